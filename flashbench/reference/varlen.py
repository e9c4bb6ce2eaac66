"""Packed variable-length batches (FlashAttention's ``flash_attn_varlen_func`` layout), float64.

q [total_q, H, d], k [total_k, Hkv, d], v [total_k, Hkv, dv] hold B sequences back to
back; sequence b's queries are rows ``cu_seqlens_q[b]:cu_seqlens_q[b + 1]`` and its keys
``cu_seqlens_k[b]:cu_seqlens_k[b + 1]``. Each sequence is an independent attention
problem with the variant's rules (causal and windows aligned bottom-right within the
sequence; a sequence with no keys gives its rows O = 0, LSE = -inf, or the sink).
Returns follow FlashAttention: o [total_q, H, dv], lse [H, total_q]; gradients have the
packed shapes of q, k, v (and dsinks [H] with sinks, summed over the sequences).

Each function runs its per-sequence twin of :mod:`flashbench.reference.oneshot` on the
sequence's [H, n, d] view, so varlen equals a loop over its sequences exactly.
"""

from __future__ import annotations

import numpy as np

from flashbench.inputs.validation import as_float_array, check_finite
from flashbench.inputs.variant import check_cu_pair, variant_of
from flashbench.reference import oneshot

__all__ = ["varlen_attention", "online_varlen_attention", "varlen_attention_grad",
           "online_varlen_attention_grad", "check_varlen", "sequences", "per_sequence",
           "per_sequence_grad"]


def check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None,
                 finite: bool = False):
    """Validate a packed batch: ``(q, k, v, cu_q, cu_k)`` as float64 arrays and int64 cu."""
    q, k, v = (as_float_array(x, name) for x, name in ((q, "q"), (k, "k"), (v, "v")))
    for name, arr, want in (("q", q, "[total_q, H, d]"), ("k", k, "[total_k, Hkv, d]"),
                            ("v", v, "[total_k, Hkv, dv]")):
        if arr.ndim != 3:
            raise ValueError(f"{name} must have the packed shape {want}, got shape {arr.shape}")
        if finite:
            check_finite(arr, name)
    if k.shape[0] != v.shape[0]:
        raise ValueError(f"k and v must have the same packed length total_k: k has "
                         f"{k.shape[0]}, v has {v.shape[0]}")
    cu_q, cu_k = check_cu_pair(cu_seqlens_q, cu_seqlens_k, q.shape[0], k.shape[0],
                               max_seqlen_q, max_seqlen_k)
    return q, k, v, cu_q, cu_k


def sequences(cu_q: np.ndarray, cu_k: np.ndarray):
    """The (query slice, key slice) of each sequence of a packed batch."""
    for b in range(cu_q.shape[0] - 1):
        yield slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])


def _heads_first(x: np.ndarray) -> np.ndarray:
    return np.swapaxes(x, 0, 1)  # [n, H, d] -> [H, n, d] (a view)


def _blind(n: int, h: int, dv: int, sinks) -> tuple[np.ndarray, np.ndarray]:
    """A sequence with queries but no key: O = 0, LSE = -inf (or the sink)."""
    lse = np.full((h, n), -np.inf)
    if sinks is not None:
        lse[...] = np.asarray(sinks, dtype=np.float64)[:, None]
    return np.zeros((h, n, dv)), lse


def _checked_sinks(h, causal=False, window=(-1, -1), softcap=None, sinks=None, **_):
    """The variant's arguments checked once for the batch (also where every sequence is
    empty); the sinks as checked floats (None without)."""
    variant = variant_of(causal, window, softcap, sinks)
    variant.sink_logits(h)
    return variant.sinks


def per_sequence(fn, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None,
                 check_finite=False, **kwargs):
    """Run ``fn(q_b, k_b, v_b, **kwargs) -> (o_b, lse_b)`` on each sequence's [H, n, d] views
    of a packed batch: (o [total_q, H, dv], lse [H, total_q]) in float64. ``kwargs`` holds
    causal, window, softcap, sinks (and whatever else ``fn`` takes: a precision model's
    dtype and block). A sequence with queries and no key gets O = 0, LSE = -inf or the sink."""
    q, k, v, cu_q, cu_k = check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                       max_seqlen_k, finite=check_finite)
    h, dv = q.shape[1], v.shape[2]
    sinks = _checked_sinks(h, **kwargs)
    o = np.zeros((q.shape[0], h, dv))
    lse = np.full((h, q.shape[0]), -np.inf)
    for qs, ks in sequences(cu_q, cu_k):
        if qs.start == qs.stop:
            continue
        if ks.start == ks.stop:
            o_b, lse_b = _blind(qs.stop - qs.start, h, dv, sinks)
        else:
            o_b, lse_b = fn(_heads_first(q[qs]), _heads_first(k[ks]), _heads_first(v[ks]),
                            **kwargs)
        o[qs] = _heads_first(o_b)
        lse[:, qs] = lse_b
    return o, lse


