"""FP8 models: hand-checked rounding points and scales, saturation, subnormals, incoherent
processing, FlashAttention-3's Table 3 bands and order, the registry and the CLI."""

import warnings

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashbench import reference as R
from flashbench.inputs.precision import CHECK_DTYPES, DTYPES, get_precision, round_to_fp8
from flashbench.numerics import flash_model, standard_model
from flashbench.numerics.fp8 import (
    P_SCALE,
    flash_fp8,
    hadamard,
    incoherence_matrix,
    quantize,
    standard_fp8,
)

f32 = np.float32
E4M3, E5M2, BF16 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.bfloat16


def e4m3(x):
    """Plain e4m3 rounding of a value that needs no saturation, as float32."""
    return f32(np.float32(x).astype(E4M3))


# -- the registry ---------------------------------------------------------------------


def test_registry_holds_fp8_and_e5m2():
    fp8, e5m2 = get_precision("fp8"), get_precision("fp8_e5m2")
    assert "fp8" in DTYPES and "fp8_e5m2" in DTYPES
    assert fp8.storage is E4M3 and fp8.max == 448.0 and fp8.eps == 2.0**-3
    assert e5m2.storage is E5M2 and e5m2.max == 57344.0 and e5m2.eps == 2.0**-2
    assert fp8.torch_name == "float8_e4m3fn" and e5m2.torch_name == "float8_e5m2"
    assert fp8.out.name == e5m2.out.name == "bf16"  # FlashAttention-3 writes O in bf16
    assert get_precision("fp16").out.name == "fp16"
    assert "fp8" not in CHECK_DTYPES  # judged on request: flashbench check --dtype fp8


# -- rounding to fp8: saturation, subnormals, ties ---------------------------------------


def test_conversion_saturates_at_448_where_a_bare_cast_gives_nan():
    x = np.array([448, 449, 464, 500, 1e4, np.inf, -1e4, -np.inf])
    np.testing.assert_array_equal(round_to_fp8(x, E4M3), [448, 448, 448, 448, 448, 448, -448, -448])
    assert np.isnan(f32(np.float32(500).astype(E4M3)))  # what ml_dtypes' astype does
    assert np.isnan(round_to_fp8(np.array([np.nan]), E4M3)[0])
    assert get_precision("fp8").operand(np.array([1000.0]))[0] == 448.0


def test_e5m2_saturates_at_57344():
    got = round_to_fp8(np.array([57344, 61440, 1e6, -np.inf]), E5M2)
    np.testing.assert_array_equal(got, [57344, 57344, 57344, -57344])


def test_e4m3_subnormals_are_kept_and_round_nearest_even():
    # smallest normal 2**-6; subnormals step by 2**-9
    x = np.array([2.0**-6, 2.0**-9, 2.0**-10, 1.01 * 2.0**-10, 3 * 2.0**-10, 5 * 2.0**-10,
                  7 * 2.0**-9])
    want = [2.0**-6, 2.0**-9, 0.0, 2.0**-9, 2.0**-8, 2.0**-8, 7 * 2.0**-9]
    np.testing.assert_array_equal(round_to_fp8(x, E4M3), want)
    # normal range: 3 mantissa bits, ties to even
    np.testing.assert_array_equal(round_to_fp8(np.array([1 + 2**-4, 1 + 3 * 2**-4, 300.0]), E4M3),
                                  [1.0, 1.25, 288.0])


# -- quantisation with FlashAttention-3's scales ----------------------------------------


def test_per_tensor_scale_maps_amax_to_448():
    x = np.array([[1.0, -3.0], [0.5, 2.0]])
    x8, descale = quantize(x)
    s = f32(448) / f32(3)
    assert descale.shape == (1, 1) and descale[0, 0] == f32(1) / s
    # 448/3 * [1, -3, 0.5, 2] = [149.3, -448, 74.7, 298.7] -> e4m3 [144, -448, 72, 288]
    np.testing.assert_array_equal(x8, [[144, -448], [72, 288]])


