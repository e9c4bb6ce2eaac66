"""review --reuse: the rules on stored results, tested on frames alone."""

import sys

import numpy as np
import pandas as pd
import pytest

from flashbench.review.envs import comparable, existing_name, facts
from flashbench.review.stored import compare_stored, judge_time_stored, within_history

REQS = ["matplotlib", "ml_dtypes", "numpy", "pandas", "tabulate", "torch", "triton"]
VENV = "virtualenv-py3.11-matplotlib-ml_dtypes-numpy-pandas-tabulate-torch2.13.0-triton"
T = "bench_reference.TimeSoftmax.time_softmax"
P = "rows=256, N=1024, dtype='fp64', impl='one-shot'"


def row(commit, value, date, bench=T, params=P, env=VENV, cpu="Xeon", status="ok",
        version="v1", spread=0.02, repeat=5, **kw):
    d = dict(machine="m", cpu=cpu, env=env, commit=commit, benchmark=bench, params=params,
             type="time", unit="seconds", value=value, status=status, version=version,
             date=pd.Timestamp(date, tz="UTC"), ci_99_a=value * (1 - spread),
             ci_99_b=value * (1 + spread), repeat=repeat,
             samples=np.full(repeat, value) * (1 + spread * np.linspace(-1, 1, repeat)))
    d.update(kw)
    return d


def compare(rows, base="b", head="h", ancestry=("b", "a2", "a1"), cpu="Xeon"):
    return compare_stored(pd.DataFrame(rows), base, head, "m", cpu, list(ancestry), 1.1, 0.02,
                          REQS)


def test_rebased_head_dated_before_base_is_still_judged_against_base_ancestors():
    """Issue 16 item 1: the head's own (early-dated) run never widens the range."""
    rows = [row("a1", 0.0026, "2026-01-02"), row("a2", 0.0030, "2026-01-03"),
            row("b", 0.0027, "2026-01-04"),
            row("h", 0.0420, "2026-01-01"),  # 15.8x slower, authored before base
            row("x", 0.0550, "2026-01-03")]  # a sibling branch: not an ancestor of base
    rows_, problems, _ = compare(rows)
    assert not problems
    (r,) = rows_
    assert (r.verdict, r.reason, r.regression) == ("slower", "significant-asv", True)
    assert "outside 0.0026..0.003" in r.detail and "3 ancestor" in r.detail


def test_run_to_run_range_of_ancestors_demotes_noise():
    assert within_history("slower", "s", 1.25, [1.0, 1.3, 1.1])[:2] == (
        "ambiguous", "inside-run-to-run-range")
    assert within_history("slower", "s", 1.6, [1.0, 1.3, 1.1])[0] == "slower"
    assert within_history("faster", "s", 0.8, [1.0, 1.3])[0] == "faster"
    assert within_history("slower", "s", 1.25, [1.0])[0] == "slower"  # no range from one
    # only the 5 newest ancestors count: an old slow level does not hide a return to it
    assert within_history("slower", "s", 3.0, [1.0] * 5 + [3.0])[0] == "slower"


def test_ratio_only_is_ambiguous_never_slower():
    """Issue 16 item 5: --quick results (one sample, no interval) cannot say slower."""
    rows = [row("b", 1.0, "2026-01-02", repeat=1, ci_99_a=np.nan, ci_99_b=np.nan),
            row("h", 2.7, "2026-01-03", repeat=1, ci_99_a=np.nan, ci_99_b=np.nan)]
    (r,), _, _ = compare(rows, ancestry=("b",))
    assert (r.verdict, r.reason, r.regression, r.undecided) == ("ambiguous", "ratio-only",
                                                                False, True)


def test_skipped_or_failed_head_is_coverage_lost():
    """Issue 16 item 2: a renamed function skips its benchmarks in head."""
    rows = [row("b", 1.0, "2026-01-02"), row("h", np.nan, "2026-01-03", status="skipped"),
            row("b", 2.0, "2026-01-02", params="other"),
            row("h", np.nan, "2026-01-03", params="other", status="failed")]
    got, problems, _ = compare(rows, ancestry=("b",))
    assert not problems
    assert {(r.params, r.verdict) for r in got} == {(P, "coverage lost"),
                                                    ("other", "coverage lost")}
    assert all(r.undecided and not r.regression for r in got)


def test_changed_benchmark_is_not_compared():
    rows = [row("b", 1.0, "2026-01-02"), row("h", 1.5, "2026-01-03", version="v2")]
    (r,), _, _ = compare(rows, ancestry=("b",))
    assert (r.verdict, r.reason, r.undecided) == ("not compared", "benchmark-changed", True)


def test_two_processors_under_one_name_are_refused():
    rows = [row("b", 1.0, "2026-01-02", cpu="Intel Xeon"),
            row("h", 1.0, "2026-01-03", cpu="AMD EPYC 7B13")]
    got, problems, _ = compare(rows, ancestry=("b",))
    assert not got and "two processors are not comparable" in problems[0]
    assert "AMD EPYC 7B13" in problems[0] and "Intel Xeon" in problems[0]
    # a commit measured on both: the shared processor is used, this machine's first
    rows.append(row("h", 1.01, "2026-01-04", cpu="Intel Xeon"))
    got, problems, _ = compare(rows, ancestry=("b",), cpu="Intel Xeon")
    assert not problems and got[0].verdict == "same"


