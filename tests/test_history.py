"""flashbench.history on results written by real asv runs and on hand-made edge cases."""

import ast
import io
import json
import math
import re
import shutil
import site
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from asv_project import make_repo, run_asv
from hypothesis import given, settings
from hypothesis import strategies as st
from once_per_run import once_per_run

from flashbench.history import (
    ACCURACY,
    FIXED_COLUMNS,
    ResultsWarning,
    error_bands,
    load_results,
    parse_params,
    steps,
    throughput,
    throughput_points,
)
from flashbench.inputs import Shape

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"  # the project's committed asv history (never written here)
CPU = "Test CPU @ 1.00GHz"


def second_interpreter(root):
    """A second venv that sees this one's packages: a different asv environment name."""
    env = root / "env-b"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    purelib = subprocess.run([str(env / "bin" / "python"), "-c",
                              "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    with open(f"{purelib}/parent.pth", "w") as f:
        f.write("\n".join(site.getsitepackages()) + "\n")
    return str(env / "bin" / "python")


@pytest.fixture(scope="module")
def asv_results(tmp_path_factory, worker_id):
    """(results folder, commits) of 4 real asv runs on a tiny project, made once a test run
    (tests/once_per_run.py: its 3 tests, spread over the workers, each ran it: 5 s of CPU
    a time); the tests only read the folder."""
    def run():
        if worker_id == "master":
            root = tmp_path_factory.mktemp("asvproj")
        else:  # beside the workers' own temp folders: the run's, read by every worker
            root = tmp_path_factory.getbasetemp().parent / "asvproj"
            root.mkdir()
        repo = make_repo(root)
        commits = subprocess.run(["git", "rev-list", "--reverse", "HEAD"], cwd=repo, text=True,
                                 capture_output=True, check=True).stdout.split()
        py_a, py_b = sys.executable, second_interpreter(root)
        run_asv(repo, commits[0], "m1", py_a, "--record-samples", "-a", "repeat=3", cpu=CPU)
        run_asv(repo, commits[1], "m1", py_a, "--quick", cpu=CPU)
        run_asv(repo, commits[1], "m1", py_b, "--quick", cpu=CPU)
        run_asv(repo, commits[1], "m2", py_a, "--quick", cpu="Other CPU")
        return [str(repo / "results"), commits]

    path, commits = once_per_run(tmp_path_factory, worker_id, "asv-results", run)
    return Path(path), commits


@pytest.mark.slow
def test_real_asv_results_load_into_one_tidy_frame(asv_results):
    path, commits = asv_results
    with pytest.warns(ResultsWarning) as caught:  # nothing here is corrupt, but ...
        df = load_results(path)
    # ... m1 ran commits[1] in two environments: one file per machine and commit is read,
    # the newer run (py_b's), and the other said (a red team, 2026-12-08)
    assert len(caught) == 1 and "left out" in str(caught[0].message)
    # 3 results files x (4 Params + 3 Skips + 2 Shaped + time + peakmem + track_plain) rows
    assert df["file"].nunique() == 3
    assert len(df) == 3 * (4 + 3 + 2 + 3)
    assert list(df.columns[:len(FIXED_COLUMNS)]) == FIXED_COLUMNS
    assert set(df["machine"]) == {"m1", "m2"}
    # the processor, as asv recorded it in each results file
    assert set(df.loc[df["machine"] == "m1", "cpu"]) == {CPU}
    assert set(df.loc[df["machine"] == "m2", "cpu"]) == {"Other CPU"}
    assert df[df["machine"] == "m1"]["env"].nunique() == 2
    assert set(df["commit"]) == set(commits)
    assert {"word", "maybe", "n", "shape", "causal"} <= set(df.columns)

    p = df[df["benchmark"] == "suite.Params.track_len"]
    assert len(p) == 12 and (p["unit"] == "widgets").all() and (p["type"] == "track").all()
    got = {(r.word, None if pd.isna(r.maybe) else r.maybe): r.value
           for r in p[p["file"] == p["file"].iloc[0]].itertuples()}  # None: missing
    assert got == {("a", None): 10, ("a", 1): 11, ("b", None): 10, ("b", 1): 11}

    s = df[df["benchmark"] == "suite.Skips.track_square"].sort_values("n")
    first = s[s["file"] == s["file"].iloc[0]]
    assert list(first["status"]) == ["ok", "skipped", "failed"]
    assert first["value"].iloc[0] == 1 and np.isnan(first["value"].iloc[1:]).all()

    t = df[(df["benchmark"] == "suite.time_sum") & (df["commit"] == commits[0])]
    assert len(t) == 1 and t["status"].iloc[0] == "ok" and t["unit"].iloc[0] == "seconds"
    assert t["value"].iloc[0] > 0
    assert isinstance(t["samples"].iloc[0], list)  # an Arrow list column: lists of floats
    samples = np.asarray(t["samples"].iloc[0], dtype=float)
    assert len(samples) >= 3
    assert samples.min() <= t["value"].iloc[0] <= samples.max()  # value: median of samples
    # asv stores statistics rounded to 5 significant digits
    assert t["q25"].iloc[0] == pytest.approx(np.percentile(samples, 25), rel=1e-4)
    assert t["ci_99_a"].iloc[0] <= t["value"].iloc[0] <= t["ci_99_b"].iloc[0]
    assert df[df["benchmark"] == "suite.track_plain"]["value"].eq(42.5).all()
    assert df[df["benchmark"] == "suite.peakmem_list"]["unit"].eq("bytes").all()
    assert df["date"].dt.tz is not None

    # a real asv timing with a shape parameter becomes throughput, per machine identity
    points = throughput_points(df)
    assert set(points["benchmark"]) == {"suite.Shaped.time_attention"}
    row = points.iloc[0]
    flops = Shape.parse("1x2x64x64x16").flops(row["causal"])
    assert row["tflops"] == pytest.approx(flops / row["value"] * 1e-12)
    assert row["backend"] == "time_attention" and row["shape"] == "B=1 H=2 Nq=64 Nk=64 d=16"
    assert len(throughput(df)) == 2 * 2  # (m1 and m2) x causal


def write(path, data, raw=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(raw if raw is not None else json.dumps(data))


def results_file(results, columns=None, commit="c" * 40, date=1700000000000, machine="m",
                 cpu=None):
    params = {"machine": machine} | ({"cpu": cpu} if cpu else {})
    return {"version": 2, "commit_hash": commit, "env_name": "env", "date": date,
            "params": params, "python": "3.11", "requirements": {},
            "result_columns": columns or ["result", "params", "version", "started_at",
                                          "duration", "stats_ci_99_a", "stats_ci_99_b"],
            "results": results}


def test_hand_made_edge_cases(tmp_path):
    write(tmp_path / "benchmarks.json", {"version": 2, "b.Track.track_x": {
        "param_names": ["dtype", "n"], "type": "track", "unit": "err"}})
    write(tmp_path / "m" / "ok.json", results_file({
        # NaN = skipped, null = failed, and a missing third value
        "b.Track.track_x": [[1.5, float("nan"), None], [["'fp16'", "'bf16'"], ["1", "2"]]],
        # missing trailing columns: result only
        "b.plain": [[3.0]],
        # unknown key in the row's columns is ignored
    }) | {"unknown_top_level_key": 1})
    write(tmp_path / "m" / "unknown-col.json",
          results_file({"b.plain": [[4.0], [], "v", 0, 0, [1.0], [5.0], "extra"]},
                       columns=["result", "params", "version", "started_at", "duration",
                                "stats_ci_99_a", "stats_ci_99_b", "brand_new_column"],
                       commit="d" * 40))  # one commit's two files are one result
    write(tmp_path / "m" / "truncated.json", None, raw='{"version": 2, "results": {"a": [1,')
    write(tmp_path / "m" / "foreign.json", {"version": 1, "results": {}})
    write(tmp_path / "m" / "nokeys.json", {"version": 2})
    write(tmp_path / "m" / "list.json", None, raw="[1, 2]")
    write(tmp_path / "m" / "machine.json", {"machine": "m"})
    with pytest.warns(ResultsWarning) as caught:
        df = load_results(tmp_path)
    messages = " | ".join(str(w.message) for w in caught)
    for name, why in (("truncated.json", "not valid JSON"), ("foreign.json", "version 1"),
                      ("nokeys.json", "missing keys"), ("list.json", "not a JSON object")):
        assert name in messages and why in messages
    assert len(df.attrs["skipped_files"]) == 4
    x = df[df["benchmark"] == "b.Track.track_x"].reset_index(drop=True)
    assert len(x) == 4
    assert list(zip(x["dtype"], x["n"], x["status"], strict=True)) == [
        ("fp16", 1, "ok"), ("fp16", 2, "skipped"), ("bf16", 1, "failed"),
        ("bf16", 2, "missing")]
    assert x["value"].iloc[0] == 1.5 and x["value"].iloc[1:].isna().all()
    assert (x["unit"] == "err").all()
    assert df["cpu"].isna().all()  # no params.cpu recorded: NaN, not an error
    plain = df[df["benchmark"] == "b.plain"].sort_values("value")
    assert list(plain["value"]) == [3.0, 4.0]
    assert math.isnan(plain["ci_99_a"].iloc[0]) and plain["ci_99_b"].iloc[1] == 5.0


def test_not_a_directory(tmp_path):
    with pytest.raises(ValueError, match="not a directory"):
        load_results(tmp_path / "nope")
    with pytest.raises(ValueError, match="not a directory"):
        load_results([tmp_path, tmp_path / "nope"])
    with pytest.raises(ValueError, match="no results folder"):
        load_results([])


def test_several_folders_each_with_its_own_benchmarks_json(tmp_path):
    """Parameter names and units come from each folder's own benchmarks.json."""
    a, b = tmp_path / "a", tmp_path / "b"
    write(a / "benchmarks.json", {"b.T.track_x": {"param_names": ["n"], "unit": "err",
                                                  "type": "track"}})
    write(b / "benchmarks.json", {"b.T.track_x": {"param_names": ["size"], "unit": "ulp",
                                                  "type": "track"}})
    write(a / "m" / "1.json", results_file({"b.T.track_x": [[1.0, 2.0], [["1", "2"]]]},
                                           cpu="CPU A"))
    write(b / "m" / "1.json", results_file({"b.T.track_x": [[3.0, 4.0], [["1", "2"]]]},
                                           cpu="CPU B", commit="d" * 40))
    both = load_results([a, b], jobs=1)
    assert len(both) == 4
    assert list(both["file"]) == [str(a / "m" / "1.json")] * 2 + [str(b / "m" / "1.json")] * 2
    assert list(both["unit"]) == ["err", "err", "ulp", "ulp"]
    assert both["n"].dtype == "category" and both["n"].isna().tolist() == [False, False, True,
                                                                             True]
    assert list(both["n"][:2]) == [1, 2] and list(both["size"][2:]) == [1, 2]
    assert {type(v) for v in both["n"].cat.categories} == {int}  # the values' own types
    assert list(both["cpu"]) == ["CPU A"] * 2 + ["CPU B"] * 2
    assert list(both["params"]) == ["n=1", "n=2", "size=1", "size=2"]
    one = load_results(a)
    assert list(one["file"]) == ["m/1.json"] * 2  # one folder: paths relative to it
    assert list(both["value"]) == list(one["value"]) + list(load_results(b)["value"])
    pd.testing.assert_frame_equal(both.drop(columns="samples"),
                                  load_results([a, b], jobs=2).drop(columns="samples"))


def synthetic(values, benchmark, params, unit="seconds", machine="m", cpu="CPU A", start=0):
    """A tidy frame as load_results makes it, for the summaries (one commit per value)."""
    n = len(values)
    label = ", ".join(f"{k}={v!r}" for k, v in params.items())
    return pd.DataFrame({"machine": machine, "cpu": cpu, "env": "e",
                         "commit": [f"{i:040d}" for i in range(start, start + n)],
                         "date": pd.date_range("2026-01-01", periods=n, tz="UTC")
                         + pd.Timedelta(hours=start),
                         "file": [f"f{i}" for i in range(start, start + n)],
                         "benchmark": benchmark, "params": label, "type": "track",
                         "unit": unit, "value": values, "status": "ok"}
                        | {k: [v] * n for k, v in params.items()})


def test_a_step_where_the_benchmark_itself_changed_says_so():
    """Red team, 2026-12-06: a +34.9% step of TimeBackward fell exactly where asv's version
    of the benchmark changed (its own code), and was attributed to the kernel's code with
    nothing said. A step across a version change reads code_changed, and report.md's steps
    table marks its commit "*", with a line saying why."""
    rng = np.random.default_rng(1)
    level = np.r_[np.ones(12), 1.5 * np.ones(12)] * (1 + 0.005 * rng.standard_normal(24))
    moved = synthetic(level, "b.moved", {"n": 1}).assign(version=["v1"] * 12 + ["v2"] * 12)
    kernel = synthetic(level, "b.kernel", {"n": 2}).assign(version="v1")
    found = steps(pd.concat([moved, kernel])).set_index("benchmark")
    assert bool(found.loc["b.moved", "code_changed"])
    assert not bool(found.loc["b.kernel", "code_changed"])
    from flashbench.history.report import _steps

    text = "\n".join(_steps(found.reset_index(), {}, {}))
    assert "1 step(s) fall where the benchmark's own code changed" in text
    assert sum("*" in line for line in text.splitlines() if line.startswith("|")) == 1


def test_a_step_where_the_host_changed_says_so(tmp_path):
    """A results commit of 2026-12-06 made the report's answer read "most [steps] at
    e54f8144 (143)": those points came from another host under the same asv machine name
    (os v1252 before, v1272 after), beside ~90 commits of code. A step whose points before
    and after came from two hosts reads host_changed (the files' params, read for the steps'
    files alone), the steps table marks its commit "+", and the answer counts them."""
    import json

    from flashbench.history.answer import answer
    from flashbench.history.files import host_reader
    from flashbench.history.report import _steps

    for i in range(24):  # the files' params, as asv writes them: 12 on each host
        (tmp_path / f"f{i}").write_text(json.dumps({
            "version": 2, "commit_hash": f"{i:040d}", "env_name": "e", "date": 1,
            "params": {"machine": "m", "os": "Linux v1252" if i < 12 else "Linux v1272",
                       "ram": "24"}, "python": "3.11", "requirements": {},
            "env_vars": {}, "result_columns": ["result"], "results": {},
            "durations": {}}))
    rng = np.random.default_rng(1)
    level = np.r_[np.ones(12), 1.5 * np.ones(12)] * (1 + 0.005 * rng.standard_normal(24))
    df = synthetic(level, "b.moved", {"n": 1})
    found = steps(df, host=host_reader([tmp_path]))
    assert list(found["host_changed"]) == [True]
    assert steps(df, host=lambda f: "one host")["host_changed"].tolist() == [False]
    assert steps(df)["host_changed"].isna().all()  # no reader: not known
    text = "\n".join(_steps(found, {}, {}))
    assert "1 step(s) fall where the results before and after came from two hosts" in text
    assert "1 of them across a change of host" in "\n".join(
        answer(df, pd.DataFrame(), found, {}))


def test_steps_find_a_level_change_and_ignore_noise():
    rng = np.random.default_rng(0)
    flat = 1.0 + 0.01 * rng.standard_normal(30)
    jump = np.r_[flat[:15], flat[15:] * 1.5]
    df = pd.concat([synthetic(flat, "b.flat", {"n": 1}), synthetic(jump, "b.jump", {"n": 1})])
    found = steps(df)
    assert list(found["benchmark"]) == ["b.jump"]
    assert found["commit"].iloc[0] == f"{15:040d}"[:8]
    assert found["change_pct"].iloc[0] == pytest.approx(50, abs=3)
    assert found["params"].iloc[0] == "n=1" and found["cpu"].iloc[0] == "CPU A"


def test_error_bands_and_baseline_ratio():
    base = {"kernel": "triton", "dtype": "bf16", "causal": False}
    err = synthetic([1e-3, 1.1e-3, 1.0e-3, 5e-3], "a.TrackAccuracy.track_o_max_abs", base)
    ratio = synthetic([1.0, 1.0, 1.0, 2.5], "a.TrackAccuracy.track_o_baseline_ratio", base)
    bands = error_bands(pd.concat([err, ratio]))
    row = bands[bands["metric"] == "o_max_abs"].iloc[0]
    assert row["commits"] == 4 and row["max"] == 5e-3 and row["latest"] == 5e-3
    assert row["band_lo"] == 1e-3 and row["band_hi"] == 1.1e-3 and not row["inside"]
    assert row["o_ratio"] == 2.5
    assert row["params"] == "kernel='triton', dtype='bf16', causal=False"
    assert ACCURACY.search("a.TrackAccuracy.track_o_max_abs")["metric"] == "o_max_abs"


def test_a_latest_within_1e_8_of_its_band_edge_is_inside():
    """The float64 reference's own rounding on another host moved an fp32 kernel's
    4.780010942617707e-07 by 1.2e-9 of itself: "outside", more error than ever (a probe,
    2026-12-07). 1e-8 of the edge is inside; 1e-7 is not."""
    edge = 4.780010942617707e-07
    rows = {}
    for name, latest in (("rounding", 4.780010937066592e-07), ("up", edge * (1 + 5e-9)),
                         ("moved", edge * (1 - 1e-7)), ("far", edge * 1.01)):
        rows[name] = error_bands(synthetic(
            [edge, edge, edge, latest], "a.TrackAccuracy.track_o_max_abs",
            {"kernel": "triton", "dtype": "fp32", "causal": False})).iloc[0]
    assert rows["rounding"]["inside"] is True and rows["up"]["inside"] is True
    assert rows["moved"]["inside"] is False and rows["far"]["inside"] is False


def test_two_processors_under_one_machine_name_are_two_machines():
    """An Intel host and then an AMD host got the same name: grouped by name alone the
    switch would read as a 2x slowdown (a step) and one wide error band; by
    (machine, cpu), two steady machines."""
    intel, amd = "Intel(R) Xeon(R) Processor", "AMD EPYC 7B13 64-Core Processor"
    acc, timing, peaks = [], [], []
    for k in range(24):
        cpu, fast = (intel, 1.0) if k < 12 else (amd, 2.0)
        kw = {"machine": "cpu-x86_64-2cpu-24gb", "cpu": cpu, "start": k}
        acc.append(synthetic([fast * 1e-3], "a.TrackAccuracy.track_o_max_abs",
                             {"kernel": "triton", "dtype": "bf16", "causal": False}, "err", **kw))
        timing.append(synthetic([fast * 1e-3], "g.TimeX.time_fwd",
                                {"backend": "triton", "dtype": "bf16",
                                 "shape": "1x8x1024x1024x64", "causal": False}, **kw))
        peaks.append(synthetic([1e-3 / fast], "g.TimeMatmulPeak.time_matmul",
                               {"n": 1024, "dtype": "bf16"}, **kw))
    df = pd.concat(acc + timing + peaks, ignore_index=True)
    bands = error_bands(df)
    assert len(bands) == 2 and set(bands["cpu"]) == {intel, amd}
    assert list(bands.set_index("cpu").loc[[intel, amd], "p50"]) == [1e-3, 2e-3]
    assert bands["inside"].all()  # each processor is steady on its own
    trend = throughput(df)
    assert len(trend) == 2 and set(trend["cpu"]) == {intel, amd}
    assert (trend["change_pct"] == 0).all()
    flops = Shape(1, 8, 1024, 1024, 64).flops()
    latest = trend.set_index("cpu")["latest"]
    assert latest[intel] == pytest.approx(flops / 1e-3 * 1e-12)
    assert latest[amd] == pytest.approx(flops / 2e-3 * 1e-12)
    # % of the same run's matmul peak: each run against its own processor's peak
    peak = {intel: 2 * 1024**3 / 1e-3 * 1e-12, amd: 2 * 1024**3 / 5e-4 * 1e-12}
    for cpu in (intel, amd):
        assert trend.set_index("cpu").loc[cpu, "latest_pct_peak"] == pytest.approx(
            100 * latest[cpu] / peak[cpu])
    assert steps(df).empty
    mixed = df.assign(cpu=intel)  # as if only the name told machines apart
    assert set(steps(mixed)["commit"]) == {f"{12:040d}"[:8]}
    band = error_bands(mixed)  # one band twice as wide, spanning both processors
    assert len(band) == 1 and (band["band_lo"].iloc[0], band["band_hi"].iloc[0]) == (1e-3, 2e-3)
    assert (bands["band_lo"] == bands["band_hi"]).all()


def test_throughput_from_shape_causal_and_direction_parameters():
    """FLOPs from the recorded problem, whatever the suite: Shape.parse(shape).flops."""
    params = {"kernel": "triton", "dtype": "fp16", "shape": "2x4/2x256x512x64",
              "causal": True, "direction": "fwd+bwd", "block": 64}
    t = synthetic([4e-3, 2e-3], "x.TimeAnything.time_it", params)
    other = synthetic([1e-3, 1e-3], "x.TimeAnything.time_other",
                      {"shape": "1x1x128x128x32", "causal": False})
    not_time = synthetic([5.0, 5.0], "x.Track.track_bytes",
                         {"shape": "1x1x128x128x32"}, unit="bytes")
    bad = synthetic([1.0, 1.0], "x.TimeAnything.time_bad", {"shape": "not a shape"})
    df = pd.concat([t, other, not_time, bad], ignore_index=True)
    trend = throughput(df).set_index("backend")
    assert set(trend.index) == {"triton", "time_other"}  # kernel column, else the method
    # bottom-right causal, Nq=256 < Nk=512: query i sees i + 257 keys
    pairs = sum(i + 257 for i in range(256))
    flops = 3.5 * 4 * 2 * 4 * 64 * pairs  # fwd+bwd = 3.5 forwards, per query head
    row = trend.loc["triton"]
    assert row["first"] == pytest.approx(flops / 4e-3 * 1e-12)
    assert row["latest"] == pytest.approx(flops / 2e-3 * 1e-12) == row["best"]
    assert row["change_pct"] == pytest.approx(100)
    assert row["shape"] == "B=2 H=4 Hkv=2 Nq=256 Nk=512 d=64"
    assert (row["direction"], row["causal"], row["variant"]) == ("fwd+bwd", True, "block=64")
    assert math.isnan(row["latest_pct_peak"])  # no matmul peak recorded
    assert trend.loc["time_other", "latest"] == pytest.approx(
        4 * 128 * 128 * 32 / 1e-3 * 1e-12)


def test_legacy_results_keep_their_throughput():
    """Results from before suites recorded a shape: TrackDeviceTime(N, d) ran
    B = 16384 // N, H = 16; the old matmul peak is track_matmul_bf16_8192."""
    shape = {"backend": "triton", "dtype": "bf16", "N": 4096, "d": 128, "causal": False}
    t = synthetic([2e-3, 1e-3], "g.TrackDeviceTime.track_device_time", shape)
    peak = synthetic([2 * 8192**3 / 800e12] * 2, "g.TrackMatmulPeak.track_matmul_bf16_8192", {})
    out = throughput(pd.concat([t, peak])).iloc[0]
    flops = 4 * 4 * 16 * 4096 * 4096 * 128  # B = 16384 // 4096 = 4, H = 16
    assert out["first"] == pytest.approx(flops / 2e-3 / 1e12)
    assert out["latest"] == pytest.approx(flops / 1e-3 / 1e12) == out["best"]
    assert out["change_pct"] == pytest.approx(100)
    assert out["latest_pct_peak"] == pytest.approx(100 * out["latest"] / 800)
    assert out["shape"] == "B=4 H=16 Nq=4096 Nk=4096 d=128" and out["variant"] == ""
    # the same problem recorded the new way continues the same series
    new = synthetic([1e-3], "g.TrackDeviceTime.track_device_time",
                    {"backend": "triton", "dtype": "bf16", "shape": "4x16x4096x4096x128",
                     "causal": False}, start=2)
    both = throughput(pd.concat([t, peak, new]))
    assert len(both) == 1 and both["commits"].iloc[0] == 3


def _benchmarks_json_at_head() -> dict:
    """benchmarks.json as asv writes it for the suites in benchmarks/ at HEAD."""
    from asv_runner.discovery import list_benchmarks

    buffer = io.StringIO()
    list_benchmarks(str(ROOT / "benchmarks"), buffer)
    return {b["name"]: b for b in json.loads(buffer.getvalue())} | {"version": 2}


@pytest.mark.slow
def test_committed_results_read_alike_after_the_suites_changed(tmp_path):
    """Once asv rewrites benchmarks.json for today's suites (shape, dtype parameters),
    the committed results still read under their own parameter names (suites.LEGACY)
    and give the same figures."""
    before = load_results(RESULTS)
    copy = tmp_path / "results"
    shutil.copytree(RESULTS, copy)
    head = _benchmarks_json_at_head()
    assert head["bench_backends.TimeCPUBackend.time_backend"]["param_names"][2] == "shape"
    (copy / "benchmarks.json").write_text(json.dumps(head))
    after = load_results(copy)
    assert list(after["params"]) == list(before["params"])
    for name in ("N", "d", "impl", "kernel", "block"):
        assert list(after[name]) == list(before[name])
    pd.testing.assert_frame_equal(throughput(after), throughput(before))
    pd.testing.assert_frame_equal(error_bands(after), error_bands(before))
    tput = throughput(before)
    old = tput[tput["machine"] == "cpu-x86_64-2cpu-24gb"]
    assert len(old) == 24  # one-shot, streamed, torch-naive, torch-sdpa x 6 (the 23 old files)
    assert (tput["machine"] == "cpu-x86_64-xeon-2cpu-24gb").any()  # the re-run's series


def _suite_classes() -> set[str]:
    """Classes in benchmarks/*.py that hold asv benchmarks (time_, track_, peakmem_...)."""
    prefixes = ("time_", "timeraw_", "track_", "peakmem_", "mem_")
    found = set()
    for path in (ROOT / "benchmarks").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                    isinstance(f, ast.FunctionDef) and f.name.startswith(prefixes)
                    for f in node.body):
                found.add(node.name)
    return found


def test_suite_names_appear_only_in_history_suites():
    names = _suite_classes()
    assert {"TrackAccuracy", "TimeAttention"} <= names and len(names) >= 5
    pattern = re.compile(r"\b(" + "|".join(sorted(names)) + r")\b")
    suites = ROOT / "flashbench" / "history" / "suites.py"
    assert pattern.search(suites.read_text())
    offenders = {str(p.relative_to(ROOT)): sorted(set(pattern.findall(p.read_text())))
                 for p in (ROOT / "flashbench").rglob("*.py")
                 if p != suites and pattern.search(p.read_text())}
    assert not offenders, f"suite names outside flashbench/history/suites.py: {offenders}"


@pytest.mark.slow
def test_history_cli_on_the_committed_results(committed_report):
    assert any(RESULTS.glob("*/*.json")), "results/ holds the project's asv history"
    rc, tmp_path = committed_report  # `flashbench history results --out DIR`
    assert rc == 0
    report = (tmp_path / "report.md").read_text()
    for heading in ("## Accuracy bands", "## Throughput", "## Steps"):
        assert heading in report
    for name in ("results.csv", "error_bands.csv", "throughput.csv", "steps.csv"):
        assert (tmp_path / name).stat().st_size > 0
    for png in ("errors.png", "tflops.png"):
        assert (tmp_path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    tidy = pd.read_csv(tmp_path / "results.csv")
    assert {"machine", "cpu", "commit", "benchmark", "value", "status", "kernel",
            "dtype"} <= set(tidy)
    assert tidy["commit"].nunique() >= 2
    frame = load_results(RESULTS)  # samples (asv --record-samples) round-trip through the CSV
    row = frame["samples"].notna().to_numpy().nonzero()[0][0]
    text = tidy["samples"].iloc[row]
    assert [float(x) for x in text.split(";")] == frame["samples"].iloc[row]


@pytest.mark.slow
def test_parallel_load_gives_the_same_frame(asv_results, tmp_path):
    """Workers (forked) read contiguous chunks; merged, the frame equals a serial load."""
    path, _ = asv_results
    serial, parallel = load_results(path, jobs=1), load_results(path, jobs=3)
    pd.testing.assert_frame_equal(serial, parallel)  # samples included
    assert serial.attrs == parallel.attrs
    # a problem found by a worker is still reported in this process
    bad = tmp_path / "results"
    shutil.copytree(path, bad)
    victim = [f for f in sorted(bad.glob("*/*.json")) if f.name != "machine.json"][-1]
    victim.write_text(victim.read_text()[:100])
    with pytest.warns(ResultsWarning, match=victim.name):
        partial = load_results(bad, jobs=2)
    # m2's file truncated, m1's two of one commit read as one
    assert partial["file"].nunique() == 2 and len(partial.attrs["skipped_files"]) == 1


@pytest.mark.slow
def test_params_label_names_each_combination(asv_results):
    path, _ = asv_results
    df = load_results(path)
    p = df[df["benchmark"] == "suite.Params.track_len"]
    assert set(p["params"]) == {"word='a', maybe=None", "word='a', maybe=1",
                                "word='b', maybe=None", "word='b', maybe=1"}
    assert set(df.loc[df["benchmark"] == "suite.track_plain", "params"]) == {""}
    assert isinstance(df["params"].dtype, pd.CategoricalDtype)
    for label, word, maybe in p[["params", "word", "maybe"]].itertuples(index=False):
        # a parameter set to None reads NaN (missing) in its Categorical column
        assert parse_params(label) == {"word": word, "maybe": None if pd.isna(maybe) else maybe}


def test_parse_params_reads_asv_labels_back():
    assert parse_params("") == {}
    assert parse_params("kernel='a, b', causal=True, n=3, x=None") == {
        "kernel": "a, b", "causal": True, "n": 3, "x": None}
    assert parse_params("n=<object at 0x1>") is None
    assert parse_params(float("nan")) is None


def test_malformed_entries_and_odd_values_are_reported(tmp_path):
    write(tmp_path / "m" / "a.json", results_file({
        "b.ok": [[1.0]],
        "b.not_a_row": 5,
        "b.bad_params": [[1.0], "not params"],
        "b.odd": [[1.0, "fast", [2]], [["1", "2", "3"]]],
    }))
    with pytest.warns(ResultsWarning) as caught:
        df = load_results(tmp_path)
    messages = " | ".join(str(w.message) for w in caught)
    assert "b.not_a_row: skipped" in messages and "b.bad_params: skipped" in messages
    assert "2 value(s) are not numbers" in messages
    assert sorted(df["benchmark"].unique()) == ["b.odd", "b.ok"]
    odd = df[df["benchmark"] == "b.odd"]
    assert odd["value"].iloc[0] == 1.0 and odd["value"].iloc[1:].isna().all()


def test_json_readers_agree_on_nan_and_infinity():
    """yyjson (fast path) and the standard library read asv's NaN / Infinity alike."""
    from flashbench.history.files import parse_json

    raw = json.dumps({"r": [float("nan"), float("inf"), -float("inf"), None, 1.5, "NaN"]})
    fast = parse_json(raw.encode())["r"]
    slow = json.loads(raw)["r"]
    assert math.isnan(fast[0]) and fast[1:] == slow[1:] == [math.inf, -math.inf, None, 1.5,
                                                            "NaN"]
    with pytest.raises(ValueError):
        parse_json(b'{"version": 2, "results": {"a": [1,')


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(-1, 29),
                          st.sampled_from([0.5, 0.995, 1.0, 1.5])), min_size=1, max_size=6),
       st.integers(0, 2**32 - 1))