def test_per_block_scales_follow_blocks_of_rows():
    x = np.array([[1.75], [-0.875], [3.5], [448.0], [0.0]])  # blocks of 2 rows: amax 1.75, 448, 0
    x8, descale = quantize(x, block=2)
    np.testing.assert_array_equal(descale[:, 0], f32([1 / 256, 1 / 256, 1, 1, 1]))
    np.testing.assert_array_equal(x8[:, 0], [448, -224, 3.5, 448, 0])


def test_zero_and_nonfinite_groups():
    x8, descale = quantize(np.zeros((3, 2)))
    assert np.all(x8 == 0) and np.all(descale == 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x8, descale = quantize(np.array([[1.0, np.inf]]))
    assert np.all(np.isnan(x8 * descale))


@given(st.lists(st.floats(-2.0**127, 2.0**127, width=32, allow_subnormal=False), min_size=1,
                max_size=50), st.integers(1, 7))
def test_quantised_values_stay_within_448_and_amax_lands_on_it(values, block):
    x = np.array(values, dtype=np.float64)[:, None]
    for b in (None, block):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            x8, descale = quantize(x, block=b)
        assert np.all(np.abs(x8) <= 448)
        # 2**-4 relative in the normal range; half a subnormal step (2**-10) absolute
        err = np.abs(x8.astype(np.float64) * descale - x)
        assert np.all(err <= (2.0**-4 * np.abs(x) + 2.0**-10 * descale) * 1.0001)
        if 1e-30 < np.abs(x).max():
            assert np.abs(x8).max() == 448


# -- incoherent processing -----------------------------------------------------------


@given(d=st.sampled_from([1, 2, 3, 12, 48, 64, 128]), seed=st.integers(0, 99))
def test_incoherence_matrix_is_orthogonal_and_keeps_qk(d, seed):
    m = incoherence_matrix(d, seed)
    np.testing.assert_allclose(m @ m.T, np.eye(d), atol=1e-12)
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal((5, d)), rng.standard_normal((7, d))
    np.testing.assert_allclose((q @ m) @ (k @ m).T, q @ k.T, atol=1e-12)
    np.testing.assert_array_equal(m, incoherence_matrix(d, seed))  # seeded


def test_hadamard_spreads_an_outlier_feature():
    h = hadamard(64)
    assert set(np.unique(np.abs(h))) == {1 / 8}
    q = np.zeros(64)
    q[5] = 30.0
    assert np.abs(q @ incoherence_matrix(64)).max() == pytest.approx(30 / 8)
    assert np.count_nonzero(hadamard(48)) == 3 * 16 * 16  # three 16 x 16 blocks


def test_incoherent_flash_is_the_plain_model_on_rotated_q_and_k(rng):
    q, k, v = rng.standard_normal((3, 2, 40, 16))
    m = incoherence_matrix(16, seed=5)
    a = flash_fp8(q, k, v, block=16, incoherent=True, seed=5)
    b = flash_fp8(q @ m, k @ m, v, block=16, incoherent=False)
    np.testing.assert_array_equal(a[0].astype(np.float64), b[0].astype(np.float64))
    np.testing.assert_array_equal(a[1], b[1])


# -- hand-checked rounding points of the two models ---------------------------------------

# One query 1.75 against keys 0 and -3.5 (scale 1): every scale is a power of two, so
# q8 * dq = 1.75, k8 * dk = [0, -3.5], v8 * dv = [0, 1.75] exactly, and S = [0, -6.125].
Q, K, V = np.array([[1.75]]), np.array([[0.0], [-3.5]]), np.array([[0.0], [1.75]])


def test_flash_rounds_p_with_the_scale_256_and_l_sums_unrounded_p():
    o, lse = flash_fp8(Q, K, V, scale=1.0, quant="tensor", incoherent=False)
    p = np.exp(f32(-6.125))  # fp32, unrounded: 0.0021875
    p8 = e4m3(p * f32(P_SCALE)) / f32(P_SCALE)  # 256 p = 0.56 -> 0.5625 -> 0.002197
    l = f32(1) + p
    assert o.dtype == BF16 and lse.dtype == np.float32
    assert o[0, 0] == BF16(f32(p8 * f32(1.75)) / l)
    assert lse[0] == np.log(l)
    # the alternatives this rules out are really different numbers
    assert e4m3(p) != p8  # without the 256: p is an e4m3 subnormal, 2**-9
    assert np.log(f32(1) + p8) != lse[0]  # l summing the rounded P


def test_flash_block_quantisation_gives_each_key_block_its_scale():
    k = np.array([[0.875], [-3.5]])  # block=1: scales 448/0.875 = 512 and 128, both exact
    o_block, lse_block = flash_fp8(Q, k, V, block=1, scale=1.0, quant="block", incoherent=False)
    o_tensor, lse_tensor = flash_fp8(Q, k, V, block=1, scale=1.0, quant="tensor",
                                     incoherent=False)
    # per tensor, 0.875 becomes 0.875 * 128 = 112 (exact too): the same S, the same outputs
    assert lse_block[0] == lse_tensor[0]
    k2 = np.array([[0.3], [-3.5]])  # 0.3 * 128 = 38.4 -> 40 (step 4); 0.3 * 1493.3 -> 448
    _, lse2_block = flash_fp8(Q, k2, V, block=1, scale=1.0, quant="block", incoherent=False)
    _, lse2_tensor = flash_fp8(Q, k2, V, block=1, scale=1.0, quant="tensor", incoherent=False)
    s_tensor = f32(1.75) * (f32(40) * (f32(1) / f32(128)))
    assert lse2_tensor[0] > lse2_block[0]  # 0.3125 > 0.3: the coarser per-tensor grid
    assert lse2_tensor[0] == pytest.approx(np.log(np.exp(s_tensor) + np.exp(-6.125)), rel=1e-6)


def test_standard_fp8_rounds_s_and_p_to_fp16_then_p_to_fp8_per_tensor():
    o, lse = standard_fp8(Q, K, V, scale=1.0)
    e = np.exp(f32(-6.125))
    l = f32(1) + e
    p16 = f32(np.float16(np.array([f32(1) / l, e / l])))
    s_p = f32(448) / p16[0]  # per-tensor scale of P: its amax is the first entry
    p8 = e4m3(p16[1] * s_p)
    assert o.dtype == BF16
    assert o[0, 0] == BF16(f32(p8 * f32(1.75)) * (f32(1) / s_p))
    assert lse[0] == np.log(l)


def test_standard_fp8_rounds_scores_to_fp16():
    """One key: LSE = S. q = [1.75, 1.75], k = [0.875, 2**-13] quantise exactly (scales 256
    and 512), S = 1.53125 + 1.75 * 2**-13 in fp32; fp16 (step 2**-10 there) drops the tail."""
    q, k, v = np.array([[1.75, 1.75]]), np.array([[0.875, 2.0**-13]]), np.array([[1.0]])
    _, lse_std = standard_fp8(q, k, v, scale=1.0)
    _, lse_flash = flash_fp8(q, k, v, scale=1.0, quant="tensor", incoherent=False)
    assert lse_std[0] == 1.53125
    assert lse_flash[0] == f32(1.53125 + 1.75 * 2.0**-13)  # the flash model keeps S in fp32


# -- properties over shapes, blocks, masks and options ------------------------------------


@given(nq=st.integers(1, 24), nk=st.integers(1, 24), d=st.sampled_from([1, 4, 16]),
       block=st.integers(1, 30), causal=st.booleans(), quant=st.sampled_from(["block", "tensor"]),
       incoherent=st.booleans(), dtype=st.sampled_from(["fp8", "fp8_e5m2"]),
       seed=st.integers(0, 999))
def test_fp8_models_stay_bounded_and_mask_like_the_reference(nq, nk, d, block, causal, quant,
                                                             incoherent, dtype, seed):
    rng = np.random.default_rng(seed)
    q, k, v = rng.standard_normal((nq, d)), rng.standard_normal((nk, d)), rng.standard_normal((nk, 3))
    ref_o, ref_lse = R.attention(q, k, v, causal=causal)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        outs = (flash_model(q, k, v, dtype, block=block, causal=causal, quant=quant,
                            incoherent=incoherent),
                standard_model(q, k, v, dtype, causal=causal))
    step = 2.0 ** -(3 if dtype == "fp8" else 2)  # fp8 rounding of P: relative step
    bound = (1 + step) ** 2 * (1 + 2**-8) * np.abs(v).max() + 1e-6
    for o, lse in outs:
        o64 = o.astype(np.float64)
        assert np.all(np.isfinite(o64))
        np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(ref_lse))
        assert np.all(o64[np.isneginf(ref_lse)] == 0)
        assert np.abs(o64).max() <= bound  # a convex combination of v, up to fp8 rounding


