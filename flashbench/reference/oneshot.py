"""The gold reference: softmax and attention in float64, one-shot and streamed.

Layouts ``x [..., N]``; ``q [..., Nq, d]``, ``k [..., Nk, d]``, ``v [..., Nk, dv]`` with
leading dims that broadcast like numpy matmul, and k, v with Hkv heads dividing q's H
(:mod:`flashbench.inputs.validation`). Every function computes in float64 whatever the
input dtype, and returns float64. ``scale`` defaults to ``1/sqrt(d)``; LSE is the natural-log
log-sum-exp of each query row's scaled, masked scores, ``[..., Nq]``; ``causal=True`` is
bottom-right aligned (query ``i`` sees key ``j`` iff ``j <= i + Nk - Nq``), and a row that
sees no key has output 0 and LSE -inf. The one-shot functions materialise the
``[..., Nq, Nk]`` scores; the streamed ones (:mod:`flashbench.reference.streaming`,
:mod:`flashbench.reference.streaming_bwd`) hold ``[..., Nq, block]`` tiles and equal them
to reduction-order noise. The contract in full: docs/numerics.md ("The float64
reference"); gradients and grouped-query heads: docs/backward.md; ``window``, ``softcap``,
``sinks``: docs/variants.md ("The contract").
"""

from __future__ import annotations

import numpy as np

from flashbench.inputs.validation import (
    attention_shape,
    check_block,
    check_qkv,
    check_rows,
    check_scale,
    check_shaped,
    grouped_grad,
    grouped_query,
    sum_to,
)
from flashbench.inputs.variant import variant_of
from flashbench.reference.products import matmul
from flashbench.reference.streaming import (
    finish,
    masked_scores,
    safe_max,
    stream_attention,
    unnormalised_softmax,
)
from flashbench.reference.streaming_bwd import sink_grad, stream_attention_grad

__all__ = ["softmax", "online_softmax", "attention", "online_attention", "row_stats",
           "attention_grad", "online_attention_grad"]


def softmax(x) -> np.ndarray:
    """One-shot softmax over the last axis of ``x [..., N]`` in float64.

    -inf entries are masked out; a row that is all -inf gives all zeros.
    """
    x = check_rows(x)
    m = safe_max(x.max(axis=-1, keepdims=True))
    e = np.exp(x - m)
    total = e.sum(axis=-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total != 0)


def row_stats(x, block: int) -> tuple[np.ndarray, np.ndarray]:
    """Streamed softmax statistics of ``x [..., N]``: (m, l), each [...], float64.

    ``m`` is the row maximum and ``l = sum(exp(x - m))``, combined block by block
    with ``l = exp(m_old - m_new) l_old + exp(m_blk - m_new) l_blk``.
    """
    x = check_rows(x)
    block = check_block(block)
    m = np.full(x.shape[:-1], -np.inf)
    l = np.zeros(x.shape[:-1])
    for start in range(0, x.shape[-1], block):
        tile = x[..., start : start + block]
        m_blk = tile.max(axis=-1)
        l_blk = np.exp(tile - safe_max(m_blk)[..., None]).sum(axis=-1)
        m_new = np.maximum(m, m_blk)
        m_ref = safe_max(m_new)
        l = np.exp(m - m_ref) * l + np.exp(m_blk - m_ref) * l_blk
        m = m_new
    return m, l


def online_softmax(x, block: int) -> np.ndarray:
    """Softmax over the last axis of ``x [..., N]``, streamed in blocks of ``block`` columns.

    First pass: the (m, l) statistics (:func:`row_stats`); second pass: each block
    normalised with the converged statistics. Any ``block >= 1``, dividing N or not.
    """
    x = check_rows(x)
    m, l = row_stats(x, block)
    m_ref = safe_max(m)[..., None]
    inv_l = np.divide(1.0, l, out=np.zeros_like(l), where=l != 0)[..., None]
    p = np.empty_like(x)
    for start in range(0, x.shape[-1], block):
        p[..., start : start + block] = np.exp(x[..., start : start + block] - m_ref) * inv_l
    return p


