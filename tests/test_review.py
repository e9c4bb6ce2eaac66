"""flashbench review: unit rules on synthetic frames, and real asv runs on real commits."""

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from flashbench.review import compare, judge_accuracy, judge_time

ROOT = Path(__file__).resolve().parents[1]


def frame(rows):
    df = pd.DataFrame(rows)
    for c in ("ci_99_a", "ci_99_b", "repeat", "samples", "unit", "type"):
        if c not in df:
            df[c] = None
    df["date"] = pd.to_datetime(df["date"], utc=True)
    df.attrs["param_columns"] = [c for c in ("kernel", "dtype", "causal", "block") if c in df]
    return df


def row(commit, bench, value, status="ok", date="2026-01-01", **kw):
    return dict(machine="m", env="e", commit=commit, benchmark=bench, value=value,
                status=status, date=date, **kw)


def test_time_verdicts_need_the_factor_and_significance():
    base = pd.Series({"value": 1.0, "ci_99_a": 0.95, "ci_99_b": 1.05, "repeat": 5})
    slow = pd.Series({"value": 1.5, "ci_99_a": 1.45, "ci_99_b": 1.55, "repeat": 5})
    noisy = pd.Series({"value": 1.5, "ci_99_a": 0.5, "ci_99_b": 2.5, "repeat": 5})
    close = pd.Series({"value": 1.05, "ci_99_a": 1.0, "ci_99_b": 1.1, "repeat": 5})
    assert judge_time(base, slow, 1.1)[0] == "slower"
    assert judge_time(slow, base, 1.1)[0] == "faster"
    assert judge_time(base, noisy, 1.1)[0] == "ambiguous"
    assert judge_time(base, close, 1.1)[0] == "same"
    one = pd.Series({"value": 1.5, "ci_99_a": None, "ci_99_b": None, "repeat": 1})
    verdict, basis = judge_time(base, one, 1.1)
    assert verdict == "slower" and "ratio only" in basis


def test_accuracy_verdicts():
    hist = pd.Series([1.0e-3, 1.05e-3])
    assert judge_accuracy("o_max_abs", 1e-3, 1.001e-3, hist, 0.02) == ("same", False)
    assert judge_accuracy("o_max_abs", 1e-3, 3e-3, hist, 0.02) == ("worse, above band", True)
    assert judge_accuracy("o_baseline_ratio", 2.1, 2.1, pd.Series([2.1]), 0.02)[1] is True
    assert judge_accuracy("o_max_abs", 1e-3, 5e-4, hist, 0.02) == ("better", False)


def test_accuracy_loss_is_a_regression_even_when_faster():
    acc = "b.TrackAccuracy.track_o_max_abs"
    df = frame([
        row("a", "b.time_x", 2.0, ci_99_a=1.9, ci_99_b=2.1, repeat=5, type="time", unit="seconds"),
        row("b", "b.time_x", 1.0, ci_99_a=0.9, ci_99_b=1.1, repeat=5, type="time",
            unit="seconds", date="2026-01-02"),
        row("a", acc, 1e-3, kernel="triton", dtype="bf16", causal=False, type="track"),
        row("b", acc, 4e-3, kernel="triton", dtype="bf16", causal=False, type="track",
            date="2026-01-02"),
    ])
    review = compare(df, "a", "b", "m")
    verdicts = {r.benchmark: (r.verdict, r.regression) for r in review.rows}
    assert verdicts["b.time_x"] == ("faster", False)
    assert verdicts[acc][1] is True
    assert review.status == 1
    assert review.rows[0].regression  # regressions first


def test_missing_or_failed_results_give_2():
    df = frame([row("a", "b.time_x", 1.0, type="time"), row("b", "b.time_x", None,
                                                             status="failed", type="time")])
    review = compare(df, "a", "b", "m")
    assert review.status == 2 and "head failed" in review.undecided[0]
    review = compare(df, "a", "zzz", "m")
    assert review.status == 2 and "no results for head" in review.undecided[0]


# ----------------------------------------------------------------- real commits, real asv

