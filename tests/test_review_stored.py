"""review --reuse: the rules on stored results, tested on frames alone."""

import os
import signal
import sys

import numpy as np
import pandas as pd
import pytest
from test_review_stats import band_limits  # noqa: F401  (the band rule's limits, a fixture)

from flashbench.review import stored
from flashbench.review.envs import comparable, existing_name, facts
from flashbench.review.model import Review
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
    # no range from one or none: separate runs' scatter is unknown (7.8x on unchanged code)
    for earlier in ([1.0], []):
        assert within_history("slower", "s", 7.8, earlier)[:2] == (
            "ambiguous", "no-run-to-run-range")
        assert within_history("faster", "s", 0.1, earlier)[0] == "ambiguous"
    assert within_history("same", "within-factor", 1.0, [])[:2] == ("same", "within-factor")
    # only the 5 newest ancestors count: an old slow level does not hide a return to it
    assert within_history("slower", "s", 3.0, [1.0] * 5 + [3.0])[0] == "slower"


def test_ratio_only_is_ambiguous_never_slower():
    """Issue 16 item 5: --quick results (one sample, no interval) cannot say slower."""
    rows = [row("b", 1.0, "2026-01-02", repeat=1, ci_99_a=np.nan, ci_99_b=np.nan),
            row("h", 2.7, "2026-01-03", repeat=1, ci_99_a=np.nan, ci_99_b=np.nan)]
    (r,), _, _ = compare(rows, ancestry=("b",))
    assert (r.verdict, r.reason, r.regression, r.undecided) == ("ambiguous", "ratio-only",
                                                                False, True)


def test_skipped_head_is_coverage_lost_failed_head_a_regression():
    """Issue 16 item 2: a renamed function skips its benchmarks in head (coverage lost);
    finding 1: a head that failed (asv status "failed") is a regression whatever base
    was, "still failing" when base failed too; skipped in both stays neither."""
    rows = [row("b", 1.0, "2026-01-02"), row("h", np.nan, "2026-01-03", status="skipped"),
            row("b", 2.0, "2026-01-02", params="other"),
            row("h", np.nan, "2026-01-03", params="other", status="failed"),
            row("b", np.nan, "2026-01-02", params="new", status="skipped"),
            row("h", np.nan, "2026-01-03", params="new", status="failed"),
            row("b", np.nan, "2026-01-02", params="old", status="failed"),
            row("h", np.nan, "2026-01-03", params="old", status="failed"),
            row("b", np.nan, "2026-01-02", params="gpu", status="skipped"),
            row("h", np.nan, "2026-01-03", params="gpu", status="skipped")]
    got, problems, _ = compare(rows, ancestry=("b",))
    assert not problems
    by = {r.params: r for r in got}
    assert (by[P].verdict, by[P].undecided, by[P].regression) == ("coverage lost", True, False)
    assert (by["other"].verdict, by["other"].regression) == ("failed", True)
    assert (by["new"].reason, by["new"].regression) == ("failed", True)
    assert (by["old"].reason, by["old"].undecided, by["old"].regression) == (
        "still-failing", False, False)  # already failing at base: apart (issue 36)
    assert (by["gpu"].reason, by["gpu"].undecided, by["gpu"].regression) == (
        "not-measured", False, False)


def test_tracks_without_a_rule_are_judged_ratio_only_not_dropped():
    """Finding 12: same-run reviews judge them ratio-only; stored ones did nothing."""
    dev = "bench_gpu.TrackDeviceTime.track_device_time"
    rows = [row("b", 1.0, "2026-01-02", bench=dev, type="track", unit="ms"),
            row("h", 2.0, "2026-01-03", bench=dev, type="track", unit="ms"),
            row("b", 1.0, "2026-01-02", bench=dev, params="q", type="track", unit="ms"),
            row("h", 1.02, "2026-01-03", bench=dev, params="q", type="track", unit="ms")]
    got, problems, _ = compare(rows, ancestry=("b",))
    by = {r.params: r for r in got}
    assert not problems and len(got) == 2
    assert (by[P].kind, by[P].verdict, by[P].reason, by[P].undecided, by[P].regression) == (
        "track", "ambiguous", "ratio-only", True, False)
    assert (by["q"].verdict, by["q"].reason, by["q"].undecided) == ("same", "ratio-only", False)


