"""Tolerance bands: measurement, the shipped table and tolerance(), the CLI, asv, history."""

import json
import math
import os
import re
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flashbench
from flashbench import numerics, reference
from flashbench.accuracy import error_stats
from flashbench.bands import measure_bands
from flashbench.bands.measure import (
    Cell,
    band_dtypes,
    caller_inputs,
    cell_shape,
    element_errors,
)
from flashbench.bands.table import TABLE_METRICS, build_table, load_table, tolerance, write_table
from flashbench.inputs import DISTRIBUTIONS, make_qkv
from flashbench.inputs.precision import DTYPES, get_precision
from flashbench.reference.streaming import stream_attention

ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- measurement

def test_cell_shape_keeps_rows_near_full_length():
    s = cell_shape(4096)
    assert (s.H, s.Nq, s.Nk, s.d) == (1, 256, 4096, 64)
    s = cell_shape(256)
    assert (s.H * s.Nq, s.Nq, s.Nk) == (256, 64, 256)  # causal rows see >= 193 of 256 keys
    assert cell_shape(256, causal=True).Nq == 64 and cell_shape(1, causal=True).Nq == 1
    assert cell_shape(16).Nq == 64  # not causal: tiles past the BLAS small-matrix kernels
    with pytest.raises(ValueError, match="rows must be an int >= 1"):
        cell_shape(16, rows=17, causal=True)
    with pytest.raises(ValueError, match="dist must be one of"):
        Cell(16, "uniform")


def test_band_dtypes_are_the_modelled_registry_dtypes():
    found = band_dtypes()
    assert "fp64" not in found and {"fp32", "tf32", "fp16", "bf16"} <= set(found)
    assert list(found) == [d for d in DTYPES if d in found]  # registry order


def test_element_errors_match_error_stats_per_seed():
    q, k, v = make_qkv(cell_shape(64, 64), "outliers", 3)
    out = numerics.flash_model(q, k, v, "bf16")[0]
    ref = reference.attention(q, k, v)[0]
    a, rel = element_errors(np.concatenate([out, out]), np.concatenate([ref, ref]), 2)
    stats = error_stats(out, ref)
    assert a.shape == (2, out.size)
    assert a[1].max() == stats["max_abs"] and rel[1].max() == pytest.approx(stats["rel_max"])
    assert np.percentile(rel[0], 99) == pytest.approx(stats["rel_p99"])
    bad = np.array(out, dtype=np.float64)
    bad.flat[5] = np.nan
    assert np.isinf(element_errors(bad, ref, 1)[0]).sum() == 1  # NaN out: infinite error


def test_bands_are_ordered_and_pool_the_seeds():
    bands = measure_bands(dtypes=["fp32", "bf16"], ns=[64], dists=["normal"], causal=[False, True],
                          seeds=3, versus=["fp64", "standard_model", "fp64-unrounded"],
                          rows_per_seed=64)
    got = {(b.kernel, b.dtype, b.causal, b.tensor, b.versus) for b in bands}
    assert ("flash_model", "bf16", True, "o", "standard_model") in got
    assert ("standard_model", "fp32", False, "lse", "fp64") in got
    for b in bands:
        assert b.seeds == 3 and len(b.seed_max_abs) == 3
        assert 0 <= b.abs_p50 <= b.abs_p99 <= b.abs_max == max(b.seed_max_abs)
        assert 0 <= b.rel_p50 <= b.rel_p99 <= b.rel_max == max(b.seed_rel_max)
        assert b.elements == 3 * 64 * (64 if b.tensor == "o" else 1)
        assert b.eps == get_precision(b.dtype).eps
    flash = next(b for b in bands if (b.kernel, b.dtype, b.tensor, b.versus, b.causal)
                 == ("flash_model", "bf16", "o", "fp64", False))
    std = next(b for b in bands if (b.kernel, b.dtype, b.tensor, b.versus, b.causal)
               == ("standard_model", "bf16", "o", "fp64", False))
    ratios = np.asarray(flash.seed_max_abs) / np.asarray(std.seed_max_abs)
    assert flash.ratio_max == pytest.approx(ratios.max())
    assert flash.ratio_p50 == pytest.approx(np.median(ratios))
    # seed 1 alone gives seed 1's numbers: seeds are independent draws
    one = measure_bands(dtypes=["bf16"], ns=[64], dists=["normal"], causal=[False], seeds=[1],
                        rows_per_seed=64)
    assert next(b for b in one if b.kernel == "flash_model" and b.tensor == "o"
                ).abs_max == flash.seed_max_abs[1]


