"""Head dims real models use (issue 37): the ``d[/dv]`` shape spelling, and the float64
reference, its gradients and both precision models over d in 8..576 with dv != d."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flashbench import reference as R
from flashbench.inputs import Shape, make_qkv
from flashbench.numerics import flash_model, flash_model_grad, standard_model, standard_model_grad

EXACT = 1e-12
head_dims = st.integers(8, 576)
shapes = st.builds(Shape, B=st.integers(1, 3), H=st.integers(1, 8), Nq=st.integers(1, 4096),
                   Nk=st.integers(1, 4096), d=st.integers(1, 576),
                   dv=st.none() | st.integers(1, 576))


@given(shape=shapes, gqa=st.booleans())
def test_spec_round_trips_with_dv(shape, gqa):
    if gqa:
        shape = Shape(shape.B, shape.H * 2, shape.Nq, shape.Nk, shape.d, shape.dv, Hkv=shape.H)
    text = shape.spec()
    assert Shape.parse(text) == shape
    assert text.endswith(f"x{shape.d}" if shape.dv is None else f"x{shape.d}/{shape.dv}")


def test_parse_reads_the_design_spelling():
    s = Shape.parse("1x8x1024x192/128")
    assert (s.Nq, s.Nk, s.d, s.dv, s.head_dim_v) == (1024, 1024, 192, 128, 128)
    s = Shape.parse("1x8/2x1024x1024x80")
    assert (s.Hkv, s.d, s.dv) == (2, 80, None)
    assert Shape.parse("1x1x33x65x64x16") == Shape(1, 1, 33, 65, 64, 16)  # the older form
    assert Shape(1, 1, 33, 65, 64, 16).spec() == "1x1x33x65x64/16"
    assert "dv=128" in Shape.parse("1x8x1024x192/128").label()


@pytest.mark.parametrize("bad", ["1x8x1024x192/", "1x8x1024x/128", "1x8x64x64x192x128/64",
                                 "1x8x1024x192/0", "1x8x1024x192/12a"])
def test_parse_rejects_bad_dv(bad):
    with pytest.raises(ValueError, match="(?i)shape"):
        Shape.parse(bad)


def test_flops_count_the_true_dims():
    # forward FLOPs = 2 B H (d + dv) Nq Nk: 192/128 counts 320 columns, 80 counts 160
    assert Shape.parse("1x1x64x192/128").flops() == 2 * 320 * 64 * 64
    assert Shape.parse("1x1x64x80").flops() == 4 * 80 * 64 * 64


def _qkv(nq, nk, d, dv, heads, seed):
    q, k, v = make_qkv(Shape(1, heads, nq, nk, d, dv), seed=seed)
    return q[0], k[0], v[0]


@settings(max_examples=40, deadline=None)
@given(d=head_dims, dv=head_dims, nq=st.integers(1, 24), nk=st.integers(1, 24),
       block=st.integers(1, 32), causal=st.booleans(), seed=st.integers(0, 2**16))
def test_reference_streamed_equals_one_shot_any_dims(d, dv, nq, nk, block, causal, seed):
    q, k, v = _qkv(nq, nk, d, dv, 2, seed)
    o, lse = R.attention(q, k, v, causal=causal)
    o_s, lse_s = R.online_attention(q, k, v, block=block, causal=causal)
    assert o.shape == (2, nq, dv) and lse.shape == (2, nq)
    np.testing.assert_allclose(o_s, o, rtol=0, atol=EXACT)
    np.testing.assert_allclose(lse_s, lse, rtol=0, atol=EXACT)


@settings(max_examples=30, deadline=None)
@given(d=head_dims, dv=head_dims, nq=st.integers(1, 16), nk=st.integers(1, 16),
       block=st.integers(1, 16), causal=st.booleans(), seed=st.integers(0, 2**16))
def test_reference_gradients_any_dims(d, dv, nq, nk, block, causal, seed):
    q, k, v = _qkv(nq, nk, d, dv, 2, seed)
    do = np.random.default_rng(seed + 1).standard_normal((2, nq, dv))
    grads = R.attention_grad(q, k, v, do, causal=causal)
    o, lse = R.attention(q, k, v, causal=causal)
    streamed = R.online_attention_grad(q, k, v, o, lse, do, block=block, causal=causal)
    for g, s, x in zip(grads, streamed, (q, k, v), strict=True):
        assert g.shape == s.shape == x.shape
        scale = max(1.0, float(np.abs(g).max()))
        np.testing.assert_allclose(s, g, rtol=0, atol=EXACT * scale)


@settings(max_examples=25, deadline=None)
@given(d=head_dims, dv=head_dims, nq=st.integers(1, 16), nk=st.integers(1, 16),
       causal=st.booleans(), dtype=st.sampled_from(["fp32", "bf16", "fp16"]),
       seed=st.integers(0, 2**16))
def test_precision_models_take_any_dims(d, dv, nq, nk, causal, dtype, seed):
    """fp64 models are the reference to 1e-12; every dtype gives o [.., Nq, dv] in T and
    gradients of q's, k's and v's shapes."""
    q, k, v = _qkv(nq, nk, d, dv, 2, seed)
    ref_o, ref_lse = R.attention(q, k, v, causal=causal)
    for model in (flash_model, standard_model):
        o, lse = model(q, k, v, "fp64", causal=causal)
        np.testing.assert_allclose(o, ref_o, rtol=0, atol=EXACT)
        np.testing.assert_allclose(lse, ref_lse, rtol=0, atol=EXACT)
        o, lse = model(q, k, v, dtype, causal=causal)
        assert o.shape == (2, nq, dv) and lse.shape == (2, nq)
    do = np.random.default_rng(seed + 1).standard_normal((2, nq, dv))
    ref = R.attention_grad(q, k, v, do, causal=causal)
    for model in (flash_model_grad, standard_model_grad):
        exact = model(q, k, v, do, "fp64", causal=causal)
        rounded = model(q, k, v, do, dtype, causal=causal)
        for g, e, r, x in zip(ref, exact, rounded, (q, k, v), strict=True):
            assert e.shape == r.shape == x.shape
            np.testing.assert_allclose(e, g, rtol=0, atol=EXACT * max(1.0, np.abs(g).max()))


def test_tolerance_measures_a_head_dim_the_table_lacks():
    """d = 64 reads the shipped table; another d is the flash model's band measured at that
    d (x the safety factor), not d = 64's."""
    from flashbench import tolerance
    from flashbench.bands.measure import measure_bands
    from flashbench.bands.table import SAFETY

    assert tolerance("bf16", 256, d=64) == tolerance("bf16", 256)
    got = tolerance("bf16", 256, d=80)
    band = next(b for b in measure_bands(dtypes=["bf16"], ns=[256], dists=["normal"],
                                         causal=[False], d=80)
                if b.kernel == "flash_model" and b.tensor == "o")
    assert got == band.abs_max * SAFETY and got != tolerance("bf16", 256)
    assert tolerance("bf16", 256, d=192, dv=128) > 0
    with pytest.raises(ValueError, match="d must be an int >= 1"):
        tolerance("bf16", 256, d=0)


def test_bands_cli_takes_a_head_dim(capsys):
    from flashbench.cli import main

    rc = main(["bands", "--dtype", "bf16", "--n", "128", "--dist", "normal", "--seeds", "2",
               "--head-dim", "192/128", "--quiet"])
    assert rc == 0 and "d=192/128" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        main(["bands", "--head-dim", "80/x"])
    assert exit_.value.code == 2 and "head dim must be D or D/DV" in capsys.readouterr().err
