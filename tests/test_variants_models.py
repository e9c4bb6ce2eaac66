"""The precision models with the variants: fp64 equals the reference, the degenerate variants
equal the plain models bit for bit, and the flash model passes the baseline rule."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashbench import numerics, reference
from flashbench.accuracy import baseline_rule, error_stats

VARIANTS = [dict(window=(5, 0), causal=True), dict(window=(3, 7)), dict(softcap=2.0),
            dict(softcap=30.0, causal=True), dict(sinks=np.array([0.3, -1.0, 2.0, 0.0])),
            dict(window=(4, 4), softcap=5.0, sinks=np.array([1.0, 1.0, -2.0, 0.5]))]


def inputs(seed=0, nq=24, nk=40, d=16):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((1, 4, nq, d)), rng.standard_normal((1, 2, nk, d)),
            rng.standard_normal((1, 2, nk, d)))


@given(st.sampled_from(VARIANTS), st.integers(1, 17), st.integers(0, 2**16))
def test_fp64_models_equal_the_reference(kw, block, seed):
    q, k, v = inputs(seed)
    ref = reference.attention(q, k, v, **kw)
    for out in (numerics.flash_model(q, k, v, "fp64", block=block, **kw),
                numerics.standard_model(q, k, v, "fp64", **kw)):
        for a, b in zip(out, ref, strict=True):
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)
    do = np.random.default_rng(seed).standard_normal(ref[0].shape)
    want = reference.attention_grad(q, k, v, do, **kw)
    for got in (numerics.flash_model_grad(q, k, v, do, "fp64", block=block, **kw),
                numerics.standard_model_grad(q, k, v, do, "fp64", **kw)):
        assert len(got) == len(want)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-11)


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_degenerate_variants_equal_the_plain_models_bit_for_bit(dtype):
    q, k, v = inputs(1)
    no_sink = np.full(4, -np.inf)
    for causal in (False, True):
        plain = numerics.flash_model(q, k, v, dtype, block=16, causal=causal)
        std = numerics.standard_model(q, k, v, dtype, causal=causal)
        for kw in (dict(window=(-1, -1)), dict(window=(99, 99)), dict(sinks=no_sink)):
            for a, b in zip(numerics.flash_model(q, k, v, dtype, block=16, causal=causal, **kw),
                            plain, strict=True):
                np.testing.assert_array_equal(a, b)
            for a, b in zip(numerics.standard_model(q, k, v, dtype, causal=causal, **kw), std,
                            strict=True):
                np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("kw", VARIANTS, ids=lambda kw: " ".join(sorted(kw)))
def test_the_flash_model_passes_the_baseline_rule_with_variants(dtype, kw):
    q, k, v = inputs(2, nq=64, nk=96, d=32)
    ref_o, ref_lse = reference.attention(q, k, v, **kw)
    flash = numerics.flash_model(q, k, v, dtype, block=32, **kw)
    std = numerics.standard_model(q, k, v, dtype, **kw)
    for i, ref in enumerate((ref_o, ref_lse)):  # O, then LSE
        verdict = baseline_rule(error_stats(flash[i], ref)["max_abs"],
                                error_stats(std[i], ref)["max_abs"], dtype)
        assert verdict.passed, (i, verdict)


def test_the_fp8_models_refuse_a_variant_by_name():
    q, k, v = inputs()
    with pytest.raises(ValueError, match="fp8 models take causal only"):
        numerics.flash_model(q, k, v, "fp8", window=(4, 0))
    with pytest.raises(ValueError, match="fp8 models take causal only"):
        numerics.standard_model(q, k, v, "fp8", softcap=3.0)


@pytest.mark.parametrize("kw", [{}, VARIANTS[1], VARIANTS[4]], ids=["plain", "window", "sinks"])
def test_the_flash_model_streams_fp32_operands_with_grouped_heads(kw, monkeypatch):
    """k, v with fewer heads than q go through the grouping wrapper, which checks (and
    converts to float64) its arguments: the rounding to fp32 must come after it."""
    from flashbench.numerics import forward

    seen, real = [], forward.stream_attention

    def spy(q, k, v, **kw_):
        seen.append((q.dtype, k.dtype, v.dtype, kw_["compute"]))
        return real(q, k, v, **kw_)

    monkeypatch.setattr(forward, "stream_attention", spy)
    q, k, v = inputs(3)
    numerics.flash_model(q, k, v, "fp32", **kw)
    assert seen == [(np.float32,) * 4]
