"""scripts/gpu_session.sh as far as a machine without a GPU can run it: usage, the no-GPU
refusal, its commit list, and --dry-run end to end (every phase, results under OUTDIR)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_session.sh"


def script_commits() -> list[str]:
    text = SCRIPT.read_text()
    found = re.search(r"COMMITS=\$\{GPU_SESSION_COMMITS:-\$\(git rev-parse --short=7 HEAD\) "
                      r"([0-9a-f ]+)\}", text)
    assert found, "the history's commits: the one checked out first, then main's"
    return found[1].split()


def test_usage_errors_exit_2(tmp_path):
    for args in ([], ["a", "b"], ["--dry-run"], ["", "--dry-run"]):
        r = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True)
        assert r.returncode == 2 and "usage: bash scripts/gpu_session.sh" in r.stderr, args


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU refusal")
def test_without_a_gpu_it_refuses_unless_dry_run(tmp_path):
    r = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "out")], capture_output=True,
                       text=True, env={**os.environ, "PYTHON": sys.executable}, timeout=120)
    assert r.returncode == 3 and "no CUDA GPU" in r.stdout


def test_the_history_commits_changed_the_kernels():
    """At least 5 commits, each of which changed flashbench/kernels (git log)."""
    commits = script_commits()
    assert len(commits) >= 5
    changed = subprocess.run(["git", "log", "--format=%H", "--", "flashbench/kernels"],
                             cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for c in commits:
        assert any(h.startswith(c) for h in changed), c


def test_the_speed_tests_phase_names_test_files_that_exist():
    """The phase runs a default list the dry run replaces (GPU_SESSION_SPEED_TESTS): a file
    renamed away would cost a GPU window its phase."""
    text = SCRIPT.read_text()
    default = re.search(r"SPEED_TESTS=\$\{GPU_SESSION_SPEED_TESTS:-([^}]*)\}", text)
    files = default[1].split()
    assert len(files) >= 5 and all((ROOT / f).is_file() for f in files), files


def test_a_window_split_over_calls_runs_only_the_phases_named(tmp_path):
    """GPU_SESSION_PHASES: the phases named run, the others say "skipped" and fail nothing
    (the window of 2026-12-04 ran out in one call before the reviews)."""
    code = (f'source {ROOT / "tools" / "gpu" / "common.sh"}; gpu_start t {tmp_path} 60; '
            'phase one 10 0 true; phase two 10 0 false; phase three 10 1 false; exit $FAILED')
    r = subprocess.run(["bash", "-c", code], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "GPU_SESSION_PHASES": "one three"})
    summary = (tmp_path / "summary.txt").read_text()
    assert r.returncode == 0, summary
    assert re.search(r"^one: ok in \d+s", summary, re.M)
    assert "two: skipped (not in GPU_SESSION_PHASES)" in summary
    assert re.search(r"^three: ok \(exit 1, as expected\)", summary, re.M)


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the dry run is for machines without one")
def test_dry_run_walks_every_phase(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    # one commit: the session's history phase wired end to end; several commits, each its
    # own flashbench, are test_gpu_history.py's (12 s a commit here)
    commits = script_commits()[:1]
    env = {**os.environ, "HOME": str(home), "PYTHON": sys.executable,
           "GPU_SESSION_COMMITS": " ".join(commits),
           "GPU_SESSION_TESTS": "tests/test_gpu_suites.py -k grid", "GPU_SESSION_WORKERS": "1",
           "GPU_SESSION_SPEED_TESTS": "tests/test_tricks.py"}  # its GPU tests, which skip
    out = tmp_path / "out"

    def status():
        return subprocess.run(["git", "status", "--porcelain", "--", "flashbench", "README.md"],
                              cwd=ROOT, capture_output=True, text=True).stdout

    before = status()
    r = subprocess.run(["bash", str(SCRIPT), str(out), "--dry-run"], capture_output=True,
                       text=True, env=env, timeout=900)
    summary = (out / "summary.txt").read_text()
    assert r.returncode == 0, summary
    for name in ("variants", "tests", "speed", "speed_tests", "findings", "fp8_d256",
                 "history", "review_noop", "review_slow", "gpu_bench"):
        assert re.search(rf"^{name}: ok in \d+s of \d+s", summary, re.M), name
    assert "every phase as expected" in summary
    results = sorted((out / "results").glob("*/*-existing-*.json"))
    assert sorted(json.loads(f.read_text())["commit_hash"][:7] for f in results) == \
        sorted(commits)
    findings = json.loads((out / "findings" / "findings.json").read_text())
    assert findings["exp2"]["points"] > 0 and findings["fp32_case"]["ratio"] > 0
    for review in ("noop", "slow"):
        data = json.loads((out / "gpu-results" / f"review-{review}.json").read_text())
        assert data["factor"] == 1.05 and data["status"] == 0
    speed = json.loads((out / "speed" / "fwd.json").read_text())  # the user path's row too
    assert {(r["backend"], r["status"]) for r in speed["rows"]} == {
        ("sdpa-flash", "PASS"), ("tools.gpu.userkernels:sdpa_flash", "PASS")}
    slow = (out / "slow.configs.py").read_text()
    assert "128: (_c(64, 32, 4, 2),)," in slow  # the slowed head's one small d=128 config
    assert status() == before  # the heads never touched the working tree


FAKE_PYTHON = """#!/usr/bin/env bash
# records each call's arguments, one JSON list a line; runs nothing
"$REAL_PYTHON" -c 'import json, os, sys; open(sys.argv[1], "a").write(json.dumps(sys.argv[2:] \\
  + ["POSTING=" + os.environ.get("FLASHBENCH_GPU_POSTING", "")]) + "\\n")' "$FAKE_LOG" "$@"
"""


def test_the_device_speed_runs_are_commands_flashbench_takes(tmp_path, monkeypatch):
    """tools/gpu/speed.sh's runs on the device (not its dry run), each read here as flashbench
    reads it up to the timing or judging: a typo, an option the command does not take or a
    case its memory check refuses would otherwise cost a run of the scarce GPU window (the
    packed run's Q:K case was refused as 54.6 GB: its totals' square; now its own scores)."""
    import flashbench.cli.check as check
    import flashbench.cli.speed as speed
    import flashbench.measure.run as run
    from flashbench.cli import build_parser

    fake, log = tmp_path / "python", tmp_path / "calls.jsonl"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    r = subprocess.run(["bash", str(ROOT / "tools" / "gpu" / "speed.sh"), str(tmp_path / "out")],
                       capture_output=True, text=True, timeout=60, cwd=ROOT,
                       env={**os.environ, "PYTHON": str(fake), "REAL_PYTHON": sys.executable,
                            "FAKE_LOG": str(log)})
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.findall(r"^(\w+): exit 0", r.stdout, re.M) == [
        "fwd", "fwd_posted", "fp8", "fwdbwd", "decode", "softcap", "varlen", "dsinks"]

    class Reached(Exception):
        pass

    def reached(*args, **kwargs):
        raise Reached

    monkeypatch.setattr(speed, "_timed", reached)
    monkeypatch.setattr(run, "run_check", reached)
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    posting = [c.pop() for c in calls]  # FLASHBENCH_GPU_POSTING: the fwd_posted run's alone
    assert posting.count("POSTING=1") == 1 and posting.count("POSTING=") == len(calls) - 1
    commands = [c[2:] for c in calls if c[:2] == ["-m", "flashbench.cli"]]
    assert len(commands) == 8
    for argv in commands:
        args = build_parser().parse_args(argv)
        with pytest.raises(Reached):
            (speed._run if args.command == "speed" else check.run)(args)
