"""The history report read by a fresh-eyes probe (2026-12-07): a trend across a benchmark's
own code change, a folder without benchmarks.json, a value that is no number, a result list
cut short, a single slow last point, a machine that recorded no processor."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from test_history import results_file, run_cli, tiny_results, write

from flashbench.history import load_results
from flashbench.history.answer import answer, machine_labels
from flashbench.history.steps import current_code, steps
from flashbench.history.summaries import error_bands, throughput

TIMING = "t.TimeX.time_fwd"
SHAPE = "'1x2x256x256x64'"


def versioned_results(root, seconds: list[float], versions: list[str]):
    """A results folder: one timing with a shape, a commit per value, each recorded under
    the benchmark version given (asv's hash of the benchmark's code)."""
    write(root / "benchmarks.json", {TIMING: {"param_names": ["shape"], "unit": "seconds",
                                              "type": "time", "version": versions[-1]}})
    for k, (s, v) in enumerate(zip(seconds, versions, strict=True)):
        write(root / "m" / f"{k:08x}-env.json", results_file(
            {TIMING: [[s], [[SHAPE]], v]}, commit=f"{k:08x}" + "0" * 32,
            date=1700000000000 + k * 60000, cpu="CPU A"))
    return root


def test_current_code_keeps_each_machines_newest_version_and_rows_without_one():
    df = pd.DataFrame({
        "machine": ["m", "m", "m", "m", "m", "n"], "cpu": [None] * 6,
        "benchmark": ["a", "a", "a", "b", "b", "a"],
        "date": pd.to_datetime(["2026-01-01", "2026-01-03", "2026-01-02", "2026-01-01",
                                "2026-01-02", "2026-01-01"]),
        "version": pd.Categorical(["v1", "v2", "v1", None, "w", "v1"])})
    # m's "a" is v2 now (its newest row by date, whatever the row order); "b"'s first row
    # recorded no version (kept: nothing tells); n's "a" is a series of its own
    assert current_code(df).tolist() == [False, True, False, True, True, True]
    assert current_code(df.drop(columns="version")).all()
    # benchmarks.json's version decides where it names one (asv's rule): a backfill of
    # older commits after the benchmark's edit is current, the newest commit's run before
    # it is not (a review, 2026-12-07: the newest result's version dropped the backfill)
    declared = np.array(["v1", "v1", "v1", None, None, "v1"], dtype=object)
    assert current_code(df, declared).tolist() == [True, False, True, True, True, True]
    gone = np.array(["v9"] * 6, dtype=object)  # a version no row holds: none is current
    assert current_code(df.assign(version=pd.Categorical(["v1"] * 6)), gone).tolist() == \
        [False] * 6
    # the same date in two envs: each env is a series of its own, whatever the row order
    twin = pd.DataFrame({"machine": "m", "cpu": None, "env": ["py310", "py311"] * 2,
                         "benchmark": "a", "date": pd.to_datetime(["2026-01-01"] * 2 +
                                                                  ["2026-01-02"] * 2, utc=True),
                         "version": pd.Categorical(["v1", "v1", "v2", "v1"])})
    assert current_code(twin).tolist() == [False, True, True, True]
    assert current_code(twin.iloc[::-1]).tolist() == [True, True, True, False]


def test_a_trend_across_the_benchmarks_own_code_change_reads_the_current_code(tmp_path,
                                                                             capsys):
    """The probe's trend of 9 points over 3 asv versions read -29 % where the benchmark
    itself changed. asv starts a new series there and its graphs show the newest alone."""
    root = versioned_results(tmp_path / "results", [1e-3] * 3 + [2e-3] * 3,
                             ["v1"] * 3 + ["v2"] * 3)
    df = load_results(root, cache=False)
    every = throughput(df).iloc[0]
    assert every["commits"] == 6 and every["change_pct"] < -49  # what the table read
    now = throughput(df[current_code(df)]).iloc[0]
    assert now["commits"] == 3 and abs(now["change_pct"]) < 1e-9
    rc, out, err = run_cli(["history", str(root), "--out", str(tmp_path / "out")], capsys)
    assert rc == 0, err
    assert "- 3 results of 1 benchmark(s) were recorded under other code than the " \
        "benchmark's current" in out
    trend = pd.read_csv(tmp_path / "out" / "throughput.csv")
    assert trend["commits"].tolist() == [3] and abs(trend["change_pct"].iloc[0]) < 1e-9
    assert len(pd.read_csv(tmp_path / "out" / "results.csv")) == 6  # every row kept there


def test_a_folder_without_benchmarks_json_is_said(tmp_path, capsys):
    """The probe's report lost most of its rows (units, types and parameter names unknown),
    exit 0, nothing said."""
    root = tiny_results(tmp_path / "results")
    (root / "benchmarks.json").unlink()
    rc, out, err = run_cli(["history", str(root), "--out", str(tmp_path / "out")], capsys)
    assert rc == 0, err
    assert "benchmarks.json: missing: the units, types and parameter names" in err
    assert "- `" in out and "benchmarks.json`: missing" in out and "skipped `" not in out


def test_a_value_that_is_no_number_fails_and_a_short_list_is_said(tmp_path):
    """The probe: "oops" read as NaN became "skipped" (setup raised NotImplementedError, the
    docs say), and a list cut to 1 of its 3 values left 2 "missing" with no word."""
    write(tmp_path / "benchmarks.json", {"b.Track.track_x": {
        "param_names": ["n"], "type": "track", "unit": "err"}})
    write(tmp_path / "m" / "a.json", results_file({
        "b.Track.track_x": [[1.0, "oops", 3.0], [["1", "2", "3"]]],
        "b.Track.track_y": [[1.0], [["1", "2", "3"]]]}))
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        df = load_results(tmp_path, cache=False)
    status = dict(zip(df["benchmark"].astype(str) + df["params"].astype(str),
                      df["status"].astype(str), strict=True))
    assert status["b.Track.track_xn=2"] == "failed" and status["b.Track.track_xn=1"] == "ok"
    assert sorted(v for k, v in status.items() if "track_y" in k) == ["missing", "missing",
                                                                     "ok"]
    text = " ".join(str(w.message) for w in said)
    assert "1 value(s) are not numbers" in text and "a failed result" in text
    assert "2 result(s) of 1 benchmark(s) absent" in text and "b.Track.track_y" in text


def frame(seconds, machine="m", cpu="CPU A"):
    n = len(seconds)
    return pd.DataFrame({"machine": machine, "cpu": cpu, "env": "e",
                         "commit": [f"{i:040d}" for i in range(n)],
                         "date": pd.date_range("2026-01-01", periods=n, tz="UTC"),
                         "file": [f"f{i}" for i in range(n)], "benchmark": TIMING,
                         "params": f"shape={SHAPE}", "type": "time", "unit": "seconds",
                         "value": seconds, "status": "ok", "shape": SHAPE.strip("'")})


def test_the_answer_names_a_last_point_under_half_its_best():
    """The probe: a 9x drop in the newest run was said only deep in the throughput table
    (one point is no step), never in the answer."""
    df = frame([1e-3, 1e-3, 1.1e-3, 9e-3])
    text = "\n".join(answer(df, error_bands(df), steps(df), machine_labels(df),
                            trend=throughput(df)))
    line = next(x for x in text.splitlines() if x.startswith("- Throughput"))
    assert "**1** timing(s)" in line and "B=1 H=2 Nq=256 Nk=256 d=64 fwd" in line, line
    steady = frame([1e-3, 1e-3, 1.1e-3, 1.2e-3])
    text = "\n".join(answer(steady, error_bands(steady), steps(steady),
                            machine_labels(steady), trend=throughput(steady)))
    assert "- Throughput: no timing's latest point under 50%" in text


def test_the_newest_commit_names_a_machine_that_recorded_no_processor():
    """The probe: "Newest commit per machine: ." where asv recorded no cpu (None == None is
    never True in a pandas comparison)."""
    df = frame([1e-3, 1e-3], cpu=None)
    text = "\n".join(answer(df, error_bands(df), steps(df), machine_labels(df)))
    assert "Newest commit per machine: M1 `00000000` (2026-01-02)." in text, text


def test_a_panels_commit_labels_never_sit_on_each_other():
    """A probe (2026-12-07): tflops.png printed three 12-03 commits' labels over each other
    ("f561b3b7dde01a2c1b6e8"): a panel's commits sat side by side on history's x axis, and
    every one of them got a label. Labels now keep a fifth of the axis apart."""
    from flashbench.history import figure as fg

    fig = fg.pyplot().figure()
    ax = fig.add_subplot()
    labels = {x: f"c{x}" for x in range(50)}
    fg.commit_axis(ax, labels, [3, 40, 41, 42])
    assert list(ax.get_xticks()) == [3, 42]  # the latest always, then the far one
    fg.commit_axis(ax, labels, range(21))
    ticks = list(ax.get_xticks())
    gaps = [b - a for a, b in zip(ticks, ticks[1:], strict=False)]
    assert ticks[-1] == 20 and len(ticks) == 4 and min(gaps) >= 4, ticks
    fg.pyplot().close(fig)


def test_the_plots_draw_an_earlier_code_faint_and_apart(tmp_path):
    """Reading the current code alone left tflops.png with the committed history's last 3
    commits of 51 (a review of this change, 2026-12-07): the plots draw every result, each
    benchmark code a line of its own, an earlier code's faint."""
    from flashbench.history.plots import tflops_figure
    from flashbench.history.summaries import throughput_points

    root = versioned_results(tmp_path / "results", [1e-3] * 3 + [2e-3] * 3,
                             ["v1"] * 3 + ["v2"] * 3)
    df = load_results(root, cache=False)
    points = throughput_points(df.assign(current=current_code(df)))
    fig = tflops_figure(points, df)
    drawn = [ln for ln in fig.axes[0].get_lines() if len(ln.get_xdata()) == 3]
    assert sorted(ln.get_alpha() for ln in drawn) == [0.3, 1], drawn
    faint, bold = sorted(drawn, key=lambda ln: ln.get_alpha())
    assert max(faint.get_xdata()) < min(bold.get_xdata())  # the earlier code, earlier