def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None,
                     causal: bool = False, scale: float | None = None,
                     window: tuple[int, int] = (-1, -1), softcap: float | None = None,
                     sinks=None, check_finite: bool = False):
    """One-shot attention of a packed batch (module docstring), float64.

    Args:
        q: [total_q, H, d]; k: [total_k, Hkv, d]; v: [total_k, Hkv, dv].
        cu_seqlens_q, cu_seqlens_k: int [B + 1], from 0, non-decreasing, ending at total_q
            and total_k; lengths of 0 are allowed.
        max_seqlen_q, max_seqlen_k: None, or ints at least the longest sequence.
        causal, scale, window, softcap, sinks, check_finite: as
            :func:`flashbench.reference.attention`, for every sequence.

    Returns:
        (o [total_q, H, dv], lse [H, total_q]), float64.
    """
    return per_sequence(oneshot.attention, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                    max_seqlen_k, check_finite, causal=causal, scale=scale, window=window,
                    softcap=softcap, sinks=sinks)


def online_varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None,
                            max_seqlen_k=None, block: int = 64, causal: bool = False,
                            scale: float | None = None, window: tuple[int, int] = (-1, -1),
                            softcap: float | None = None, sinks=None,
                            check_finite: bool = False):
    """Streamed attention of a packed batch: :func:`varlen_attention` with the (m, l)
    recurrence over key blocks of ``block`` keys within each sequence."""
    return per_sequence(oneshot.online_attention, q, k, v, cu_seqlens_q, cu_seqlens_k,
                    max_seqlen_q, max_seqlen_k, check_finite, block=block, causal=causal,
                    scale=scale, window=window, softcap=softcap, sinks=sinks)


def per_sequence_grad(fn, q, k, v, do, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None,
                      max_seqlen_k=None, forward=None, **kwargs):
    """Run ``fn(q_b, k_b, v_b, do_b, **kwargs) -> (dq_b, dk_b, dv_b[, dsinks_b])`` on each
    sequence's [H, n, d] views (``forward``: its (o_b, lse_b) come between v_b and do_b):
    the packed gradients in float64, dsinks summed over the sequences (with sinks). Rows of
    a sequence without keys, and keys of one without queries, get zero gradients."""
    q, k, v, cu_q, cu_k = check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                       max_seqlen_k)
    do = as_float_array(do, "do")
    want = (q.shape[0], q.shape[1], v.shape[2])
    if do.shape != want:
        raise ValueError(f"do must have the output's shape [total_q, H, dv] {want}, got "
                         f"shape {do.shape}")
    sinks = _checked_sinks(q.shape[1], **kwargs)
    grads = [np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)]
    dsinks = None if sinks is None else np.zeros(q.shape[1])
    for qs, ks in sequences(cu_q, cu_k):
        if qs.start == qs.stop or ks.start == ks.stop:
            continue  # blind rows: dq = 0; unseen keys: dk = dv = 0; the sink's dS is 0 (O = 0)
        args = [_heads_first(x) for x in (q[qs], k[ks], v[ks])]
        if forward is not None:  # the streamed backward reads the forward's O and LSE
            args += forward(*args, **kwargs)
        out = fn(*args, _heads_first(do[qs]), **kwargs)
        for grad, part, rows in zip(grads, out[:3], (qs, ks, ks), strict=True):
            grad[rows] = _heads_first(part)
        if dsinks is not None:
            dsinks += out[3]
    return (*grads, dsinks) if dsinks is not None else tuple(grads)


def varlen_attention_grad(q, k, v, do, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None,
                          max_seqlen_k=None, causal: bool = False, scale: float | None = None,
                          window: tuple[int, int] = (-1, -1), softcap: float | None = None,
                          sinks=None):
    """One-shot gradients of a packed batch: ``(dq, dk, dv)`` with q's, k's, v's packed
    shapes (with sinks: ``(dq, dk, dv, dsinks)``); ``do`` [total_q, H, dv]."""
    return per_sequence_grad(oneshot.attention_grad, q, k, v, do, cu_seqlens_q, cu_seqlens_k,
                     max_seqlen_q, max_seqlen_k, causal=causal, scale=scale, window=window,
                     softcap=softcap, sinks=sinks)


def online_varlen_attention_grad(q, k, v, do, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None,
                                 max_seqlen_k=None, block: int = 64, causal: bool = False,
                                 scale: float | None = None,
                                 window: tuple[int, int] = (-1, -1),
                                 softcap: float | None = None, sinks=None):
    """Streamed gradients of a packed batch (FlashAttention-2's recurrence per sequence, from
    the streamed forward's O and LSE); returns as :func:`varlen_attention_grad`."""

    def grad(q, k, v, o, lse, do, **kw):
        return oneshot.online_attention_grad(q, k, v, o, lse, do, **kw)

    return per_sequence_grad(grad, q, k, v, do, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                     max_seqlen_k, forward=oneshot.online_attention, block=block,
                     causal=causal, scale=scale, window=window, softcap=softcap, sinks=sinks)