def test_vectorised_step_screen_matches_the_per_series_screen(shapes, seed):
    from flashbench.history.steps import maybe_steps, screen

    rng = np.random.default_rng(seed)
    parts = []
    for length, at, factor in shapes:
        x = 1 + 0.01 * rng.standard_normal(length)
        if 0 <= at < length:
            x[at:] *= factor
        parts.append(x)
    lengths = np.array([len(x) for x in parts], dtype=np.int64)
    got = screen(np.concatenate(parts), lengths, 0.01)
    want = [len(x) >= 3 and maybe_steps(x, 0.01) for x in parts]
    assert list(got) == want


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(-1, 4), max_size=40), st.lists(st.integers(0, 6), max_size=4),
       st.booleans(), st.booleans())
def test_the_samples_column_holds_each_rows_slice(counts, cuts, arrow, at_rows):
    """Arrow list arrays over the flat samples, given in chunks of numpy or Arrow arrays
    (cut at rows, as a cache's parts are, or anywhere): each row's list is its own
    slice, NA where none were recorded."""
    import pyarrow as pa

    from flashbench.history.frame import SAMPLES, sample_column

    counts = np.array(counts, dtype=np.int64)
    flat = np.arange(counts[counts > 0].sum(), dtype=float) / 3
    if at_rows:  # cuts at row boundaries: one list array per chunk, no copy
        rows = np.cumsum(np.maximum(counts, 0))
        cuts = [int(rows[min(c, len(rows) - 1)]) for c in np.cumsum(cuts)] if len(rows) else []
        bounds = sorted({0, len(flat), *cuts})
    else:
        bounds = sorted({0, len(flat), *(min(c, len(flat)) for c in np.cumsum(cuts))})
    chunks = [flat[a:b] for a, b in zip(bounds, bounds[1:], strict=False)] or [flat]
    out = sample_column([pa.array(c) if arrow else c for c in chunks], counts)
    assert out.dtype == SAMPLES and len(out) == len(counts)
    start = 0
    for count, got in zip(counts, out, strict=True):
        if count < 0:
            assert got is pd.NA
            continue
        assert got == flat[start:start + count].tolist()
        start += count


