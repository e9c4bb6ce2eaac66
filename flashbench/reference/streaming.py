"""The (m, l) recurrence of FlashAttention-2, written once for every compute dtype.

softmax is shift-invariant, so the statistics of two key blocks combine exactly:
``m = max(m_a, m_b)``, ``l = exp(m_a - m) l_a + exp(m_b - m) l_b``. The output
streams the same way: ``O = exp(m_old - m_new) O + P_blk V_blk`` with
``P_blk = exp(S_blk - m_new)``, and one division by ``l`` at the end.

:func:`stream_attention` is used by :func:`flashbench.reference.online_attention`
(float64, no rounding) and by :func:`flashbench.numerics.flash_model` (float32 with
the operands and P rounded to a storage dtype). It never holds more than one
``[..., Nq, block]`` score tile.

Causal masking is bottom-right aligned: query ``i`` sees key ``j`` iff
``j <= i + Nk - Nq``. Rows that see no key finish with ``l == 0``: their output is
0 and their LSE is -inf, computed without floating-point warnings.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from flashbench.inputs.validation import check_causal


def causal_mask(nq: int, nk: int, start: int = 0, stop: int | None = None) -> np.ndarray | None:
    """Boolean [nq, stop - start] mask of keys ``start..stop-1`` hidden from each query.

    Returns None when no key of that range is hidden from any query (the block lies
    wholly on or below the diagonal), so callers skip the masking work.
    """
    stop = nk if stop is None else stop
    offset = nk - nq
    if stop - 1 <= offset:  # the first query row already sees every key of the block
        return None
    rows = np.arange(nq)[:, None]
    cols = np.arange(start, stop)[None, :]
    return cols > rows + offset


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


def masked_scores(q: np.ndarray, k: np.ndarray, scale: float, causal: bool,
                  round_s: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
    """The full score matrix ``(q @ k^T) * scale`` [..., Nq, Nk] in q's dtype, causal
    entries set to -inf (after ``round_s``, which models storing S in a lower precision)."""
    s = np.matmul(q, np.swapaxes(k, -1, -2))
    s *= s.dtype.type(scale)
    if round_s is not None:
        s = round_s(s)
    if causal:
        hidden = causal_mask(q.shape[-2], k.shape[-2])
        if hidden is not None:
            s[..., hidden] = -np.inf
    return s


def unnormalised_softmax(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """In place: ``s`` becomes ``exp(s - rowmax)``; returns (that array, the row maxima m)."""
    m = s.max(axis=-1)
    s -= safe_max(m)[..., None]
    return np.exp(s, out=s), m


def finish(o: np.ndarray, m: np.ndarray, l: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Divide the accumulated output by l once; rows with l == 0 give output 0 and LSE -inf."""
    seen = (l != 0)[..., None]  # NaN l propagates NaN (see log_sum_exp)
    o = np.divide(o, l[..., None], out=np.zeros_like(o), where=seen)
    return o, log_sum_exp(m, l)


def first_row(nq: int, nk: int, start: int, causal: bool) -> int:
    """The first query row that sees key ``start``: with a causal mask, rows above it see no
    key of a block starting there, nor of any later block (0 without a mask)."""
    return max(0, start - (nk - nq)) if causal else 0


def score_tile(q: np.ndarray, kt: np.ndarray, start: int, stop: int, r0: int, scale,
               causal: bool) -> np.ndarray:
    """Scores of query rows ``r0:`` against keys ``start:stop``: ``(q @ k^T) * scale``
    [..., Nq - r0, stop - start] in q's dtype, causal entries set to -inf by assignment
    (hidden whatever the score, even inf or nan). ``kt`` is k transposed, [..., d, Nk]."""
    s = np.matmul(q[..., r0:, :], kt[..., start:stop])
    s *= scale
    if causal:
        hidden = causal_mask(q.shape[-2], kt.shape[-1], start, stop)
        if hidden is not None:
            np.copyto(s, -np.inf, where=hidden[r0:])
    return s


def stream_attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    block: int,
    causal: bool,
    scale: float,
    compute: type = np.float64,
    round_p: Callable[[np.ndarray], np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Stream key/value blocks through the (m, l) recurrence.

    Args:
        q: [..., Nq, d], k: [..., Nk, d], v: [..., Nk, dv], already in ``compute``
            dtype and already rounded to whatever the caller models.
        block: keys per block (>= 1; the last block may be shorter).
        causal: bottom-right aligned causal mask.
        scale: multiplies q @ k^T (in ``compute`` dtype) before the softmax.
        compute: float64 or float32: dtype of scores, m, l, P and the O accumulator.
        round_p: rounds the unnormalised P tile before P @ V (None: no rounding).

    Returns:
        (o, lse): o [..., Nq, dv] and lse [..., Nq], both in ``compute`` dtype.
    """
    causal = check_causal(causal)
    nq, nk, dv = q.shape[-2], k.shape[-2], v.shape[-1]
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    o = np.zeros(batch + (nq, dv), dtype=compute)
    m = np.full(batch + (nq,), -np.inf, dtype=compute)
    l = np.zeros(batch + (nq,), dtype=compute)
    scale_c = compute(scale)
    kt = np.swapaxes(k, -1, -2)
    for start in range(0, nk, block):
        stop = min(start + block, nk)
        r0 = first_row(nq, nk, start, causal)
        if r0 >= nq:
            break
        o_r, m_r, l_r = o[..., r0:, :], m[..., r0:], l[..., r0:]  # views: updated in place
        s = score_tile(q, kt, start, stop, r0, scale_c, causal)  # [..., Nq - r0, b]
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
        o_r += np.matmul(p if round_p is None else round_p(p), v[..., start:stop, :])
        m_r[...] = m_new
    return finish(o, m, l)