def problem(q, k, v, causal, scale, window, softcap, sinks, check_finite):
    """Validate an attention call: ``(q, k, v, variant, scale, sink)`` with q, k, v float64,
    the :class:`~flashbench.inputs.variant.Variant` and the sink logits [H, 1] (None
    without sinks)."""
    q, k, v = check_qkv(q, k, v, finite=check_finite)
    variant = variant_of(causal, window, softcap, sinks)
    scale = check_scale(scale, q.shape[-1])
    out = attention_shape(q.shape, k.shape, v.shape)
    if len(out) < 3:  # q without a head dim: one head, its sink broadcasting over rows
        sink = variant.sink_logits(1)
        return q, k, v, variant, scale, None if sink is None else sink.reshape(1)
    return q, k, v, variant, scale, variant.sink_logits(out[-3])


def attention(q, k, v, causal: bool = False, scale: float | None = None,
              window: tuple[int, int] = (-1, -1), softcap: float | None = None, sinks=None,
              check_finite: bool = False):
    """One-shot attention in float64; materialises the full score matrix.

    Args:
        q: [..., Nq, d]; k: [..., Nk, d]; v: [..., Nk, dv]. Any real dtype; NumPy
            arrays or array-likes (a torch tensor is a TypeError).
        causal: bottom-right aligned causal mask.
        scale: score scale; None means 1/sqrt(d).
        window: (left, right) keys visible around the aligned diagonal, -1 unbounded.
        softcap: c > 0: scores become c tanh(s / c) before masking; None: no cap.
        sinks: [H] float logits, one per query head (None: no sinks).
        check_finite: raise ValueError if q, k or v hold inf or nan.

    Returns:
        (o, lse): o [..., Nq, dv] float64, lse [..., Nq] float64 (natural log; with
        sinks it includes the sink term).
    """
    q, k, v, variant, scale, sink = problem(q, k, v, causal, scale, window, softcap, sinks,
                                            check_finite)
    return _one_shot(q, k, v, variant=variant, scale=scale, sink=sink)


@grouped_query
def _one_shot(q, k, v, *, variant, scale, sink):
    p, m = unnormalised_softmax(masked_scores(q, k, scale, variant))
    return finish(matmul(p, v), m, p.sum(axis=-1), sink)


def online_attention(q, k, v, block: int = 64, causal: bool = False, scale: float | None = None,
                     window: tuple[int, int] = (-1, -1), softcap: float | None = None,
                     sinks=None, check_finite: bool = False):
    """Streamed attention in float64: key/value blocks through the (m, l) recurrence.

    Holds at most one ``[..., Nq, block]`` score tile; ``block`` is any int >= 1,
    including values that do not divide Nk or exceed it. Key blocks a window hides from
    every row are never visited. Same arguments and returns as :func:`attention`, to
    which it is equal up to ~1e-13.
    """
    block = check_block(block)
    q, k, v, variant, scale, sink = problem(q, k, v, causal, scale, window, softcap, sinks,
                                            check_finite)
    return _streamed(q, k, v, block=block, causal=variant, scale=scale, sink=sink)


_streamed = grouped_query(stream_attention)