def test_reference_sees_the_inputs_the_kernel_got():
    x = np.linspace(-3, 3, 7)
    assert np.array_equal(caller_inputs("bf16", x),
                          x.astype(ml_dtypes.bfloat16).astype(np.float64))
    assert np.array_equal(caller_inputs("tf32", x), x.astype(np.float32).astype(np.float64))
    if "fp8" in band_dtypes():  # the fp8 models quantise with their own scales
        assert caller_inputs("fp8", x) is x
    # so the band is the kernel's own error: far below the input rounding of large logits
    bands = measure_bands(dtypes=["bf16"], ns=[64], dists=["large-logits"], causal=[False],
                          seeds=2, versus=["fp64", "fp64-unrounded"], rows_per_seed=64)
    o = {b.versus: b for b in bands if b.kernel == "flash_model" and b.tensor == "o"}
    assert o["fp64"].abs_max < 0.05 < o["fp64-unrounded"].abs_max


def test_bad_arguments():
    with pytest.raises(ValueError, match="fp64 has no band"):
        measure_bands(dtypes=["fp64"], ns=[16], seeds=1)
    with pytest.raises(ValueError, match="seeds must be >= 1"):
        measure_bands(dtypes=["bf16"], ns=[16], seeds=0)
    with pytest.raises(ValueError, match="versus must be some of"):
        measure_bands(dtypes=["bf16"], ns=[16], seeds=1, versus=["fp32"])
    with pytest.raises(ValueError, match="N must be an int >= 1"):
        measure_bands(dtypes=["bf16"], ns=[0], seeds=1)


# --------------------------------------------------------------------------- the table

def test_shipped_table_loads_and_covers_what_it_claims():
    t = load_table()
    assert t["safety"] == 2.0 and t["command"].startswith("python -m tools.data.make_tolerances")
    assert set(band_dtypes()) <= set(t["dtypes"])  # every modelled dtype of the registry
    assert t["dists"] == sorted(DISTRIBUTIONS) and t["causal"] == [False, True]
    assert {256, 1024, 4096} <= set(t["n"])
    cells = {(c["dtype"], c["n"], c["dist"], c["causal"], c["tensor"]): c for c in t["cells"]}
    assert len(cells) == len(t["cells"])
    for dtype in t["dtypes"]:
        for n in t["n"]:
            for dist in t["dists"]:
                for causal in t["causal"]:
                    for tensor in ("o", "lse"):
                        c = cells[(dtype, n, dist, causal, tensor)]
                        for m in ("abs", "rel"):
                            assert 0 <= c[f"{m}_p50"] <= c[f"{m}_p99"] <= c[f"{m}_max"]
                            assert 0 < c[f"{m}_max"] < math.inf
                        assert tolerance(dtype, n, dist, "max_abs", causal, tensor) == \
                            (pytest.approx(2 * c["abs_max"]) if not causal else
                             pytest.approx(2 * max(cells[(dtype, g, dist, True, tensor)]
                                                   ["abs_max"] for g in t["n"] if g <= n)))


