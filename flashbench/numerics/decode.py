"""Precision models of decode: split-KV with partial states stored in fp32, bf16 or fp16.

:func:`split_decode_model` is a split-KV decode kernel computing in T: q, k, v rounded to
T; each key chunk (aligned to ``block``) streamed through the flash model's fp32 (m, l)
recurrence with P rounded to T (:func:`flashbench.reference.streaming.stream_attention`);
the partial O_s and LSE_s stored in ``partials`` / ``lse_dtype`` (with one split nothing
is stored); merged in fp32 (:func:`flashbench.reference.decode.merge`); O rounded to T,
LSE fp32. A weight read from an LSE rounded by delta is off by exp(delta), and delta
grows with |LSE|: docs/decode.md has the measured cost. :func:`standard_decode_model`,
plain attention in T on each sequence's gathered cache, is the baseline rule's yardstick.
"""

from __future__ import annotations

import numpy as np

from flashbench.inputs.kvcache import split_bounds
from flashbench.inputs.precision import PRECISIONS, Precision, get_precision
from flashbench.inputs.validation import check_block, split_heads
from flashbench.numerics.forward import standard_model
from flashbench.reference.decode import check_decode, merge, sequence_cache
from flashbench.reference.streaming import stream_attention

__all__ = ["split_decode_model", "standard_decode_model", "PARTIAL_DTYPES"]

PARTIAL_DTYPES = ("fp32", "bf16", "fp16")  # what partial states may be stored in


def _sequences(q, k_cache, v_cache, cache_seqlens, block_table, causal, scale,
               prec: Precision, dv=None):
    """Per sequence: (b, n, q [Hkv, G, Nq, d], k, v [Hkv, 1, n, *]) rounded to ``prec``."""
    q, k_cache, v_cache, lens, table, layout, scale = check_decode(
        q, k_cache, v_cache, cache_seqlens, block_table, causal, scale, dv)
    out = []
    for b, n in enumerate(lens.tolist()):
        k = sequence_cache(k_cache, b, n, table).transpose(1, 0, 2)[:, None]
        v = sequence_cache(v_cache, b, n, table).transpose(1, 0, 2)[:, None]
        qb = split_heads(q[b].transpose(1, 0, 2), layout.group, -3)
        out.append((b, n, prec.operand(qb), prec.operand(k), prec.operand(v)))
    return out, layout, scale, lens


def _chunk(q, k, v, n, start, stop, causal, block, scale, round_p):
    """Partial (o, lse) of keys [start, stop) of a sequence of n keys, fp32: query rows that
    see the same keys of the chunk (bottom-right causal) are streamed together."""
    nq = q.shape[-2]
    o = np.zeros(q.shape[:-1] + (v.shape[-1],), np.float32)
    lse = np.full(q.shape[:-1], -np.inf, np.float32)
    limits = [min(stop, n - nq + i + 1) if causal else stop for i in range(nq)]
    for limit in sorted(set(limits)):
        if limit <= start:
            continue
        rows = [i for i, x in enumerate(limits) if x == limit]
        o[..., rows, :], lse[..., rows] = stream_attention(
            q[..., rows, :], k[..., start:limit, :], v[..., start:limit, :], block=block,
            causal=False, scale=scale, compute=np.float32, round_p=round_p)
    return o, lse


def _partial(name: str, value) -> Precision:
    """The Precision of ``partials`` or ``lse_dtype`` (a name or a Precision)."""
    prec = PRECISIONS.get(value) if isinstance(value, str) else value
    if not isinstance(prec, Precision) or prec.name not in PARTIAL_DTYPES:
        raise ValueError(f"{name} must be one of {PARTIAL_DTYPES}, got {value!r}")
    return prec


def split_decode_model(q, k_cache, v_cache, cache_seqlens, block_table=None,
                       dtype: str | Precision = "bf16", causal: bool = False,
                       scale: float | None = None, num_splits: int = 1, block: int = 64,
                       partials: str | Precision = "fp32", lse_dtype: str | Precision = "fp32",
                       dv: int | None = None):
    """Model of a split-KV decode kernel computing in ``dtype`` (module docstring).

    Arguments as :func:`flashbench.reference.decode_attention`, plus ``dtype`` (fp32,
    tf32, fp16, bf16), ``block`` (keys per streamed block; chunks are aligned to it),
    ``partials`` and ``lse_dtype`` (the precisions O_s and LSE_s are stored in: fp32,
    bf16 or fp16); ``dv`` with ``v_cache=None``: the absorbed MLA form (V = k_cache[...,
    :dv]). Returns ``(o [B, Nq, H, dv] in T's storage dtype, lse [B, H, Nq]
    float32)``; a 16-bit LSE that overflows (fp16 past 65504) gives NaN, as a kernel would.
    """
    prec = get_precision(dtype)  # the door: names become Precisions here, once
    store = {name: _partial(name, value)
             for name, value in (("partials", partials), ("lse_dtype", lse_dtype))}
    if prec.compute is not np.float32:
        raise ValueError(f"dtype must be one of fp32, tf32, fp16, bf16, got {prec.name!r}")
    block = check_block(block)
    seqs, layout, scale, lens = _sequences(q, k_cache, v_cache, cache_seqlens, block_table,
                                           causal, scale, prec, dv)
    bounds = split_bounds(int(lens.max()), num_splits, align=block)
    round_p = None if prec.name == "fp32" else prec.operand
    S, B, H, nq, dv = len(bounds), layout.B, layout.H, layout.Nq, layout.dv
    o_parts = np.zeros((S, B, H, nq, dv), np.float32)
    lse_parts = np.full((S, B, H, nq), -np.inf, np.float32)
    for b, n, qb, k, v in seqs:
        for s, (start, stop) in enumerate(bounds):
            o, lse = _chunk(qb, k, v, n, start, min(stop, n), causal, block, scale, round_p)
            o_parts[s, b], lse_parts[s, b] = o.reshape(H, nq, dv), lse.reshape(H, nq)
    if S == 1:  # nothing to merge: no partials stored
        o, lse = o_parts[0], lse_parts[0]
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            o, lse = merge(store["partials"].stored(o_parts), store["lse_dtype"].stored(lse_parts))
    return prec.store(o.transpose(0, 2, 1, 3)), lse.astype(np.float32)


def standard_decode_model(q, k_cache, v_cache, cache_seqlens, block_table=None,
                          dtype: str | Precision = "bf16", causal: bool = False,
                          scale: float | None = None, dv: int | None = None):
    """Plain attention in ``dtype`` on each sequence's gathered cache
    (:func:`flashbench.numerics.standard_model`): the baseline rule's yardstick for decode.
    ``dv``: as :func:`split_decode_model`. Returns (o [B, Nq, H, dv] in T's storage dtype,
    lse [B, H, Nq] float32)."""
    prec = get_precision(dtype)  # the door
    seqs, layout, scale, _ = _sequences(q, k_cache, v_cache, cache_seqlens, block_table,
                                        causal, scale, PRECISIONS["fp64"], dv)
    o = np.zeros((layout.B, layout.Nq, layout.H, layout.dv), prec.storage)
    lse = np.full((layout.B, layout.H, layout.Nq), -np.inf, np.float32)
    for b, n, qb, k, v in seqs:
        if n == 0:
            continue
        ob, lb = standard_model(qb, k, v, prec, causal=causal, scale=scale)
        o[b] = ob.reshape(layout.H, layout.Nq, layout.dv).transpose(1, 0, 2)
        lse[b] = lb.reshape(layout.H, layout.Nq)
    return o, lse
