"""The float64 reference: streamed == one-shot, LSE, masks, warnings-free edge rows."""

import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashbench import reference as R
from flashbench.reference.streaming import causal_mask

EXACT = 1e-12


def brute_force(q, k, v, causal=False, scale=None):
    """Per-row loop, written independently of the library: (o, lse) in float64."""
    nq, d = q.shape[-2:]
    nk = k.shape[-2]
    scale = 1 / np.sqrt(d) if scale is None else scale
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    q, k, v = (np.broadcast_to(x, batch + x.shape[-2:]) for x in (q, k, v))
    o = np.zeros(batch + (nq, v.shape[-1]))
    lse = np.full(batch + (nq,), -np.inf)
    for idx in np.ndindex(*batch):
        for i in range(nq):
            keys = [j for j in range(nk) if not causal or j <= i + nk - nq]
            if not keys:
                continue
            s = np.array([q[idx][i] @ k[idx][j] * scale for j in keys])
            mx = s.max()
            w = np.exp(s - mx)
            lse[idx][i] = mx + np.log(w.sum())
            o[idx][i] = (w / w.sum()) @ v[idx][keys]
    return o, lse


dims = st.integers(1, 9)


@given(nq=st.integers(1, 40), nk=st.integers(1, 40), d=dims, dv=dims, block=st.integers(1, 50),
       causal=st.booleans(), seed=st.integers(0, 2**16), batch=st.sampled_from([(), (2,), (2, 3)]))
def test_streamed_equals_one_shot(nq, nk, d, dv, block, causal, seed, batch):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal(batch + (nq, d)) * 3
    k = rng.standard_normal(batch + (nk, d)) * 3
    v = rng.standard_normal(batch + (nk, dv))
    o1, l1 = R.attention(q, k, v, causal=causal)
    o2, l2 = R.online_attention(q, k, v, block=block, causal=causal)
    assert o1.shape == o2.shape == batch + (nq, dv)
    assert l1.shape == l2.shape == batch + (nq,)
    np.testing.assert_array_equal(np.isneginf(l1), np.isneginf(l2))
    assert np.abs(o1 - o2).max() <= EXACT
    fin = np.isfinite(l1)
    if fin.any():
        assert np.abs(l1[fin] - l2[fin]).max() <= EXACT


@given(nq=st.integers(1, 12), nk=st.integers(1, 12), causal=st.booleans(), seed=st.integers(0, 999))
def test_matches_brute_force_including_lse(nq, nk, causal, seed):
    rng = np.random.default_rng(seed)
    q, k, v = rng.standard_normal((2, nq, 5)), rng.standard_normal((2, nk, 5)), rng.standard_normal((2, nk, 3))
    o, lse = R.attention(q, k, v, causal=causal, scale=0.7)
    bo, blse = brute_force(q, k, v, causal=causal, scale=0.7)
    np.testing.assert_allclose(o, bo, rtol=0, atol=1e-13)
    assert not np.isnan(lse).any() and not np.isnan(o).any()
    np.testing.assert_allclose(lse, blse, rtol=0, atol=1e-13)


def test_lse_is_log_sum_exp_of_scaled_masked_scores(rng):
    q, k, v = rng.standard_normal((6, 8)), rng.standard_normal((10, 8)), rng.standard_normal((10, 4))
    _, lse = R.online_attention(q, k, v, block=3, causal=True, scale=0.25)
    s = q @ k.T * 0.25
    s[causal_mask(6, 10)] = -np.inf
    expected = np.log(np.exp(s).sum(axis=-1))  # natural log, not base 2
    np.testing.assert_allclose(lse, expected, rtol=1e-14)


