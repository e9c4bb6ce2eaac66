"""The (m, l) recurrence of FlashAttention-2, written once for every compute dtype.

softmax is shift-invariant, so the row statistics (max m, sum l) of two key blocks combine
exactly; the output streams the same way, rescaled as m moves, and is divided by l once at
the end. :func:`stream_attention` is used by :func:`flashbench.reference.online_attention`
(float64, no rounding) and by :func:`flashbench.numerics.flash_model` (float32 with the
operands and P rounded to a storage dtype). It never holds more than one
``[..., Nq, block]`` score tile. Masks and score modifiers come from one
:class:`~flashbench.inputs.variant.Variant` (``causal`` arguments take a bool or a
Variant): key blocks no row sees are skipped, and each block touches only the rows that see
it. Rows that see no key finish with ``l == 0`` (output 0, LSE -inf, no floating-point
warnings); sinks join the statistics in :func:`finish`. The recurrence written out:
docs/numerics.md ("The streamed forward: the (m, l) recurrence").
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from flashbench.inputs.variant import Variant, variant_of
from flashbench.reference.products import matmul

_CAUSAL = Variant(causal=True)


def causal_mask(nq: int, nk: int, start: int = 0, stop: int | None = None) -> np.ndarray | None:
    """Boolean [nq, stop - start] mask of keys ``start..stop-1`` hidden from each query by
    the causal mask; None when no key of that range is hidden (:meth:`Variant.hidden`)."""
    return _CAUSAL.hidden(nq, nk, start, stop)


def safe_max(m: np.ndarray) -> np.ndarray:
    """Row maxima with -inf (rows that see no key yet) replaced by 0: exp never sees inf - inf."""
    return np.where(np.isneginf(m), np.zeros((), m.dtype), m)


def log_sum_exp(m: np.ndarray, l: np.ndarray) -> np.ndarray:
    """LSE = m + log(l) from row statistics; -inf where l == 0 (the row sees no key).

    Only l == 0 means "blind": a NaN l (non-finite inputs) stays NaN, never 0 / -inf.
    """
    blind = l == 0
    return np.where(blind, np.array(-np.inf, dtype=m.dtype),
                    m + np.log(np.where(blind, np.ones((), l.dtype), l)))


def masked_scores(q: np.ndarray, k: np.ndarray, scale: float, causal: bool | Variant,
                  round_s: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
    """The full score matrix ``(q @ k^T) * scale`` [..., Nq, Nk] in q's dtype, softcapped,
    hidden entries set to -inf (``round_s`` models storing S, and each op of the softcap,
    in a lower precision)."""
    variant = variant_of(causal)
    s = matmul(q, np.swapaxes(k, -1, -2))
    s *= s.dtype.type(scale)
    if round_s is not None:
        s = round_s(s)
    s = variant.cap(s, round_s)
    hidden = variant.hidden(q.shape[-2], k.shape[-2])
    if hidden is not None:
        s[..., hidden] = -np.inf
    return s


def unnormalised_softmax(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """In place: ``s`` becomes ``exp(s - rowmax)``; returns (that array, the row maxima m)."""
    m = s.max(axis=-1)
    s -= safe_max(m)[..., None]
    return np.exp(s, out=s), m


def finish(o: np.ndarray, m: np.ndarray, l: np.ndarray,
           sink: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Divide the accumulated output by l once; rows with l == 0 give output 0 and LSE -inf.

    ``sink`` (broadcasting against m; None: no sink) joins the statistics first, as a
    block of one key with no value: ``m' = max(m, sink)``, ``l' = exp(m - m') l +
    exp(sink - m')`` and O is rescaled by ``exp(m - m')``. A sink of -inf changes nothing
    (bit for bit); a blind row with a finite sink gets O = 0 and LSE = sink.
    """
    if sink is not None:
        sink = np.broadcast_to(sink.astype(m.dtype, copy=False), m.shape)
        m_new = np.maximum(m, sink)
        m_ref = safe_max(m_new)
        alpha = np.exp(m - m_ref)
        l = l * alpha + np.exp(sink - m_ref)
        o = o * alpha[..., None]
        m = m_new
    seen = (l != 0)[..., None]  # NaN l propagates NaN (see log_sum_exp)
    o = np.divide(o, l[..., None], out=np.zeros_like(o), where=seen)
    return o, log_sum_exp(m, l)