def test_tolerance_rules():
    t = load_table()
    grid = sorted(t["n"])
    cells = {(c["dtype"], c["n"], c["dist"], c["causal"], c["tensor"]): c for c in t["cells"]}
    lo, hi = grid[3], grid[4]
    between = 2 * lo  # log-log interpolation, here half way in log N
    for metric, field in TABLE_METRICS.items():
        a, b = (cells[("bf16", g, "outliers", False, "o")][field] for g in (lo, hi))
        f = math.log(between / lo) / math.log(hi / lo)
        assert tolerance("bf16", between, "outliers", metric) == pytest.approx(
            2 * a ** (1 - f) * b ** f)
    # below the smallest N: that N's edge; causal square: every row length up to n
    assert tolerance("fp16", 1) == tolerance("fp16", grid[0])
    causal = [cells[("fp16", g, "normal", True, "o")]["abs_max"] for g in grid]
    assert tolerance("fp16", grid[-1], causal=True) == pytest.approx(2 * max(causal))
    # causal with few query rows: only the long rows count
    assert tolerance("fp16", grid[-1], causal=True, nq=1) == pytest.approx(2 * causal[-1])
    assert tolerance("fp16", 1000, causal=True, nq=1) <= tolerance("fp16", 1000, causal=True)
    assert flashbench.tolerance is tolerance


