"""History on a new user's results (issue 24): one results file, a corrupt one beside it,
the same folder twice, a failed newest commit, an inf error."""

import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_history import results_file, run_cli, synthetic, tiny_results, write

from flashbench.history import load_results
from flashbench.history.summaries import error_bands

RESULTS = Path(__file__).resolve().parent.parent / "results"
BASE = {"kernel": "triton", "dtype": "bf16", "causal": False}
TRACK = "a.TrackAccuracy.track_o_max_abs"


def one_real_results_file(root: Path) -> Path:
    """A folder as a first ``asv run`` leaves it: benchmarks.json and one results file
    (a committed one: its frame has categorical identity columns)."""
    machine = RESULTS / "cpu-x86_64-xeon-2cpu-24gb"
    first = sorted(p for p in machine.glob("*.json") if p.name != "machine.json")[0]
    (root / machine.name).mkdir(parents=True)
    shutil.copy(RESULTS / "benchmarks.json", root)
    shutil.copy(first, root / machine.name)
    return root


@pytest.mark.parametrize("corrupt", [False, True])
def test_history_of_one_results_file(tmp_path, capsys, corrupt):
    """Probe: 'incompatible index of inserted column with frame index' (error_bands, when
    no series has an earlier commit), also with a corrupt file beside the good one."""
    root = one_real_results_file(tmp_path / "results")
    if corrupt:
        (root / "cpu-x86_64-xeon-2cpu-24gb" / "0000-env.json").write_text('{"version": 2,')
    with pytest.warns(Warning) if corrupt else _nothing():
        bands = error_bands(load_results(root))
    assert not bands.empty and bands["band_lo"].isna().all() and bands["commits"].eq(1).all()
    rc, out, err = run_cli(["history", str(root), "--out", str(tmp_path / "out")], capsys)
    assert rc == 0, err
    assert "## Accuracy bands" in out and (tmp_path / "out" / "error_bands.csv").exists()


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_the_same_folder_twice_is_read_once_with_a_warning(tmp_path, capsys):
    """Probe: `history DIR DIR` counted every row twice (commits doubled)."""
    root = tiny_results(tmp_path / "results", commits=3)
    rc, _, err = run_cli(["history", str(root), str(root) + "/", "--out",
                          str(tmp_path / "out")], capsys)
    assert rc == 0 and "given more than once" in err and "read once" in err
    bands = pd.read_csv(tmp_path / "out" / "error_bands.csv")
    assert bands["commits"].eq(3).all()


def test_one_folder_is_never_said_to_be_skipped(tmp_path, capsys):
    """Probe (2026-12-06): every single-folder report's third line read "skipped `results`:
    no asv results in it", under the count of the results it had read (one folder's file
    paths are relative to it, and were tested as under it)."""
    root = tiny_results(tmp_path / "results", commits=2)
    rc, _, err = run_cli(["history", str(root), "--out", str(tmp_path / "out")], capsys)
    assert rc == 0, err
    text = (tmp_path / "out" / "report.md").read_text()
    assert "skipped" not in text and "2 commits, 1 machine; " in text  # not "1 machines"


def test_a_copy_beside_its_folder_is_read_once_and_said(tmp_path, capsys):
    """Probe (2026-12-06): `history results COPY` read every file twice, silently: 106
    files, a zero noise estimate, 1,141 steps where the folder alone has 195. A results file
    two folders hold byte for byte at the same machine/name.json is read from the first; the
    report names the other folder and why."""
    root = tiny_results(tmp_path / "results", commits=3)
    copy = shutil.copytree(root, tmp_path / "copy")
    rc, _, err = run_cli(["history", str(root), str(copy), "--out", str(tmp_path / "out")],
                         capsys)
    assert rc == 0 and f"{copy}: 3 of its results files are also in {root}, byte for " \
        "byte: read once, from there" in err, err
    assert pd.read_csv(tmp_path / "out" / "error_bands.csv")["commits"].eq(3).all()
    report = (tmp_path / "out" / "report.md").read_text()
    assert "3 results files, 3 commits" in report and "no asv results in it" not in report
    first = sorted((copy / "m").glob("*.json"))[0]  # a file that differs is read (one
    first.write_text(first.read_text().replace("CPU A", "CPU B"))  # name, two processors)
    with pytest.warns(Warning, match="2 of its results files are also in"):
        frame = load_results([root, copy])
    assert frame["file"].nunique() == 4 and set(frame["cpu"]) == {"CPU A", "CPU B"}


