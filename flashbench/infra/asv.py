"""asv as a subprocess: its configuration read as asv reads it, and runs that leave nothing.

:func:`read_config` reads an asv.conf.json with asv's own reader (it allows ``//``
comments). :func:`run_asv_process` runs an asv command as the leader of a session of its
own, with a private TMPDIR: asv's benchmark server and processes have process groups of
their own, which killing asv's group would orphan, and an ended asv leaves its
forkserver's socket folder in TMPDIR; every process of the session is ended, and the
folder removed, when the command returns or anything interrupts it. Used by the review
(``--reuse``) and tools/gpu/history.py.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

# a results file's latest plausible "date", asv's milliseconds since 1970: 2100-01-01 (1e20
# ended history with an OverflowError, and the site published it: a probe, 2026-12-07)
LATEST_DATE = 4102444800000


def read_config(path: Path | str) -> dict:
    """The asv configuration at ``path``; ValueError naming the file where it is missing
    or unreadable."""
    if not Path(path).is_file():
        raise ValueError(f"no asv configuration {path}")
    from asv.util import load_json

    try:
        return load_json(str(path), js_comments=True)
    except Exception as exc:  # asv raises its own UserError for unreadable JSON
        raise ValueError(f"{path} is not readable: {exc}") from None


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


def run_in_session(cmd: list[str], cwd, env: dict | None = None, echo=None
                   ) -> subprocess.CompletedProcess:
    """Run ``cmd`` (stdout and stderr captured) as the leader of a new session, and end
    every process of that session when it returns or when anything interrupts it.
    ``echo``: a text stream that also gets each line of stdout as it comes, prefixed with
    the seconds since the start (stderr then joins stdout): the progress of a long run
    survives its interruption."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE if echo is None else subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        if echo is None:
            out, err = proc.communicate()
        else:
            out, err, t0 = [], "", time.monotonic()
            for line in proc.stdout:
                out.append(line)
                echo.write(f"[{time.monotonic() - t0:6.1f}s] {line}")
                echo.flush()
            out = "".join(out)
            proc.wait()
    except BaseException:
        try:
            proc.kill()
        except OSError:
            pass
        end_session(proc.pid)
        proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        raise
    end_session(proc.pid)  # anything asv left behind
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def run_asv_process(cmd: list[str], cwd, env: dict | None = None, echo=None
                    ) -> subprocess.CompletedProcess:
    """:func:`run_in_session` with a private TMPDIR, removed after (module docstring)."""
    tmp = tempfile.mkdtemp(prefix="flashbench-asv-")  # short: asv puts a socket in it
    try:
        return run_in_session(cmd, cwd, {**(os.environ if env is None else env),
                                         "TMPDIR": tmp}, echo)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def last_words(text: str) -> str:
    """The last non-empty line of a process's output, for an error message."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"