VALUES = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from(["a", "b", "1"]),
                   st.sampled_from([0.5, 1.0, float("nan")]), st.just((1, 2)))


@settings(max_examples=150, deadline=None)
@given(st.lists(VALUES, min_size=1, max_size=12), st.lists(st.integers(0, 11), max_size=40))
def test_a_parameter_column_keeps_each_values_type(table, picks):
    """A Categorical of the values in their own types (None and NaN missing), unless
    two values of different types compare equal (1, 1.0, True) or one is not a str,
    int, float or bool: then the objects themselves."""
    from flashbench.history.frame import objects, param_column

    at = np.array([p % len(table) for p in picks], dtype=np.int32)
    out = param_column(objects(table), at)
    want = [table[k] for k in at]

    def missing(v):
        return v is None or (isinstance(v, float) and v != v)

    present = [v for v in table if not missing(v)]
    kinds = {(type(v), v) for v in present}
    categorical = all(type(v) in (str, int, float, bool) for v in present) \
        and len(kinds) == len(set(present))
    assert isinstance(out, pd.Categorical) == categorical
    if not categorical:
        assert all(a is b for a, b in zip(out, want, strict=True))
        return
    got = out.astype(object)
    assert len(got) == len(want) and out.categories.dtype == object
    for g, w in zip(got, want, strict=True):
        if missing(w):
            assert pd.isna(g)
        else:
            assert type(g) is type(w) and g == w


