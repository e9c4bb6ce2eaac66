"""The float64 truth of decode: merge_states, split-KV, paged caches, ragged lengths."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashbench import reference as R
from flashbench.inputs.kvcache import make_decode, split_bounds
from flashbench.reference.decode import sequence_cache

TOL = 1e-12


def brute_force(q, k_cache, v_cache, lens, table, causal, scale=None):
    """Row by row from the definition: softmax over the keys query i of sequence b sees."""
    B, nq, H, d = q.shape
    hkv = k_cache.shape[2]
    scale = 1 / np.sqrt(d) if scale is None else scale
    o = np.zeros((B, nq, H, v_cache.shape[-1]))
    lse = np.full((B, H, nq), -np.inf)
    for b in range(B):
        n = int(lens[b])
        k = sequence_cache(k_cache, b, n, table)
        v = sequence_cache(v_cache, b, n, table)
        for h in range(H):
            g = h // (H // hkv)
            for i in range(nq):
                seen = n if not causal else n - nq + i + 1
                if seen <= 0:
                    continue
                s = k[:seen, g] @ q[b, i, h] * scale
                lse[b, h, i] = np.log(np.sum(np.exp(s - s.max()))) + s.max()
                o[b, i, h] = np.exp(s - lse[b, h, i]) @ v[:seen, g]
    return o, lse


def close(a, b, tol=TOL):
    (oa, la), (ob, lb) = a, b
    assert np.array_equal(np.isneginf(la), np.isneginf(lb))
    fin = np.isfinite(lb)
    assert np.abs(oa - ob).max(initial=0) <= tol
    assert np.abs(la[fin] - lb[fin]).max(initial=0) <= tol


@st.composite
def decode_problem(draw, paged=True):
    hkv = draw(st.sampled_from([1, 2]))
    group = draw(st.sampled_from([1, 2, 4, 8]))
    nq = draw(st.integers(1, 16))
    causal = draw(st.booleans())
    B = draw(st.integers(1, 3))
    lo = nq if causal else 0
    lens = draw(st.lists(st.integers(lo, 300), min_size=B, max_size=B))
    page = draw(st.sampled_from([16, 32, 64, 128, 256])) if paged else None
    d = draw(st.sampled_from([8, 16]))
    seed = draw(st.integers(0, 2**16))
    q, k, v, lens, table = make_decode(B, hkv * group, hkv, nq, d, lens, page, seed=seed)
    return q, k, v, lens, table, causal


@given(decode_problem(), st.integers(1, 40))
def test_split_kv_merged_equals_one_shot_for_any_split(problem, splits):
    q, k, v, lens, table, causal = problem
    one = R.decode_attention(q, k, v, lens, table, causal=causal)
    close(R.decode_attention(q, k, v, lens, table, causal=causal, num_splits=splits), one)
    close(one, brute_force(q, k, v, lens, table, causal))


@given(decode_problem(), st.lists(st.integers(0, 300), min_size=0, max_size=8))
def test_any_chunk_boundaries_merge_to_one_shot(problem, cuts):
    """Arbitrary chunks, including empty ones and ones past a short sequence's end."""
    q, k, v, lens, table, causal = problem
    edges = sorted({0, int(lens.max()), *[c for c in cuts if c <= lens.max()]})
    bounds = list(zip(edges[:-1], edges[1:], strict=True)) + [(int(lens.max()),) * 2]
    o_p, lse_p = R.decode_partials(q, k, v, lens, table, causal=causal, bounds=bounds)
    o, lse = R.merge_states(o_p, lse_p)
    close((o.transpose(0, 2, 1, 3), lse), R.decode_attention(q, k, v, lens, table, causal=causal))


@given(decode_problem())
def test_paged_equals_contiguous_exactly(problem):
    q, k, v, lens, table, causal = problem
    cap = max(int(lens.max()), 1)
    kc = np.zeros((len(lens), cap) + k.shape[2:])
    vc = np.zeros((len(lens), cap) + v.shape[2:])
    for b, n in enumerate(lens):
        kc[b, :n] = sequence_cache(k, b, n, table)
        vc[b, :n] = sequence_cache(v, b, n, table)
    for splits in (1, 3):
        paged = R.decode_attention(q, k, v, lens, table, causal=causal, num_splits=splits)
        flat = R.decode_attention(q, kc, vc, lens, None, causal=causal, num_splits=splits)
        assert np.array_equal(paged[0], flat[0]) and np.array_equal(paged[1], flat[1])


def test_pages_shared_between_sequences_and_scattered():
    q, k, v, _, _ = make_decode(3, 4, 2, 2, 16, [40, 40, 40], 16, seed=3)
    # sequences 0 and 1 share their first two pages (a common prompt), in another order of
    # the pool; sequence 2 reads pages in reverse pool order
    table = np.array([[5, 0, 2], [5, 0, 7], [7, 3, 1]])
    lens = np.array([40, 36, 33])
    o, lse = R.decode_attention(q, k, v, lens, table, causal=True, num_splits=4)
    close((o, lse), brute_force(q, k, v, lens, table, True))
    # the shared prefix: sequence 1 at length 32 reads exactly sequence 0's first 32 keys
    q1 = q.copy()
    q1[1] = q1[0]
    o2, lse2 = R.decode_attention(q1, k, v, np.array([32, 32, 33]), table, causal=True)
    assert np.array_equal(o2[0], o2[1]) and np.array_equal(lse2[0], lse2[1])