def test_a_time_of_zero_or_less_is_named_and_left_out():
    """Probe (2026-12-06): a timing of 0 s read "best inf TFLOP/s" and one of -0.01 s was
    counted as a commit; an error of 0 stays a value (an exact kernel's)."""
    from flashbench.history.summaries import finite_ok

    times = synthetic([1e-3, 0.0, -0.01, 2e-3], "t.TimeX.time_fwd", {"kernel": "triton"})
    times["type"] = "time"
    assert finite_ok(times).tolist() == [True, False, False, True]
    errors = synthetic([1e-3, 0.0], TRACK, BASE).assign(type="track")
    assert finite_ok(errors).tolist() == [True, True]


def test_a_failed_newest_commit_is_not_shown_as_the_previous_value():
    """Probe: 'latest' quietly showed the previous commit's value when the newest failed."""
    err = synthetic([1e-3, 1.1e-3, np.nan], TRACK, BASE)
    err.loc[2, "status"] = "failed"
    row = error_bands(err).iloc[0]
    assert row["latest_status"] == "failed" and np.isnan(row["latest"])
    assert row["latest_commit"] == f"{2:040d}"[:8] and row["inside"] is False
    assert row["commits"] == 2 and row["max"] == 1.1e-3


def test_an_inf_error_is_named_non_finite_and_never_inside():
    err = synthetic([1e-3, 1.1e-3, np.inf], TRACK, BASE)
    row = error_bands(err).iloc[0]
    assert row["latest_status"] == "non-finite" and row["latest"] == np.inf
    assert row["inside"] is False and row["band_hi"] == 1.1e-3
    ok = error_bands(synthetic([1e-3, 1.1e-3, 1.05e-3], TRACK, BASE)).iloc[0]
    assert ok["latest_status"] == "ok" and ok["inside"] is True


def test_an_inf_read_from_a_results_file_is_non_finite(tmp_path):
    write(tmp_path / "benchmarks.json", {"version": 2, TRACK: {
        "param_names": ["kernel"], "type": "track", "unit": "err"}})
    for k, value in enumerate(["1e-3", "Infinity"]):
        write(tmp_path / "m" / f"{k}.json", None, raw=__import__("json").dumps(results_file(
            {TRACK: [[0.0], [["'triton'"]]]}, commit=f"{k:040d}", date=1700000000000 + k))
            .replace("[[0.0]", f"[[{value}]"))
    row = error_bands(load_results(tmp_path)).iloc[0]
    assert row["latest_status"] == "non-finite" and row["inside"] is False


def test_a_benchmark_benchmarks_json_no_longer_declares_gets_asvs_type_and_unit(tmp_path):
    """A probe, 2026-12-07: steps.csv gave six peak-memory steps no unit (a benchmark
    removed since, so benchmarks.json declares it no more). asv's type and unit by the
    name's prefix stand in; a track's unit stays unknown."""
    write(tmp_path / "benchmarks.json", {"version": 2})
    write(tmp_path / "m" / "0.json", results_file({
        "a.P.peakmem_x": [[1e6]], "a.T.time_x": [[0.5]], "a.M.mem_x": [[10.0]],
        "a.K.track_x": [[3.0]]}))
    df = load_results(tmp_path)
    got = {str(b): (t, u) for b, t, u in zip(df["benchmark"], df["type"], df["unit"],
                                             strict=True)}
    assert got["a.P.peakmem_x"] == ("peakmemory", "bytes")
    assert got["a.T.time_x"] == ("time", "seconds") and got["a.M.mem_x"] == ("memory", "bytes")
    assert got["a.K.track_x"][0] == "track" and pd.isna(got["a.K.track_x"][1])


def _track_and_time(tmp_path, values) -> None:
    """A results folder of one track and one timing, a commit per (track, seconds) of
    ``values``, each as JSON text (inf, 1e308: what a file may hold)."""
    write(tmp_path / "benchmarks.json", {"version": 2, TRACK: {
        "param_names": ["kernel"], "type": "track", "unit": "err"},
        "a.Time.time_x": {"param_names": [], "type": "time", "unit": "seconds"}})
    for k, (err, secs) in enumerate(values):
        write(tmp_path / "m" / f"{k}.json", None, raw=__import__("json").dumps(results_file(
            {TRACK: [[0.0], [["'triton'"]]], "a.Time.time_x": [[7.0]]},
            commit=f"{k:040d}", date=1700000000000 + k)).replace("[[0.0]", f"[[{err}]")
            .replace("[[7.0]]", f"[[{secs}]]"))