SLOW = '''
    for _ in range(3):  # deliberate extra passes over the blocks (review test)
        for start in range(0, nk, block):
            np.exp(np.matmul(q, kt[..., start:start + block]))
'''


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A clone of this repository with commits that slow, degrade and keep the code."""
    tmp = tmp_path_factory.mktemp("review")
    repo = tmp / "repo"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}

    def commit(msg, *edits):
        """Apply (path, old, new) replacements on main's base and commit them."""
        subprocess.run(["git", "checkout", "-q", "-B", "main", base], cwd=repo, check=True)
        for path, old, new in edits:
            p = repo / path
            text = p.read_text()
            assert old in text, f"{old!r} not in {path}"
            p.write_text(text.replace(old, new, 1))
        subprocess.run(["git", "commit", "-qam", msg], cwd=repo, check=True, env=env)
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True, text=True,
                              capture_output=True).stdout.strip()

    base = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True, text=True,
                          capture_output=True).stdout.strip()
    marker = "    for start in range(0, nk, block):\n        stop = min(start + block, nk)"
    slow = commit("slow", ("flashbench/streaming.py", marker, SLOW + marker))
    coarse = commit("coarse P",
                    ("flashbench/numerics.py",
                     'round_p = None if prec.name in ("fp64", "fp32") else prec.operand',
                     'round_p = None if prec.name in ("fp64", "fp32") else '
                     '(lambda p: p.astype(ml_dtypes.float8_e4m3fn).astype(np.float32))'),
                    ("flashbench/numerics.py", "import numpy as np\n",
                     "import ml_dtypes\nimport numpy as np\n"))
    same = commit("docs", ("README.md", "# flashbench", "# flashbench (unchanged code)"))
    broken = commit("broken", ("flashbench/streaming.py", marker,
                               "    raise RuntimeError('broken on purpose')\n" + marker))
    subprocess.run(["git", "checkout", "-q", "-B", "main", base], cwd=repo, check=True)
    return repo, {"base": base, "slow": slow, "coarse": coarse, "same": same, "broken": broken}


def review(repo, base, head, bench):
    env = {**os.environ, "HOME": str(repo)}  # private ~/.asv-machine.json
    return subprocess.run([sys.executable, "-m", "flashbench.cli", "review", base, head,
                           "--existing", "--machine", "review-test", "--bench", bench, "--all"],
                          cwd=repo, capture_output=True, text=True, env=env, timeout=900)


TIME_BENCH = r"TimeStreamBlock"
ACC_BENCH = r"TrackAccuracy.track_o_max_abs"


@pytest.mark.slow
def test_slower_commit_is_flagged(project):
    repo, c = project
    r = review(repo, c["base"], c["slow"], TIME_BENCH)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "slower" in r.stdout and "REGRESSION" in r.stdout
    assert "time_online_attention" in r.stdout


@pytest.mark.slow
def test_less_accurate_commit_is_flagged_though_not_slower(project):
    repo, c = project
    r = review(repo, c["base"], c["coarse"], ACC_BENCH)
    assert r.returncode == 1, r.stdout + r.stderr
    lines = [line for line in r.stdout.splitlines() if "**REGRESSION**" in line]
    assert lines and all("kernel=flash_model" in line for line in lines)
    assert any("dtype=bf16" in line or "dtype=fp16" in line for line in lines)


@pytest.mark.slow
def test_unchanged_commit_passes(project):
    repo, c = project
    r = review(repo, c["base"], c["same"], ACC_BENCH)  # deterministic: no timing noise
    assert r.returncode == 0, r.stdout + r.stderr
    assert "OK: nothing regressed" in r.stdout


@pytest.mark.slow
def test_failed_result_cannot_be_decided(project):
    repo, c = project
    r = review(repo, c["base"], c["broken"], TIME_BENCH)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "could not decide" in r.stdout and "head failed" in r.stdout


def test_run_to_run_range_of_recent_commits_demotes_noise():
    from flashbench.review import within_history

    history = pd.Series([1.0, 1.3, 1.1, 1.0])  # earlier commits' own runs; base last
    assert within_history("slower", "sig", 1.25, history)[0] == "ambiguous"
    assert within_history("slower", "sig", 1.6, history)[0] == "slower"
    assert within_history("faster", "sig", 0.8, history)[0] == "faster"
    assert within_history("slower", "sig", 1.25, history.iloc[-1:])[0] == "slower"  # no range
    old_slow = pd.Series([3.0, 1.0, 1.0, 1.0, 1.0, 1.0])  # optimised 5 commits ago
    assert within_history("slower", "sig", 3.0, old_slow)[0] == "slower"