@given(st.integers(1, 6), st.integers(1, 5), st.integers(0, 2**16))
def test_merge_states_is_associative_and_order_free(S, rows, seed):
    rng = np.random.default_rng(seed)
    o = rng.standard_normal((S, 2, rows, 3))
    lse = rng.standard_normal((S, 2, rows)) * 5
    lse[rng.random(lse.shape) < 0.3] = -np.inf
    whole = R.merge_states(o, lse)
    perm = rng.permutation(S)
    close(R.merge_states(o[perm], lse[perm]), whole, 1e-13)
    cut = S // 2
    if 0 < cut < S:
        a, b = R.merge_states(o[:cut], lse[:cut]), R.merge_states(o[cut:], lse[cut:])
        close(R.merge_states(np.stack([a[0], b[0]]), np.stack([a[1], b[1]])), whole, 1e-13)


def test_merge_states_blind_chunks_contribute_nothing():
    o = np.array([[[[1.0, 2.0]]], [[[np.nan, np.inf]]]])  # chunk 1 sees no key: O unread
    lse = np.array([[[0.5]], [[-np.inf]]])
    out, l = R.merge_states(o, lse)
    assert np.array_equal(out, o[0]) and l[0, 0] == 0.5
    out, l = R.merge_states(o[1:], lse[1:])
    assert np.array_equal(out, np.zeros((1, 1, 2))) and np.isneginf(l).all()


def test_merge_states_two_equal_halves():
    o = np.ones((2, 1, 1, 4))
    o[1] *= 3
    out, lse = R.merge_states(o, np.log(np.array([[[1.0]], [[3.0]]])))
    assert np.allclose(out, 2.5, atol=1e-15) and np.isclose(lse[0, 0], np.log(4.0), atol=1e-15)


def test_merge_states_bad_input():
    with pytest.raises(ValueError, match="lse_parts must have o_parts' shape"):
        R.merge_states(np.zeros((2, 3, 4)), np.zeros((2, 4)))
    with pytest.raises(ValueError, match="NaN or \\+inf"):
        R.merge_states(np.zeros((2, 3, 4)), np.array([[0, np.nan, 0], [0, 0, 0]]))
    with pytest.raises(ValueError, match="whose LSE is finite"):
        R.merge_states(np.full((1, 1, 1), np.nan), np.zeros((1, 1)))
    with pytest.raises(ValueError, match="at least 3-D"):
        R.merge_states(np.zeros((2, 4)), np.zeros(2))


def test_split_bounds_cover_and_align():
    assert split_bounds(10, 3) == [(0, 4), (4, 8), (8, 10)]
    assert split_bounds(10, 3, align=8) == [(0, 8), (8, 10), (10, 10)]
    assert split_bounds(2, 4) == [(0, 1), (1, 2), (2, 2), (2, 2)]


def test_zero_length_sequence_without_causal_sees_nothing():
    q, k, v, _, table = make_decode(2, 2, 1, 3, 8, [20, 20], 16)
    o, lse = R.decode_attention(q, k, v, np.array([0, 20]), table, num_splits=3)
    assert np.array_equal(o[0], np.zeros_like(o[0])) and np.isneginf(lse[0]).all()
    assert np.isfinite(lse[1]).all()


@pytest.mark.parametrize("change, match", [
    (lambda a: a.update(table=np.array([[0, -1], [1, 2]])), r"block_table\[0, 1\] = -1"),
    (lambda a: a.update(table=np.array([[0, 9], [1, 2]])), r"block_table\[0, 1\] = 9 .*\[0, 5\)"),
    (lambda a: a.update(lens=np.array([33, 20])), r"cache_seqlens\[0\] = 33 is longer than "
     r"its pages hold: 32"),
    (lambda a: a.update(lens=np.array([30, 3])), r"cache_seqlens\[1\] = 3 is shorter than Nq = 4"),
    (lambda a: a.update(lens=np.array([30, -1]), causal=False), r"cache_seqlens\[1\] = -1 is "
     "negative"),
    (lambda a: a.update(splits=0), "num_splits must be >= 1"),
    (lambda a: a.update(lens=np.array([3.0, 4.0])), "cache_seqlens must hold integers"),
    (lambda a: a.update(table=np.zeros((3, 2), dtype=int)), r"block_table must be \[B, max_pages"),
])
def test_bad_decode_input_is_a_clear_error(change, match):
    q, k, v, _, _ = make_decode(2, 4, 2, 4, 8, [32, 32], 16, spare_pages=1)
    args = {"table": np.array([[0, 1], [2, 3]]), "lens": np.array([30, 20]), "causal": True,
            "splits": 2}
    change(args)
    with pytest.raises((ValueError, TypeError), match=match):
        R.decode_attention(q, k, v, args["lens"], args["table"], causal=args["causal"],
                           num_splits=args["splits"])


def test_heads_must_group():
    _, k, v, lens, table = make_decode(1, 4, 4, 1, 8, [10], 16)
    q = np.zeros((1, 1, 6, 8))
    with pytest.raises(ValueError, match="Hkv=4 heads .*must divide q's H=6"):
        R.decode_attention(q, k, v, lens, table)