def test_plots_order_commits_by_date_not_by_hash():
    """The label columns are Categoricals sorted by hash; the plots' x axis is history."""
    from flashbench.history.plots import by_commit, commit_order

    commits = ["f" * 40, "a" * 40, "c" * 40]  # date order; hash order would be a, c, f
    df = pd.DataFrame({"commit": pd.Categorical(commits),
                       "date": pd.date_range("2026-01-01", periods=3, tz="UTC"),
                       "value": [1.0, 2.0, 3.0]})
    order = commit_order(df)
    assert order == {"f" * 40: 0, "a" * 40: 1, "c" * 40: 2}
    shuffled = by_commit(df.iloc[[2, 0, 1]], order)
    assert list(shuffled["x"]) == [0, 1, 2] and list(shuffled["value"]) == [1.0, 2.0, 3.0]


def test_a_machines_line_breaks_where_another_machine_measured_between():
    """A probe, 2026-12-07: M2's line ran through M3's shaded span, a host step drawn as a
    ramp across commits M2 never measured. A line now breaks (a NaN) wherever another
    machine's commits in the panel lie between two of its points; unbroken elsewhere."""
    from flashbench.history import figure as fg
    from flashbench.history import plots

    points = {0: ("a", 1.0), 1: ("a", 2.0), 2: ("b", 5.0), 3: ("b", 6.0), 4: ("a", 3.0),
              5: ("a", 4.0)}  # commit k at hour k
    df = pd.concat([synthetic([v], "a.T.track_x", {"kernel": "triton"}, machine=m, start=k)
                    for k, (m, v) in points.items()], ignore_index=True)
    fig, axes = fg.grid(1, 1)
    lines = plots._Series({"triton"}).draw(axes[0, 0], df, "value", plots.commit_order(df))
    got = {tuple(float(x) for x in line.get_xdata()): [float(y) for y in line.get_ydata()]
           for line in lines}
    fg.pyplot().close(fig)
    a = got[(0.0, 1.0, 2.5, 4.0, 5.0)]  # machine a: broken across b's commits 2 and 3
    assert a[:2] == [1.0, 2.0] and np.isnan(a[2]) and a[3:] == [3.0, 4.0], got
    assert got[(2.0, 3.0)] == [5.0, 6.0]  # machine b: nothing between its points


