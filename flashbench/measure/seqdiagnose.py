"""A packed batch's and a decode case's wrong semantics to try (:mod:`.diagnose`, whose
:func:`~.diagnose.diagnose` judges them): per sequence the dense case's (scales, head-dim
blocks, variant, masks, grouped-query map), and what sequences bring: the pack read as one
sequence, the queries' offsets used for the keys, each sequence's keys cut short or read on
past its length (into the next sequence's, or a cache's stale entries), a decode mask
without the cache's offset."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator

import numpy as np

from flashbench import reference
from flashbench.measure.diagnose import (
    BLOCKS,
    Candidates,
    column_blocks,
    head_dim_blocks,
    lses_of,
    scales,
    variant_left_out,
    zeroed_past,
)

__all__ = ["varlen_candidates", "decode_candidates"]


def varlen_candidates(q, k, v, cu, cu_k, kw: dict) -> Candidates:
    """The same for a packed batch (q, k, v [total, heads, d], ``cu`` / ``cu_k`` the
    queries' and keys' offsets), on the whole batch: the pack read as one sequence, the
    queries' offsets used for the keys, each sequence's keys read on into the next one's,
    and per sequence the dense case's semantics (the scales, head-dim blocks, variant,
    masks, grouped-query map, keys cut short)."""
    return Candidates(_varlen(q, k, v, np.asarray(cu), np.asarray(cu_k), kw), lses=lses_of(kw))


def _varlen(q, k, v, cu, cu_k, kw: dict) -> Iterator[tuple[str, Callable]]:
    from flashbench.reference.varlen import per_sequence

    def o_of(qq, kk, vv, fn=reference.attention, cq=cu, ck=cu_k, **over):
        return functools.cache(lambda: per_sequence(fn, qq, kk, vv, cq, ck,
                                                    **{**kw, **over})[0])

    def heads_first(x):
        return x.transpose(1, 0, 2)

    yield ("the packed batch attended as one sequence (cu_seqlens not read: queries see "
           "the other sequences' keys)", functools.cache(lambda: heads_first(
               reference.attention(*map(heads_first, (q, k, v)), **kw)[0])))
    if not np.array_equal(cu, cu_k):  # K and V sliced at the queries' offsets (as far as
        ck = np.minimum(cu, k.shape[0])  # K holds rows: a slice past its end is cut short)
        yield ("the queries' offsets (cu_seqlens_q) used for the keys too",
               o_of(q, k[:ck[-1]], v[:ck[-1]], ck=ck))
    for words, scale in scales(q.shape[-1], v.shape[-1]):
        yield words, o_of(q, k, v, scale=scale)
    yield from head_dim_blocks(q, k, v, kw, o_of)
    yield from variant_left_out(kw, o_of, q, k, v)
    lengths = list(zip(np.diff(cu), np.diff(cu_k), strict=True))
    if "window" not in kw:
        if kw.get("causal"):
            if any(n != m and n > 0 and m > 0 for n, m in lengths):
                yield ("a causal mask aligned top-left in each sequence (query i sees keys "
                       "0..i), not bottom-right as FlashAttention aligns it when Nq != Nk",
                       o_of(q, k, v, fn=_top_left))
            yield "no causal mask", o_of(q, k, v, causal=False)
        else:
            yield "a causal mask where none was asked", o_of(q, k, v, causal=True)
    h, hkv = q.shape[1], k.shape[1]
    if hkv not in (1, h):
        wrong = np.arange(h) % hkv
        yield (f"grouped-query heads mapped h % Hkv, not h // (H / Hkv) = h // {h // hkv}",
               o_of(q, k[:, wrong], v[:, wrong]))
    if "window" in kw or kw.get("causal") and any(n > 1 for n, _ in lengths):
        return  # each sequence's own diagonal: a shorter one moves it (tried dense)
    keys = [int(m) for _, m in lengths]

    def gathered(counts):  # sequence i's keys: ``counts[i]`` rows from its first on
        rows = np.concatenate([np.arange(a, a + n) for a, n in zip(cu_k, counts,
                                                                   strict=False)] + [[]])
        rows = rows.astype(np.int64)
        return o_of(q, k[rows], v[rows], ck=np.concatenate([[0], np.cumsum(counts)]))

    for kept, words in _shorter(keys, "cu_seqlens_k off by one"):
        yield words, gathered(kept)
    if not kw.get("causal"):
        for block, reach in _longer(keys, [None] * len(keys), cu_k, k.shape[0]):
            yield (f"each sequence's keys read on to the end of its last block of {block} "
                   "(no length mask: the next sequence's keys in its softmax)",
                   gathered(reach))


def _shorter(keys: list[int], one_short: str) -> list[tuple[tuple, str]]:
    """(keys kept per sequence, in words) of each sequence's keys cut short: at its
    partial last block of 16 to 128 keys, or by one (``one_short``: how)."""
    why: dict[tuple, list[str]] = {}
    for block in BLOCKS:
        kept = tuple(m // block * block for m in keys)
        if kept != tuple(keys) and not any(x == 0 < m for x, m in zip(kept, keys, strict=True)):
            why.setdefault(kept, []).append(str(block))
    causes = {kept: [f"a loop over key blocks of {' or '.join(sizes)} that ends one block "
                     "early"] for kept, sizes in why.items()}
    one = tuple(m - 1 for m in keys)
    if any(m > 1 for m in keys) and all(x != 0 for x, m in zip(one, keys, strict=True)
                                        if m > 0):
        causes.setdefault(tuple(max(x, 0) for x in one), []).append(
            f"a key count one short ({one_short})")
    return [(kept, f"each sequence's last keys left out ({_cut_words(kept, keys)}: "
             f"{', or '.join(c)})") for kept, c in causes.items()]


def _cut_words(kept, keys) -> str:
    cut = [(i, m - x, m) for i, (x, m) in enumerate(zip(kept, keys, strict=True)) if x != m]
    said = ", ".join(f"{n} of {m} in sequence {i}" for i, n, m in cut[:3])
    return said + (f" and {len(cut) - 3} sequence(s) more" if len(cut) > 3 else "")


def _longer(keys, rooms, starts, total):
    """(block, keys read per sequence) where a kernel reads on to the end of each sequence's
    last partial block of 16 to 128 keys, as far as ``rooms`` (None: the rows after its
    start, ``starts[i]``, up to ``total``) allow."""
    seen = set()
    for block in BLOCKS:
        reach = tuple(min(-(-m // block) * block, total - int(a) if room is None else room)
                      for m, room, a in zip(keys, rooms, starts, strict=False))
        if reach != tuple(keys) and reach not in seen:
            seen.add(reach)
            yield block, reach


def _top_left(q, k, v, **kw):
    """One sequence's attention with query i seeing keys 0..i: its first Nq keys under the
    bottom-right mask (Nq <= Nk), else no mask but keys up to i (Nq - Nk past the
    bottom-right diagonal: a review, 2026-12-07, found those sequences left bottom-right)."""
    nq, nk = q.shape[-2], k.shape[-2]
    if nq > nk:
        return reference.attention(q, k, v, **{**kw, "causal": False, "window": (-1, nq - nk)})
    return reference.attention(q, k[..., :nq, :], v[..., :nq, :], **kw)


def decode_candidates(inputs, causal: bool, dv: int | None,
                      absorbed: bool) -> Iterator[tuple[str, Callable]]:
    """The same for a decode case (``inputs``: q, k and v caches, cache_seqlens, block
    table; ``absorbed``: MLA's form, V the first ``dv`` columns of K): the scales, the
    grouped-query map, the causal mask among several new tokens left out or without the
    cache's offset, each sequence's last keys left out or read on past its length."""
    q, k, v, lens, table = inputs

    def o_of(**over):  # computed once, when first asked (diagnose compares them again)
        return functools.cache(lambda: reference.decode_attention(
            q, k, None if absorbed else v, lens, table, **{"causal": causal, "dv": dv,
                                                           **over})[0])

    def with_caches(kk, vv, kept=lens):
        return functools.cache(lambda: reference.decode_attention(
            q, kk, None if absorbed else vv, kept, table, causal=causal, dv=dv)[0])

    for words, scale in scales(q.shape[-1], dv or v.shape[-1]):
        yield words, o_of(scale=scale)
    d = q.shape[-1]
    if not absorbed:  # a head-dim block that misses the rest (the dense case's, on caches)
        for p in column_blocks(d):
            yield (f"scores q.k summed over the first {p} of d = {d} columns (the rest of the "
                   "head dim left out: a loop over head-dim blocks that stops after the "
                   "first)", functools.cache(lambda p=p: reference.decode_attention(
                       q[..., :p], k[..., :p], v, lens, table, causal=causal, dv=dv,
                       scale=d ** -0.5)[0]))
    true = o_of()  # computed once, when first asked, for every block
    for p in column_blocks(dv or v.shape[-1]):
        yield (f"O's columns past the first {p} of dv = {dv or v.shape[-1]} left at zero",
               zeroed_past(true, p))
    h, hkv, nq = q.shape[2], k.shape[-2], q.shape[1]
    if hkv not in (1, h):
        wrong = np.arange(h) % hkv
        yield (f"grouped-query heads mapped h % Hkv, not h // (H / Hkv) = h // {h // hkv}",
               with_caches(k[..., wrong, :], None if absorbed else v[..., wrong, :]))
    lens = np.asarray(lens)
    if causal and nq > 1:
        yield "no causal mask among the new tokens", o_of(causal=False)
        yield (f"a causal mask without the cache's offset (new token i sees keys up to i, not "
               f"up to cache_seqlens - {nq} + i)", with_caches(k, v, np.full_like(lens, nq)))
        return  # a shorter cache moves the new tokens' diagonal: no dropped tail tried
    one = "cache_seqlens - 1" + (", or a causal diagonal one key early" if causal else "")
    for kept, words in _shorter([int(x) for x in lens], one):
        yield words, with_caches(k, v, np.array(kept))
    page = k.shape[1]  # contiguous: the capacity; paged: the keys of a page
    rooms = [-(-int(n) // page) * page for n in lens] if table is not None else \
        [page] * len(lens)
    for block, reach in _longer([int(x) for x in lens], rooms, [0] * len(lens), 0):
        yield (f"keys past each sequence's length read on to the end of its last block of "
               f"{block} (no length mask: the cache's stale entries in its softmax)",
               with_caches(k, v, np.array(reach)))
