"""Decode inputs: a KV cache, contiguous or paged, its checks, and seeded caches to judge on.

Layouts are FlashAttention's ``flash_attn_with_kvcache``: q [B, Nq, H, d]; a contiguous
cache k_cache [B, capacity, Hkv, d], v_cache [B, capacity, Hkv, dv]; a paged cache
k_cache [num_pages, page_size, Hkv, d] with ``block_table`` [B, max_pages] of page
indices (key j of sequence b lies in page ``block_table[b, j // page_size]`` at row
``j % page_size``); ``cache_seqlens`` [B], the keys each sequence holds. Pages may be
scattered and shared between sequences; entries past a sequence's last page are not read
(they may hold anything, as vLLM's padding does). The Nq new tokens are the last Nq
positions of each sequence: with ``causal`` query i sees key j iff
``j <= cache_seqlens[b] - Nq + i``. The checks work on shapes and NumPy ints, so the
NumPy and the torch side share them.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from flashbench.inputs.problem import Shape, make_qkv
from flashbench.inputs.validation import check_causal, head_group

__all__ = ["CacheLayout", "check_cache", "check_seqlens", "check_block_table", "check_splits",
           "split_bounds", "make_decode", "value_cache"]


@dataclass(frozen=True)
class CacheLayout:
    """The sizes of one decode call: B, Nq, H, Hkv, d, dv; ``page_size`` (None for a
    contiguous cache) and ``capacity``, the most keys a sequence can hold (contiguous:
    the cache's second dim; paged: max_pages x page_size)."""

    B: int
    Nq: int
    H: int
    Hkv: int
    d: int
    dv: int
    page_size: int | None
    capacity: int
    num_pages: int | None = None

    @property
    def group(self) -> int:
        return self.H // self.Hkv


def check_cache(q_shape, k_shape, v_shape, table_shape=None) -> CacheLayout:
    """Sizes of a decode call from the shapes of q, k_cache, v_cache and block_table (None:
    a contiguous cache); ValueError naming the argument and the layout expected."""
    q_shape, k_shape, v_shape = tuple(q_shape), tuple(k_shape), tuple(v_shape)
    for name, shape, want in (("q", q_shape, "[B, Nq, H, d]"),
                              ("k_cache", k_shape, "[B, capacity, Hkv, d] or [num_pages, "
                               "page_size, Hkv, d]"), ("v_cache", v_shape, "as k_cache's")):
        if len(shape) != 4 or 0 in shape:
            raise ValueError(f"{name} must be 4-D {want} with no empty dim, got shape {shape}")
    B, nq, h, d = q_shape
    if k_shape[:3] != v_shape[:3]:
        raise ValueError(f"k_cache and v_cache must share their first three dims, got "
                         f"{k_shape} and {v_shape}")
    if k_shape[3] != d:
        raise ValueError(f"q and k_cache must share the head dim d: q has {d}, k_cache "
                         f"{k_shape[3]}")
    head_group(h, k_shape[2], v_shape[2], where=" (dim 2 of the caches)")
    if table_shape is None:
        if k_shape[0] != B:
            raise ValueError(f"a contiguous k_cache [B, capacity, Hkv, d] must have q's batch "
                             f"B={B}, got {k_shape[0]} (a paged cache needs block_table)")
        return CacheLayout(B, nq, h, k_shape[2], d, v_shape[3], None, k_shape[1])
    table_shape = tuple(table_shape)
    if len(table_shape) != 2 or table_shape[0] != B or table_shape[1] < 1:
        raise ValueError(f"block_table must be [B, max_pages] with B={B} and max_pages >= 1, "
                         f"got shape {table_shape}")
    return CacheLayout(B, nq, h, k_shape[2], d, v_shape[3], k_shape[1],
                       table_shape[1] * k_shape[1], num_pages=k_shape[0])


def value_cache(k_cache, v_cache, dv):
    """``(v_cache, absorbed)`` of a decode call (NumPy or torch arrays alike). ``v_cache``
    None is MLA's absorbed form: V is the view ``k_cache[..., :dv]``, dv an int below K's
    head dim; else v_cache itself, whose head dim a given ``dv`` must equal (O's head dim
    is V's). ValueError naming the mismatch."""
    if v_cache is None:
        if isinstance(dv, bool) or not isinstance(dv, (int, np.integer)) or dv < 1:
            raise ValueError(f"v_cache=None (V is k_cache[..., :dv], the absorbed MLA form) "
                             f"needs dv, an int >= 1, got {dv!r}")
        d = np.shape(k_cache)[-1] if np.ndim(k_cache) else None
        if d is not None and dv >= d:
            raise ValueError(f"dv={dv} must be below k_cache's head dim d={d} in the absorbed "
                             f"form (V is k_cache[..., :dv])")
        return (k_cache[..., :int(dv)] if d is not None else k_cache), True
    if dv is not None and np.ndim(v_cache) and np.shape(v_cache)[-1] != dv:
        raise ValueError(f"dv={dv} differs from v_cache's head dim {np.shape(v_cache)[-1]}: "
                         f"O's head dim is V's")
    return v_cache, False


def _ints(x, name: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integers, got dtype {arr.dtype}")
    return arr.astype(np.int64)


def check_seqlens(cache_seqlens, layout: CacheLayout, causal) -> np.ndarray:
    """``cache_seqlens`` [B] as int64: each in [0, capacity], and >= Nq when causal (the
    new tokens are the sequence's last Nq positions). ValueError naming the sequence."""
    causal = check_causal(causal)
    lens = _ints(cache_seqlens, "cache_seqlens")
    if lens.shape != (layout.B,):
        raise ValueError(f"cache_seqlens must have shape [B] = ({layout.B},), got {lens.shape}")
    where = "max_pages x page_size" if layout.page_size else "the cache's capacity (dim 1)"
    for b, n in enumerate(lens.tolist()):
        if n < 0:
            raise ValueError(f"cache_seqlens[{b}] = {n} is negative")
        if n > layout.capacity:
            raise ValueError(f"cache_seqlens[{b}] = {n} is longer than its pages hold: "
                             f"{layout.capacity} keys ({where})")
        if causal and n < layout.Nq:
            raise ValueError(f"cache_seqlens[{b}] = {n} is shorter than Nq = {layout.Nq}: with "
                             f"causal the new tokens are the last Nq positions of the cache")
    return lens


def check_block_table(block_table, layout: CacheLayout, lens: np.ndarray) -> np.ndarray:
    """``block_table`` [B, max_pages] as int64: the entries each sequence reads (its first
    ceil(len / page_size)) must be page indices in [0, num_pages). ValueError naming the
    entry. Later entries are never read and may hold anything."""
    table = _ints(block_table, "block_table")
    for b, n in enumerate(lens.tolist()):
        used = table[b, : -(-n // layout.page_size)]
        bad = np.flatnonzero((used < 0) | (used >= layout.num_pages))
        if bad.size:
            j = int(bad[0])
            raise ValueError(f"block_table[{b}, {j}] = {int(used[j])} is not a page index in "
                             f"[0, {layout.num_pages}) (sequence {b} holds {n} keys in pages "
                             f"of {layout.page_size})")
    return table


def check_splits(num_splits) -> int:
    """The number of key chunks of a split-KV decode: an int >= 1."""
    if isinstance(num_splits, bool) or not isinstance(num_splits, numbers.Integral):
        raise TypeError(f"num_splits must be an int >= 1, got {type(num_splits).__name__} "
                        f"{num_splits!r}")
    if num_splits < 1:
        raise ValueError(f"num_splits must be >= 1, got {num_splits}")
    return int(num_splits)


def split_bounds(max_len: int, num_splits: int, align: int = 1) -> list[tuple[int, int]]:
    """Key ranges ``[start, stop)`` of ``num_splits`` chunks over ``max_len`` keys, as
    FlashAttention splits them: each ``ceil(max_len / num_splits)`` keys rounded up to a
    multiple of ``align`` (the kernel's key block); trailing chunks may be empty, and a
    shorter sequence's chunks past its length see no key."""
    num_splits = check_splits(num_splits)
    per = -(-max(max_len, 1) // num_splits)
    per = -(-per // align) * align
    return [(min(s * per, max_len), min((s + 1) * per, max_len)) for s in range(num_splits)]


def make_decode(B: int, H: int, Hkv: int, Nq: int, d: int, seqlens, page_size: int | None = None,
                dist: str = "normal", seed: int = 0, dv: int | None = None, spare_pages: int = 3,
                logit_std: float = 2000.0):
    """Seeded float64 decode inputs: ``(q, k_cache, v_cache, cache_seqlens, block_table)``.

    ``seqlens``: the B cache lengths. Contiguous (``page_size`` None): capacity
    max(seqlens), block_table None. Paged: each sequence's pages drawn at random from a
    pool with ``spare_pages`` unused ones (scattered, in no order), its table padded
    with -1. ``dist`` and ``logit_std``: as :func:`flashbench.inputs.make_qkv` draws them
    ("normal", "outliers", "large-logits" with scores of standard deviation logit_std).
    """
    lens = np.asarray(seqlens, dtype=np.int64)
    dv = d if dv is None else dv
    pages = [] if page_size is None else [-(-int(n) // page_size) for n in lens]
    total = sum(pages) + spare_pages
    keys = B * max(int(lens.max()), 1) if page_size is None else total * page_size
    # q of all B x Nq new tokens and the keys of the whole pool, drawn as one problem
    q, k, v = make_qkv(Shape(1, H, B * Nq, keys, d, dv=dv, Hkv=Hkv), dist, seed, logit_std)
    q = q[0].transpose(1, 0, 2).reshape(B, Nq, H, d)
    rows = (B, -1) if page_size is None else (total, page_size)
    k, v = (x[0].transpose(1, 0, 2).reshape(*rows, Hkv, x.shape[-1]) for x in (k, v))
    if page_size is None:
        return q, k, v, lens, None
    order = np.random.default_rng(seed + 1).permutation(total)
    table = np.full((B, max(max(pages), 1)), -1, dtype=np.int64)
    start = 0
    for b, n in enumerate(pages):
        table[b, :n] = order[start:start + n]
        start += n
    return q, k, v, lens, table