def attention_grad(q, k, v, do, causal: bool = False, scale: float | None = None,
                   window: tuple[int, int] = (-1, -1), softcap: float | None = None,
                   sinks=None, check_finite: bool = False):
    """One-shot gradients of attention in float64; materialises S, P and dS.

    Softmax's textbook backward, ``dS = P * (dP - rowsum(P * dP))`` with ``dP = dO V^T``
    (times ``1 - (t / c)^2`` through a softcap, t the capped score), then
    ``dq = scale dS K``, ``dk = scale dS^T Q``, ``dv = P^T dO``.

    Args:
        q, k, v, causal, scale, window, softcap, sinks, check_finite: as for :func:`attention`.
        do: [..., Nq, dv], the gradient of the output (o's shape).

    Returns:
        (dq, dk, dv): float64 arrays of q's, k's and v's shapes; with sinks
        (dq, dk, dv, dsinks), dsinks [H] (:func:`flashbench.reference.streaming_bwd.sink_grad`).
    """
    q, k, v, variant, scale, sink = problem(q, k, v, causal, scale, window, softcap, sinks,
                                            check_finite)
    do = check_shaped(do, "do", attention_shape(q.shape, k.shape, v.shape),
                      "the output's shape [..., Nq, dv]", finite=check_finite)
    grads = grouped_grad(_one_shot_grad, q, k, v, ((do, -3), (sink, -2)), variant=variant,
                         scale=scale)
    if sink is None:
        return grads
    o, lse = _one_shot(q, k, v, variant=variant, scale=scale, sink=sink)
    return (*grads, sink_grad(sink, lse, o, do))


def _one_shot_grad(q, k, v, do, sink, *, variant, scale):
    s = masked_scores(q, k, scale, variant)
    dcap = None if variant.softcap is None else variant.cap_grad(s)
    p, m = unnormalised_softmax(s)
    l = p.sum(axis=-1, keepdims=True)
    if sink is not None:  # the sink's term joins the denominator (shifted by the row max;
        with np.errstate(over="ignore"):  # a sink e^709 above every score: P = 0, as it is)
            l += np.exp(sink - safe_max(m))[..., None]
    p = np.divide(p, l, out=p, where=l != 0)  # rows that see no key: P = 0
    dv = sum_to(matmul(np.swapaxes(p, -1, -2), do), v.shape)
    ds = matmul(do, np.swapaxes(v, -1, -2))  # dP
    ds -= np.einsum("...ij,...ij->...i", ds, p)[..., None]
    ds *= p
    if dcap is not None:
        ds *= dcap
    dq = sum_to(matmul(ds, k), q.shape) * scale
    dk = sum_to(matmul(np.swapaxes(ds, -1, -2), q), k.shape) * scale
    return dq, dk, dv


def online_attention_grad(q, k, v, o, lse, do, block: int = 64, causal: bool = False,
                          scale: float | None = None, window: tuple[int, int] = (-1, -1),
                          softcap: float | None = None, sinks=None,
                          check_finite: bool = False):
    """Streamed gradients of attention in float64: FlashAttention-2's backward recurrence.

    ``D = rowsum(dO * O)``; per key block, P is recomputed from the scores and the
    LSE (never stored) and dV, dS, dQ, dK follow (:mod:`flashbench.reference.streaming_bwd`).
    Holds a few ``[..., Nq, block]`` tiles at most; ``block`` is any int >= 1.

    Args:
        q, k, v, causal, scale, window, softcap, sinks, check_finite: as for
            :func:`online_attention`.
        o, lse: the forward's output [..., Nq, dv] and LSE [..., Nq] (for example from
            :func:`online_attention` with the same arguments; with sinks, the LSE holds them).
        do: [..., Nq, dv], the gradient of the output.

    Returns:
        (dq, dk, dv) (with sinks: (dq, dk, dv, dsinks)) as :func:`attention_grad`, to
        which they are equal to ~1e-13 relative to the gradient's scale.
    """
    block = check_block(block)
    q, k, v, variant, scale, sink = problem(q, k, v, causal, scale, window, softcap, sinks,
                                            check_finite)
    out = attention_shape(q.shape, k.shape, v.shape)
    o = check_shaped(o, "o", out, "the output's shape [..., Nq, dv]")
    lse = check_shaped(lse, "lse", out[:-1], "the output's row shape [..., Nq]")
    do = check_shaped(do, "do", out, "the output's shape [..., Nq, dv]", finite=check_finite)
    grads = grouped_grad(stream_attention_grad, q, k, v, ((o, -3), (lse, -2), (do, -3)),
                         block=block, causal=variant, scale=scale)
    return grads if sink is None else (*grads, sink_grad(sink, lse, o, do))

