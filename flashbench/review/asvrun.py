"""asv for the review: the project's asv.conf.json, and ``asv run <commit>^!`` into
``.asv/review-results/`` for a ``--reuse`` commit without stored results (``existing``:
this Python, the commit's tree first on the path through ``ASV_PYTHONPATH``); asv writing
no results raises :class:`AsvError` with asv's last words.

asv runs through :func:`flashbench.infra.asv.run_asv_process`: nothing of it outlives
the review (its processes, its forkserver's socket folder), interrupted or not.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from flashbench.infra.asv import last_words, read_config, run_asv_process
from flashbench.infra.git import toplevel
from flashbench.infra.machine import ASV_LAUNCH_ENV, asv_launch_method, register
from flashbench.review.gitops import Session

REVIEW_RESULTS = Path(".asv") / "review-results"


class AsvError(RuntimeError):
    """asv could not benchmark a commit (exit status 3 of the CLI)."""


def config(root: Path) -> dict:
    """asv.conf.json at ``root``; ValueError where it is missing or unreadable."""
    if not (root / "asv.conf.json").is_file():
        raise ValueError(f"no asv.conf.json at the repository root {root}")
    return read_config(root / "asv.conf.json")


def project(cwd) -> tuple[Path, Path]:
    """(repository root, benchmark folder); ValueError outside a flashbench-style project."""
    root = toplevel(cwd)
    return root, root / config(root).get("benchmark_dir", "benchmarks")


def requirement_names(root: Path) -> list[str]:
    """The requirement names of asv.conf.json's matrix (for environment names)."""
    matrix = config(root).get("matrix", {})
    reqs = matrix.get("req", matrix) if isinstance(matrix, dict) else {}
    return sorted(k for k in reqs if isinstance(k, str))


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
    with Session(root) as session:
        env = {**os.environ, **ASV_LAUNCH_ENV}
        if existing:
            env["ASV_PYTHONPATH"] = str(session.worktree("head", commit))
            cmd += ["-E", f"existing:{sys.executable}", "--set-commit-hash", commit]
        else:
            cmd.append(f"{commit}^!")
        log(f"review: asv run {commit[:8]} ({'quick' if quick else 'full'}, "
            f"{'existing env' if existing else 'virtualenv'}) on {machine}")
        try:
            r = run_asv_process(cmd, root, env)
        except OSError as exc:
            raise AsvError(f"cannot run asv: {exc}") from None
    written = [p for p in out.glob(f"{machine}/{commit[:8]}-*.json")
               if p.stat().st_mtime >= started]
    if not written:
        raise AsvError(f"asv run {commit[:8]} wrote no results (exit {r.returncode}): "
                       f"{last_words(r.stdout + r.stderr)}")