def test_values_left_out_are_said_in_report_md_not_only_on_stderr(tmp_path):
    """A probe, 2026-12-07: an inf accuracy value and a -1 s timing were named on stderr
    alone; report.md's rows just counted fewer commits. report.md says them under its
    header, as it does a corrupt file."""
    from flashbench.history import report

    _track_and_time(tmp_path, [("1e-3", "0.5"), ("Infinity", "-1.0")])
    with pytest.warns(Warning):
        report.build_report(tmp_path, tmp_path / "out")
    head = (tmp_path / "out" / "report.md").read_text().split("## The answer")[0]
    assert f"1 value(s) not finite ({TRACK}) at commit 00000000" in head, head
    assert "1 value(s) that no measurement gives" in head and "(-1)" in head, head


def test_a_time_no_clock_gives_is_left_out_and_plotted_without_a_crash(tmp_path):
    """A probe, 2026-12-07: a timing edited to 1e-300 s read "best inf TFLOP/s" and a
    -100% step; one of 1e308 s (and a track of 1e308) crashed the plots, exit 3; a track
    of -5 read "less error than ever". Each is named and left out of steps, trends and
    bands (the newest, "below 0"); the report is whole."""
    from flashbench.history import report

    _track_and_time(tmp_path, [("1e-3", "0.5"), ("1e308", "1e-300"), ("2e-3", "1e308"),
                               ("-5", "0.6")])
    with pytest.warns(Warning):
        report.build_report(tmp_path, tmp_path / "out")
    head = (tmp_path / "out" / "report.md").read_text().split("## The answer")[0]
    assert "3 value(s) that no measurement gives" in head, head  # and a track of -5: it
    assert "(-5)" in head, head  # read "less error than ever" (a probe)
    bands = __import__("pandas").read_csv(tmp_path / "out" / "error_bands.csv")
    assert list(bands["latest_status"]) == ["below 0"], bands
    assert "(1e-300)" in head and "(1e+308)" in head, head
    answer = (tmp_path / "out" / "report.md").read_text().split("## The answer")[1]
    assert not __import__("re").search(r"\binf\b", answer), answer


def test_a_report_interrupted_midway_leaves_the_previous_one_whole(tmp_path, monkeypatch):
    """history --out writes each file whole: a run that fails while plotting leaves the
    previous report's files as they were, and no half-written file or staging folder.
    (A small results folder: what is checked does not depend on its size; the failing
    run has staged the CSVs and errors.png when plot_tflops fails.)"""
    from flashbench.history import report

    root = tiny_results(tmp_path / "results")
    out = tmp_path / "out"
    report.build_report(root, out)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert "report.md" in before and "results.csv" in before

    staged = []

    def broken(points, df, path):
        staged.extend(sorted(p.name for p in Path(path).parent.iterdir()))
        raise RuntimeError("interrupted while plotting")

    monkeypatch.setattr(report, "plot_tflops", broken)
    with pytest.raises(RuntimeError, match="interrupted"):
        report.build_report(root, out)
    after = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert {"errors.png", "tflops.png", "results.csv"} <= set(before)
    assert {"errors.png", "results.csv"} <= set(staged)  # written, then left unmoved
    assert after == before
    assert not [p for p in out.iterdir() if p.is_dir()]


def test_a_report_folder_that_cannot_be_made_is_refused_before_loading(tmp_path,
                                                                      monkeypatch):
    from flashbench.history import report

    def no_load(*args, **kwargs):
        raise AssertionError("loaded the results before refusing --out")

    monkeypatch.setattr(report, "load_results", no_load)
    (tmp_path / "a-file.txt").write_text("mine")
    with pytest.raises(ValueError, match="not a writable folder"):
        report.build_report(tmp_path, tmp_path / "a-file.txt" / "report")
    assert (tmp_path / "a-file.txt").read_text() == "mine"