def test_a_panel_puts_its_rows_in_history_order_once(monkeypatch):
    """Failed before: a panel sorted every column of its rows once per line (1,305 sorts
    for rules.png of results/: most of a report's plotting CPU). Now once a panel, and
    each line still runs in history order with its own values."""
    from flashbench.history import figure as fg
    from flashbench.history import plots

    kernels = ("triton", "flash_model", "torch-naive")
    df = pd.concat([synthetic([float(10 * k + i) for i in range(5)], "a.T.track_x",
                              {"kernel": kernel, "dtype": "bf16"}, unit="err")
                    for k, kernel in enumerate(kernels)], ignore_index=True)
    df = df.iloc[np.random.default_rng(1).permutation(len(df))]  # rows out of order
    calls = []
    real = plots.by_commit
    monkeypatch.setattr(plots, "by_commit", lambda g, order: calls.append(len(g))
                        or real(g, order))
    fig, axes = fg.grid(1, 1)
    lines = plots._Series(set(kernels)).draw(axes[0, 0], df, "value",
                                              plots.commit_order(df))
    assert calls == [len(df)]  # one sort for the panel's 15 rows
    assert len(lines) == 3
    for line in lines:
        x, y = line.get_xdata(), line.get_ydata()
        assert list(x) == [0, 1, 2, 3, 4] and list(np.diff(y)) == [1.0] * 4
    assert sorted(line.get_ydata()[0] for line in lines) == [0.0, 10.0, 20.0]
    fg.pyplot().close(fig)


