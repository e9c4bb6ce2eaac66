"""A FAIL's cause found by trying it: the float64 reference under the plausible wrong
semantics kernel authors write (a scale of 1/sqrt(dv), of a padded d, or none; q.k or O cut
to a power-of-two head-dim block; a causal mask aligned top-left, left out or added; the
variant's softcap, sinks or window left out, the softcap before the scale, a window bound
one key off; a last, partial key block dropped or left unmasked; grouped-query heads
mapped h % Hkv; an LSE in base 2). The first the kernel's output matches within what its
dtype allows (2x the same-dtype standard's max error, and under a quarter of its error
against the true attention), or that explains 99% of that error, is named. Only a FAILed
record is tried: a few float64 references of its case. A probe (2026-12-07): a 1/sqrt(dv)
scale at d = 192, dv = 128 in bf16 read "likely the O accumulator" (36.6x the standard's
error, under the precision defects' 61x)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator

import numpy as np

from flashbench import reference
from flashbench.accuracy.metrics import to_numpy

MATCH = 2.0  # the candidate's error within this many times the standard's (the 2x rule)
CLEARER = 0.25  # and under this share of the kernel's error against the true attention,
EXPLAINS = 0.01  # or under this share alone (an fp32 kernel's own rounding of its LSE in
# base 2 is several times the standard's error, and a hundredth of the base's)


def _scales(d: int, dv: int) -> Iterator[tuple[str, float]]:
    if dv != d:
        yield f"a scale of 1/sqrt(dv) = 1/sqrt({dv}), not 1/sqrt(d) = 1/sqrt({d})", dv ** -0.5
    padded = 1 << (d - 1).bit_length()
    if padded != d:
        yield f"a scale of 1/sqrt({padded}) (d = {d} padded to {padded}), not 1/sqrt({d})", \
            padded ** -0.5
    yield "no 1/sqrt(d) scale (a scale of 1)", 1.0


def dense_candidates(q, k, v, kw: dict) -> list[tuple[str, Callable]]:
    """(words, the O of attention so, computed once when first asked) of each plausible
    wrong semantics of a dense case: ``q``, ``k``, ``v`` its float64 inputs, ``kw`` its
    keywords (causal and the variant's: :meth:`~flashbench.measure.records.Case.kwargs`).
    One list serves every FAILed kernel and dtype of the case. Each is computed on the
    first batch element's last :data:`ROWS` queries (a wrong semantics shows in every row;
    the bottom-right mask keeps its alignment on the last rows): six references of a
    default case cost less than the one the check already made."""
    return Candidates(_dense(q, k, v, kw), view=dense_view)


class Candidates(list):
    """(words, output) pairs, and ``view``: the part of an output they are computed for."""

    def __init__(self, items, view=lambda x: x):
        super().__init__(items)
        self.view = view


ROWS = 256  # the query rows a candidate is computed on (the last ones of batch element 0)


def dense_view(x):
    """The part of a dense output (``[B, H, Nq, dv]``) the candidates are computed for."""
    return x[:1, ..., -ROWS:, :]


def _dense(q, k, v, kw: dict) -> Iterator[tuple[str, Callable]]:
    full_nq = q.shape[-2]
    q, k, v = q[:1, ..., -ROWS:, :], k[:1], v[:1]  # batch 0's last rows: same alignment

    def o_of(qq, kk, vv, **over):
        return functools.cache(lambda: reference.attention(qq, kk, vv, **{**kw, **over})[0])

    d, dv = q.shape[-1], v.shape[-1]
    for words, scale in _scales(d, dv):
        yield words, o_of(q, k, v, scale=scale)
    yield from _head_dim_blocks(q, k, v, kw, o_of)
    yield from _variant_left_out(kw, o_of, q, k, v)
    nq, nk = full_nq, k.shape[-2]
    if "window" not in kw:
        if kw.get("causal"):
            if nq < nk:  # top-left: query i sees keys 0..i, the bottom-right mask of Nk = Nq
                yield ("a causal mask aligned top-left (query i sees keys 0..i), not "
                       "bottom-right as FlashAttention aligns it when Nq < Nk",
                       o_of(q, k[..., :nq, :], v[..., :nq, :]))
            yield "no causal mask", o_of(q, k, v, causal=False)
        else:
            yield "a causal mask where none was asked", o_of(q, k, v, causal=True)
    h, hkv = q.shape[-3], k.shape[-3]
    if hkv not in (1, h):
        wrong = np.arange(h) % hkv
        yield (f"grouped-query heads mapped h % Hkv, not h // (H / Hkv) = h // {h // hkv}",
               o_of(q, k[..., wrong, :, :], v[..., wrong, :, :]))
    yield from _key_tail(q, k, v, kw, o_of)


BLOCKS = (16, 32, 64, 128)  # the key blocks a kernel's last, partial one is tried at


def _head_dim_blocks(q, k, v, kw, o_of):
    """A d or dv that is no power of two held in a power-of-two block that misses the rest:
    q.k summed over the block's columns alone, or O's columns past it never written."""
    d, dv = q.shape[-1], v.shape[-1]
    if d & (d - 1):
        p = 1 << (d.bit_length() - 1)
        yield (f"scores q.k summed over the first {p} of d = {d} columns (the rest of a "
               f"head-dim block of {p} left out)", o_of(q[..., :p], k[..., :p], v,
                                                         scale=kw.get("scale", d ** -0.5)))
    if dv & (dv - 1):
        p = 1 << (dv.bit_length() - 1)
        true = o_of(q, k, v)

        def zeroed():
            o = true().copy()
            o[..., p:] = 0.0
            return o

        yield f"O's columns past the first {p} of dv = {dv} left at zero", zeroed


def _variant_left_out(kw, o_of, q, k, v):
    """The case's variant left out, or a softcap put before the scale (c tanh(q.k / c),
    then scaled) or a window bound one key off."""
    if "softcap" in kw:
        c = kw["softcap"]
        yield "no softcap (scores left uncapped)", o_of(q, k, v, softcap=None)
        yield (f"the softcap applied before the 1/sqrt(d) scale: c tanh(q.k / c) scaled, not "
               f"c tanh(q.k / sqrt(d) / c), c = {c:g}",
               o_of(q, k, v, softcap=c * q.shape[-1] ** -0.5))
    if "sinks" in kw:
        yield "the sinks left out (no sink term in the softmax's sum)", o_of(q, k, v, sinks=None)
    if "window" in kw:
        left, right = kw["window"]
        yield "no sliding window (every key the mask allows)", o_of(q, k, v, window=(-1, -1))
        for side, other in (("left", (left + 1, right)), ("left", (left - 1, right)),
                            ("right", (left, right + 1)), ("right", (left, right - 1))):
            bound = left if side == "left" else right
            if bound < 0 or min(other) < -1 or (side == "right" and kw.get("causal")):
                continue  # an unbounded side, a bound of 0 made -1, causal's right of 0
            more = sum(other) > left + right
            yield (f"a window of {other}, not {(left, right)}: one key "
                   f"{'more' if more else 'fewer'} on the {side}", o_of(q, k, v, window=other))


def _key_tail(q, k, v, kw, o_of):
    """Keys past Nk in a kernel's last, partial key block of 16 to 128: dropped (the
    block's loop ends a block early), or left unmasked (read as zeros: scores of 0 over a
    zero-padded K and V). Tried without a window, the unmasked tail without a causal
    mask too (the bottom-right causal mask hides it)."""
    if "window" in kw:
        return
    nk = k.shape[-2]
    dropped, unmasked = {}, {}  # the blocks of each length of keys kept, or padded to
    for block in BLOCKS:
        dropped.setdefault(nk // block * block, []).append(block)
        unmasked.setdefault(-(-nk // block) * block, []).append(block)

    def blocks(sizes):
        return " or ".join(map(str, sizes))

    for kept, sizes in dropped.items():
        if kept in (0, nk):
            continue
        # causal: keys past ``kept`` hidden, the bottom-right diagonal kept where it was
        over = {"causal": False, "window": (-1, nk - kept)} if kw.get("causal") else {}
        yield (f"the last key block dropped: keys {kept} to {nk - 1} of Nk = {nk} left out "
               f"(a loop over key blocks of {blocks(sizes)} that ends one block early)",
               o_of(q, k[..., :kept, :], v[..., :kept, :], **over))
    if kw.get("causal"):
        return
    for padded, sizes in unmasked.items():
        if padded == nk:
            continue
        pad = [(0, 0)] * (k.ndim - 2) + [(0, padded - nk), (0, 0)]
        yield (f"keys past Nk = {nk} left unmasked up to {padded} (the last block of "
               f"{blocks(sizes)} keys): scores of 0 over zero-padded K and V",
               o_of(q, np.pad(k, pad), np.pad(v, pad)))


def varlen_candidates(q, k, v, cu, cu_k, kw: dict) -> Candidates:
    """The same for a packed batch (q, k, v [total, heads, d], ``cu`` / ``cu_k`` the
    queries' and keys' offsets), on the whole batch: the pack read as one sequence, the
    queries' offsets used for the keys, and per sequence the dense case's semantics (the
    scales, head-dim blocks, variant, masks, grouped-query map, a partial last key block
    dropped)."""
    return Candidates(_varlen(q, k, v, np.asarray(cu), np.asarray(cu_k), kw))


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
    for words, scale in _scales(q.shape[-1], v.shape[-1]):
        yield words, o_of(q, k, v, scale=scale)
    yield from _head_dim_blocks(q, k, v, kw, o_of)
    yield from _variant_left_out(kw, o_of, q, k, v)
    lengths = list(zip(np.diff(cu), np.diff(cu_k), strict=True))
    if "window" not in kw:
        if kw.get("causal"):
            if any(0 < n < m for n, m in lengths):
                yield ("a causal mask aligned top-left in each sequence (query i sees keys "
                       "0..i), not bottom-right as FlashAttention aligns it when Nq < Nk",
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
    keys, seen = [m for _, m in lengths], set()
    for block in BLOCKS:
        kept = tuple(m // block * block for m in keys)
        if list(kept) == keys or any(x == 0 < m for x, m in zip(kept, keys, strict=True)) \
                or kept in seen:
            continue
        seen.add(kept)
        yield (f"each sequence's last key block dropped (a loop over key blocks of {block} "
               "that ends one block early)", o_of(q, k, v, fn=functools.partial(
                   _tail_dropped, block=block)))


def _top_left(q, k, v, **kw):
    nq = q.shape[-2]
    return reference.attention(q, k[..., :nq, :], v[..., :nq, :], **kw)


def _tail_dropped(q, k, v, block, **kw):
    kept = k.shape[-2] // block * block
    return reference.attention(q, k[..., :kept, :], v[..., :kept, :], **kw)


def decode_candidates(inputs, causal: bool, dv: int | None,
                      absorbed: bool) -> Iterator[tuple[str, Callable]]:
    """The same for a decode case (``inputs``: q, k and v caches, cache_seqlens, block
    table; ``absorbed``: MLA's form, V the first ``dv`` columns of K): the scales, the
    causal mask among several new tokens left out, each sequence's partial last block
    dropped."""
    q, k, v, lens, table = inputs

    def o_of(**over):
        return lambda: reference.decode_attention(q, k, None if absorbed else v, lens, table,
                                                  **{"causal": causal, "dv": dv, **over})[0]

    for words, scale in _scales(q.shape[-1], dv or v.shape[-1]):
        yield words, o_of(scale=scale)
    if causal and q.shape[1] > 1:
        yield "no causal mask among the new tokens", o_of(causal=False)
        return  # a shorter cache moves the new tokens' diagonal: no dropped tail tried
    lens, seen = np.asarray(lens), set()
    for block in BLOCKS:  # each sequence's last, partial key block dropped
        kept = lens // block * block
        if (kept == lens).all() or ((kept == 0) & (lens > 0)).any() or kept.tobytes() in seen:
            continue
        seen.add(kept.tobytes())
        yield (f"each sequence's last key block dropped (a loop over key blocks of {block} "
               "that ends one block early)",
               lambda kept=kept: reference.decode_attention(
                   q, k, None if absorbed else v, kept, table, causal=causal, dv=dv)[0])


def _matches(err: float, standard: float, own: float) -> bool:
    return (err <= MATCH * max(standard, 1e-12) and err < CLEARER * own) or err < EXPLAINS * own


def _max_abs(a, b) -> float:
    with np.errstate(invalid="ignore"):
        return float(np.max(np.abs(a - b), initial=0.0))


def diagnose(candidates, out, ref, o_standard: float,
             lse_standard: float | None = None) -> str | None:
    """The wrong semantics the kernel's output (``out``: o, and lse or None) matches, in
    words, or None. ``candidates``: :func:`dense_candidates` or :func:`decode_candidates`
    (a :class:`Candidates`' view: the part of an output they are computed for); ``ref``:
    the true (o, lse); ``o_standard`` / ``lse_standard``: the same-dtype standard model's
    max abs errors (the rule's yardstick)."""
    view = getattr(candidates, "view", lambda x: x)
    o = to_numpy(out[0])  # a float64 copy
    if not np.isfinite(o).all() or o.shape != ref[0].shape:
        return None
    o = view(o)
    own = _max_abs(o, view(ref[0]))
    for words, alt in candidates:  # alt: computed at the first FAIL that asks (cached)
        err = _max_abs(o, alt())
        if _matches(err, o_standard, own):
            return (f"its O matches attention with {words}: max |O - that| {err:.2g} (the "
                    f"same-dtype standard's error: {o_standard:.2g}; against the true "
                    f"attention: {own:.2g})")
    lse = out[1] if len(out) > 1 else None
    if lse is not None and lse_standard is not None:
        lse = to_numpy(lse)
        seen = np.isfinite(ref[1])  # rows that see no key: -inf in any base
        if lse.shape == ref[1].shape and np.isfinite(lse[seen]).all():
            lse, truth = lse[seen], ref[1][seen]
            err, own = _max_abs(lse, truth / math.log(2)), _max_abs(lse, truth)
            if _matches(err, lse_standard, own):
                return (f"its LSE matches the true LSE in base 2 (divided by ln 2): max "
                        f"|LSE - that| {err:.2g}, against the true LSE {own:.2g}; "
                        "FlashAttention's LSE is the natural log")
    return None