@pytest.mark.parametrize("damage", ["truncated", "an entry a list"])
def test_a_corrupt_benchmarks_json_is_said_in_the_report(tmp_path, capsys, damage):
    """A probe: a truncated benchmarks.json was said on stderr alone, the report (whose
    summaries lost the rows it types) saying nothing; and entries that are no objects were
    left out unsaid. Both are listed with what was skipped."""
    import json

    root = tiny_results(tmp_path / "results")
    path = root / "benchmarks.json"
    if damage == "truncated":
        path.write_text(path.read_text()[:100])
        why = "benchmarks.json: unreadable ("
    else:
        meta = json.loads(path.read_text())
        name = next(k for k in meta if k != "version")
        meta[name] = [1, 2]
        path.write_text(json.dumps(meta))
        why = f"benchmarks.json: 1 entries are no objects ({name})"
    rc, out, err = run_cli(["history", str(root), "--out", str(tmp_path / "out")], capsys)
    assert rc == 0, err
    assert why in err
    assert why.replace("benchmarks.json:", "benchmarks.json`:") in out, out


def test_a_change_another_machine_read_between_this_machines_runs_is_said(tmp_path, capsys):
    """A newcomer's report opened with "+71% more error" on M3's newest commit, no cause
    given: M2 had read that value three commits earlier (inside its band there), and M3 had
    not run since. The answer's why says where it was seen first."""
    root = tmp_path / "results"
    write(root / "benchmarks.json", {
        "a.TrackAccuracy.track_o_max_abs": {"param_names": ["kernel", "dtype", "shape"],
                                            "unit": "max |O - O_fp64|", "type": "track"}})

    def run(machine, cpu, k, value):
        write(root / machine / f"{k:08x}-{cpu[-1]}.json", results_file(
            {"a.TrackAccuracy.track_o_max_abs": [[value], [["'triton'"], ["'fp32'"],
                                                            ["'1x2x64x64x16'"]]]},
            commit=f"{k:08x}" + "0" * 32, date=1700000000000 + k * 60000, machine=machine,
            cpu=cpu))

    for k in (0, 1):  # M1 (cpu A) runs commits 0, 1 and then 5 alone
        run("m", "cpu A", k, 2.79e-7)
    run("m", "cpu A", 5, 4.78e-7)
    for k, v in ((0, 2.8e-7), (1, 2.8e-7), (2, 4.78e-7), (3, 4.78e-7), (4, 4.78e-7)):
        run("m", "cpu B", k, v)  # cpu B read the change at commit 2
    rc, out, err = run_cli(["history", str(root), "--out", str(tmp_path / "out")], capsys)
    assert rc == 0, err
    answer = out[out.index("## The answer"):out.index("Machines:")]
    assert "a value another machine changed to first, at a commit this machine did not run" \
        in answer, answer
    line = next(x for x in answer.splitlines() if "| 4.78e-07" in x)
    assert "seen on M2 since `00000002`" in line, line