def test_commit_categories_follow_history_not_hash(tmp_path):
    """Sorting by commit (or by a mapping of it) sorts by the date of its results."""
    for commit, day in (("f" * 40, 1), ("a" * 40, 2), ("c" * 40, 3)):
        write(tmp_path / "m" / f"{commit[:8]}.json",
              results_file({"b.plain": [[float(day)]]}, commit=commit,
                           date=1700000000000 + day * 86_400_000))
    df = load_results(tmp_path)
    assert list(df["commit"].cat.categories) == ["f" * 40, "a" * 40, "c" * 40]
    assert list(df.sort_values("commit")["value"]) == [1.0, 2.0, 3.0]
    short = df["commit"].map(lambda c: c[:8])  # an injective mapping keeps the order
    assert list(df.assign(s=short).sort_values("s")["value"]) == [1.0, 2.0, 3.0]


# --------------------------------------------------------------------------- the CLI

def tiny_results(root: Path, commits: int = 3) -> Path:
    """A results folder: an accuracy track and a timing with a shape, ``commits`` runs."""
    write(root / "benchmarks.json", {
        "a.TrackAccuracy.track_o_max_abs": {"param_names": ["kernel", "dtype", "shape"],
                                            "unit": "max |O - O_fp64|", "type": "track"},
        "t.TimeX.time_fwd": {"param_names": ["shape", "causal"], "unit": "seconds",
                             "type": "time"}})
    for k in range(commits):
        write(root / "m" / f"{k:08x}-env.json", results_file({
            "a.TrackAccuracy.track_o_max_abs": [[1e-3, 2e-3], [["'triton'"],
                                                               ["'fp16'", "'bf16'"],
                                                               ["'1x2x64x64x16'"]]],
            "t.TimeX.time_fwd": [[1e-4, 6e-5], [["'1x2x64x64x16'"], ["False", "True"]]]},
            commit=f"{k:08x}" + "0" * 32, date=1700000000000 + k * 60000, cpu="CPU A"))
    return root