@given(hkv=st.sampled_from([1, 2, 3]), group=st.sampled_from([2, 3]), nq=st.integers(1, 20),
       nk=st.integers(1, 20), block=st.integers(1, 24), causal=st.booleans(),
       quant=st.sampled_from(["block", "tensor"]), incoherent=st.booleans(),
       dtype=st.sampled_from(["fp8", "fp8_e5m2"]), seed=st.integers(0, 999))
def test_grouped_query_fp8_equals_the_expanded_heads(hkv, group, nq, nk, block, causal, quant,
                                                     incoherent, dtype, seed):
    """k, v with Hkv heads of H = Hkv x group (docs/fp8.md: "k and v may have fewer heads"):
    both fp8 models equal their run on k, v repeated per q head, bit for bit (a k head's
    block scales and a tensor's amax are its expansion's). A probe's Hkv = 2 of H = 4 raised
    a broadcast error (2026-12-07)."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((2, hkv * group, nq, 8))
    k, v = rng.standard_normal((2, hkv, nk, 8)), rng.standard_normal((2, hkv, nk, 4))
    kx, vx = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    for model, options in ((flash_fp8, {"block": block, "quant": quant,
                                        "incoherent": incoherent}), (standard_fp8, {})):
        got = model(q, k, v, dtype, causal=causal, **options)
        want = model(q, kx, vx, dtype, causal=causal, **options)
        for g, w in zip(got, want, strict=True):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_array_equal(g, w)


def test_check_takes_grouped_query_fp8(capsys):
    from flashbench.cli import main

    status = main(["check", "--shape", "1x4/2x64x64x32", "--dtype", "fp8", "--pass", "fwd",
                   "--no-backends", "--quiet"])
    out = capsys.readouterr().out
    assert status == 0 and "RESULT: PASS" in out, out


def test_bad_options_are_named():
    q = np.ones((2, 4))
    with pytest.raises(ValueError, match="quant"):
        flash_model(q, q, q, "fp8", quant="row")
    with pytest.raises(TypeError, match="incoherent"):
        flash_model(q, q, q, "fp8", incoherent="yes")
    with pytest.raises(ValueError, match="fp8 dtypes"):
        flash_model(q, q, q, "fp16", quant="block")
    with pytest.raises(ValueError, match="dtype"):
        standard_fp8(q, q, q, "fp16")
    with pytest.raises(ValueError, match="block"):
        flash_fp8(q, q, q, block_q=0)


# -- FlashAttention-3's Table 3: bands and order ----------------------------------------


def test_table3_fp8_rows_within_2x_of_the_paper_and_in_its_order():
    """1x2x2048x128, seed 0 (about 5 s): every FP8 figure within a factor of 2 of Table 3
    (2.4e-2, 9.1e-3, 9.3e-3, 2.4e-2), FlashAttention-3 below the baseline and below its
    run without incoherent processing; fp16 flash below fp16 standard."""
    from flashbench.inputs import Shape
    from flashbench.measure.papers import fa3_table3, order_claims

    table = fa3_table3(Shape(1, 2, 2048, 2048, 128), seeds=(0,))
    for row in table.rows:
        if row.setting.dtype == "fp8":
            assert 0.5 <= row.ratio <= 2.0, (row.setting.label, row.rmse)
    claims = order_claims(table)
    assert len(claims) == 3 and all(held for _, held in claims), claims


# -- command line -----------------------------------------------------------------------


def test_check_takes_fp8_from_the_registry(capsys):
    from flashbench.cli import main

    status = main(["check", "--shape", "1x2x40x16", "--dtype", "fp8", "fp8_e5m2", "--causal",
                   "off", "--no-backends", "--quiet", "--tables"])
    out = capsys.readouterr().out
    assert status == 0 and "fp8_e5m2" in out and "RESULT: PASS" in out
    # fp8 is forward only: the gradient section says so instead of an empty table
    grads = out.split("5. Gradients")[1]
    assert "none: no dtype asked (fp8, fp8_e5m2) has a backward" in grads
    assert "dq err" not in grads and "band: the band rule's ratio" not in grads


def test_table_fa3_prints_markdown_beside_the_paper(capsys):
    from flashbench.cli import main

    assert main(["table", "fa3", "--shape", "1x1x64x16", "--seeds", "0", "1", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "| FP8 baseline (per-tensor scales, fp16 softmax) | 2.40e-02 |" in out
    assert "seeds 0, 1" in out and "B=1 H=1 Nq=64 Nk=64 d=16" in out
    assert out.count("\n| FP") == 6


# -- asv ----------------------------------------------------------------------------------


def test_fp8_suite_reads_its_records_and_skips_where_a_commit_has_no_fp8():
    from benchmarks.bench_accuracy import DTYPES, TrackFP8Accuracy

    assert "fp8" in DTYPES and "fp8_e5m2" in DTYPES  # judged in TrackAccuracy like any dtype
    suite = TrackFP8Accuracy()
    key = ("fp8", "block", True, "s", "outliers")
    suite.setup({key: {"rmse": 9e-3, "max_abs": 0.3, "vs_baseline": 0.4}}, *key)
    assert suite.track_o_rmse(None, *key) == 9e-3
    assert suite.track_o_rmse_vs_baseline(None, *key) == 0.4
    with pytest.raises(NotImplementedError, match="does not model fp8"):
        suite.setup({}, *key)
    with pytest.raises(NotImplementedError, match="lacks"):
        suite.setup({"missing": "this commit lacks flashbench.numerics"}, *key)


def test_speed_times_the_fp8_forward_on_its_pools_e4m3_inputs():
    """speed's fp8 pool holds e4m3 q, k, v (quantised before the clock, FlashAttention-3's
    convention); triton-fp8's timed call sent them to the quantising path, which refuses
    e4m3: every fp8 row "raised" (a probe, 2026-12-07; a GPU's rows, seen here with the
    interpreter let through). Its GB/s counts o in bf16, as it is written (5 units of
    e4m3 q's size at Nq = Nk, d = dv, not 4)."""
    import dataclasses

    from flashbench.backends import get_backend
    from flashbench.inputs import Shape
    from flashbench.measure.roofline import measure_roofline
    from flashbench.measure.speed import SpeedCase
    from flashbench.measure.speedrun import time_backend

    backend = dataclasses.replace(get_backend("triton-fp8"), interpreted=lambda: False)
    case = SpeedCase(Shape(1, 2, 64, 64, 32), "fp8")
    row = time_backend(case, backend, measure_roofline("cpu", ["fp8"]), seed=1, samples=3,
                       warmup=1)
    assert row.status == "PASS" and not row.failures, (row.reason, row.failures)
    assert case.bytes() == 5 * 2 * 64 * 32  # q, k, v in e4m3, o in bf16
    assert SpeedCase(Shape(1, 2, 64, 64, 32), "bf16").bytes() == 4 * 2 * 64 * 32 * 2
