"""Every bad input raises a clear error that names the argument."""

import numpy as np
import pytest

from flashbench import numerics as M
from flashbench import reference as R
from flashbench.inputs.validation import attention_shape

q = np.zeros((2, 4, 8))
k = np.zeros((2, 6, 8))
v = np.zeros((2, 6, 3))

def _do(q, k, v):
    """A dO of the output's shape (zeros where the shapes do not make one)."""
    try:
        return np.zeros(attention_shape(np.shape(q), np.shape(k), np.shape(v)))
    except Exception:
        return np.zeros((2, 4, 3))


def _grad(*a, **kw):
    return R.attention_grad(*a[:3], _do(*a[:3]), *a[3:], **kw)


def _online_grad(*a, **kw):
    do = _do(*a[:3])
    return R.online_attention_grad(*a[:3], do, do[..., 0], do, *a[3:], **kw)


ALL = [
    ("attention", lambda *a, **kw: R.attention(*a, **kw)),
    ("online", lambda *a, **kw: R.online_attention(*a, **kw)),
    ("flash16", lambda *a, **kw: M.flash_model(*a, "fp16", **kw)),
    ("std16", lambda *a, **kw: M.standard_model(*a, "bf16", **kw)),
    ("grad", _grad),
    ("online_grad", _online_grad),
    ("flash_grad16", lambda *a, **kw: M.flash_model_grad(*a[:3], _do(*a[:3]), "fp16", **kw)),
    ("std_grad16", lambda *a, **kw: M.standard_model_grad(*a[:3], _do(*a[:3]), "bf16", **kw)),
]


@pytest.mark.parametrize("name,fn", ALL)
@pytest.mark.parametrize("args,exc,match", [
    ((np.zeros(8), k, v), ValueError, r"q must have shape \[..., Nq, d\]"),
    ((q, np.zeros((2, 6, 5)), v), ValueError, "q and k must share the head dim d"),
    ((q, k, np.zeros((2, 5, 3))), ValueError, "k and v must share the key count Nk"),
    ((np.zeros((3, 2, 4, 8)), np.zeros((2, 2, 6, 8)), np.zeros((2, 2, 6, 3))), ValueError,
     "do not broadcast"),
    ((np.zeros((3, 4, 8)), k, v), ValueError, r"Hkv=2 heads \(dim -3\), which must divide q's H=3"),
    ((np.zeros((4, 4, 8)), k, np.zeros((1, 6, 3))), ValueError, "k has 2, v has 1"),
    ((q.astype(complex), k, v), TypeError, "q must be a real numeric array"),
    ((q, np.array([["a"]]), v), TypeError, "k must be a real numeric array"),
    ((q, k, np.zeros((2, 0, 3))), ValueError, "v must have non-empty"),
])
def test_bad_arrays(name, fn, args, exc, match):
    with pytest.raises(exc, match=match):
        fn(*args)


@pytest.mark.parametrize("block,exc", [(0, ValueError), (-3, ValueError), (2.0, TypeError),
                                        (True, TypeError), ("8", TypeError)])
def test_bad_block(block, exc):
    for fn in (lambda: R.online_attention(q, k, v, block=block),
               lambda: M.flash_model(q, k, v, "fp32", block=block),
               lambda: R.online_softmax(np.zeros((2, 5)), block)):
        with pytest.raises(exc, match="block"):
            fn()


@pytest.mark.parametrize("dtype", ["fp4", "float16", None, 16])
def test_unknown_dtype(dtype):
    with pytest.raises(ValueError, match="dtype must be one of"):
        M.flash_model(q, k, v, dtype)
    with pytest.raises(ValueError, match="dtype must be one of"):
        M.standard_model(q, k, v, dtype)


@pytest.mark.parametrize("scale,exc", [(np.inf, ValueError), ("0.5", TypeError)])
def test_bad_scale(scale, exc):
    with pytest.raises(exc, match="scale"):
        R.attention(q, k, v, scale=scale)


@pytest.mark.parametrize("name,fn", ALL)
def test_non_finite_inputs_raise_where_checking_is_asked_for(name, fn):
    ones = np.ones_like(q)
    bad = k.copy()
    bad[1, 2, 3] = np.inf
    with pytest.raises(ValueError, match="k has 1 non-finite"):
        fn(ones, bad, v, check_finite=True)
    with np.errstate(all="ignore"):  # not asked: computed as given, no check cost
        o, *_ = fn(ones, bad, v)
    assert o.shape in ((2, 4, 3), (2, 4, 8)) and not np.isfinite(np.asarray(o, dtype=float)).all()


def test_empty_softmax_row_is_an_error():
    with pytest.raises(ValueError, match="x must have shape"):
        R.softmax(np.zeros((3, 0)))


@pytest.mark.parametrize("name,fn", ALL[:2] + ALL[4:6])
def test_torch_tensors_are_refused_by_name(name, fn):
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match=r"q is a torch.Tensor.*q.detach\(\).cpu\(\).numpy\(\)"):
        fn(torch.zeros(2, 4, 8, requires_grad=True), k, v)
    with pytest.raises(TypeError, match="v is a torch.Tensor"):
        fn(q, k, torch.zeros(2, 6, 3))


