"""The float64 backward: streamed == one-shot, equal to torch.autograd, blind rows and keys."""

import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashbench import reference as R

EXACT = 1e-12


def rel_diffs(grads, refs):
    """max |a - b| of each gradient relative to the gradients' scale: the largest magnitude
    among the reference's dq, dk, dv (a gradient that is 0 in exact arithmetic, dq of a
    row that sees one key, comes out as rounding noise of its terms' size)."""
    scale = max(float(np.abs(r).max()) for r in refs)
    return [float(np.abs(a - b).max()) / max(scale, 1e-300) for a, b in zip(grads, refs, strict=True)]


def grads_both_ways(q, k, v, do, block, causal, scale=None):
    o, lse = R.online_attention(q, k, v, block=block, causal=causal, scale=scale)
    one = R.attention_grad(q, k, v, do, causal=causal, scale=scale)
    streamed = R.online_attention_grad(q, k, v, o, lse, do, block=block, causal=causal,
                                       scale=scale)
    return one, streamed


@given(nq=st.integers(1, 40), nk=st.integers(1, 40), d=st.integers(1, 9), dv=st.integers(1, 9),
       block=st.integers(1, 50), causal=st.booleans(), seed=st.integers(0, 2**16),
       batch=st.sampled_from([(), (2,), (2, 3)]))
def test_streamed_equals_one_shot(nq, nk, d, dv, block, causal, seed, batch):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal(batch + (nq, d)) * 3
    k = rng.standard_normal(batch + (nk, d)) * 3
    v = rng.standard_normal(batch + (nk, dv))
    do = rng.standard_normal(batch + (nq, dv))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no invalid-value or divide warnings, blind rows included
        one, streamed = grads_both_ways(q, k, v, do, block, causal)
    for a, b, x in zip(streamed, one, (q, k, v), strict=True):
        assert a.shape == b.shape == x.shape and a.dtype == np.float64
        assert np.isfinite(a).all()
    assert max(rel_diffs(streamed, one)) <= EXACT


@given(nq=st.integers(1, 12), nk=st.integers(1, 12), causal=st.booleans(),
       seed=st.integers(0, 2**16), scale=st.sampled_from([None, 0.3, 2.0]),
       shapes=st.sampled_from([((2, 3), (2, 3), (2, 3)),  # plain
                               ((2, 3), (1, 3), (2, 3)),  # k broadcast over the batch, v not
                               ((3,), (2, 1), (2, 1)),  # q broadcast over a batch of k, v
                               ((1, 4), (1, 2), (1, 2)),  # grouped-query, G = 2
                               ((2, 4), (2, 1), (2, 1))]))  # multi-query
def test_float64_gradients_equal_torch_autograd(nq, nk, causal, seed, scale, shapes):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(seed)
    bq, bk, bv = shapes
    q, k = rng.standard_normal(bq + (nq, 5)) * 2, rng.standard_normal(bk + (nk, 5)) * 2
    v = rng.standard_normal(bv + (nk, 3))
    o, lse = R.attention(q, k, v, causal=causal, scale=scale)
    do = rng.standard_normal(o.shape)
    tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    group = q.shape[-3] // k.shape[-3] if k.shape[-3] not in (1, q.shape[-3]) else 1
    ek, ev = (t.repeat_interleave(group, dim=-3) for t in (tk, tv))  # the expanded computation
    s = tq @ ek.transpose(-1, -2) * (1 / np.sqrt(5) if scale is None else scale)
    if causal:  # bottom-right aligned
        s = s.masked_fill(torch.arange(nk)[None, :] > torch.arange(nq)[:, None] + nk - nq,
                          float("-inf"))
    p = torch.nan_to_num(torch.softmax(s, dim=-1))  # rows that see no key: P = 0
    (p @ ev).backward(torch.from_numpy(do))
    for block in (1, 4):
        grads = R.online_attention_grad(q, k, v, o, lse, do, block=block, causal=causal,
                                        scale=scale)
        for g, t in zip(grads, (tq, tk, tv), strict=True):
            assert g.shape == tuple(t.shape)
            np.testing.assert_allclose(g, t.grad.numpy(), rtol=0,
                                       atol=1e-12 * max(1.0, np.abs(t.grad.numpy()).max()))
    for g, t in zip(R.attention_grad(q, k, v, do, causal=causal, scale=scale), (tq, tk, tv), strict=True):
        np.testing.assert_allclose(g, t.grad.numpy(), rtol=0,
                                   atol=1e-12 * max(1.0, np.abs(t.grad.numpy()).max()))