CHILD = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))
from flashbench.cli import main
sys.exit(main(["history", sys.argv[1], "--out", sys.argv[2]]))
"""


@pytest.mark.slow  # a child process that draws the report's plots (10 s of CPU)
def test_an_infinite_timing_is_reported_and_kept_out_of_steps_within_bounded_memory(tmp_path):
    """Issue 36 (6): one infinite timing in a series made asv's step solver grow to 21.7 GB
    (MemoryError under this 3 GB limit, exit 3: failed before). Now one line names the file,
    the benchmark and the commit, and the step the finite values hold is still found."""
    import json
    import subprocess
    import sys

    from flashbench.history.steps import steps

    bench = "t.TimeX.time_fwd"
    write(tmp_path / "r" / "benchmarks.json", {bench: {
        "param_names": ["shape"], "unit": "seconds", "type": "time"}})
    for k in range(40):
        value = {12: "Infinity", 30: "-Infinity"}.get(
            k, repr(1e-3 * (1.5 if k >= 20 else 1.0) * (1 + 0.002 * (k % 3))))
        write(tmp_path / "r" / "m" / f"{k:03d}.json", None, raw=json.dumps(results_file(
            {bench: [[0.0], [["'1x2x64x64x16'"]]]}, commit=f"{k:08x}" + "0" * 32,
            date=1700000000000 + k * 60000, cpu="CPU A")).replace("[[0.0]", f"[[{value}]"))
    child = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "r"),
                            str(tmp_path / "report")], capture_output=True, text=True,
                           timeout=600)
    assert child.returncode == 0, child.stderr[-2000:]
    lines = [x for x in child.stderr.splitlines() if "not finite" in x]
    assert len(lines) == 2 and "012.json" in lines[0] and bench in lines[0], child.stderr
    assert "0000000c" in lines[0] and "left out of steps and trends" in lines[0]
    assert "030.json" in lines[1] and "0000001e" in lines[1]
    with pytest.warns(UserWarning, match="not finite"):
        frame = load_results(tmp_path / "r", cache=False)
    found = steps(frame)
    assert list(found["commit"]) == ["00000014"] and np.isfinite(found["before"]).all()


def test_every_accuracy_track_suite_is_read_as_accuracy():
    """Failed before: bench_headdims' TrackHeadDimAccuracy was not in history.suites.ACCURACY,
    so its tracks reached no band, no rule plot and no review rule. Every Track* class in
    benchmarks/ whose tracks record errors or rule ratios must match."""
    import ast
    from pathlib import Path

    from flashbench.history.suites import ACCURACY

    missed = []
    for path in sorted((Path(__file__).resolve().parents[1] / "benchmarks").glob("bench_*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and node.name.startswith("Track"):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and item.name.startswith("track_"):
                        name = f"{path.stem}.{node.name}.{item.name}"
                        if not ACCURACY.search(name):
                            missed.append(name)
    assert not missed, missed


@pytest.mark.parametrize("window", [(256, 0), (1024, 0), (16, 16)])
def test_a_windowed_variants_flops_count_only_its_visible_pairs(window):
    """history's TFLOP/s of TimeVariantReference's "causal window=(256,0)" counted every
    4096 x 4096 pair (16x the work done; its causal column read False): now the pairs its
    mask leaves visible, as speed counts them."""
    from flashbench.history.summaries import problem
    from flashbench.inputs import Shape
    from flashbench.inputs.variant import variant_of
    from flashbench.measure.speed import SpeedCase

    label = f"causal window=({window[0]},{window[1]})"
    got = problem("bench_variants.TimeVariantReference.time_variant",
                  f"shape='1x1x4096x4096x64', dtype='fp64', variant='{label}', impl='streamed'")
    shape = Shape(1, 1, 4096, 4096, 64)
    want = SpeedCase(shape, "fp64", True, "fwd", variant_of(True, window=window)).flops()
    assert got[3] is True and got[6] == pytest.approx(want, rel=1e-12)
    plain = problem("bench_variants.TimeVariantReference.time_variant",
                    "shape='1x1x4096x4096x64', dtype='fp64', variant='softcap=30', "
                    "impl='streamed'")
    assert plain[3] is False and plain[6] == shape.flops(False, "fwd")


def test_the_accuracy_tables_show_the_parameters_no_column_shows(tmp_path, committed_report):
    """The decode merge study's rows (partials, lse_dtype) and the decode tracks' case read
    as duplicates with empty kernels in report.md's accuracy tables: an "other" column
    holds those parameters now, as the answer's table does. The committed history's report
    is the run's one (conftest.committed_report: `flashbench history results`, 8 s of CPU
    a report); the folder that gave nothing, said, is a small history's beside it."""
    from flashbench.history.answer import other_params
    from flashbench.history.report import build_report

    assert other_params("dtype='bf16', partials='fp16', lse_dtype='fp32'") == \
        "partials='fp16' lse_dtype='fp32'"
    assert other_params("kernel='flex', dtype='fp16'") is None
    (tmp_path / "empty").mkdir()  # a folder holding no results: said, not only named
    small = tiny_results(tmp_path / "results", commits=2)
    build_report([small, tmp_path / "empty"], tmp_path / "r")
    said = (tmp_path / "r" / "report.md").read_text()
    assert f"- skipped `{tmp_path / 'empty'}`: no asv results in it" in said
    assert f"- skipped `{small}`" not in said  # the folder that gave results is not
    rc, report = committed_report
    assert rc == 0
    text = (report / "report.md").read_text()
    accuracy = text.split("## Accuracy bands", 1)[1].split("\n## ", 1)[0]
    assert "partials='bf16' lse_dtype='fp32'" in accuracy and "| other " in accuracy
    # ... and name a study's rows so (red team, 2026-12-06: the merge study's rows, with no
    # kernel, read as a failing kernel under "baseline rule passes at <= 2": 13.4)
    study = [ln for ln in accuracy.splitlines() if "partials=" in ln]
    assert study and all(re.search(r"\|\s*\(study\)\s*\|", ln) for ln in study), study[:2]
    assert "a (study) row is a study's measurement, not a kernel's verdict" in accuracy
    # a run slower across the board (tflops.png's red band) is named by the throughput
    # table too: a latest value from one read -88 % there with no note
    from flashbench.history.files import read_benchmarks
    from flashbench.history.load import load_results
    from flashbench.history.plots import commit_order, loaded_runs
    from flashbench.history.steps import current_code, declared_versions
    from flashbench.history.summaries import throughput_points

    df = load_results([RESULTS])
    order = commit_order(df)
    at = {x: c for c, x in order.items()}
    # the report's trends read each benchmark's current code alone (history.steps)
    now = df[current_code(df, declared_versions(df, [read_benchmarks(RESULTS)], [RESULTS]))]
    loaded = loaded_runs(throughput_points(now), order)
    throughput = text.split("## Throughput", 1)[1].split("\n## ", 1)[0]
    assert bool(loaded) == ("**Runs slower across the board**" in throughput)
    for xs in loaded.values():
        assert all(f"`{str(at[x])[:8]}`" in throughput for x in xs)


