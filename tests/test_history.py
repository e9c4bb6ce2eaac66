"""flashbench.history on results written by real asv runs and on hand-made edge cases."""

import json
import math
import shutil
import site
import subprocess
import sys
import warnings

import numpy as np
import pandas as pd
import pytest
from asv_project import make_repo, run_asv
from hypothesis import given, settings
from hypothesis import strategies as st

from flashbench.history import ResultsWarning, error_bands, load_results, steps, throughput

pytestmark = pytest.mark.slow


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
def asv_results(tmp_path_factory):
    root = tmp_path_factory.mktemp("asvproj")
    repo = make_repo(root)
    commits = subprocess.run(["git", "rev-list", "--reverse", "HEAD"], cwd=repo, text=True,
                             capture_output=True, check=True).stdout.split()
    py_a, py_b = sys.executable, second_interpreter(root)
    run_asv(repo, commits[0], "m1", py_a, "--record-samples", "-a", "repeat=3")
    run_asv(repo, commits[1], "m1", py_a, "--quick")
    run_asv(repo, commits[1], "m1", py_b, "--quick")
    run_asv(repo, commits[1], "m2", py_a, "--quick")
    return repo / "results", commits


def test_real_asv_results_load_into_one_tidy_frame(asv_results):
    path, commits = asv_results
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResultsWarning)  # nothing here is corrupt
        df = load_results(path)
    # 4 results files x (4 Params + 3 Skips + time + peakmem + track_plain) rows
    assert df["file"].nunique() == 4
    assert len(df) == 4 * (4 + 3 + 3)
    assert set(df["machine"]) == {"m1", "m2"}
    assert df[df["machine"] == "m1"]["env"].nunique() == 2
    assert set(df["commit"]) == set(commits)
    assert {"word", "maybe", "n"} <= set(df.columns)

    p = df[df["benchmark"] == "suite.Params.track_len"]
    assert len(p) == 16 and (p["unit"] == "widgets").all() and (p["type"] == "track").all()
    got = {(r.word, r.maybe): r.value for r in p[p["file"] == p["file"].iloc[0]].itertuples()}
    assert got == {("a", None): 10, ("a", 1): 11, ("b", None): 10, ("b", 1): 11}

    s = df[df["benchmark"] == "suite.Skips.track_square"].sort_values("n")
    first = s[s["file"] == s["file"].iloc[0]]
    assert list(first["status"]) == ["ok", "skipped", "failed"]
    assert first["value"].iloc[0] == 1 and np.isnan(first["value"].iloc[1:]).all()

    t = df[(df["benchmark"] == "suite.time_sum") & (df["commit"] == commits[0])]
    assert len(t) == 1 and t["status"].iloc[0] == "ok" and t["unit"].iloc[0] == "seconds"
    assert t["value"].iloc[0] > 0
    samples = t["samples"].iloc[0]
    assert isinstance(samples, np.ndarray) and samples.dtype == float and len(samples) >= 3
    assert samples.min() <= t["value"].iloc[0] <= samples.max()  # value: median of samples
    # asv stores statistics rounded to 5 significant digits
    assert t["q25"].iloc[0] == pytest.approx(np.percentile(samples, 25), rel=1e-4)
    assert t["ci_99_a"].iloc[0] <= t["value"].iloc[0] <= t["ci_99_b"].iloc[0]
    assert df[df["benchmark"] == "suite.track_plain"]["value"].eq(42.5).all()
    assert df[df["benchmark"] == "suite.peakmem_list"]["unit"].eq("bytes").all()
    assert df["date"].dt.tz is not None


def write(path, data, raw=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(raw if raw is not None else json.dumps(data))


def results_file(results, columns=None):
    return {"version": 2, "commit_hash": "c" * 40, "env_name": "env", "date": 1700000000000,
            "params": {"machine": "m"}, "python": "3.11", "requirements": {},
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
                                "stats_ci_99_a", "stats_ci_99_b", "brand_new_column"]))
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
    plain = df[df["benchmark"] == "b.plain"].sort_values("value")
    assert list(plain["value"]) == [3.0, 4.0]
    assert math.isnan(plain["ci_99_a"].iloc[0]) and plain["ci_99_b"].iloc[1] == 5.0


def test_not_a_directory(tmp_path):
    with pytest.raises(ValueError, match="not a directory"):
        load_results(tmp_path / "nope")


