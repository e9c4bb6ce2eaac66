"""A FAIL's cause found by trying it: the float64 reference under the plausible wrong
semantics kernel authors write (a scale of 1/sqrt(dv), of a padded d, or none; a causal
mask aligned top-left, left out or added; grouped-query heads mapped h % Hkv; an LSE in base
2). The first the kernel's output matches within what its dtype allows (2x the same-dtype
standard's max error, and under a quarter of its error against the true attention), or
that explains 99% of that error, is named. Only a FAILed record is tried: a few float64
references of its case. A probe
(2026-12-07): a 1/sqrt(dv) scale at d = 192, dv = 128 in bf16 read "likely the O
accumulator" (36.6x the standard's error, under the precision defects' 61x)."""

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

    for words, scale in _scales(q.shape[-1], v.shape[-1]):
        yield words, o_of(q, k, v, scale=scale)
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


def decode_candidates(inputs, causal: bool, dv: int | None,
                      absorbed: bool) -> Iterator[tuple[str, Callable]]:
    """The same for a decode case (``inputs``: q, k and v caches, cache_seqlens, block
    table; ``absorbed``: MLA's form, V the first ``dv`` columns of K): the scales, and the
    causal mask among several new tokens left out."""
    q, k, v, lens, table = inputs

    def o_of(**over):
        return lambda: reference.decode_attention(q, k, None if absorbed else v, lens, table,
                                                  **{"causal": causal, "dv": dv, **over})[0]

    for words, scale in _scales(q.shape[-1], dv or v.shape[-1]):
        yield words, o_of(scale=scale)
    if causal and q.shape[1] > 1:
        yield "no causal mask among the new tokens", o_of(causal=False)


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