def run_cli(argv, capsys):
    """(exit status, stdout, stderr) of ``flashbench`` with ``argv``."""
    from flashbench.cli import main

    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse's parser.exit for errors
        rc = exc.code
    out, err = capsys.readouterr()
    return rc, out, err


def refused(rc, err, *words):
    """Exit 2 with one line naming the problem, never a traceback."""
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("flashbench history: error:"), err
    assert "Traceback" not in err
    for word in words:
        assert word in lines[0]


def test_history_out_writes_into_new_empty_or_report_folders(tmp_path, capsys):
    results = tiny_results(tmp_path / "results")
    new = tmp_path / "new" / "report"  # created, parents too
    rc, out, _ = run_cli(["history", str(results), "--out", str(new)], capsys)
    assert rc == 0 and "## Throughput" in out
    assert (new / ".flashbench-history").exists() and (new / "report.md").exists()
    rc, _, _ = run_cli(["history", str(results), "--out", str(new)], capsys)
    assert rc == 0  # a previous report: overwritten
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run_cli(["history", str(results), "--out", str(empty)], capsys)[0] == 0
    assert {p.name for p in empty.iterdir()} >= {"report.md", "results.csv", "steps.csv"}


def test_history_out_never_overwrites_a_users_files(tmp_path, capsys, monkeypatch):
    results = tiny_results(tmp_path / "results")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "report.md").write_text("my notes\n")
    (mine / "results.csv").write_text("my,data\n")
    rc, _, err = run_cli(["history", str(results), "--out", str(mine)], capsys)
    refused(rc, err, str(mine), "--force")
    assert (mine / "report.md").read_text() == "my notes\n"
    assert (mine / "results.csv").read_text() == "my,data\n"
    assert sorted(p.name for p in mine.iterdir()) == ["report.md", "results.csv"]

    a_file = tmp_path / "a-file.txt"
    a_file.write_text("keep me\n")
    rc, _, err = run_cli(["history", str(results), "--out", str(a_file)], capsys)
    refused(rc, err, "is a file")
    rc, _, err = run_cli(["history", str(results), "--out", str(a_file / "sub")], capsys)
    refused(rc, err, "cannot write the report there")
    assert a_file.read_text() == "keep me\n"

    monkeypatch.chdir(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    rc, _, err = run_cli(["history", str(results), "--out", ""], capsys)
    refused(rc, err, "--out")
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written here

    rc, _, _ = run_cli(["history", str(results), "--out", str(mine), "--force"], capsys)
    assert rc == 0 and "# flashbench history" in (mine / "report.md").read_text()


@pytest.mark.parametrize("contents", ["empty", "machine.json only", "null results",
                                      "corrupt only"])
def test_history_on_a_folder_without_results(tmp_path, capsys, contents):
    folder = tmp_path / "results"
    folder.mkdir()
    if contents != "empty":
        write(folder / "m" / "machine.json", {"machine": "m", "version": 1})
    if contents == "null results":
        write(folder / "m" / "c-env.json", results_file({"b.T.track_x": [[None, None],
                                                                        [["1", "2"]]]}))
    if contents == "corrupt only":
        write(folder / "m" / "c-env.json", None, raw='{"version": 2, "results": {')
    out = tmp_path / "out"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResultsWarning)
        rc, _, err = run_cli(["history", str(folder), "--out", str(out)], capsys)
    refused(rc, err, *([f"no measured result in {folder}: 2 results, all failed"]
                       if contents == "null results" else [f"no results in {folder}"]))
    assert not out.exists()  # nothing written


