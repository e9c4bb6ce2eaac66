"""Grouped-query attention on the NumPy side: every path equals the expanded computation."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashbench import numerics as M
from flashbench import reference as R
from flashbench.inputs.precision import get_precision
from flashbench.inputs.validation import check_qkv, kv_group


def expand(x, group):
    """k or v [..., Hkv, N, *] -> [..., Hkv * group, N, *]: query head h reads kv head h // group."""
    return np.repeat(x, group, axis=-3)


def reduce_group(x, group):
    """A gradient of the expanded k or v -> that of k or v: the group's heads summed."""
    return x.reshape(x.shape[:-3] + (x.shape[-3] // group, group) + x.shape[-2:]).sum(axis=-3)


def forward_paths(dtype, block):
    return {
        "attention": lambda q, k, v, c: R.attention(q, k, v, causal=c),
        "online_attention": lambda q, k, v, c: R.online_attention(q, k, v, block=block, causal=c),
        "flash_model": lambda q, k, v, c: M.flash_model(q, k, v, dtype, block=block, causal=c),
        "standard_model": lambda q, k, v, c: M.standard_model(q, k, v, dtype, causal=c),
    }


def grad_paths(dtype, block):
    def online(q, k, v, do, c):
        o, lse = R.online_attention(q, k, v, block=block, causal=c)
        return R.online_attention_grad(q, k, v, o, lse, do, block=block, causal=c)

    return {
        "attention_grad": lambda q, k, v, do, c: R.attention_grad(q, k, v, do, causal=c),
        "online_attention_grad": online,
        "flash_model_grad": lambda q, k, v, do, c: M.flash_model_grad(q, k, v, do, dtype,
                                                                      block=block, causal=c),
        "standard_model_grad": lambda q, k, v, do, c: M.standard_model_grad(q, k, v, do, dtype,
                                                                            causal=c),
    }


def same(a, b, exact):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape
    if exact:  # the same arithmetic, only the layout differs
        np.testing.assert_array_equal(a, b)
    else:  # float64 sums over the group in another order
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12 * max(1.0, np.abs(b).max()))


@given(hkv=st.integers(1, 3), group=st.integers(1, 4), nq=st.integers(1, 20),
       nk=st.integers(1, 20), batch=st.sampled_from([(), (2,)]), causal=st.booleans(),
       dtype=st.sampled_from(["fp64", "fp32", "tf32", "fp16", "bf16"]),
       block=st.integers(1, 24), seed=st.integers(0, 2**16))
def test_every_numpy_path_equals_the_expanded_computation(hkv, group, nq, nk, batch, causal,
                                                          dtype, block, seed):
    rng = np.random.default_rng(seed)
    h = hkv * group
    q = rng.standard_normal(batch + (h, nq, 8))
    k = rng.standard_normal(batch + (hkv, nk, 8))
    v = rng.standard_normal(batch + (hkv, nk, 4))
    do = rng.standard_normal(batch + (h, nq, 4))
    ek, ev = expand(k, group), expand(v, group)
    for name, fn in forward_paths(dtype, block).items():
        o, lse = fn(q, k, v, causal)
        eo, else_ = fn(q, ek, ev, causal)
        assert o.shape == batch + (h, nq, 4) and lse.shape == batch + (h, nq), name
        same(o, eo, exact=True)
        same(lse, else_, exact=True)
    for name, fn in grad_paths(dtype, block).items():
        dq, dk, dv = fn(q, k, v, do, causal)
        edq, edk, edv = fn(q, ek, ev, do, causal)
        assert (dq.shape, dk.shape, dv.shape) == (q.shape, k.shape, v.shape), name
        same(dq, edq, exact=True)
        if dtype == "fp64":
            same(dk, reduce_group(edk, group), exact=False)
            same(dv, reduce_group(edv, group), exact=False)
        else:  # the expanded gradients are rounded per head, the grouped ones once: compare
            # both with the float64 sum of the per-head values, within a few storage ulps
            for g, e in ((dk, edk), (dv, edv)):
                e64 = reduce_group(np.asarray(e, dtype=np.float64), group)
                tol = 4 * group * get_precision(dtype).eps
                np.testing.assert_allclose(np.asarray(g, np.float64), e64, rtol=0,
                                           atol=tol * max(1.0, np.abs(e64).max()))


def test_grouped_query_uses_no_expanded_copy(monkeypatch, rng):
    """The reference never materialises k or v with H heads: np.repeat is never called and
    no array of the expanded size reaches the score matmul."""
    calls = []
    monkeypatch.setattr(np, "repeat", lambda *a, **kw: calls.append(a) or None)
    q, k, v = rng.standard_normal((8, 5, 4)), rng.standard_normal((2, 7, 4)), rng.standard_normal((2, 7, 3))
    o, lse = R.online_attention(q, k, v, block=3)
    assert not calls and o.shape == (8, 5, 3)
    dq, dk, dv = R.online_attention_grad(q, k, v, o, lse, np.ones_like(o), block=3)
    assert not calls and dk.shape == k.shape and dv.shape == v.shape


def test_query_head_h_reads_kv_head_h_over_group(rng):
    q = rng.standard_normal((6, 3, 4))
    k, v = rng.standard_normal((2, 5, 4)), rng.standard_normal((2, 5, 2))
    o, _ = R.attention(q, k, v)
    for h in range(6):
        np.testing.assert_array_equal(o[h], R.attention(q[h], k[h // 3], v[h // 3])[0])


@pytest.mark.parametrize("shapes,group", [(((4, 2, 8), (2, 3, 8), (2, 3, 5)), 2),
                                          (((4, 2, 8), (4, 3, 8), (4, 3, 5)), 1),
                                          (((4, 2, 8), (1, 3, 8), (1, 3, 5)), 1),  # MQA: broadcast
                                          (((2, 8), (3, 3, 8), (3, 3, 5)), 1),  # q has no heads
                                          (((1, 2, 8), (3, 3, 8), (3, 3, 5)), 1)])  # q broadcast
def test_group_size(shapes, group):
    assert kv_group(*shapes) == group
    check_qkv(*(np.zeros(s) for s in shapes))


@pytest.mark.parametrize("hq,hk,hv,match", [
    (6, 4, 4, "Hkv=4 heads .* must divide q's H=6"),
    (2, 4, 4, "Hkv=4 heads .* must divide q's H=2"),
    (4, 2, 1, "k has 2, v has 1"),
    (4, 4, 2, "k has 4, v has 2"),
])
def test_bad_head_counts_name_both(hq, hk, hv, match):
    q, k, v = np.zeros((hq, 3, 8)), np.zeros((hk, 5, 8)), np.zeros((hv, 5, 2))
    for fn in (lambda: R.attention(q, k, v), lambda: R.online_attention(q, k, v),
               lambda: M.flash_model(q, k, v, "bf16"), lambda: M.standard_model(q, k, v, "fp16"),
               lambda: R.attention_grad(q, k, v, np.zeros((hq, 3, 2)))):
        with pytest.raises(ValueError, match=match):
            fn()


def _outcome(fn, *args, **kwargs):
    """(value, None) or (None, the ValueError's text)."""
    try:
        return fn(*args, **kwargs), None
    except ValueError as err:
        return None, str(err)


@given(h=st.integers(1, 12), hk=st.integers(1, 12), hv=st.integers(1, 12))
def test_one_head_count_rule_on_both_sides(h, hk, hv):
    """validation.head_group is the rule; the torch tensors check, the Triton kernels' check
    and the NumPy shapes check all apply it: the same group, or an error that starts with
    the rule's words (the Triton forward had its own wording before)."""
    import torch

    import flashbench
    from flashbench.inputs.validation import head_group
    from flashbench.kernels import validate

    q, k, v = (torch.zeros(1, n, 4, 16) for n in (h, hk, hv))
    want, words = _outcome(head_group, h, hk, hv)
    got, said = _outcome(validate.kv_group, q, k, v)
    assert got == want and (said or "").startswith(words or "")
    assert (said is None) == (words is None)
    if words is not None:
        with pytest.raises(ValueError) as caught:
            flashbench.triton_attention(q, k, v)
        assert str(caught.value).startswith(words)
    # NumPy: dim -3 holds the heads, and a count of 1 broadcasts
    want, words = _outcome(head_group, h, hk, hv, broadcast=True, where=" (dim -3)")
    got, said = _outcome(kv_group, (h, 3, 8), (hk, 5, 8), (hv, 5, 2))
    assert got == want and (said is None) == (words is None)
    assert (said or "").startswith(words or "")
    if 1 not in (h, hk):  # no broadcasting: the same rule as the torch side
        assert want == _outcome(head_group, h, hk, hv)[0]