@pytest.mark.parametrize("bad,match", [
    (dict(do=np.zeros((2, 4, 4))), r"do must have the output's shape \[..., Nq, dv\] \(2, 4, 3\)"),
    (dict(o=np.zeros((4, 3))), r"o must have the output's shape"),
    (dict(lse=np.zeros((2, 3))), r"lse must have the output's row shape \[..., Nq\] \(2, 4\)"),
])
def test_gradient_arguments_must_have_the_outputs_shape(bad, match):
    args = dict(o=np.zeros((2, 4, 3)), lse=np.zeros((2, 4)), do=np.zeros((2, 4, 3)), **{})
    args.update(bad)
    with pytest.raises(ValueError, match=match):
        R.online_attention_grad(q, k, v, args["o"], args["lse"], args["do"])
    if "do" in bad:
        for fn in (lambda: R.attention_grad(q, k, v, bad["do"]),
                   lambda: M.flash_model_grad(q, k, v, bad["do"], "bf16"),
                   lambda: M.standard_model_grad(q, k, v, bad["do"], "fp32")):
            with pytest.raises(ValueError, match=match):
                fn()


def test_backward_models_name_the_dtypes_they_cover():
    with pytest.raises(ValueError, match="dtype must be one of"):
        M.flash_model_grad(q, k, v, np.zeros((2, 4, 3)), "fp8")
    with pytest.raises(ValueError, match="dtype must be one of"):
        M.standard_model_grad(q, k, v, np.zeros((2, 4, 3)), "float16")


def _stream(*a, causal):
    from flashbench.reference.streaming import stream_attention

    return stream_attention(*a, block=4, causal=causal, scale=1.0)


def _stream_grad(q, k, v, causal):
    from flashbench.reference.streaming_bwd import stream_attention_grad

    o, lse = R.attention(q, k, v)
    return stream_attention_grad(q, k, v, o, lse, np.ones_like(o), block=4, causal=causal,
                                 scale=1.0)


def _fp8(name):
    from flashbench.numerics import fp8

    return getattr(fp8, name)


def _with_causal(fn):
    return lambda q, k, v, c: fn(q, k, v, causal=c)


NUMPY_CAUSAL = {
    **{name: _with_causal(fn) for name, fn in ALL},
    "flash_fp8_model": lambda q, k, v, c: M.flash_model(q, k, v, "fp8", causal=c),
    "standard_fp8_model": lambda q, k, v, c: M.standard_model(q, k, v, "fp8_e5m2", causal=c),
    "flash_fp8": lambda q, k, v, c: _fp8("flash_fp8")(q, k, v, causal=c),
    "standard_fp8": lambda q, k, v, c: _fp8("standard_fp8")(q, k, v, causal=c),
    "stream_attention": lambda q, k, v, c: _stream(q, k, v, causal=c),
    "stream_attention_grad": _stream_grad,
}


@pytest.mark.parametrize("name", sorted(NUMPY_CAUSAL))
@pytest.mark.parametrize("bad", ["False", "", 0, 1, None, np.array(True), [True]],
                         ids=["str", "empty", "0", "1", "None", "array", "list"])
def test_causal_must_be_a_bool(name, bad):
    """``causal="False"`` used to apply the mask (a non-empty string is truthy)."""
    qq, kk, vv = (np.random.default_rng(0).standard_normal(s) for s in ((2, 4, 8), (2, 6, 8),
                                                                       (2, 6, 8)))
    with pytest.raises(TypeError, match=r"causal must be True or False \(a bool\), got"):
        NUMPY_CAUSAL[name](qq, kk, vv, bad)


@pytest.mark.parametrize("name", sorted(NUMPY_CAUSAL))
def test_a_numpy_bool_causal_counts_as_the_bool(name):
    qq, kk, vv = (np.random.default_rng(0).standard_normal(s) for s in ((2, 4, 8), (2, 6, 8),
                                                                       (2, 6, 8)))
    for flag in (True, False):
        got = NUMPY_CAUSAL[name](qq, kk, vv, np.bool_(flag))
        want = NUMPY_CAUSAL[name](qq, kk, vv, flag)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(np.asarray(a, dtype=float), np.asarray(b, dtype=float))


def test_the_ml_dtypes_formats_are_real_numbers_to_the_reference():
    """bf16 and e4m3 arrays (numpy kind "V", known through ml_dtypes) and e5m2 (kind "f")
    are accepted as real arrays and computed in float64; a structured array is not."""
    import ml_dtypes

    from flashbench.inputs.validation import as_float_array

    for t in (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2):
        got = as_float_array(np.array([1.5, -2.0], dtype=t), "q")
        assert got.dtype == np.float64 and got.tolist() == [1.5, -2.0]
    with pytest.raises(TypeError, match="q must be a real numeric array"):
        as_float_array(np.zeros(2, dtype=[("a", "f4")]), "q")