@pytest.mark.parametrize("case", ["both ran the newest", "no cpu", "tiny values",
                                  "read it all along"])
def test_seen_elsewhere_is_said_only_of_a_commit_this_machine_did_not_run(tmp_path, capsys,
                                                                          case):
    """A review: two machines that both ran the commit that caused a change each read
    "seen on the other since" it (a change at the newest commit, said to be between
    runs); machines without a cpu never matched (None == None is False in pandas); numpy's
    default atol matched any two values under 1e-8; a machine that read the value from its
    first run on (another host's numbers, no change) was named "since" a commit between this
    machine's runs (a probe, 2026-12-07)."""
    root = tmp_path / "results"
    write(root / "benchmarks.json", {
        "a.TrackAccuracy.track_o_max_abs": {"param_names": ["kernel", "dtype", "shape"],
                                            "unit": "max |O - O_fp64|", "type": "track"}})

    def run(machine, k, value):
        write(root / machine / f"{k:08x}.json", results_file(
            {"a.TrackAccuracy.track_o_max_abs": [[value], [["'triton'"], ["'fp32'"],
                                                            ["'1x2x64x64x16'"]]]},
            commit=f"{k:08x}" + "0" * 32, date=1700000000000 + k * 60000, machine=machine,
            cpu=None if case == "no cpu" else f"cpu {machine}"))

    old, new = (1e-12, 5e-13) if case == "tiny values" else (2.79e-7, 4.78e-7)
    other = 9e-13 if case == "tiny values" else new
    for machine in ("a", "b"):
        for k in (0, 1):
            run(machine, k, new if case == "read it all along" and machine == "b" else old)
    if case == "both ran the newest":
        run("a", 2, new)
        run("b", 2, new)
    else:
        run("b", 2, other)
        run("a", 3, new)
    rc, out, err = run_cli(["history", str(root), "--out", str(tmp_path / "out")], capsys)
    assert rc == 0, err
    answer = out[out.index("## The answer"):out.index("Machines:")]
    seen = "seen on" in answer
    assert seen is (case == "no cpu"), answer


