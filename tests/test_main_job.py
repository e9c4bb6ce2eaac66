"""scripts/main.sh leaves the tracked tree as it was: asv runs from a copy of
asv.conf.json whose results folder is main-job/results (ignored), so neither a committed
results/<machine>/machine.json (rewritten by asv on every run: kernel build, RAM) nor a new
results file lands in results/."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_main_job_leaves_git_status_clean(tmp_path):
    """Failed before: main.sh ran asv into results/, rewriting the committed
    results/<machine>/machine.json and adding an untracked results file."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(clone)], check=True)
    (clone / ".venv").symlink_to(ROOT / ".venv")  # set-up is not what is tested here
    # One committed results file a machine (every machine.json kept): the report phase reads
    # a history whose length nothing here asserts on (the report of the whole committed
    # history: tests/test_report.py); the history phase's CPU time falls with it.
    seen = set()
    for f in sorted((clone / "results").glob("*/*-*.json")):
        if f.parent.name in seen:
            f.unlink()
        seen.add(f.parent.name)
    subprocess.run(["git", "-c", "user.name=test", "-c", "user.email=test@example.invalid",
                    "commit", "-qam", "one results file a machine"], cwd=clone, check=True)
    with open(clone / ".git" / "info" / "exclude", "a") as f:
        f.write(".venv\n")
    env = {**os.environ, "MAIN_JOB_SKIP": "setup check site",
           "MAIN_JOB_BENCH": r"^bench_decode\.TimeMergeStates"}
    run = subprocess.run(["bash", "scripts/main.sh"], cwd=clone, env=env, text=True,
                         capture_output=True, timeout=900)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    status = subprocess.run(["git", "status", "--porcelain", "--ignored=no"], cwd=clone,
                            text=True, capture_output=True, check=True).stdout
    assert status == "", status
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, text=True,
                          capture_output=True, check=True).stdout.strip()
    made = list((clone / "main-job" / "results").glob(f"*/{head[:8]}-*.json"))
    assert made, "no results file in main-job/results"
    assert (clone / "main-job" / "report" / "report.md").is_file()
    assert (clone / "main-job" / "report" / "check.txt").is_file()
    assert "Done in" in run.stdout and "main-job/report/report.md" in run.stdout
    assert "· " not in run.stdout  # asv's own lines go to main-job/asv.log