def synthetic(values, benchmark, params, unit="seconds", machine="m"):
    """A tidy frame as load_results makes it, for the summaries."""
    n = len(values)
    df = pd.DataFrame({"machine": machine, "env": "e", "commit": [f"{i:040d}" for i in range(n)],
                       "date": pd.date_range("2026-01-01", periods=n, tz="UTC"),
                       "file": "f", "benchmark": benchmark, "type": "track", "unit": unit,
                       "value": values, "status": "ok"} | {k: [v] * n for k, v in params.items()})
    df.attrs["param_columns"] = list(params)
    return df


def test_steps_find_a_level_change_and_ignore_noise():
    rng = np.random.default_rng(0)
    flat = 1.0 + 0.01 * rng.standard_normal(30)
    jump = np.r_[flat[:15], flat[15:] * 1.5]
    df = pd.concat([synthetic(flat, "b.flat", {"n": 1}), synthetic(jump, "b.jump", {"n": 1})])
    df.attrs["param_columns"] = ["n"]
    found = steps(df)
    assert list(found["benchmark"]) == ["b.jump"]
    assert found["commit"].iloc[0] == f"{15:040d}"[:8]
    assert found["change_pct"].iloc[0] == pytest.approx(50, abs=3)


def test_error_bands_and_baseline_ratio():
    base = {"kernel": "triton", "dtype": "bf16", "causal": False}
    err = synthetic([1e-3, 1.1e-3, 1.0e-3, 5e-3], "a.TrackAccuracy.track_o_max_abs", base)
    ratio = synthetic([1.0, 1.0, 1.0, 2.5], "a.TrackAccuracy.track_o_baseline_ratio", base)
    bands = error_bands(pd.concat([err, ratio]))
    row = bands[bands["metric"] == "o_max_abs"].iloc[0]
    assert row["commits"] == 4 and row["max"] == 5e-3 and row["latest"] == 5e-3
    assert row["band_lo"] == 1e-3 and row["band_hi"] == 1.1e-3 and not row["inside"]
    assert row["o_ratio"] == 2.5


def test_throughput_from_device_times_and_peak():
    shape = {"backend": "triton", "dtype": "bf16", "N": 4096, "d": 128, "causal": False}
    t = synthetic([2e-3, 1e-3], "g.TrackDeviceTime.track_device_time", shape)
    peak = synthetic([2 * 8192**3 / 800e12] * 2, "g.TrackMatmulPeak.track_matmul_bf16_8192", {})
    df = pd.concat([t, peak])
    df.attrs["param_columns"] = list(shape)
    out = throughput(df).iloc[0]
    flops = 4 * 4 * 16 * 4096 * 4096 * 128  # B = 16384 // 4096 = 4, H = 16
    assert out["first"] == pytest.approx(flops / 2e-3 / 1e12)
    assert out["latest"] == pytest.approx(flops / 1e-3 / 1e12) == out["best"]
    assert out["change_pct"] == pytest.approx(100)
    assert out["latest_pct_peak"] == pytest.approx(100 * out["latest"] / 800)


def test_history_cli_on_the_committed_results(tmp_path):
    from pathlib import Path

    from flashbench.cli import main

    results = Path(__file__).resolve().parents[1] / "results"
    assert any(results.glob("*/*.json")), "results/ holds the project's asv history"
    rc = main(["history", str(results), "--out", str(tmp_path)])
    assert rc == 0
    report = (tmp_path / "report.md").read_text()
    for heading in ("## Accuracy bands", "## Throughput", "## Steps"):
        assert heading in report
    for name in ("results.csv", "error_bands.csv", "throughput.csv", "steps.csv"):
        assert (tmp_path / name).stat().st_size > 0
    for png in ("errors.png", "tflops.png"):
        assert (tmp_path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    tidy = pd.read_csv(tmp_path / "results.csv")
    assert {"machine", "commit", "benchmark", "value", "status", "kernel", "dtype"} <= set(tidy)
    assert tidy["commit"].nunique() >= 2
    frame = load_results(results)  # samples (asv --record-samples) round-trip through the CSV
    row = frame["samples"].map(lambda x: x is not None).to_numpy().nonzero()[0][0]
    text = tidy["samples"].iloc[row]
    assert [float(x) for x in text.split(";")] == frame["samples"].iloc[row].tolist()


def test_parallel_load_gives_the_same_frame(asv_results, tmp_path):
    """Workers (forked) read contiguous chunks; merged, the frame equals a serial load."""
    path, _ = asv_results
    serial, parallel = load_results(path, jobs=1), load_results(path, jobs=3)
    pd.testing.assert_frame_equal(serial.drop(columns="samples"),
                                  parallel.drop(columns="samples"))
    for a, b in zip(serial["samples"], parallel["samples"], strict=True):
        assert (a is None and b is None) or np.array_equal(a, b)
    assert serial.attrs == parallel.attrs
    # a problem found by a worker is still reported in this process
    bad = tmp_path / "results"
    shutil.copytree(path, bad)
    victim = [f for f in sorted(bad.glob("*/*.json")) if f.name != "machine.json"][-1]
    victim.write_text(victim.read_text()[:100])
    with pytest.warns(ResultsWarning, match=victim.name):
        partial = load_results(bad, jobs=2)
    assert partial["file"].nunique() == 3 and len(partial.attrs["skipped_files"]) == 1


def test_params_label_names_each_combination(asv_results):
    path, _ = asv_results
    df = load_results(path)
    p = df[df["benchmark"] == "suite.Params.track_len"]
    assert set(p["params"]) == {"word='a', maybe=None", "word='a', maybe=1",
                                "word='b', maybe=None", "word='b', maybe=1"}
    assert set(df.loc[df["benchmark"] == "suite.track_plain", "params"]) == {""}
    assert isinstance(df["params"].dtype, pd.CategoricalDtype)


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
    from flashbench.history import _parse_json

    raw = json.dumps({"r": [float("nan"), float("inf"), -float("inf"), None, 1.5, "NaN"]})
    fast = _parse_json(raw.encode())["r"]
    slow = json.loads(raw)["r"]
    assert math.isnan(fast[0]) and fast[1:] == slow[1:] == [math.inf, -math.inf, None, 1.5,
                                                            "NaN"]
    with pytest.raises(ValueError):
        _parse_json(b'{"version": 2, "results": {"a": [1,')


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(-1, 29),
                          st.sampled_from([0.5, 0.995, 1.0, 1.5])), min_size=1, max_size=6),
       st.integers(0, 2**32 - 1))