def test_a_results_file_dated_past_2100_is_refused_by_name(tmp_path):
    """A probe (2026-12-07): "date": 1e20 ended history and bands with exit 3 (an
    OverflowError converting it); 1e17 with OutOfBoundsDatetime."""
    import json

    from flashbench.history.files import read_results_file

    good = {"version": 2, "commit_hash": "abc", "env_name": "e", "date": 1, "params": {},
            "python": "3.11", "requirements": {}, "result_columns": [], "results": {}}
    path = tmp_path / "r.json"
    for date in (10**20, 10**17, -5):
        path.write_text(json.dumps({**good, "date": date}))
        with pytest.raises(ValueError, match=r"'date' is \S+, expected milliseconds since "
                                             r"1970 \(before 2100\)"):
            read_results_file(path)
    path.write_text(json.dumps(good))
    assert read_results_file(path)["date"] == 1


def test_a_file_nested_too_deep_is_refused_before_it_is_parsed(tmp_path):
    """A probe, 2026-12-07: one results file of "[" x 100,000 then "]" x 100,000 ended
    `flashbench history` with a segfault (exit 139, no word), in yyjson's conversion to
    Python objects. It is now refused by name, as any corrupt file, before it is parsed;
    asv's own files nest 5 deep."""
    from flashbench.history.files import read_results_file

    deep = tmp_path / "deep.json"
    deep.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(ValueError, match="nested deeper than 64 levels"):
        read_results_file(deep)
    shallow = tmp_path / "shallow.json"  # strings' brackets count: a bound, never a miss
    shallow.write_bytes(b'{"version": 2, "x": "' + b"[" * 60 + b'"}')
    with pytest.raises(ValueError, match="missing keys"):
        read_results_file(shallow)


def test_a_file_larger_than_asv_writes_is_refused_before_it_is_read(tmp_path):
    """A probe, 2026-12-07: a 96 MB results file held 1.19 GB as Python objects while
    `flashbench history` read it. A results file or benchmarks.json past 64 MiB (asv's for
    these suites: under 200 kB) is refused by its size, as any corrupt file, unread (a
    sparse file here: its bytes are never touched)."""
    from flashbench.history.files import read_benchmarks, read_results_file

    huge = tmp_path / "huge.json"
    with huge.open("wb") as f:
        f.truncate(96 << 20)
    with pytest.raises(ValueError, match=r"96 MiB, larger than any file asv writes for "
                                         r"these suites \(limit 64 MiB\): not read"):
        read_results_file(huge)
    folder = tmp_path / "machine"
    folder.mkdir()
    huge.rename(folder / "benchmarks.json")
    problems: list = []
    assert read_benchmarks(folder, problems) == {}
    assert len(problems) == 1 and "96 MiB, larger than any file" in problems[0][1]