@pytest.mark.parametrize("nq,nk,blind", [(5, 5, 0), (3, 7, 0), (7, 3, 4), (9, 1, 8)])
def test_causal_is_bottom_right_aligned(nq, nk, blind, rng):
    q, k, v = rng.standard_normal((nq, 4)), rng.standard_normal((nk, 4)), rng.standard_normal((nk, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no divide-by-zero or invalid-value warnings
        o, lse = R.attention(q, k, v, causal=True)
        o2, lse2 = R.online_attention(q, k, v, block=2, causal=True)
    # exactly the first `blind` rows see no key: O = 0, LSE = -inf
    assert np.isneginf(lse).sum() == blind == np.isneginf(lse2).sum()
    assert np.all(o[:blind] == 0) and np.all(o2[:blind] == 0)
    # the last query row sees every key: equals non-causal attention for that row
    o_full, lse_full = R.attention(q, k, v)
    np.testing.assert_allclose(o[-1], o_full[-1], atol=1e-15)
    np.testing.assert_allclose(lse[-1], lse_full[-1], atol=1e-15)
    if nq == nk:  # lower triangle: row 0 sees key 0 only
        np.testing.assert_allclose(o[0], v[0], atol=1e-15)


@given(n=st.integers(1, 70), block=st.integers(1, 80), rows=st.integers(1, 4), seed=st.integers(0, 999),
       masked=st.booleans())
def test_online_softmax_equals_softmax(n, block, rows, seed, masked):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, n)) * 10
    if masked:
        x[rng.random(x.shape) < 0.3] = -np.inf
        x[0] = -np.inf  # a fully masked row
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p1, p2 = R.softmax(x), R.online_softmax(x, block)
    assert np.abs(p1 - p2).max() <= EXACT
    sums = p1.sum(axis=-1)
    full = ~np.all(np.isneginf(x), axis=-1)
    np.testing.assert_allclose(sums[full], 1.0, atol=1e-13)
    assert np.all(p1[~full] == 0)


def test_softmax_is_shift_invariant_and_stable(rng):
    x = rng.standard_normal((3, 50))
    np.testing.assert_allclose(R.softmax(x + 1000.0), R.softmax(x), atol=1e-15)
    y = x + 1000.0
    m, l = R.row_stats(y, 7)
    np.testing.assert_array_equal(m, y.max(-1))
    np.testing.assert_allclose(l, np.exp(y - y.max(-1, keepdims=True)).sum(-1), rtol=1e-14)


def test_inputs_of_any_real_dtype_compute_in_float64(rng):
    q = rng.standard_normal((4, 8)).astype(np.float32)
    o, lse = R.attention(q, q, q)
    assert o.dtype == np.float64 and lse.dtype == np.float64
    o2, _ = R.attention(q.astype(np.float64), q.astype(np.float64), q.astype(np.float64))
    np.testing.assert_array_equal(o, o2)


def test_block_larger_than_n_and_block_one_agree(rng):
    q, k, v = rng.standard_normal((2, 33, 16)), rng.standard_normal((2, 45, 16)), rng.standard_normal((2, 45, 8))
    a = R.online_attention(q, k, v, block=1)
    b = R.online_attention(q, k, v, block=1000)
    c = R.attention(q, k, v)
    for x in (a, b):
        assert np.abs(x[0] - c[0]).max() <= EXACT and np.abs(x[1] - c[1]).max() <= EXACT


def test_streamed_never_holds_more_than_one_score_tile(monkeypatch, rng):
    """Every matmul the streamed path makes produces at most [.., Nq, block] scores."""
    import flashbench.reference.streaming as S

    shapes = []
    real = np.matmul

    def spy(a, b, *args, **kw):
        out = real(a, b, *args, **kw)
        shapes.append(out.shape)
        return out

    monkeypatch.setattr(S.np, "matmul", spy)
    q, k, v = rng.standard_normal((2, 50, 8)), rng.standard_normal((2, 300, 8)), rng.standard_normal((2, 300, 8))
    S.stream_attention(q, k, v, block=32, causal=False, scale=0.3)
    monkeypatch.undo()
    assert shapes and max(int(np.prod(s)) for s in shapes) <= 2 * 50 * 32


@given(st.integers(2, 12), st.integers(1, 5), st.integers(0, 2**32 - 1))
def test_a_masked_key_never_reaches_the_rows_it_is_hidden_from(n, block, seed):
    """An inf key hidden by the causal mask leaves earlier rows finite and equal, streamed
    or not (adding -inf to an inf score would make them NaN)."""
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((1, 2, n, 4)) for _ in range(3))
    k[..., -1, :] = np.inf  # only the last query sees the last key
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # inf * x in the last row
        o1, lse1 = R.attention(q, k, v, causal=True)
        o2, lse2 = R.online_attention(q, k, v, block=block, causal=True)
    assert np.isfinite(o2[..., :-1, :]).all() and np.isfinite(lse2[..., :-1]).all()
    np.testing.assert_allclose(o2[..., :-1, :], o1[..., :-1, :], rtol=0, atol=1e-12)
    np.testing.assert_allclose(lse2[..., :-1], lse1[..., :-1], rtol=0, atol=1e-12)