def test_vectorised_step_screen_matches_the_per_series_screen(shapes, seed):
    from flashbench.history import _maybe_steps, _screen

    rng = np.random.default_rng(seed)
    parts = []
    for length, at, factor in shapes:
        x = 1 + 0.01 * rng.standard_normal(length)
        if 0 <= at < length:
            x[at:] *= factor
        parts.append(x)
    lengths = np.array([len(x) for x in parts], dtype=np.int64)
    got = _screen(np.concatenate(parts), lengths, 0.01)
    want = [len(x) >= 3 and _maybe_steps(x, 0.01) for x in parts]
    assert list(got) == want


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(-1, 4), max_size=40))
def test_sample_views_match_their_slices(counts):
    """Rows in runs of equal sample counts become views; each equals its own slice."""
    from flashbench.history import _sample_arrays

    counts = np.array(counts, dtype=np.int64)
    flat = np.arange(counts[counts > 0].sum(), dtype=float)
    out = _sample_arrays(flat, counts)
    start = 0
    for count, got in zip(counts, out, strict=True):
        if count < 0:
            assert got is None
            continue
        assert got.tolist() == flat[start:start + count].tolist()
        assert not got.flags.writeable
        start += count


def test_plots_order_commits_by_date_not_by_hash():
    """The label columns are Categoricals sorted by hash; the plots' x axis is history."""
    from flashbench.history_report import _commit_order, by_commit

    commits = ["f" * 40, "a" * 40, "c" * 40]  # date order; hash order would be a, c, f
    df = pd.DataFrame({"commit": pd.Categorical(commits),
                       "date": pd.date_range("2026-01-01", periods=3, tz="UTC"),
                       "value": [1.0, 2.0, 3.0]})
    order = _commit_order(df)
    assert order == {"f" * 40: 0, "a" * 40: 1, "c" * 40: 2}
    shuffled = by_commit(df.iloc[[2, 0, 1]], order)
    assert list(shuffled["x"]) == [0, 1, 2] and list(shuffled["value"]) == [1.0, 2.0, 3.0]


def test_commit_categories_follow_history_not_hash(tmp_path):
    """Sorting by commit (or by a mapping of it) sorts by the date of its results."""
    for commit, day in (("f" * 40, 1), ("a" * 40, 2), ("c" * 40, 3)):
        write(tmp_path / "m" / f"{commit[:8]}.json",
              results_file({"b.plain": [[float(day)]]})
              | {"commit_hash": commit, "date": 1700000000000 + day * 86_400_000})
    df = load_results(tmp_path)
    assert list(df["commit"].cat.categories) == ["f" * 40, "a" * 40, "c" * 40]
    assert list(df.sort_values("commit")["value"]) == [1.0, 2.0, 3.0]
    short = df["commit"].map(lambda c: c[:8])  # an injective mapping keeps the order
    assert list(df.assign(s=short).sort_values("s")["value"]) == [1.0, 2.0, 3.0]