def test_existing_environment_of_this_python_compares_with_matching_virtualenv():
    """Issue 16 item 7: same interpreter version and pinned packages -> comparable."""
    import importlib.metadata

    mine = existing_name()
    f = facts(mine, REQS)
    assert f.python == f"{sys.version_info[0]}.{sys.version_info[1]}"
    torch = importlib.metadata.version("torch").split("+")[0]
    venv = (f"virtualenv-py{f.python}-matplotlib-ml_dtypes-numpy-pandas-tabulate-"
            f"torch{torch}-triton")
    ok, why = comparable(venv, mine, REQS)
    assert ok and "unpinned, not checked" in why
    other = venv.replace(f"torch{torch}", "torch1.0.0")
    ok, why = comparable(other, mine, REQS)
    assert not ok and f"torch 1.0.0 vs {torch}" in why
    ok, why = comparable(venv.replace(f"py{f.python}", "py2.7"), mine, REQS)
    assert not ok and "Python 2.7" in why
    ok, why = comparable("existing-py_some_other_python", mine, REQS)
    assert not ok and "cannot inspect" in why
    rows = [row("b", 1.0, "2026-01-02", env=other), row("h", 1.0, "2026-01-03", env=mine)]
    got, problems, _ = compare(rows, ancestry=("b",))
    assert not got and "not comparable" in problems[0] and "same-run" in problems[0]
    rows[0]["env"] = venv
    got, problems, notes = compare(rows, ancestry=("b",))
    assert not problems and got[0].verdict == "same" and "Compared across" in notes[0]


def test_accuracy_regression_even_when_faster():
    acc = "bench_accuracy.TrackAccuracy.track_o_max_abs"
    rows = [row("b", 2.0, "2026-01-02"), row("h", 1.0, "2026-01-03"),
            row("a1", 1e-3, "2026-01-01", bench=acc, params="k", type="track", unit="err"),
            row("b", 1e-3, "2026-01-02", bench=acc, params="k", type="track", unit="err"),
            row("h", 4e-3, "2026-01-03", bench=acc, params="k", type="track", unit="err")]
    got, _, _ = compare(rows, ancestry=("b", "a1"))
    by = {r.benchmark: r for r in got}
    assert by[T].verdict == "faster" and not by[T].regression
    assert by[acc].regression and by[acc].reason == "worse, above-band"


def test_missing_commit_is_a_problem():
    _, problems, _ = compare([row("b", 1.0, "2026-01-02")], ancestry=("b",))
    assert problems == ["no results for head h on m"]


def test_asv_private_statistics_behave_as_review_expects():
    """review --reuse relies on asv._stats.is_different (asv bounded < 0.7): this notices
    a change of its meaning."""
    from asv._stats import is_different

    a = [1.00, 1.01, 0.99, 1.00, 1.02]
    stats_a = {"ci_99_a": 0.98, "ci_99_b": 1.02, "repeat": 5}
    far = [1.50, 1.51, 1.49, 1.50, 1.52]
    stats_far = {"ci_99_a": 1.48, "ci_99_b": 1.53, "repeat": 5}
    assert is_different(a, far, stats_a, stats_far)
    assert not is_different(a, a, stats_a, stats_a)
    # without samples: the 99% intervals decide
    assert is_different(None, None, stats_a, stats_far)
    assert not is_different(None, None, stats_a, {"ci_99_a": 1.0, "ci_99_b": 1.6,
                                                  "repeat": 5})
    base = pd.Series(row("b", 1.0, "2026-01-02"))
    head = pd.Series(row("h", 1.5, "2026-01-02"))
    assert judge_time_stored(base, head, 1.1) == ("slower", "significant-asv")
    assert judge_time_stored(base, base, 1.1) == ("same", "within-factor")


@pytest.mark.parametrize("ratio", [1.0, 1.05])
def test_within_factor_is_same(ratio):
    rows = [row("b", 1.0, "2026-01-02"), row("h", ratio, "2026-01-03")]
    (r,), _, _ = compare(rows, ancestry=("b",))
    assert r.verdict == "same" and not r.undecided


def test_bench_selects_names_or_grid_points_of_stored_rows():
    import re

    from flashbench.review.stored import _matching

    frame = pd.DataFrame([row("b", 1.0, "2026-01-02"),
                          row("b", 1.0, "2026-01-02", params="rows=256, N=16384, impl='online'"),
                          row("b", 1.0, "2026-01-02", bench="b.TimeOther.time_x", params="")])
    assert len(_matching(frame, re.compile("TimeSoftmax"))) == 2
    assert len(_matching(frame, re.compile(r"TimeSoftmax.*N=16384"))) == 1
    assert len(_matching(frame, None)) == 3 and not len(_matching(frame, re.compile("zzz")))
