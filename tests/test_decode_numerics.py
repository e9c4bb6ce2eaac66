"""Precision models of split-KV decode: partial states stored in fp32, bf16, fp16."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashbench import reference as R
from flashbench.accuracy import error_stats, judge
from flashbench.inputs.kvcache import make_decode
from flashbench.inputs.precision import get_precision
from flashbench.numerics import flash_model
from flashbench.numerics.decode import split_decode_model, standard_decode_model
from flashbench.reference.decode import sequence_cache


def test_one_split_is_the_flash_model_of_each_sequence():
    q, k, v, lens, t = make_decode(3, 4, 2, 3, 16, [200, 77, 3], 32, seed=2)
    o, lse = split_decode_model(q, k, v, lens, t, "bf16", causal=True, block=32)
    for b, n in enumerate(lens):
        fo, fl = flash_model(q[b].transpose(1, 0, 2), sequence_cache(k, b, n, t).transpose(1, 0, 2),
                             sequence_cache(v, b, n, t).transpose(1, 0, 2), "bf16", block=32,
                             causal=True)
        assert np.array_equal(fo.transpose(1, 0, 2), o[b])
        assert np.abs(fl - lse[b]).max() <= 2e-6  # fp32 sums of rows cut at another length


@given(st.sampled_from(["fp32", "fp16", "bf16"]), st.integers(1, 12), st.booleans(),
       st.integers(0, 1000))
def test_fp32_partials_keep_the_baseline_rule(dtype, splits, causal, seed):
    inputs = make_decode(2, 4, 1, 4, 32, [300, 129], 16, seed=seed)
    ref = R.decode_attention(*inputs, causal=causal)
    out = split_decode_model(*inputs, dtype, causal=causal, num_splits=splits, block=16)
    j = judge(out, standard_decode_model(*inputs, dtype, causal=causal), ref, dtype)
    assert j["o"]["verdict"].passed and j["lse"]["verdict"].passed
    # the fp32 merge loses nothing the final rounding to the dtype does not hide
    one = split_decode_model(*inputs, dtype, causal=causal, block=16)
    assert error_stats(out[0], ref[0])["max_abs"] <= 1.5 * error_stats(one[0], ref[0])["max_abs"] \
        + get_precision(dtype).eps


def test_bf16_lse_costs_half_an_ulp_of_the_lse():
    inputs = make_decode(2, 4, 2, 2, 64, [2048, 1500], 64, seed=0)
    ref = R.decode_attention(*inputs, causal=True)
    exact = split_decode_model(*inputs, "fp16", causal=True, num_splits=8)
    cheap = split_decode_model(*inputs, "fp16", causal=True, num_splits=8, lse_dtype="bf16")
    err = error_stats(cheap[1], ref[1])["max_abs"]
    assert err > 10 * error_stats(exact[1], ref[1])["max_abs"]
    # |LSE| < 16 here: bf16's step there is 2**-4, so each LSE_s is off by at most 2**-5
    assert np.abs(ref[1]).max() < 16 and err <= 2**-5 + 1e-3
    std = standard_decode_model(*inputs, "fp16", causal=True)
    assert not judge(cheap, std, ref, "fp16")["lse"]["verdict"].passed


def test_fp16_lse_overflow_breaks_the_merge():
    """Scores past fp16's largest finite value: stored LSE_s become inf, the merge NaN."""
    inputs = make_decode(1, 2, 1, 1, 16, [256], 64, seed=1)
    out = split_decode_model(*inputs, "fp32", num_splits=4, scale=2e5, lse_dtype="fp16")
    assert np.isnan(out[0]).any()
    ok = split_decode_model(*inputs, "fp32", num_splits=4, scale=2e5)
    assert np.isfinite(ok[0]).all()


def test_bad_model_arguments():
    inputs = make_decode(1, 2, 1, 1, 16, [10], 16)
    with pytest.raises(ValueError, match="lse_dtype must be one of"):
        split_decode_model(*inputs, "bf16", lse_dtype="fp8")
    with pytest.raises(ValueError, match="dtype must be one of fp32"):
        split_decode_model(*inputs, "fp64")
    with pytest.raises(ValueError, match="num_splits must be >= 1"):
        split_decode_model(*inputs, "bf16", num_splits=0)