@pytest.mark.parametrize("case", ["host alone", "b moved too", "newest failed"])
def test_a_change_where_the_machine_changed_host_says_so(tmp_path, capsys, case):
    """A probe, 2026-12-07: 59 tracks outside their band moved at M3's first run on a new
    host (its os and ram in the results files' params), and the answer gave no why (the
    steps table marked them + for a host). The answer's why reads "host changed"; not where
    another machine on an unchanged host made the same move (that is the code's: a review),
    nor of a newest result that failed (its last two ok runs are not its newest)."""
    root = tmp_path / "results"
    write(root / "benchmarks.json", {
        "a.TrackAccuracy.track_o_max_abs": {"param_names": ["kernel", "dtype", "shape"],
                                            "unit": "max |O - O_fp64|", "type": "track"}})

    def run(machine, k, value, os_name):
        data = results_file(
            {"a.TrackAccuracy.track_o_max_abs": [[value], [["'triton'"], ["'fp32'"],
                                                            ["'1x2x64x64x16'"]]]},
            commit=f"{k:08x}" + "0" * 32, date=1700000000000 + k * 60000, machine=machine,
            cpu=f"cpu {machine}")
        data["params"] |= {"os": os_name, "ram": "24GB"}
        write(root / machine / f"{k:08x}.json", data)

    for k in (0, 1, 2):
        run("a", k, 2.79e-7 if k < 2 else 4.78e-7, "Linux 6.1" if k < 2 else "Linux 6.8")
        run("b", k, 4.78e-7 if k == 2 and case == "b moved too" else 2.79e-7, "Linux 6.1")
    if case == "newest failed":
        run("a", 3, None, "Linux 6.8")
    rc, out, err = run_cli(["history", str(root), "--out", str(tmp_path / "out")], capsys)
    assert rc == 0, err
    answer = out[out.index("## The answer"):out.index("Machines:")]
    said = "changed between its last two runs" in answer
    rows = [x for x in answer.splitlines() if x.startswith("| M")]
    assert said is (case == "host alone"), answer
    assert sum("host changed" in x for x in rows) == (case == "host alone"), rows