@pytest.mark.parametrize("nq,nk,blind", [(7, 3, 4), (9, 1, 8), (5, 5, 0), (3, 7, 0)])
def test_rows_that_see_no_key_get_zero_dq_and_nothing_is_nan(nq, nk, blind, rng):
    q, k, v = rng.standard_normal((2, nq, 4)), rng.standard_normal((2, nk, 4)), rng.standard_normal((2, nk, 2))
    do = rng.standard_normal((2, nq, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no 0 * inf or -inf - -inf on the way
        one, streamed = grads_both_ways(q, k, v, do, block=2, causal=True)
    for dq, dk, dv in (one, streamed):
        assert np.all(dq[:, :blind] == 0)
        assert np.all(dq[:, blind + 1:] != 0)  # rows that see two keys or more
        assert np.isfinite(dq).all() and np.isfinite(dk).all() and np.isfinite(dv).all()


def test_a_key_seen_by_one_row_gets_that_rows_gradient(rng):
    """Causal, Nq = Nk: the last key is seen by the last row only, so dv[-1] = P[-1, -1] dO[-1]
    (and under bottom-right alignment every key is seen by the last row: no key is unseen)."""
    q, k, v = rng.standard_normal((4, 4)), rng.standard_normal((4, 4)), rng.standard_normal((4, 2))
    do = rng.standard_normal((4, 2))
    o, lse = R.attention(q, k, v, causal=True)
    dq, dk, dv = R.online_attention_grad(q, k, v, o, lse, do, block=1, causal=True)
    p33 = np.exp(q[3] @ k[3] / 2 - lse[3])
    np.testing.assert_allclose(dv[3], p33 * do[3], rtol=1e-14)
    assert np.all(dk != 0) and np.all(dv != 0)


def test_an_inf_key_does_not_reach_the_rows_it_is_hidden_from(rng):
    """Streamed with block = 1, an inf key hidden from the earlier rows leaves their dq
    finite and equal to the problem without that key (the one-shot dS @ K multiplies
    their zero dS by inf: NaN everywhere)."""
    q, k, v = (rng.standard_normal((1, 2, 6, 4)) for _ in range(3))
    k[..., -1, :] = np.inf
    do = rng.standard_normal((1, 2, 6, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        o, lse = R.online_attention(q, k, v, block=1, causal=True)
        dq, dk, dv = R.online_attention_grad(q, k, v, o, lse, do, block=1, causal=True)
    first = R.attention_grad(q[..., :5, :], k[..., :5, :], v[..., :5, :], do[..., :5, :],
                             causal=True)
    assert np.isfinite(dq[..., :5, :]).all()
    np.testing.assert_allclose(dq[..., :5, :], first[0], rtol=0, atol=1e-12)


def test_streamed_backward_holds_only_block_tiles(monkeypatch, rng):
    """Every matmul the streamed backward makes has at most Nq x block (or block x d) entries
    per batch element: no [Nq, Nk] score matrix."""
    import flashbench.reference.streaming as S
    import flashbench.reference.streaming_bwd as SB

    shapes = []
    real = np.matmul

    def spy(a, b, *args, **kw):
        out = real(a, b, *args, **kw)
        shapes.append(out.shape)
        return out

    monkeypatch.setattr(S.np, "matmul", spy)
    assert SB.np is S.np  # one numpy module: the spy sees both files' matmuls
    q, k, v = rng.standard_normal((2, 50, 8)), rng.standard_normal((2, 300, 8)), rng.standard_normal((2, 300, 8))
    o, lse = R.online_attention(q, k, v, block=32)
    shapes.clear()
    do = rng.standard_normal(o.shape)
    SB.stream_attention_grad(q, k, v, o, lse, do, block=32, causal=False, scale=0.3)
    monkeypatch.undo()
    assert shapes and max(int(np.prod(s)) for s in shapes) <= 2 * 50 * 32


def test_default_scale_is_one_over_sqrt_d(rng):
    q, k, v = rng.standard_normal((5, 16)), rng.standard_normal((7, 16)), rng.standard_normal((7, 3))
    do = rng.standard_normal((5, 3))
    a = R.attention_grad(q, k, v, do)
    b = R.attention_grad(q, k, v, do, scale=0.25)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
