"""asv for the review: the project's asv.conf.json, and ``asv run <commit>^!`` into
``.asv/review-results/`` for a ``--reuse`` commit without stored results (``existing``:
this Python, the commit's tree first on the path through ``ASV_PYTHONPATH``); asv writing
no results raises :class:`AsvError` with asv's last words.

asv runs in a session of its own (:func:`run_in_session`): its benchmark server and
processes have process groups of their own, which killing asv's group would orphan;
every process of the session is ended when the review is interrupted, fails, or asv
returns. asv's temporary files (its forkserver's socket folder, which an ended asv leaves
behind) go to a private TMPDIR, removed with it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from flashbench.infra.machine import ASV_LAUNCH_ENV, asv_launch_method, register
from flashbench.review.gitops import Session, toplevel

REVIEW_RESULTS = Path(".asv") / "review-results"


class AsvError(RuntimeError):
    """asv could not benchmark a commit (exit status 3 of the CLI)."""


def config(root: Path) -> dict:
    """asv.conf.json at ``root`` (asv's reader: it allows // comments); ValueError where it
    is missing or unreadable."""
    conf = root / "asv.conf.json"
    if not conf.is_file():
        raise ValueError(f"no asv.conf.json at the repository root {root}")
    from asv.util import load_json

    try:
        return load_json(str(conf), js_comments=True)
    except Exception as exc:  # asv raises its own UserError for unreadable JSON
        raise ValueError(f"{conf} is not readable: {exc}") from None


def project(cwd) -> tuple[Path, Path]:
    """(repository root, benchmark folder); ValueError outside a flashbench-style project."""
    root = toplevel(cwd)
    return root, root / config(root).get("benchmark_dir", "benchmarks")


def requirement_names(root: Path) -> list[str]:
    """The requirement names of asv.conf.json's matrix (for environment names)."""
    matrix = config(root).get("matrix", {})
    reqs = matrix.get("req", matrix) if isinstance(matrix, dict) else {}
    return sorted(k for k in reqs if isinstance(k, str))


def session_members(sid: int) -> list[int]:
    """Live (not zombie) processes of session ``sid`` (Linux's /proc; elsewhere: the
    process group ``sid``, if it still exists)."""
    if not os.path.isdir("/proc/self"):
        try:
            os.killpg(sid, 0)
        except OSError:
            return []
        return [sid]
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # after the command name: state, ppid, pgrp, session, ...
        if len(fields) > 3 and fields[0] != "Z" and int(fields[3]) == sid:
            members.append(int(entry))
    return members


def end_session(sid: int, grace: float = 3.0) -> None:
    """SIGTERM every process of session ``sid``, SIGKILL after ``grace`` seconds, until
    none is left (a dying asv may still fork)."""
    deadline = time.monotonic() + grace
    sig = signal.SIGTERM
    for _ in range(100):
        members = session_members(sid)
        if not members:
            return
        for pid in members:
            try:
                if os.path.isdir("/proc/self"):
                    os.kill(pid, sig)
                else:
                    os.killpg(sid, sig)
            except OSError:
                pass
        time.sleep(0.05)
        if time.monotonic() > deadline:
            sig = signal.SIGKILL


def run_in_session(cmd: list[str], cwd, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``cmd`` (stdout and stderr captured) as the leader of a new session, and end
    every process of that session when it returns or when anything interrupts it."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate()
    except BaseException:
        try:
            proc.kill()
        except OSError:
            pass
        end_session(proc.pid)
        proc.wait()
        for stream in (proc.stdout, proc.stderr):
            stream.close()
        raise
    end_session(proc.pid)  # anything asv left behind
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def run_asv(root: Path, commit: str, machine: str, quick: bool, existing: bool,
            bench: str | None, log) -> None:
    """Benchmark ``commit`` into ``root/.asv/review-results`` (module docstring)."""
    register(machine)
    out = root / REVIEW_RESULTS
    out.mkdir(parents=True, exist_ok=True)
    conf = config(root)
    for key in ("repo", "benchmark_dir", "env_dir", "html_dir"):
        conf[key] = str((root / conf.get(key, ".")).resolve())
    conf["results_dir"] = str(out.resolve())
    conf_path = root / ".asv" / "review-asv.conf.json"
    conf_path.write_text(json.dumps(conf))
    cmd = [sys.executable, "-m", "asv", "run", "--config", str(conf_path), "--machine", machine,
           "--launch-method", asv_launch_method(), "--show-stderr", "--record-samples"]
    if quick:
        cmd.append("--quick")
    if bench:
        cmd += ["--bench", bench]
    started = time.time() - 1.0
    tmp = tempfile.mkdtemp(prefix="flashbench-asv-")  # short: asv puts a socket in it
    try:
        with Session(root) as session:
            env = {**os.environ, **ASV_LAUNCH_ENV, "TMPDIR": tmp}
            if existing:
                env["ASV_PYTHONPATH"] = str(session.worktree("head", commit))
                cmd += ["-E", f"existing:{sys.executable}", "--set-commit-hash", commit]
            else:
                cmd.append(f"{commit}^!")
            log(f"review: asv run {commit[:8]} ({'quick' if quick else 'full'}, "
                f"{'existing env' if existing else 'virtualenv'}) on {machine}")
            try:
                r = run_in_session(cmd, root, env)
            except OSError as exc:
                raise AsvError(f"cannot run asv: {exc}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    written = [p for p in out.glob(f"{machine}/{commit[:8]}-*.json")
               if p.stat().st_mtime >= started]
    if not written:
        last = [line for line in (r.stdout + r.stderr).splitlines() if line.strip()]
        raise AsvError(f"asv run {commit[:8]} wrote no results (exit {r.returncode}): "
                       f"{last[-1].strip() if last else 'no output'}")