def score_tile(q: np.ndarray, kt: np.ndarray, start: int, stop: int, rows: tuple[int, int],
               scale, variant: Variant) -> np.ndarray:
    """Scores of query rows ``r0:r1`` against keys ``start:stop``: ``(q @ k^T) * scale``
    [..., r1 - r0, stop - start] in q's dtype, softcapped, hidden entries set to -inf by
    assignment (hidden whatever the score, even inf or nan). ``kt`` is k transposed."""
    r0, r1 = rows
    s = matmul(q[..., r0:r1, :], kt[..., start:stop])
    s *= scale
    s = variant.cap(s)
    hidden = variant.hidden(q.shape[-2], kt.shape[-1], start, stop, r0, r1)
    if hidden is not None:
        np.copyto(s, -np.inf, where=hidden)
    return s


def key_blocks(variant: Variant, nq: int, nk: int, block: int):
    """The key blocks some query row sees: ``(start, stop, (r0, r1))`` with the rows that
    see each; blocks no row sees are never yielded (a window's work grows with the window)."""
    lo, hi = variant.key_range(nq, nk)
    for start in range((lo // block) * block, hi, block):
        stop = min(start + block, nk)
        r0, r1 = variant.row_range(nq, nk, start, stop)
        if r0 < r1:
            yield start, stop, (r0, r1)


def stream_attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    block: int,
    causal: bool | Variant,
    scale: float,
    compute: type = np.float64,
    round_p: Callable[[np.ndarray], np.ndarray] | None = None,
    sink: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Stream key/value blocks through the (m, l) recurrence.

    Args:
        q: [..., Nq, d], k: [..., Nk, d], v: [..., Nk, dv], already in ``compute``
            dtype and already rounded to whatever the caller models.
        block: keys per block (>= 1; the last block may be shorter).
        causal: a bool (bottom-right aligned causal mask) or a :class:`Variant`.
        scale: multiplies q @ k^T (in ``compute`` dtype) before the softmax.
        compute: float64 or float32: dtype of scores, m, l, P and the O accumulator.
        round_p: rounds the unnormalised P tile before P @ V (None: no rounding).
        sink: per-row sink logits broadcasting against [..., Nq] (:func:`finish`).

    Returns:
        (o, lse): o [..., Nq, dv] and lse [..., Nq], both in ``compute`` dtype.
    """
    variant = variant_of(causal)
    nq, nk, dv = q.shape[-2], k.shape[-2], v.shape[-1]
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    o = np.zeros(batch + (nq, dv), dtype=compute)
    m = np.full(batch + (nq,), -np.inf, dtype=compute)
    l = np.zeros(batch + (nq,), dtype=compute)
    scale_c = compute(scale)
    kt = np.swapaxes(k, -1, -2)
    for start, stop, (r0, r1) in key_blocks(variant, nq, nk, block):
        o_r, m_r, l_r = o[..., r0:r1, :], m[..., r0:r1], l[..., r0:r1]  # views: in place
        s = score_tile(q, kt, start, stop, (r0, r1), scale_c, variant)  # [..., r1 - r0, b]
        m_new = np.maximum(m_r, s.max(axis=-1))
        m_ref = safe_max(m_new)
        alpha = np.exp(m_r - m_ref)  # rescales the old statistics; 0 where m was -inf
        s -= m_ref[..., None]
        p = np.exp(s, out=s)
        l_r *= alpha
        l_r += p.sum(axis=-1)
        moved = alpha != 1  # rows whose running max moved: only they need rescaling
        if moved.all():
            o_r *= alpha[..., None]
        elif moved.any():
            o_r[moved] *= alpha[moved][:, None]
        o_r += matmul(p if round_p is None else round_p(p), v[..., start:stop, :])
        m_r[...] = m_new
    return finish(o, m, l, sink)