@pytest.mark.parametrize("kwargs,exc,match", [
    (dict(dtype="fp64", n=256), ValueError, "dtype must be one of"),
    (dict(dtype="int8", n=256), ValueError, "dtype must be one of"),
    (dict(dtype="bf16", n=0), ValueError, r"n \(keys per query row\) must be an int in"),
    (dict(dtype="bf16", n=10**7), ValueError, r"n \(keys per query row\)"),
    (dict(dtype="bf16", n=256.0), ValueError, r"n \(keys per query row\)"),
    (dict(dtype="bf16", n=256, dist="uniform"), ValueError, "dist must be one of"),
    (dict(dtype="bf16", n=256, metric="rmse"), ValueError, "metric must be one of"),
    (dict(dtype="bf16", n=256, tensor="dq"), ValueError, "tensor must be one of"),
    (dict(dtype="bf16", n=256, causal="yes"), TypeError, "causal must be a bool"),
    (dict(dtype="bf16", n=256, causal=True, nq=0), ValueError, "nq"),
])
def test_tolerance_errors(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        tolerance(**kwargs)


def test_build_and_write_a_table_round_trip(tmp_path):
    bands = measure_bands(dtypes=["fp16"], ns=[16, 64], dists=["normal"], causal=[False],
                          seeds=2, rows_per_seed=32)
    table = build_table(bands, safety=3.0, command="test")
    path = write_table(table, tmp_path / "t.json")
    assert json.loads(path.read_text())["cells"] == table["cells"]
    flash = {b.n: b for b in bands if b.kernel == "flash_model" and b.tensor == "o"}
    assert tolerance("fp16", 64, table=path) == pytest.approx(3 * flash[64].abs_max)
    assert tolerance("fp16", 32, table=path) == pytest.approx(
        3 * math.sqrt(flash[16].abs_max * flash[64].abs_max))
    with pytest.raises(ValueError, match="causal=True is not in the table"):
        tolerance("fp16", 16, causal=True, table=path)
    with pytest.raises(ValueError, match="dtype must be one of"):
        tolerance("bf16", 16, table=path)
    with pytest.raises(ValueError, match="cannot be read"):
        tolerance("fp16", 16, table=tmp_path / "missing.json")
    with pytest.raises(ValueError, match="safety must be"):
        build_table(bands, safety=0.5)


# --------------------------------------------------------------------------- the band catches a rounding

def p_rounded_twice(q, k, v, dtype: str, coarser, causal=False):
    """The flash model with one rounding made worse: P rounded to the dtype, then to a
    coarser format before P @ V (a kernel converting P with the wrong 16-bit type)."""
    prec = get_precision(dtype)
    o, lse = stream_attention(*(prec.operand(x) for x in (q, k, v)), block=64, causal=causal,
                              scale=1 / math.sqrt(q.shape[-1]), compute=np.float32,
                              round_p=lambda p: p.astype(prec.storage).astype(coarser)
                              .astype(np.float32))
    return prec.store(o), lse


@pytest.mark.parametrize("dtype,coarser,n,causal,max_catches", [
    ("fp16", ml_dtypes.bfloat16, 1024, False, True),
    ("bf16", ml_dtypes.float8_e4m3fn, 1024, False, True),
    ("fp16", ml_dtypes.bfloat16, 4096, True, True),
    ("fp16", ml_dtypes.bfloat16, 1024, True, False),  # a wide causal max at 1024: p99 only
])
def test_p_rounded_twice_falls_outside_the_band_the_flash_model_stays_inside(
        dtype, coarser, n, causal, max_catches):
    """The real flash model stays inside every tolerance on fresh seeds; the one with P
    rounded twice leaves the p99 bands (2-5x) and, where P's rounding sets the max, the
    max band too."""
    shape = cell_shape(n, causal=causal)  # bottom-right causal: rows see n - 255 .. n keys
    limits = {m: tolerance(dtype, n, metric=m, causal=causal, nq=shape.Nq)
              for m in ("max_abs", "abs_p99", "rel_p99")}
    for seed in range(1000, 1003):  # not the seeds the table was measured on
        q, k, v = (caller_inputs(dtype, x) for x in make_qkv(shape, "normal", seed))
        ref = reference.attention(q, k, v, causal=causal)[0]
        good = error_stats(numerics.flash_model(q, k, v, dtype, causal=causal)[0], ref)
        bad = error_stats(p_rounded_twice(q, k, v, dtype, coarser, causal)[0], ref)
        for metric, limit in limits.items():
            assert good[metric] <= limit, (seed, metric, good[metric], limit)
        assert bad["abs_p99"] > 2 * limits["abs_p99"] and bad["rel_p99"] > 2 * limits["rel_p99"]
        assert (bad["max_abs"] > limits["max_abs"]) == max_catches, (seed, bad["max_abs"])


@settings(max_examples=int(os.environ.get("BANDS_EXAMPLES", 20)), deadline=None)
@given(dtype=st.sampled_from(band_dtypes()), n=st.integers(1, 300),
       dist=st.sampled_from(DISTRIBUTIONS), causal=st.booleans(), seed=st.integers(2000, 10**6),
       nq=st.integers(1, 48))
def test_property_flash_model_stays_inside_its_tolerance(dtype, n, dist, causal, seed, nq):
    """Fresh seeds, any N in the table's range (between grid points too), any query rows."""
    from flashbench.inputs import Shape

    q, k, v = (caller_inputs(dtype, x) for x in make_qkv(Shape(1, 2, min(nq, n), n, 64), dist,
                                                          seed))
    ref = reference.attention(q, k, v, causal=causal)
    out = numerics.flash_model(q, k, v, dtype, causal=causal)
    rows = min(nq, n)
    assert error_stats(out[0], ref[0])["max_abs"] <= tolerance(dtype, n, dist, causal=causal,
                                                              nq=rows)
    assert error_stats(out[1], ref[1])["max_abs"] <= tolerance(dtype, n, dist, causal=causal,
                                                              tensor="lse", nq=rows)


# --------------------------------------------------------------------------- the CLI

def run_cli(argv, capsys):
    from flashbench.cli import main

    try:
        status = main(argv)
    except SystemExit as exc:  # argparse's own errors
        status = exc.code
    out, err = capsys.readouterr()
    return status, out, err


def test_cli_small_run_and_json(tmp_path, capsys):
    path = tmp_path / "bands.json"
    argv = ["bands", "--n", "64", "--dist", "normal", "outliers", "--causal", "off",
            "--seeds", "2", "--dtype", "fp32", "bf16", "--quiet", "--json", str(path)]
    status, out, err = run_cli(argv, capsys)
    assert status == 0, err
    assert "\\|err\\| p50 / p99 / max" in out and "max vs one-shot" in out
    # a Markdown table: every line as many cells as the header (|err| unescaped shifted them)
    table = [ln for ln in out.splitlines() if ln.startswith("|")]
    assert len({len(re.findall(r"(?<!\\)\|", ln)) for ln in table}) == 1, table[:2]
    lines = [ln for ln in out.splitlines() if ln.startswith("| bf16")]
    assert len(lines) == 2 and "| 64 " in lines[0]
    data = json.loads(path.read_text())
    assert data["meta"]["seeds"] == 2 and len(data["bands"]) >= 2 * 2 * 2 * 2
    status, out, err = run_cli(argv, capsys)  # exists: refused without --force
    assert status == 2 and "exists" in err and len(err.strip().splitlines()) == 1
    status, _, err = run_cli(argv + ["--force", "--tensor", "lse"], capsys)
    assert status == 0, err


@pytest.mark.parametrize("argv,match", [
    (["--seeds", "0"], "must be an integer >= 1"),
    (["--dtype", "fp64"], "fp64 has no band"),
    (["--dtype", "fp12"], "dtype must be one of"),
    (["--kernels", "flash_model", "no-such-kernel"], "unknown backend"),
    (["--from-results", "/nonexistent/results"], "not a folder of asv results"),
])
def test_cli_bad_arguments_are_one_line_exit_2(argv, match, capsys):
    status, out, err = run_cli(["bands", "--n", "16", "--seeds", "1", "--quiet", *argv], capsys)
    assert status == 2 and match in err and len(err.strip().splitlines()) == 1


def bands_results(root: Path, maxes=(1e-3, 1.5e-3)) -> Path:
    """A hand-made asv results folder with the bands tracks of two commits."""
    names = {"o_abs": "|O - O_fp64| (unitless)", "o_rel": "relative error of O",
             "lse_abs": "|LSE - LSE_fp64|", "o_ratio": "x standard_model"}
    params = [["'flash_model'"], ["'bf16'", "'fp16'"], ["1024"], ["'normal'"], ["False"],
              ["'p50'", "'p99'", "'max'"]]
    meta = {f"bench_bands.TrackBands.track_{q}": {
        "param_names": ["kernel", "dtype", "N", "dist", "causal", "stat"], "unit": u,
        "type": "track"} for q, u in names.items()}
    (root / "m").mkdir(parents=True)
    (root / "benchmarks.json").write_text(json.dumps({"version": 2, **meta}))
    for i, top in enumerate(maxes):
        results = {b: [[1e-4, 5e-4, top, 1e-5, 5e-5, 1e-4], params] for b in meta}
        (root / "m" / f"{i:08x}-env.json").write_text(json.dumps({
            "version": 2, "commit_hash": f"{i:08x}" + "0" * 32, "env_name": "env",
            "date": 1700000000000 + i * 60000, "params": {"machine": "m", "cpu": "CPU A"},
            "python": "3.11", "requirements": {}, "result_columns": ["result", "params"],
            "results": results}))
    return root


def test_cli_from_results(tmp_path, capsys):
    root = bands_results(tmp_path / "results")
    status, out, err = run_cli(["bands", "--from-results", str(root)], capsys)
    assert status == 0, err
    assert "00000001" in out  # the latest commit
    bf16 = next(ln for ln in out.splitlines() if ln.startswith("| bf16"))
    assert "1.0e-04 / 5.0e-04 / 1.5e-03" in bf16
    # the newest commit's file corrupt: an older commit's bands, and the skip said (a
    # probe, 2026-12-07: silence, exit 0)
    newest = root / "m" / "00000001-env.json"
    newest.write_text(newest.read_text()[:200])
    status, out, err = run_cli(["bands", "--from-results", str(root)], capsys)
    assert status == 0 and "00000000" in out, err
    assert f"flashbench bands: {newest}: skipped: not valid JSON" in err, err


# --------------------------------------------------------------------------- history

def test_band_history_lists_a_widened_cell_and_plots(tmp_path):
    from flashbench.history import load_results
    from flashbench.history.bands import band_history, widened, widened_markdown
    from flashbench.history.plots import plot_bands  # what the report draws bands.png with

    df = load_results(bands_results(tmp_path / "results"))
    h = band_history(df)
    assert set(h["quantity"]) == {"o_abs", "o_rel", "lse_abs", "o_ratio"}
    assert len(h) == 2 * 2 * 4  # commits x dtypes x quantities
    first = h[(h["x"] == 0) & (h["dtype"] == "bf16") & (h["quantity"] == "o_abs")].iloc[0]
    assert (first["p50"], first["p99"], first["max"]) == (1e-4, 5e-4, 1e-3)
    w = widened(h)
    # every quantity of bf16 rose at the second commit (its max 1e-3 -> 1.5e-3); fp16 did not
    assert set(w["dtype"]) == {"bf16"} and len(w) == 4
    assert w.iloc[0]["change"] == pytest.approx(1.5)
    text = widened_markdown(h)
    assert "- flash_model bf16 N=1024 normal o_abs: max 0.001 -> 0.0015 (x1.50)" in text
    assert "fp16" not in text
    assert widened(h, min_change=0.6).empty
    assert "No band widened" in widened_markdown(h, min_change=0.6)
    assert plot_bands(h, tmp_path / "bands.png") and (tmp_path / "bands.png").stat().st_size
    assert not plot_bands(h[h["quantity"] == "none"], tmp_path / "none.png")
    assert band_history(df[df["benchmark"].str.contains("nothing")]).empty


# --------------------------------------------------------------------------- asv

def test_asv_grid_is_the_registry():
    sys.path.insert(0, str(ROOT))
    from benchmarks import bench_bands
    from flashbench.backends import BACKENDS

    assert set(bench_bands.DTYPES) <= set(band_dtypes())
    assert {"fp32", "fp16", "bf16"} <= set(bench_bands.DTYPES)
    assert bench_bands.DISTS == list(DISTRIBUTIONS)
    assert set(bench_bands.NS) <= set(load_table()["n"])
    assert all(k == "flash_model" or k in BACKENDS for k in bench_bands.KERNELS)
    assert bench_bands.TRITON_DTYPES == [d for d in bench_bands.DTYPES
                                         if d in BACKENDS["triton"].dtypes]
    skipped = {(k, d, n, c) for k, d, n, _, c, _ in bench_bands.TrackBands.skip_params}
    assert ("triton", "bf16", 256, True) not in skipped
    assert ("triton", "bf16", 1024, False) in skipped and ("triton", "fp8", 256, False) in skipped
    assert ("flash_model", "fp8", 4096, False) not in skipped
    assert ("flash_model", "bf16", 1024, True) not in skipped
    assert ("flash_model", "bf16", 4096, True) in skipped
    import itertools

    points = len(list(itertools.product(*bench_bands.TrackBands.params)))
    assert points - len(bench_bands.TrackBands.skip_params) <= 200  # one process each


def test_asv_suite_reads_its_cache():
    from benchmarks.bench_bands import TrackBands

    suite = TrackBands()
    with pytest.raises(NotImplementedError, match="lacks"):
        suite.setup({"missing": "this commit lacks flashbench.bands"}, "flash_model", "bf16",
                    256, "normal", False, "max")
    cache = {("flash_model", "bf16", 256, "normal", False): {"p50": 1.0, "p99": 2.0, "max": 3.0}}
    for stat, want in (("p50", 1.0), ("p99", 2.0), ("max", 3.0)):
        suite.setup(cache, "flash_model", "bf16", 256, "normal", False, stat)
        assert suite.track_o_abs(cache, "flash_model", "bf16", 256, "normal", False, stat) == want


def test_a_grouped_query_band_draws_whole_groups_and_check_passes_the_flash_model(tmp_path):
    """dk and dv of a grouped-query case sum over its group of query heads: a band drawn on
    plain heads (what band_shape gave past 1,024 query rows) put the flash model's own GQA
    dv at 1.99x its band at 1x16/2x256x256x64 bf16, and check FAILed it and the Triton
    kernel (RESULT: FAIL for correct kernels)."""
    from flashbench.bands.case import band_shape
    from flashbench.cli import main
    from flashbench.inputs import Shape

    b = band_shape(Shape(1, 16, 256, 256, 64, Hkv=2), grad=True)
    assert (b.B, b.H, b.kv_heads) == (1, 8, 1)  # 1,024 rows: one whole group of 8
    b = band_shape(Shape(2, 32, 128, 128, 64, Hkv=8), grad=True)
    assert b.H % 4 == 0 and b.H // b.kv_heads == 4 and b.H * 128 >= 1024
    assert band_shape(Shape(1, 16, 256, 256, 64), grad=True).kv_heads == 4  # plain stays
    b = band_shape(Shape(1, 16, 256, 256, 64, Hkv=2))  # O's and LSE's: plain heads
    assert (b.H, b.kv_heads) == (4, 4)
    rc = main(["check", "--shape", "1x16/2x256x64", "--dtype", "bf16", "--pass", "bwd",
               "--causal", "off", "--no-backends", "--quiet", "--save", str(tmp_path)])
    assert rc == 0


def test_an_op_that_returns_no_lse_gets_no_lse_band_and_says_so(capsys):
    """torch's peers return no LSE: their "LSE" is flashbench's stand-in, the same numbers for
    each of them (a red team found torch-sdpa's and torch-naive's LSE bands identical)."""
    said = []
    bands = measure_bands(dtypes=["bf16"], ns=[64], dists=["normal"], causal=[False],
                          seeds=2, kernels=["torch-sdpa", "triton"], say=said.append)
    assert {(b.kernel, b.tensor) for b in bands if b.kernel != "standard_model"} == {
        ("torch-sdpa", "o"), ("triton", "o"), ("triton", "lse")}
    assert any("torch-sdpa: no LSE band (it returns no LSE" in s for s in said)


def test_the_header_counts_the_rows_each_seed_draws(capsys):
    """Whole heads of a cell's rows: N = 300 draws 3 heads of 75 rows (225), N = 1,000 one of
    250; the header said 256."""
    from flashbench.cli import main

    assert main(["bands", "--quiet", "--n", "300", "1000", "--seeds", "1", "--dist", "normal",
                 "--dtype", "bf16", "--causal", "off"]) == 0
    assert "1 seeds x 225-250 query rows x d=64 per cell" in capsys.readouterr().out


@pytest.mark.parametrize("args", [["--from-results", "results", "--n", "16"],
                                  ["--from-results", "results", "--unrounded"],
                                  ["--kernels", "standard_model", "--n", "16"],
                                  ["--head-dim", "64/", "--n", "16"]],
                         ids=["n-with-results", "unrounded-with-results", "standard-model",
                              "head-dim-slash"])
def test_options_that_cannot_mean_what_they_say_are_refused(args, capsys):
    """Accepted and ignored before (a red team): --from-results read the suite's grid
    whatever --n asked, --kernels standard_model printed nothing, 64/ read as 64."""
    from flashbench.cli import main

    root = Path(__file__).resolve().parents[1]
    args = [str(root / a) if a == "results" else a for a in args]
    try:
        code = main(["bands", "--quiet", *args])
    except SystemExit as exc:  # argparse's own refusals
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert ("choose(s) a measurement" in err or "standard_model: its band" in err
            or "must be D or D/DV" in err), err


def test_a_kernel_that_takes_no_dtype_asked_says_so():
    said = []
    bands = measure_bands(dtypes=["tf32"], ns=[16], dists=["normal"], causal=[False], seeds=1,
                          kernels=["triton"], say=said.append)
    assert not [b for b in bands if b.kernel == "triton"]
    assert any("triton tf32: skipped: it takes fp32, fp16, bf16" in s for s in said), said


def test_a_users_function_that_returns_o_alone_gets_no_lse_band(user_module):
    """What the call returned decides (a user's backend record says own_lse for every
    function: its (o, lse) or o alone is known only once called; a fresh-eyes review)."""
    from flashbench.backends.user import release

    user_module("fb_oonly", "from flashbench.kernels.torch_peers import naive_attention\n"
                "def fn(q, k, v, causal=False):\n"
                "    return naive_attention(q, k, v, causal)[0]\n")
    said = []
    try:
        bands = measure_bands(dtypes=["fp32"], ns=[16], dists=["normal"], causal=[False],
                              seeds=1, kernels=["fb_oonly:fn"], say=said.append)
    finally:
        release()
    assert {b.tensor for b in bands if b.kernel == "fb_oonly:fn"} == {"o"}
    assert any("fb_oonly:fn: no LSE band" in s for s in said), said


def test_a_kernel_that_cannot_take_the_head_dim_is_named_not_a_crash(capsys):
    """A red team (2026-12-06): `bands --head-dim 44 --kernels flash_model triton` measured
    the models' cells, then failed with exit 3 ("flashbench's own failure") on Triton's
    refusal of d = 44. The kernel is skipped, and said after the tables, --quiet or not."""
    from flashbench.cli import main

    rc = main(["bands", "--dtype", "fp16", "--n", "16", "--seeds", "2", "--causal", "off",
               "--dist", "normal", "--head-dim", "44", "--kernels", "flash_model", "triton",
               "--quiet"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "Not measured: triton fp16: skipped: head dim d=44 is not a multiple of 8" in out
    assert "\ntriton:\n" not in out  # no table of its own: nothing measured


def test_a_kernel_returning_inf_is_an_infinite_error_not_a_failure_of_bands(user_module,
                                                                            tmp_path, capsys):
    """A probe: `bands --kernels ... mod:infk` ended with exit 3 ("flashbench bands:
    failed: returned 8 non-finite value(s)"), no JSON, where the docs count a non-finite
    output as an infinite error."""
    user_module("fbbandsinf", "import torch\n\n\ndef infk(q, k, v, causal=False, scale=None):\n"
                "    o = torch.nn.functional.scaled_dot_product_attention(q, k, v)\n"
                "    o[..., 0, 0] = float('inf')\n    return o\n")
    path = tmp_path / "b.json"
    status, out, err = run_cli(["bands", "--dtype", "fp32", "--n", "64", "--seeds", "2",
                                "--dist", "normal", "--causal", "off", "--kernels",
                                "flash_model", "fbbandsinf:infk", "--json", str(path)], capsys)
    assert status == 1, err  # the JSON written, the kernel named under "Failed:" (exit 1)
    assert "fbbandsinf:infk fp32: failed (" in err and "its error counted infinite" in err
    doc = json.loads(path.read_text())
    mine = [b for b in doc["bands"] if b["kernel"] == "fbbandsinf:infk"]
    assert mine and all(b["abs_max"] == "inf" for b in mine), mine


def test_a_kernel_that_raises_is_said_after_the_tables_and_its_percentiles_are_inf(
        user_module, tmp_path, capsys):
    """A probe, 2026-12-07: a user kernel that raised read "- / - / inf" (numpy's NaN
    percentiles of infinite errors, its RuntimeWarning on stderr) and its reason appeared
    only in the progress lines --quiet hides, the JSON none. Now "inf / inf / inf", the
    reason after the tables (--quiet too) and in the JSON's meta."""
    user_module("fbbandsraise", "def k(q, k, v, causal=False, scale=None):\n"
                "    raise RuntimeError('boom')\n")
    path = tmp_path / "b.json"
    status, out, err = run_cli(["bands", "--dtype", "fp16", "--n", "64", "--seeds", "2",
                                "--dist", "normal", "--causal", "off", "--kernels",
                                "fbbandsraise:k", "--quiet", "--json", str(path)], capsys)
    assert status == 1, err  # 0 before: a kernel that never ran read as measured (a probe)
    assert "RuntimeWarning" not in err and "| inf / inf / inf" in out, (out, err)
    assert "Failed: fbbandsraise:k fp16: failed (raised RuntimeError: boom)" in out, out
    doc = json.loads(path.read_text())
    assert any("RuntimeError: boom" in line for line in doc["meta"]["failed"]), doc["meta"]
    mine = [b for b in doc["bands"] if b["kernel"] == "fbbandsraise:k"]
    assert mine and all(b["abs_p50"] == "inf" == b["abs_p99"] for b in mine), mine
