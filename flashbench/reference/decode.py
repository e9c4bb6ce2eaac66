"""The float64 truth of decode: attention over a KV cache, contiguous or paged, split-KV.

Layouts and the causal rule are those of :mod:`flashbench.inputs.kvcache`
(FlashAttention's ``flash_attn_with_kvcache``): q [B, Nq, H, d], caches with
``cache_seqlens`` and, paged, a ``block_table``; o [B, Nq, H, dv], lse [B, H, Nq].

Split-KV: the keys ``[0, max(cache_seqlens))`` are cut into ``num_splits`` chunks
(:func:`flashbench.inputs.kvcache.split_bounds`); each chunk gives a partial (O_s, LSE_s)
of the softmax over its keys alone, and :func:`merge_states` combines them:
``LSE = logsumexp_s LSE_s``, ``O = sum_s exp(LSE_s - LSE) O_s``. That is the lecture's
(m, l) recurrence applied to whole chunks (``m = max_s LSE_s``, ``l = sum_s
exp(LSE_s - m)``), exact in float64. A chunk that sees no key (past a short sequence's
end, or above the causal diagonal) has O_s = 0, LSE_s = -inf and contributes nothing.
"""

from __future__ import annotations

import numpy as np

from flashbench.inputs.kvcache import (
    check_block_table,
    check_cache,
    check_seqlens,
    check_splits,
    split_bounds,
    value_cache,
)
from flashbench.inputs.validation import as_float_array, check_scale, split_heads
from flashbench.reference.products import matmul
from flashbench.reference.streaming import finish, masked_scores, safe_max

__all__ = ["merge_states", "merge", "decode_attention", "decode_partials", "sequence_cache",
           "check_decode"]