def test_memory_is_judged_by_the_memory_rule():
    """peakmem_ results (older suites) and tracks in bytes (peak memory measured in a
    fresh subprocess): more memory beyond the factor is a regression."""
    pm = "bench_memory.PeakmemAttention.peakmem_attention"
    tr = "bench_memory.PeakmemAttention.track_peak_memory"
    rows = [row("b", 100e6, "2026-01-02", bench=pm, type="peakmemory", unit="bytes", repeat=1,
                ci_99_a=np.nan, ci_99_b=np.nan),
            row("h", 150e6, "2026-01-03", bench=pm, type="peakmemory", unit="bytes", repeat=1,
                ci_99_a=np.nan, ci_99_b=np.nan),
            row("b", 100e6, "2026-01-02", bench=tr, type="track", unit="bytes"),
            row("h", 80e6, "2026-01-03", bench=tr, type="track", unit="bytes"),
            row("b", 100e6, "2026-01-02", bench=tr, params="x", type="track", unit="bytes"),
            row("h", 105e6, "2026-01-03", bench=tr, params="x", type="track", unit="bytes")]
    got, problems, notes = compare(rows, ancestry=("b",))
    assert not problems
    by = {(r.benchmark, r.params): r for r in got}
    assert all(r.kind == "memory" and r.samples == 1 for r in got)
    assert (by[pm, P].verdict, by[pm, P].reason, by[pm, P].regression) == (
        "more memory", "more-memory", True)
    assert (by[tr, P].verdict, by[tr, P].regression) == ("less memory", False)
    assert (by[tr, "x"].verdict, by[tr, "x"].reason) == ("same", "within-factor")
    assert any("forkserver" in n for n in notes)  # stored peakmem_ depends on the launch


def test_results_of_another_processor_are_announced_in_header_and_rows():
    """Finding 12: never silently another processor's results."""
    rows = [row("b", 1.0, "2026-01-02", cpu="AMD EPYC 7B13"),
            row("h", 1.0, "2026-01-03", cpu="AMD EPYC 7B13")]
    got, problems, notes = compare(rows, ancestry=("b",), cpu="Intel Xeon")
    assert not problems and got[0].verdict == "same"
    assert any("AMD EPYC 7B13" in n and "not this machine's processor" in n
               and "Intel Xeon" in n for n in notes)
    assert got[0].detail.startswith("measured on AMD EPYC 7B13, not this machine's processor")
    got, _, notes = compare(rows, ancestry=("b",), cpu="AMD EPYC 7B13")
    assert not notes and "not this machine" not in got[0].detail