def test_history_cli_reads_several_folders_and_names_shared_machines(tmp_path, capsys):
    a = tiny_results(tmp_path / "a")
    b = tiny_results(tmp_path / "b")
    for path in (b / "m").glob("*.json"):  # the same machine name, another processor
        data = json.loads(path.read_text())
        data["params"]["cpu"] = "CPU B"
        path.write_text(json.dumps(data))
    out = tmp_path / "out"
    rc, text, _ = run_cli(["history", str(a), str(b), "--out", str(out)], capsys)
    assert rc == 0
    assert "machine name `m` holds results of 2 processors (CPU A; CPU B)" in text
    trend = pd.read_csv(out / "throughput.csv")
    assert len(trend) == 2 * 2 and set(trend["cpu"]) == {"CPU A", "CPU B"}
    assert (out / "errors.png").exists() and (out / "tflops.png").exists()


def test_history_cli_says_a_skipped_file_in_one_line(tmp_path, capsys):
    """Failed before: Python's warning format, the harness's source path and line under
    each skipped file's message."""
    a = tiny_results(tmp_path / "a")
    (a / "m" / "broken.json").write_text('{"version": 2, "results": {"a": [1,')
    with warnings.catch_warnings():
        warnings.simplefilter("always", ResultsWarning)
        rc, _, err = run_cli(["history", str(a), "--out", str(tmp_path / "out")], capsys)
    lines = [line for line in err.splitlines() if "broken.json" in line]
    assert rc == 0 and len(lines) == 1, err
    assert lines[0].startswith("flashbench history: warning: ") and "not valid JSON" in lines[0]
    assert "report.py" not in err and "load_results(" not in err


def test_machine_spans_follow_runs_of_commits_not_each_machines_extremes():
    """Failed before: one span per machine from its first to its last commit, so a machine
    that measured commits inside another's range was drawn over it, and the other's later
    points sat under its label."""
    from flashbench.history.figure import spans_of

    frame = pd.DataFrame({"machine": ["a"] * 5 + ["b"] * 3, "cpu": ["A"] * 5 + ["B"] * 3,
                          "x": [0, 1, 2, 5, 7, 3, 4, 7]})
    labels = {("a", "A"): "M1", ("b", "B"): "M2"}
    assert spans_of(frame, labels) == [("M1", 0, 2), ("M2", 3, 4), ("M1", 5, 5),
                                       ("M1 M2", 7, 7)]


def test_machines_that_take_turns_are_not_labelled_over_each_other():
    """40 commits measured by two machines in turn: 40 spans, a label at most every 8% of
    the axis (before the change that split spans into runs, 40 labels would overlap)."""
    from flashbench.history.figure import machine_spans, pyplot

    fig, ax = pyplot().subplots()
    machine_spans(ax, [("M1" if x % 2 else "M2", x, x) for x in range(40)])
    labels = [t for t in ax.texts if t.get_text()]
    xs = [t.get_position()[0] for t in labels]
    pyplot().close(fig)
    assert 1 < len(labels) <= 13
    assert all(b - a >= 0.08 * 40 for a, b in zip(xs, xs[1:], strict=False))
