"""A FAIL's cause found by trying it: the float64 reference under the plausible wrong
semantics kernel authors write (a scale of 1/sqrt(dv), of a padded d, or none; q.k or O cut
to a power-of-two head-dim block; a causal mask aligned top-left, left out, added, or its
diagonal one key off; the variant's softcap, sinks or window left out, the softcap before
the scale, a window bound one key off; keys cut short or a partial block left unmasked;
grouped-query heads mapped h % Hkv; an LSE in base 2 or without its sinks; a packed batch's
and a decode case's own: :mod:`.seqdiagnose`). The first the kernel's output matches within
what its dtype allows (2x the same-dtype standard's max error, and under a quarter of its
error against the true attention) is named, with every candidate giving the same output;
one that explains 99% of that error is named a partial match. Only a FAILed record is
tried. A probe (2026-12-07): a 1/sqrt(dv) scale at d = 192, dv = 128 in bf16 read "likely
the O accumulator" (36.6x the standard's error, under the precision defects' 61x)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator

import numpy as np

from flashbench import reference
from flashbench.accuracy.bandrule import DEFECTS_REACH
from flashbench.accuracy.metrics import to_numpy
from flashbench.inputs.variant import MAX_WINDOW

MATCH = 2.0  # the candidate's error within this many times the standard's (the 2x rule)
CLEARER = 0.25  # and under this share of the kernel's error against the true attention,
EXPLAINS = 0.01  # or under this share alone (an fp32 kernel's own rounding of its LSE in
# base 2 is several times the standard's error, and a hundredth of the base's)


def scales(d: int, dv: int) -> Iterator[tuple[str, float]]:
    if dv != d:
        yield f"a scale of 1/sqrt(dv) = 1/sqrt({dv}), not 1/sqrt(d) = 1/sqrt({d})", dv ** -0.5
    padded = 1 << (d - 1).bit_length()
    if padded != d:
        yield f"a scale of 1/sqrt({padded}) (d = {d} padded to {padded}), not 1/sqrt({d})", \
            padded ** -0.5
    yield "no 1/sqrt(d) scale (a scale of 1)", 1.0
    yield f"a scale of 1/d = 1/{d} (the square root left out), not 1/sqrt({d})", 1.0 / d


def dense_candidates(q, k, v, kw: dict) -> list[tuple[str, Callable]]:
    """(words, the O of attention so, computed once when first asked) of each plausible
    wrong semantics of a dense case: ``q``, ``k``, ``v`` its float64 inputs, ``kw`` its
    keywords (causal and the variant's: :meth:`~flashbench.measure.records.Case.kwargs`).
    One list serves every FAILed kernel and dtype of the case. Each is computed on the
    first batch element's last :data:`ROWS` queries (a wrong semantics shows in every row;
    the bottom-right mask keeps its alignment on the last rows): all of them (5-11) cost
    0.16-0.32 s at N = 1024, 2.2 s at 1x8x4096x4096x128 against the check's own reference's
    11 s (this 2-CPU machine, 2026-12-07)."""
    return Candidates(_dense(q, k, v, kw), view=dense_view, lses=lses_of(kw))


class Candidates(list):
    """(words, output[, view]) items, ``view``: the part of an output they are computed for
    (an item's own where it has one); ``lses``: (words, the LSE so from the true one)."""

    def __init__(self, items, view=lambda x: x, lses=()):
        super().__init__(items)
        self.view = view
        self.lses = (*lses, ("the true LSE in base 2 (divided by ln 2); FlashAttention's LSE "
                             "is the natural log", lambda lse: lse / math.log(2)))


def lses_of(kw: dict) -> list:
    """The LSE with the sinks left out of it alone (its O may have them): log(e^LSE - e^s),
    the head's sink s (the heads the next-to-last axis of a dense [B, H, Nq] or packed
    [H, total] LSE)."""
    if "sinks" not in kw:
        return []
    sinks = np.asarray(kw["sinks"], dtype=np.float64)[:, None]

    def without(lse):
        with np.errstate(divide="ignore", invalid="ignore"):
            return lse + np.log1p(-np.exp(sinks - lse))

    return [("the true LSE without the sink term (the sinks left out of the LSE)", without)]


ROWS = 256  # the query rows a candidate is computed on (the last ones of batch element 0)


def dense_view(x):
    """The part of a dense output (``[B, H, Nq, dv]``) the candidates are computed for."""
    return x[:1, ..., -ROWS:, :]


def _dense(q, k, v, kw: dict) -> Iterator[tuple]:
    full_nq, nk = q.shape[-2], k.shape[-2]
    first = _first_rows(q[:1], k[:1], v[:1], kw)
    q, k, v = q[:1, ..., -ROWS:, :], k[:1], v[:1]  # batch 0's last rows: same alignment

    def o_of(qq, kk, vv, **over):
        return functools.cache(lambda: reference.attention(qq, kk, vv, **{**kw, **over})[0])

    d, dv = q.shape[-1], v.shape[-1]
    for words, scale in scales(d, dv):
        yield words, o_of(q, k, v, scale=scale)
    yield from head_dim_blocks(q, k, v, kw, o_of)
    yield from variant_left_out(kw, o_of, q, k, v, first)
    nq = full_nq
    if kw.get("causal"):
        if nq < nk:  # top-left: query i sees keys 0..i, the bottom-right mask of Nk = Nq
            yield (f"a causal mask aligned top-left (query i sees keys up to i), not "
                   f"bottom-right (up to i + Nk - Nq = {_plus(nk - nq)}) as FlashAttention "
                   "aligns it", o_of(q, k[..., :nq, :], v[..., :nq, :]))
        elif nq > nk and "window" not in kw:  # keys up to i: bottom-right's i + (Nq - Nk)
            yield (f"a causal mask aligned top-left (query i sees keys up to i), not "
                   f"bottom-right (up to i - (Nq - Nk) = i - {nq - nk}: the first "
                   f"{nq - nk} queries see none) as FlashAttention aligns it",
                   o_of(q, k, v, causal=False, window=(-1, nq - nk)))
        if "window" not in kw:
            yield "no causal mask", o_of(q, k, v, causal=False)
            if nq > 1:  # at Nq = 2 the same as no mask: both said (diagnose)
                yield (f"the causal diagonal one key late (query i sees keys up to i + Nk - "
                       f"Nq + 1 = {_plus(nk - nq + 1)})", o_of(q, k, v, causal=False,
                                                            window=(-1, 1)))
        if nk > 1 and "window" not in kw:  # at Nq = 1 the last key left out: both said
            yield (f"the causal diagonal one key early (query i sees keys up to i + Nk - Nq "
                   f"- 1 = {_plus(nk - nq - 1)}, not the key at its own position)",
                   o_of(q, k[..., :-1, :], v[..., :-1, :]))
    elif "window" not in kw:
        yield "a causal mask where none was asked", o_of(q, k, v, causal=True)
    h, hkv = q.shape[-3], k.shape[-3]
    if hkv not in (1, h):
        wrong = np.arange(h) % hkv
        yield (f"grouped-query heads mapped h % Hkv, not h // (H / Hkv) = h // {h // hkv}",
               o_of(q, k[..., wrong, :, :], v[..., wrong, :, :]))
    yield from _key_tail(q, k, v, kw, o_of, full_nq)


def _plus(n: int) -> str:
    """``i + n`` in words, its sign written (i - 211, not i + -211)."""
    return f"i + {n}" if n > 0 else f"i - {-n}" if n < 0 else "i"


def _first_rows(q, k, v, kw: dict):
    """(view, the keys they see): the first :data:`ROWS` queries that see a key, under a
    causal mask where the last ones see nearly every key (a sink left out weighs on the
    first rows alone); None where the last rows are every row or no causal mask is set.
    Their keys are cut where the last of them stops: the bottom-right diagonal stays."""
    nq, nk = q.shape[-2], k.shape[-2]
    if nq <= ROWS or not kw.get("causal"):
        return None
    start = max(0, nq - nk)  # bottom-right: query i sees keys up to i + nk - nq
    cut = min(nk, start + ROWS + nk - nq)

    def view(x):
        return x[:1, ..., start:start + ROWS, :]

    return view, (view(q), k[..., :cut, :], v[..., :cut, :])


BLOCKS = (16, 32, 64, 128)  # the key blocks a kernel's last, partial one is tried at


HEAD_BLOCKS = (32, 64, 128, 256)  # the head-dim blocks a kernel's loop may stop after


def column_blocks(d: int) -> list[int]:
    """The head-dim blocks shorter than ``d``, the largest first (a probe's q.k over 64 of
    192 columns went untried: only 128, the largest, was, and none at a power-of-two d)."""
    return [p for p in reversed(HEAD_BLOCKS) if p < d]


def zeroed_past(true: Callable, p: int) -> Callable:
    """``true()``'s output with its columns past the first ``p`` at zero (computed once)."""
    @functools.cache
    def zeroed():
        o = true().copy()
        o[..., p:] = 0.0
        return o

    return zeroed


def head_dim_blocks(q, k, v, kw, o_of):
    """A head dim held in a block that misses the rest (a loop over head-dim blocks of
    32-256 that stops after the first): q.k summed over the block's columns alone, or O's
    columns past it never written."""
    d, dv = q.shape[-1], v.shape[-1]
    for p in column_blocks(d):
        yield (f"scores q.k summed over the first {p} of d = {d} columns (the rest of the "
               "head dim left out: a loop over head-dim blocks that stops after the first)",
               o_of(q[..., :p], k[..., :p], v, scale=kw.get("scale", d ** -0.5)))
    true = o_of(q, k, v)
    for p in column_blocks(dv):
        yield f"O's columns past the first {p} of dv = {dv} left at zero", zeroed_past(true, p)


def variant_left_out(kw, o_of, q, k, v, first=None):
    """The case's variant left out, or a softcap put before the scale (c tanh(q.k / c),
    then scaled) or a window bound one key off; ``first``: :func:`_first_rows`, where
    sinks left out are tried."""
    if "softcap" in kw:
        c = kw["softcap"]
        yield "no softcap (scores left uncapped)", o_of(q, k, v, softcap=None)
        yield (f"the softcap applied before the 1/sqrt(d) scale: c tanh(q.k / c) scaled, not "
               f"c tanh(q.k / sqrt(d) / c), c = {c:g}",
               o_of(q, k, v, softcap=c * q.shape[-1] ** -0.5))
    if "sinks" in kw:
        words = "the sinks left out (no sink term in the softmax's sum)"
        if first is None:
            yield words, o_of(q, k, v, sinks=None)
        else:
            view, qkv = first
            yield words, o_of(*qkv, sinks=None), view
    if "window" in kw:
        left, right = kw["window"]
        yield "no sliding window (every key the mask allows)", o_of(q, k, v, window=(-1, -1))
        for side, other in (("left", (-1, right)), ("right", (left, -1))):
            bound = left if side == "left" else right
            if bound >= 0 and other != (-1, -1) and not (side == "right" and kw.get("causal")):
                yield (f"the window's {side} bound left out (unbounded), not {bound} (a bound "
                       "of 0 read as -1, no bound?)" if bound == 0 else
                       f"the window's {side} bound left out (unbounded), not {bound}",
                       o_of(q, k, v, window=other))
        for side, other in (("left", (left + 1, right)), ("left", (left - 1, right)),
                            ("right", (left, right + 1)), ("right", (left, right - 1))):
            bound, new = (left, other[0]) if side == "left" else (right, other[1])
            if bound < 0 or not 0 <= new <= MAX_WINDOW or (side == "right" and kw.get(
                    "causal")):  # an unbounded side, a bound of 0 made -1 (unbounded), past
                continue  # int32, causal's right of 0
            yield (f"a window of {other}, not {(left, right)}: one key "
                   f"{'more' if new > bound else 'fewer'} on the {side}",
                   o_of(q, k, v, window=other))


def _key_tail(q, k, v, kw, o_of, nq: int):
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

    why = {kept: [f"a loop over key blocks of {blocks(sizes)} that ends one block early"]
           for kept, sizes in dropped.items() if kept not in (0, nk)}
    if 0 < nq < nk:
        why.setdefault(nq, []).append(f"a key loop bounded by the queries' length Nq = {nq}")
    if nk > 1:
        why.setdefault(nk - 1, []).append("a key count one short")
    for kept, causes in sorted(why.items()):
        # causal: keys past ``kept`` hidden, the bottom-right diagonal kept where it was
        over = {"causal": False, "window": (-1, nk - kept)} if kw.get("causal") else {}
        keys = f"key {kept}" if kept == nk - 1 else f"keys {kept} to {nk - 1}"
        yield (f"{keys} of Nk = {nk} left out ({', or '.join(causes)})",
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


def _matches(err: float, standard: float, own: float) -> bool:
    return (err <= MATCH * max(standard, 1e-12) and err < CLEARER * own) or err < EXPLAINS * own


def _same(alt, output) -> bool:
    """Whether candidate ``alt`` gives ``output`` (to float64's rounding)."""
    try:
        return _max_abs(alt(), output) <= 1e-12 * max(1.0, float(np.abs(output).max()))
    except ValueError:
        return False


def _max_abs(a, b) -> float:
    with np.errstate(invalid="ignore"):
        return float(np.max(np.abs(a - b), initial=0.0))


def diagnose(candidates, out, ref, o_standard: float,
             lse_standard: float | None = None) -> str | None:
    """The wrong semantics the kernel's output (``out``: o, and lse or None) matches, in
    words, or None. ``candidates``: :func:`dense_candidates`, :func:`varlen_candidates` or
    :func:`decode_candidates` (a :class:`Candidates`' view: the part of an output they are
    computed for); ``ref``: the true (o, lse); ``o_standard`` / ``lse_standard``: the
    same-dtype standard model's max abs errors (the rule's yardstick). Candidates that give
    the same output as the match are named beside it (at Nq = 2 no causal mask is a
    diagonal one key late); a match that explains 99% of the error but stays past 2x the
    standard's says a second defect remains."""
    items = [(words, alt, rest[0] if rest else getattr(candidates, "view", lambda x: x))
             for words, alt, *rest in candidates]
    o = to_numpy(out[0])  # a float64 copy
    if not np.isfinite(o).all() or o.shape != ref[0].shape:
        return None
    for words, alt, view in items:  # alt: computed at the first FAIL that asks (cached)
        mine = view(o)
        own = _max_abs(mine, view(ref[0]))
        try:
            err = _max_abs(mine, alt())
        except ValueError:  # a semantics the reference refuses here: not this one
            continue
        if _matches(err, o_standard, own):
            same = [w for w, a, v in items if v is view and w != words and _same(a, alt())]
            named = words + "".join(f", or (the same here) {w}" for w in same)
            if err <= MATCH * max(o_standard, 1e-12):
                return (f"its O matches attention with {named}: max |O - that| {err:.2g} "
                        f"(the same-dtype standard's error: {o_standard:.2g}; against the "
                        f"true attention: {own:.2g})")
            left = err / max(o_standard, 1e-12)
            # a newcomer's scale of 1 explained "100.0%" and read "a second defect" at 19x:
            # that semantics' own rounding (scores 8x larger) is coarser than the standard's
            why = ("that semantics' own rounding (larger scores round coarser), or a "
                   "second defect" if left <= DEFECTS_REACH and "scale" in words else
                   "a second defect")
            return (f"its O is nearest attention with {named}, which explains "
                    f"{math.floor(10000 * (1 - err / own)) / 100:.2f}% of its error (against "
                    f"the true attention: {own:.2g}); what remains, max |O - that| "
                    f"{err:.2g}, is {left:.0f}x the same-dtype standard's error: {why}")
    lse = out[1] if len(out) > 1 else None
    if lse is None or lse_standard is None or to_numpy(lse).shape != ref[1].shape:
        return None
    lse = to_numpy(lse)
    for words, alt_of in getattr(candidates, "lses", Candidates(()).lses):
        alt = alt_of(ref[1])
        seen = np.isfinite(ref[1]) & np.isfinite(alt)  # rows that see no key: -inf
        if seen.any() and np.isfinite(lse[seen]).all():
            err, own = _max_abs(lse[seen], alt[seen]), _max_abs(lse[seen], ref[1][seen])
            if _matches(err, lse_standard, own):
                return (f"its LSE matches {words}: max |LSE - that| {err:.2g}, against the "
                        f"true LSE {own:.2g}")
    return None
