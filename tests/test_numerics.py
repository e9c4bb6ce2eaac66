"""Precision models: hand-checked rounding points, dtype ordering, properties."""

import warnings

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashbench import reference as R
from flashbench.accuracy import error_stats
from flashbench.inputs.precision import get_precision, round_to_tf32
from flashbench.numerics import DTYPES, flash_model, standard_model

f32 = np.float32
STORAGE = {"fp64": np.float64, "fp32": np.float32, "tf32": np.float32, "fp16": np.float16,
           "bf16": ml_dtypes.bfloat16}


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_p_is_rounded_before_pv_and_l_sums_unrounded_p(dtype):
    """One query, keys with scores [0, x]: O = T(T(p) * 1 / (1 + p)), p = exp(x) in fp32."""
    x = -1.34375  # representable in fp16 and bf16; chosen so the three orders below differ
    q = np.array([[1.0]])
    k = np.array([[0.0], [x]])
    v = np.array([[0.0], [1.0]])
    o, lse = flash_model(q, k, v, dtype, scale=1.0)
    T = STORAGE[dtype]
    p = np.exp(f32(x))  # fp32, unrounded
    p_t = f32(T(p))  # P rounded to T before P @ V
    expected = T(p_t / (f32(1) + p))  # l accumulates the unrounded p
    assert o[0, 0] == expected
    # the alternatives this rules out are really different numbers
    assert T(p / (f32(1) + p)) != expected  # P not rounded
    assert T(p_t / (f32(1) + p_t)) != expected  # l summing the rounded P
    assert lse[0] == f32(np.log(f32(1) + p))


def test_standard_model_rounds_scores_and_probabilities():
    """S = 1 + 2**-8 is a bf16 tie: standard rounds it to 1.0, the flash model keeps fp32."""
    q = np.array([[1.0, 1.0]])
    k = np.array([[1.0, 2.0**-8]])
    v = np.array([[3.0]])
    _, lse_std = standard_model(q, k, v, "bf16", scale=1.0)
    _, lse_flash = flash_model(q, k, v, "bf16", scale=1.0)
    assert lse_std[0] == 1.0
    assert lse_flash[0] == f32(1 + 2.0**-8)
    # two keys, P = [p, 1-p] rounded to bf16 after normalisation, then P @ V in fp32
    k2 = np.array([[0.0, 0.0], [1.0, 0.0]])
    v2 = np.array([[0.0], [1.0]])
    o, _ = standard_model(q, k2, v2, "bf16", scale=1.0)
    e = np.exp(f32(-1))
    p1 = f32(1) / (f32(1) + e)
    assert o[0, 0] == ml_dtypes.bfloat16(f32(ml_dtypes.bfloat16(p1)))


def test_tf32_rounds_matmul_operands_to_10_bits():
    q = np.array([[1.0 + 2.0**-12]])  # an fp32 value that tf32 rounds to 1.0
    k = np.array([[1.0]])
    v = np.array([[2.0]])
    _, lse_tf32 = flash_model(q, k, v, "tf32", scale=1.0)
    _, lse_fp32 = flash_model(q, k, v, "fp32", scale=1.0)
    assert lse_tf32[0] == 1.0
    assert lse_fp32[0] == f32(1.0 + 2.0**-12)


def test_round_to_tf32_is_nearest_even():
    x = np.array([1 + 2**-11, 1 + 3 * 2**-11, 1 + 2**-11 + 2**-20, -(1 + 2**-12), np.inf, 3.0],
                 dtype=np.float32)
    got = round_to_tf32(x)
    np.testing.assert_array_equal(got, np.array([1.0, 1 + 2**-9, 1 + 2**-10, -1.0, np.inf, 3.0],
                                                dtype=np.float32))
    assert np.all(got.view(np.uint32) & 0x1FFF == 0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_output_dtypes_follow_storage(dtype, rng):
    q = rng.standard_normal((2, 5, 16))
    o, lse = flash_model(q, q, q, dtype, block=2)
    o2, lse2 = standard_model(q, q, q, dtype)
    # O is written in the storage format, but fp8 kernels write bf16 (FlashAttention-3)
    want_o = STORAGE.get(dtype, ml_dtypes.bfloat16 if dtype.startswith("fp8") else None)
    assert o.dtype == o2.dtype == np.dtype(want_o) == np.dtype(get_precision(dtype).out.storage)
    want = np.float64 if dtype == "fp64" else np.float32
    assert lse.dtype == lse2.dtype == want


def test_fp64_models_equal_the_reference(rng):
    q, k, v = rng.standard_normal((3, 40, 8)), rng.standard_normal((3, 50, 8)), rng.standard_normal((3, 50, 8))
    o, lse = R.attention(q, k, v, causal=True)
    for fo, fl in (flash_model(q, k, v, "fp64", block=7, causal=True),
                   standard_model(q, k, v, "fp64", causal=True)):
        assert np.abs(fo - o).max() <= 1e-12
        np.testing.assert_allclose(fl, lse, atol=1e-12)


def test_error_grows_fp32_fp16_bf16_by_their_epsilons(rng):
    q, k, v = rng.standard_normal((3, 1, 4, 256, 64))
    ref = R.attention(q, k, v)
    rmse = {dt: error_stats(flash_model(q, k, v, dt)[0], ref[0])["rmse"]
            for dt in ("fp32", "tf32", "fp16", "bf16")}
    assert rmse["fp32"] < rmse["fp16"] < rmse["bf16"]
    assert rmse["fp32"] < rmse["tf32"]
    # bf16 has 3 fewer mantissa bits than fp16: about 8x the error
    assert 4 < rmse["bf16"] / rmse["fp16"] < 16


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_flash_model_beats_standard_on_fa3_outliers(dtype):
    from flashbench.inputs import Shape, make_qkv

    q, k, v = make_qkv(Shape(1, 2, 512, 512, 64), "outliers", seed=3)
    ref = R.attention(q, k, v)
    flash = error_stats(flash_model(q, k, v, dtype)[0], ref[0])["rmse"]
    std = error_stats(standard_model(q, k, v, dtype)[0], ref[0])["rmse"]
    assert flash < std


@given(nq=st.integers(1, 30), nk=st.integers(1, 30), d=st.sampled_from([1, 4, 16]),
       block=st.integers(1, 40), causal=st.booleans(), dtype=st.sampled_from(DTYPES),
       seed=st.integers(0, 999))
def test_models_stay_within_dtype_bounds(nq, nk, d, block, causal, dtype, seed):
    rng = np.random.default_rng(seed)
    q, k, v = rng.standard_normal((nq, d)), rng.standard_normal((nk, d)), rng.standard_normal((nk, 3))
    ref_o, ref_lse = R.attention(q, k, v, causal=causal)
    eps = get_precision(dtype).eps
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        outs = (flash_model(q, k, v, dtype, block=block, causal=causal),
                standard_model(q, k, v, dtype, causal=causal))
    bound = 64 * eps * max(1.0, np.abs(v).max())
    for o, lse in outs:
        o64 = o.astype(np.float64)
        assert np.all(np.isfinite(o64))
        np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(ref_lse))
        assert np.all(o64[np.isneginf(ref_lse)] == 0)
        assert np.abs(o64 - ref_o).max() <= bound