def test_earlier_runs_count_only_with_heads_benchmark_version():
    """Finding 6: the band (and the run-to-run range) of another version of the
    benchmark's code measured something else."""
    acc = "bench_accuracy.TrackAccuracy.track_o_max_abs"
    kw = dict(bench=acc, params="k", type="track", unit="err")
    rows = [row("a1", 2e-3, "2026-01-01", version="v0", **kw),
            row("b", 1e-3, "2026-01-02", **kw), row("h", 1.5e-3, "2026-01-03", **kw)]
    (r,), _, _ = compare(rows, ancestry=("b", "a1"))
    assert (r.reason, r.regression) == ("worse, above-band", True)
    assert "band of 1 earlier" in r.detail
    rows[0]["version"] = "v1"
    (r,), _, _ = compare(rows, ancestry=("b", "a1"))
    assert r.reason == "worse" and "band of 2 earlier" in r.detail


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
    rows = [row("a1", 2.1, "2026-01-01"), row("b", 2.0, "2026-01-02"),
            row("h", 1.0, "2026-01-03"),
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

    from flashbench.review.options import select_rows as _matching

    frame = pd.DataFrame([row("b", 1.0, "2026-01-02"),
                          row("b", 1.0, "2026-01-02", params="rows=256, N=16384, impl='online'"),
                          row("b", 1.0, "2026-01-02", bench="b.TimeOther.time_x", params="")])
    assert len(_matching(frame, re.compile("TimeSoftmax"))) == 2
    assert len(_matching(frame, re.compile(r"TimeSoftmax.*N=16384"))) == 1
    assert len(_matching(frame, None)) == 3 and not len(_matching(frame, re.compile("zzz")))


DRIVER = r"""
import signal, sys
from flashbench.infra.asv import run_in_session
from flashbench.infra.interrupts import signals_raise

folder = sys.argv[1]
# like asv: a child in a process group of its own (asv's benchmark server), with a
# grandchild of its own (a benchmark process), and a plain background child
script = (
    "sleep 300 & echo $! > {f}/plain; "
    "python3 -c 'import os, subprocess, time; os.setpgid(0, 0); "
    "p = subprocess.Popen([\"sleep\", \"300\"]); "
    "open(\"{f}/grandchild\", \"w\").write(str(p.pid)); "
    "open(\"{f}/group\", \"w\").write(str(os.getpid())); time.sleep(300)' & "
    "wait").format(f=folder)
with signals_raise():
    run_in_session(["bash", "-c", script], ".")
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_interrupted_asv_run_leaves_no_process_behind(tmp_path, signum):
    """Finding 11: the --reuse path's asv run, interrupted, must end its benchmark
    processes too (asv starts them in process groups of their own)."""
    import subprocess
    import time

    proc = subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path)],
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 60
        names = ("plain", "grandchild", "group")
        while time.time() < deadline and not all((tmp_path / n).exists() and
                                                 (tmp_path / n).read_text() for n in names):
            time.sleep(0.1)
        pids = [int((tmp_path / n).read_text()) for n in names]
        assert all(_alive(p) for p in pids)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0 and "Interrupted" in err, err  # the exception went on
    deadline = time.time() + 10
    while time.time() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    left = [p for p in pids if _alive(p)]
    for pid in left:  # never leave them running, even when the test fails
        os.kill(pid, signal.SIGKILL)
    assert not left


def test_the_accuracy_band_and_reuse_select_the_same_machine_rows(monkeypatch, tmp_path):
    """Issue 23: the band of a same-run review checked the processor then the name,
    --reuse the name then the processor, so the two read different earlier results.
    Both now read ``results.machine_rows``: this processor's rows under any machine name
    (the name changed with flashbench's naming), and rows of this name without one."""
    from flashbench.review import results

    acc = "bench_accuracy.TrackAccuracy.track_o_max_abs"
    kw = dict(bench=acc, params="k", type="track", unit="err")
    rows = [row("a1", 2e-3, "2026-01-01", machine="old-name", **kw),  # this processor
            row("a2", 9e-3, "2026-01-01", cpu="EPYC", **kw),  # this name, another one
            row("b", 1e-3, "2026-01-02", **kw), row("h", 1.5e-3, "2026-01-03", **kw)]
    (r,), problems, _ = compare(rows, ancestry=("b", "a2", "a1"))
    assert not problems and "band of 2 earlier" in r.detail and r.reason == "worse"
    frame = pd.DataFrame(rows)
    monkeypatch.setattr(results, "load_results", lambda folders, **kw: frame)
    monkeypatch.setattr(results, "ancestors", lambda base, root: ["b", "a2", "a1"])
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "x.json").write_text("{}")
    review = Review("b", "h", "m", "Xeon", "same-run A/B", 1.1, 0.02)
    band = results.band_source(tmp_path, tmp_path, review)
    assert sorted(band(acc, "k", "v1")) == [1e-3, 2e-3]  # the same two results


@pytest.mark.usefixtures("band_limits")
def test_band_ratio_tracks_are_judged_by_the_band_rule_in_stored_results():
    """Issue 25 item 4: a band-ratio track (unit "ratio") above 1, or not finite, in head
    is a regression ("outside band"), as in same-run reviews."""
    o = "bench_accuracy.TrackAccuracy.track_o_band_ratio"
    kw = dict(bench=o, type="track", unit="ratio")
    rows = [row("b", 0.6, "2026-01-02", params="up", **kw),
            row("h", 1.3, "2026-01-03", params="up", **kw),
            row("b", 0.6, "2026-01-02", params="nan", **kw),
            row("h", np.nan, "2026-01-03", params="nan", **kw),
            row("b", 0.6, "2026-01-02", params="ok", **kw),
            row("h", 0.605, "2026-01-03", params="ok", **kw)]
    got, problems, _ = compare(rows, ancestry=("b",))
    by = {r.params: r for r in got}
    assert not problems
    assert (by["up"].kind, by["up"].verdict, by["up"].regression) == (
        "accuracy", "worse, above band, outside band", True)  # base is its own band
    assert by["nan"].reason == "not-finite, outside-band" and by["nan"].regression
    assert (by["ok"].verdict, by["ok"].regression) == ("same", False)
    assert "band rule: at most 1x" in by["ok"].detail


def test_a_corrupt_stored_results_file_is_named_in_the_reviews_notes(tmp_path):
    """A probe, 2026-12-07: `review --reuse` over a folder with a truncated results file
    measured that commit again and said nothing of the file. load_stored names each file
    it skipped in the review's notes, once however often it loads."""
    from test_history import results_file, write

    from flashbench.review.results import load_stored

    write(tmp_path / "benchmarks.json", {"version": 2, "b.plain": {
        "param_names": [], "type": "track", "unit": "x"}})
    write(tmp_path / "m" / "good.json", results_file({"b.plain": [[3.0]]}))
    (tmp_path / "m" / "cut.json").write_text('{"version": 2, "results": {"a": [1,')
    notes: list = []
    for _ in range(2):
        frame = load_stored([tmp_path], notes=notes)
    assert list(frame["value"]) == [3.0]
    assert len(notes) == 1 and "Stored results `" in notes[0] and "cut.json` skipped" in notes[0]


def test_a_review_bench_pattern_reaches_asv_in_asvs_own_form(monkeypatch, tmp_path):
    """A red team (2026-12-08): `review --reuse --bench "TimeSoftmax.*N=1024"` (the review's
    name(k=v) form) gave asv a pattern matching nothing of its name(v, ...) form: "asv run
    wrote no results", exit 3. asv now gets the grid points the review selects, by name."""
    import re

    from flashbench.review import stored

    listing = [{"name": "bench_reference.TimeSoftmax.time_softmax", "type": "time", "unit": "s",
                "labels": [f"N={n}, dtype='fp64'" for n in (256, 1024)],
                "asv_labels": [f"{n}, 'fp64'" for n in (256, 1024)]},
               {"name": "bench_memory.track_rss", "type": "track", "unit": "bytes",
                "labels": [""], "asv_labels": [""]}]
    monkeypatch.setattr(stored, "list_suites", lambda *a: listing)
    asv = stored._asv_bench(tmp_path, tmp_path, "TimeSoftmax.*N=1024")

    def asv_selects(name, values):  # asv.benchmarks.Benchmarks' own matching
        return bool(re.search(asv, f"{name}({values})" if values else name))

    assert asv_selects(listing[0]["name"], "1024, 'fp64'")
    assert not asv_selects(listing[0]["name"], "256, 'fp64'")
    assert not asv_selects("bench_memory.track_rss", "")
    assert re.search(stored._asv_bench(tmp_path, tmp_path, "rss"), "bench_memory.track_rss")
    assert stored._asv_bench(tmp_path, tmp_path, None) is None
    with pytest.raises(ValueError, match="matches no benchmark"):
        stored._asv_bench(tmp_path, tmp_path, "NoSuchThing")


def test_stored_results_undecided_are_not_told_to_raise_the_budget():
    """--budget does nothing under --reuse: the summary said to raise it (a red team)."""
    from flashbench.review.model import Row

    row = Row("time", "t", "p", "seconds", "ambiguous", "no-run-to-run-range", undecided=True)
    stored_review = Review("b" * 40, "h" * 40, "m", "cpu", stored.MODE, 1.1, 0.02, rows=[row])
    assert "without --reuse" in stored_review.summary()
    assert "--budget" not in stored_review.summary()
    same_run = Review("b" * 40, "h" * 40, "m", "cpu", "same-run A/B", 1.1, 0.02, rows=[row])
    assert "--budget" in same_run.summary()