def merge(o_parts: np.ndarray, lse_parts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`merge_states` without checks, in the arrays' own dtype (float64 here, float32
    in the precision models): ``m = max_s LSE_s``; weights ``exp(LSE_s - m)`` (0 for a
    -inf chunk, whose O_s is never read); ``l`` their sum; O their weighted mean."""
    m = lse_parts.max(axis=0)
    w = np.exp(lse_parts - safe_max(m))
    l = w.sum(axis=0)
    o = np.where(np.isneginf(lse_parts)[..., None], np.zeros((), o_parts.dtype), o_parts)
    return finish(np.einsum("s...,s...d->...d", w, o), m, l)


def merge_states(o_parts, lse_parts) -> tuple[np.ndarray, np.ndarray]:
    """Merge the partial attention states of key chunks stacked on axis 0, in float64.

    Args:
        o_parts: [S, ..., Nq, dv], each chunk's softmax-normalised output over its keys.
        lse_parts: [S, ..., Nq], each chunk's natural-log LSE; -inf for a chunk that sees
            no key (its O_s is not read). NaN or +inf is a ValueError.

    Returns:
        (o, lse): o [..., Nq, dv] and lse [..., Nq], float64; all chunks -inf gives
        O = 0 and LSE = -inf.
    """
    o_parts = as_float_array(o_parts, "o_parts")
    lse_parts = as_float_array(lse_parts, "lse_parts")
    if o_parts.ndim < 3 or 0 in o_parts.shape:
        raise ValueError(f"o_parts must be [S, ..., Nq, dv] (at least 3-D, no empty dim), got "
                         f"shape {o_parts.shape}")
    if lse_parts.shape != o_parts.shape[:-1]:
        raise ValueError(f"lse_parts must have o_parts' shape without its last dim "
                         f"{o_parts.shape[:-1]}, got {lse_parts.shape}")
    bad = np.isnan(lse_parts) | np.isposinf(lse_parts)
    if bad.any():
        raise ValueError(f"lse_parts holds {int(bad.sum())} NaN or +inf value(s); a chunk's LSE "
                         f"is finite, or -inf when it sees no key")
    seen = np.isfinite(lse_parts)[..., None]
    if not np.isfinite(o_parts[np.broadcast_to(seen, o_parts.shape)]).all():
        raise ValueError("o_parts holds inf or NaN in a chunk whose LSE is finite")
    return merge(o_parts, lse_parts)


def sequence_cache(cache: np.ndarray, b: int, length: int, block_table=None) -> np.ndarray:
    """Sequence ``b``'s first ``length`` cached rows [length, Hkv, *], contiguous or
    gathered through ``block_table`` (pages of ``cache.shape[1]`` rows); no checks."""
    if block_table is None:
        return cache[b, :length]
    page = cache.shape[1]
    pages = np.asarray(block_table)[b, : -(-length // page)]
    return cache[pages].reshape(-1, *cache.shape[2:])[:length]


def check_decode(q, k_cache, v_cache, cache_seqlens, block_table, causal, scale, dv=None):
    """The checked arguments of a NumPy decode call: (q, k_cache, v_cache as float64,
    cache_seqlens, block_table as int64, the :class:`~flashbench.inputs.kvcache.CacheLayout`,
    the scale). ``v_cache`` None with ``dv``: the absorbed MLA form, V = k_cache[..., :dv]
    (:func:`flashbench.inputs.kvcache.value_cache`)."""
    q = as_float_array(q, "q")
    k_cache = as_float_array(k_cache, "k_cache")
    v_cache, _ = value_cache(k_cache, None if v_cache is None else
                             as_float_array(v_cache, "v_cache"), dv)
    layout = check_cache(q.shape, k_cache.shape, v_cache.shape,
                         None if block_table is None else np.shape(block_table))
    lens = check_seqlens(cache_seqlens, layout, causal)
    if block_table is not None:
        block_table = check_block_table(block_table, layout, lens)
    return q, k_cache, v_cache, lens, block_table, layout, check_scale(scale, layout.d)


def _partials(q, k_cache, v_cache, lens, table, layout, bounds, causal, scale):
    """(o_parts [S, B, H, Nq, dv], lse_parts [S, B, H, Nq]) for the key ranges ``bounds``."""
    S, B, H, nq, dv = len(bounds), layout.B, layout.H, layout.Nq, layout.dv
    o_parts = np.zeros((S, B, H, nq, dv))
    lse_parts = np.full((S, B, H, nq), -np.inf)
    for b in range(B):
        n = int(lens[b])
        if n == 0:
            continue
        k = sequence_cache(k_cache, b, n, table).transpose(1, 0, 2)[:, None]  # [Hkv, 1, n, d]
        v = sequence_cache(v_cache, b, n, table).transpose(1, 0, 2)[:, None]
        qb = split_heads(q[b].transpose(1, 0, 2), layout.group, -3)  # [Hkv, G, Nq, d]
        s = masked_scores(qb, k, scale, causal)  # bottom-right: j <= i + n - Nq
        for i, (start, stop) in enumerate(bounds):
            start, stop = min(start, n), min(stop, n)
            if start >= stop:
                continue
            tile = s[..., start:stop]
            m = tile.max(axis=-1)
            p = np.exp(tile - safe_max(m)[..., None])
            o, lse = finish(matmul(p, v[..., start:stop, :]), m, p.sum(axis=-1))
            o_parts[i, b] = o.reshape(H, nq, dv)
            lse_parts[i, b] = lse.reshape(H, nq)
    return o_parts, lse_parts


def decode_partials(q, k_cache, v_cache, cache_seqlens, block_table=None, *, num_splits: int = 1,
                    causal: bool = False, scale: float | None = None, bounds=None,
                    dv: int | None = None):
    """The partial states of split-KV decode, float64, before the merge.

    Args: as :func:`decode_attention`; ``bounds``: explicit key ranges ``[(start, stop),
    ...]`` (any, overlapping none, covering the keys once) in place of ``num_splits``.

    Returns:
        (o_parts [S, B, H, Nq, dv], lse_parts [S, B, H, Nq]), head-major as
        :func:`merge_states` takes them; chunks that see no key hold 0 and -inf.
    """
    q, k_cache, v_cache, lens, table, layout, scale = check_decode(
        q, k_cache, v_cache, cache_seqlens, block_table, causal, scale, dv)
    if bounds is None:
        bounds = split_bounds(int(lens.max()), check_splits(num_splits))
    return _partials(q, k_cache, v_cache, lens, table, layout, list(bounds), causal, scale)


def decode_attention(q, k_cache, v_cache, cache_seqlens, block_table=None, causal: bool = False,
                     scale: float | None = None, num_splits: int = 1, dv: int | None = None):
    """Attention of Nq new tokens per sequence over a KV cache, in float64.

    Args:
        q: [B, Nq, H, d]. k_cache, v_cache: contiguous [B, capacity, Hkv, d / dv] or paged
            [num_pages, page_size, Hkv, d / dv] (Hkv dividing H; query head h reads kv
            head h // (H // Hkv)). cache_seqlens: [B] ints, the keys each sequence holds.
            block_table: None (contiguous) or [B, max_pages] page indices.
        causal: the new tokens are the last Nq positions: query i sees key j iff
            ``j <= cache_seqlens[b] - Nq + i`` (needs cache_seqlens >= Nq).
        scale: score scale; None means 1/sqrt(d).
        num_splits: key chunks computed apart and merged (:func:`merge_states`); 1 is
            one-shot. Any value gives the same result to ~1e-15.
        dv: with ``v_cache=None``, the absorbed MLA form: V is k_cache[..., :dv]
            (DeepSeek: d = 576, dv = 512); with a v_cache, its head dim (checked).

    Returns:
        (o [B, Nq, H, dv], lse [B, H, Nq]) float64; a sequence of length 0 (not causal)
        gives O = 0 and LSE = -inf.
    """
    o_parts, lse_parts = decode_partials(q, k_cache, v_cache, cache_seqlens, block_table,
                                         num_splits=num_splits, causal=causal, scale=scale,
                                         dv=dv)
    o, lse = (o_parts[0], lse_parts[0]) if len(o_parts) == 1 else merge(o_parts, lse_parts)
    return o.transpose(0, 2, 1, 3), lse
