"""Every bad input raises a clear error that names the argument."""

import numpy as np
import pytest

from flashbench import numerics as M
from flashbench import reference as R

q = np.zeros((2, 4, 8))
k = np.zeros((2, 6, 8))
v = np.zeros((2, 6, 3))

ALL = [
    ("attention", lambda *a, **kw: R.attention(*a, **kw)),
    ("online", lambda *a, **kw: R.online_attention(*a, **kw)),
    ("flash16", lambda *a, **kw: M.flash_model(*a, "fp16", **kw)),
    ("std16", lambda *a, **kw: M.standard_model(*a, "bf16", **kw)),
]


@pytest.mark.parametrize("name,fn", ALL)
@pytest.mark.parametrize("args,exc,match", [
    ((np.zeros(8), k, v), ValueError, r"q must have shape \[..., Nq, d\]"),
    ((q, np.zeros((2, 6, 5)), v), ValueError, "q and k must share the head dim d"),
    ((q, k, np.zeros((2, 5, 3))), ValueError, "k and v must share the key count Nk"),
    ((np.zeros((3, 4, 8)), k, v), ValueError, "do not broadcast"),
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


@pytest.mark.parametrize("dtype", ["fp8", "float16", None, 16])
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
        o, _ = fn(ones, bad, v)
    assert o.shape == (2, 4, 3) and not np.isfinite(np.asarray(o, dtype=float)).all()


def test_empty_softmax_row_is_an_error():
    with pytest.raises(ValueError, match="x must have shape"):
        R.softmax(np.zeros((3, 0)))
