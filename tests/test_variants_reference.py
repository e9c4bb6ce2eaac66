"""The float64 truth of the variants (window, softcap, sinks, packed varlen): streamed ==
one-shot, the degenerate cases equal plain attention exactly, varlen == a loop over its
sequences, the brute-force definition, torch.autograd's gradients, and clear errors."""

import warnings

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from flashbench import reference as R
from flashbench.inputs.variant import Variant, check_cu_seqlens, variant_of
from flashbench.reference.streaming import key_blocks

EXACT = 1e-12
sides = st.integers(-1, 6)


@st.composite
def problems(draw, heads=True):
    """(q, k, v, variant keywords) with GQA heads, Nq != Nk, and any mix of variants."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    hkv = draw(st.sampled_from([1, 2]))
    h = hkv * draw(st.sampled_from([1, 2]))
    nq, nk, d, dv = (draw(st.integers(1, 10)) for _ in range(4))
    q = rng.standard_normal((2, h, nq, d))
    k = rng.standard_normal((2, hkv, nk, d)) * draw(st.sampled_from([1.0, 3.0]))
    v = rng.standard_normal((2, hkv, nk, dv))
    kw = dict(causal=draw(st.booleans()), window=(draw(sides), draw(sides)),
              softcap=draw(st.sampled_from([None, 0.3, 2.0, 30.0])))
    if draw(st.booleans()):
        kw["sinks"] = rng.standard_normal(h) * 2
    return q, k, v, kw


def brute_force(q, k, v, causal=False, window=(-1, -1), softcap=None, sinks=None):
    """The DESIGN contract written out per row, independently of the library (GQA expanded)."""
    h, nq, nk = q.shape[-3], q.shape[-2], k.shape[-2]
    k, v = (np.repeat(x, h // x.shape[-3], axis=-3) for x in (k, v))
    o = np.zeros(q.shape[:-1] + (v.shape[-1],))
    lse = np.full(q.shape[:-1], -np.inf)
    left, right = window
    for b, hh, i in np.ndindex(*q.shape[:-1]):
        lo = -np.inf if left < 0 else i + nk - nq - left
        hi = np.inf if right < 0 else i + nk - nq + right
        if causal:
            hi = min(hi, i + nk - nq)
        keys = [j for j in range(nk) if lo <= j <= hi]
        s = np.array([q[b, hh, i] @ k[b, hh, j] / np.sqrt(q.shape[-1]) for j in keys])
        if softcap is not None:
            s = softcap * np.tanh(s / softcap)
        terms = list(s) + ([sinks[hh]] if sinks is not None else [])
        if not terms:
            continue
        mx = max(terms)
        lse[b, hh, i] = mx + np.log(sum(np.exp(t - mx) for t in terms))
        if keys:
            o[b, hh, i] = np.exp(s - lse[b, hh, i]) @ v[b, hh, keys]
    return o, lse


def assert_close(a, b, tol=EXACT):
    for x, y in zip(a, b, strict=True):
        assert x.shape == y.shape
        np.testing.assert_allclose(x, y, rtol=0, atol=tol)


def assert_same(a, b):
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


@given(problems(), st.integers(1, 12))
def test_streamed_equals_one_shot_and_the_definition(problem, block):
    q, k, v, kw = problem
    one = R.attention(q, k, v, **kw)
    assert_close(R.online_attention(q, k, v, block=block, **kw), one)
    assert_close(brute_force(q, k, v, **kw), one)


@given(problems(), st.integers(1, 12))
def test_streamed_gradients_equal_one_shot(problem, block):
    q, k, v, kw = problem
    o, lse = R.online_attention(q, k, v, block=block, **kw)
    do = np.random.default_rng(block).standard_normal(o.shape)
    one = R.attention_grad(q, k, v, do, **kw)
    streamed = R.online_attention_grad(q, k, v, o, lse, do, block=block, **kw)
    assert len(one) == (4 if "sinks" in kw else 3)
    scale = max(float(np.abs(g).max()) for g in one) + 1
    assert_close(streamed, one, EXACT * scale)


def torch_grads(q, k, v, do, causal=False, window=(-1, -1), softcap=None, sinks=None):
    """Autograd of the contract in torch float64: the sink a score column with no value."""
    tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    g = q.shape[-3] // k.shape[-3]
    s = tq @ tk.repeat_interleave(g, -3).transpose(-1, -2) / np.sqrt(q.shape[-1])
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    hidden = variant_of(causal, window).hidden(q.shape[-2], k.shape[-2])
    if hidden is not None:
        s = s.masked_fill(torch.from_numpy(hidden), float("-inf"))
    leaves = [tq, tk, tv]
    if sinks is not None:
        ts = torch.tensor(sinks, requires_grad=True)
        s = torch.cat([s, ts[:, None, None].expand(*s.shape[:-1], 1)], -1)
        leaves.append(ts)
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)[..., :k.shape[-2]]
    (p @ tv.repeat_interleave(g, -3)).backward(torch.tensor(do))
    return [x.grad.numpy() for x in leaves]


@given(problems())
def test_gradients_equal_torch_autograd_of_the_contract(problem):
    q, k, v, kw = problem
    o, _ = R.attention(q, k, v, **kw)
    do = np.random.default_rng(0).standard_normal(o.shape)
    ours = R.attention_grad(q, k, v, do, **kw)
    theirs = torch_grads(q, k, v, do, **kw)
    assert_close(ours, theirs, 1e-11 * (max(float(np.abs(t).max()) for t in theirs) + 1))


@given(problems(), st.integers(1, 12))
def test_degenerate_variants_equal_plain_attention_exactly(problem, block):
    q, k, v, kw = problem
    causal = kw["causal"]
    nk, nq = k.shape[-2], q.shape[-2]
    plain = R.attention(q, k, v, causal=causal)
    streamed = R.online_attention(q, k, v, block=block, causal=causal)
    wide = (nq + nk, nq + nk)  # a window wider than the problem hides nothing
    for window in ((-1, -1), wide, (-1, nk + nq)):
        assert_same(R.attention(q, k, v, causal=causal, window=window), plain)
        assert_same(R.online_attention(q, k, v, block=block, causal=causal, window=window),
                    streamed)
    no_sink = np.full(q.shape[-3], -np.inf)
    assert_same(R.attention(q, k, v, causal=causal, sinks=no_sink), plain)
    assert_same(R.online_attention(q, k, v, block=block, causal=causal, sinks=no_sink), streamed)
    do = np.ones(plain[0].shape)
    grads = R.attention_grad(q, k, v, do, causal=causal)
    with_sink = R.attention_grad(q, k, v, do, causal=causal, sinks=no_sink)
    assert_same(with_sink[:3], grads)
    assert not with_sink[3].any()
    # window (-1, 0) is the causal mask; softcap -> infinity tends to no cap
    assert_same(R.attention(q, k, v, window=(-1, 0)), R.attention(q, k, v, causal=True))
    assert_close(R.attention(q, k, v, causal=causal, softcap=1e9), plain, 1e-12)


def pack(rng, lens_q, lens_k, h=2, hkv=1, d=4, dv=3):
    cu_q = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32)
    q = rng.standard_normal((cu_q[-1], h, d))
    k = rng.standard_normal((cu_k[-1], hkv, d))
    v = rng.standard_normal((cu_k[-1], hkv, dv))
    return q, k, v, cu_q, cu_k


lengths = st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9)), min_size=1, max_size=4)


@given(lengths, problems(), st.integers(1, 7))
def test_varlen_equals_a_loop_over_its_sequences_exactly(lens, problem, block):
    _, _, _, kw = problem
    rng = np.random.default_rng(len(lens))
    h = 2
    if "sinks" in kw:
        kw["sinks"] = kw["sinks"][:1].repeat(h)
    q, k, v, cu_q, cu_k = pack(rng, *zip(*lens, strict=True), h=h)
    o, lse = R.varlen_attention(q, k, v, cu_q, cu_k, **kw)
    so, slse = R.online_varlen_attention(q, k, v, cu_q, cu_k, block=block, **kw)
    assert o.shape == (q.shape[0], h, 3) and lse.shape == (h, q.shape[0])
    assert_close((so, slse), (o, lse))
    do = rng.standard_normal(o.shape)
    grads = R.varlen_attention_grad(q, k, v, do, cu_q, cu_k, **kw)
    assert_close(R.online_varlen_attention_grad(q, k, v, do, cu_q, cu_k, block=block, **kw),
                 grads, 1e-11)
    dsinks = np.zeros(h)
    for b in range(len(lens)):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        if qs.start == qs.stop:
            continue
        if ks.start == ks.stop:  # no key: O = 0, LSE = -inf or the sink; no gradient
            assert not o[qs].any() and not grads[0][qs].any()
            want = np.asarray(kw.get("sinks", np.full(h, -np.inf)))[:, None]
            np.testing.assert_array_equal(lse[:, qs], np.broadcast_to(want, lse[:, qs].shape))
            continue
        qb, kb, vb, dob = (np.swapaxes(x, 0, 1) for x in (q[qs], k[ks], v[ks], do[qs]))
        ob, lseb = R.attention(qb, kb, vb, **kw)
        np.testing.assert_array_equal(o[qs], np.swapaxes(ob, 0, 1))
        np.testing.assert_array_equal(lse[:, qs], lseb)
        gb = R.attention_grad(qb, kb, vb, dob, **kw)
        np.testing.assert_array_equal(grads[0][qs], np.swapaxes(gb[0], 0, 1))
        np.testing.assert_array_equal(grads[1][ks], np.swapaxes(gb[1], 0, 1))
        if "sinks" in kw:
            dsinks += gb[3]
    if "sinks" in kw:
        np.testing.assert_allclose(grads[3], dsinks, rtol=0, atol=1e-12)


@given(problems())
def test_one_packed_sequence_is_plain_attention_exactly(problem):
    q, k, v, kw = problem
    q, k, v = q[0], k[0], v[0]  # [H, N, d]
    packed = [np.ascontiguousarray(np.swapaxes(x, 0, 1)) for x in (q, k, v)]
    cu_q, cu_k = np.array([0, q.shape[1]]), np.array([0, k.shape[1]])
    o, lse = R.varlen_attention(*packed, cu_q, cu_k, q.shape[1], k.shape[1], **kw)
    one = R.attention(q, k, v, **kw)
    np.testing.assert_array_equal(np.swapaxes(o, 0, 1), one[0])
    np.testing.assert_array_equal(lse, one[1])


def test_rows_that_see_no_key_follow_the_rule_with_and_without_a_sink():
    rng = np.random.default_rng(3)
    q, k, v = rng.standard_normal((1, 2, 6, 4)), rng.standard_normal((1, 2, 3, 4)), \
        rng.standard_normal((1, 2, 3, 4))
    # Nk - Nq = -3: rows 0..2 see no key under window (0, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        o, lse = R.online_attention(q, k, v, block=2, window=(0, 0))
        assert not o[..., :3, :].any() and np.isneginf(lse[..., :3]).all()
        assert np.isfinite(lse[..., 3:]).all()
        sinks = np.array([0.5, -1.0])
        o, lse = R.online_attention(q, k, v, block=2, window=(0, 0), sinks=sinks)
        assert not o[..., :3, :].any()
        np.testing.assert_array_equal(lse[0, :, :3], np.repeat(sinks[:, None], 3, 1))
        do = rng.standard_normal(o.shape)
        dq, dk, dv, dsinks = R.online_attention_grad(q, k, v, o, lse, do, block=2,
                                                     window=(0, 0), sinks=sinks)
        assert not dq[..., :3, :].any() and np.isfinite(dsinks).all()


@pytest.mark.parametrize("nk", [64, 512])
def test_a_window_visits_work_that_grows_with_the_window_not_n(nk):
    """Score entries the streamed forward computes: at most Nq * (left + right + 1 + 2 block)."""
    variant, block = Variant(window=(8, 0)), 8
    area = sum((r1 - r0) * (stop - start)
               for start, stop, (r0, r1) in key_blocks(variant, nk, nk, block))
    assert area <= nk * (8 + 1 + 2 * block)
    assert area < nk * nk / 2 or nk == 64


@pytest.mark.parametrize("kw, err, match", [
    (dict(window=(-2, 0)), ValueError, "window"),
    (dict(window=(1,)), TypeError, "window"),
    (dict(window=(1.5, 0)), TypeError, "left"),
    (dict(window="ab"), TypeError, "window"),
    (dict(softcap=0.0), ValueError, "softcap"),
    (dict(softcap=-1.0), ValueError, "softcap"),
    (dict(softcap=float("nan")), ValueError, "softcap"),
    (dict(softcap=float("inf")), ValueError, "softcap"),
    (dict(softcap=True), TypeError, "softcap"),
    (dict(sinks=np.zeros(3)), ValueError, r"sinks must have shape \[H\] = \(2,\)"),
    (dict(sinks=np.zeros((2, 1))), ValueError, "sinks"),
    (dict(sinks=np.zeros(2, dtype=np.int64)), TypeError, "sinks"),
    (dict(sinks=np.array([0.0, np.nan])), ValueError, "sinks"),
    (dict(sinks=np.array([0.0, np.inf])), ValueError, "sinks"),
])
def test_bad_variants_are_clear_errors(kw, err, match):
    q = np.zeros((1, 2, 3, 4))
    for fn in (R.attention, R.online_attention):
        with pytest.raises(err, match=match):
            fn(q, q, q, **kw)
    with pytest.raises(err, match=match):
        R.attention_grad(q, q, q, q, **kw)


@pytest.mark.parametrize("cu, max_seqlen, err, match", [
    ([1, 3, 5], None, ValueError, "start at 0"),
    ([0, 3, 2, 5], None, ValueError, "non-decreasing"),
    ([0, 3, 4], None, ValueError, "end at the packed length 5"),
    ([0.0, 5.0], None, TypeError, "int array"),
    ([[0, 5]], None, ValueError, r"\[B \+ 1\]"),
    ([0, 2, 5], 2, ValueError, "smaller than its longest sequence"),
    ([0, 2, 5], 2.5, TypeError, "max_seqlen"),
])
def test_bad_cu_seqlens_are_clear_errors(cu, max_seqlen, err, match):
    with pytest.raises(err, match=match):
        check_cu_seqlens(np.array(cu), "cu_seqlens_q", 5, max_seqlen)
    q = np.zeros((5, 1, 4))
    with pytest.raises(err, match=match):
        R.varlen_attention(q, q, q, np.array(cu), np.array([0, 2, 5]), max_seqlen_q=max_seqlen)


def test_varlen_shape_errors_and_empty_sequences():
    q = np.zeros((5, 2, 4))
    with pytest.raises(ValueError, match=r"packed shape \[total_q, H, d\]"):
        R.varlen_attention(q[None], q, q, [0, 5], [0, 5])
    with pytest.raises(ValueError, match="same number of sequences"):
        R.varlen_attention(q, q, q, [0, 5], [0, 2, 5])
    with pytest.raises(ValueError, match="sinks"):  # checked even where no sequence has keys
        R.varlen_attention(q, q[:0], q[:0], [0, 5], [0, 0], sinks=np.zeros(3))
    o, lse = R.varlen_attention(q, q[:0], q[:0], [0, 0, 5], [0, 0, 0])
    assert not o.any() and np.isneginf(lse).all()


def test_variant_is_hashable_data_with_a_label():
    a = variant_of(True, (128, 0), 30.0, np.array([0.0, 1.0]))
    assert a == Variant(True, (128, 0), 30, (0.0, 1.0)) and hash(a) == hash(a)
    assert a.label() == "causal window=(128,0) softcap=30 sinks"
    assert Variant().label() == "full" and Variant().plain and not Variant().masked
    assert Variant(causal=True, window=(4, 3)).right == 0
    assert Variant(window=(2, 1)).visible_pairs(5, 5) == 4 * 5 - 1 - 3
