"""The key-block phases of one query block, shared by the forward and the backward's dQ kernel
(and the sink's merge into a finished block's statistics, :func:`merge_sink`; the mask of a
masked block, :func:`key_mask`, which the forward and both backward kernels share).

A program holding query rows ``[start_m * BLOCK_M, (start_m + 1) * BLOCK_M)`` streams key
blocks in two phases (bottom-right causal alignment: query i sees key j iff
``j <= i + Nk - Nq``):

- ``[0, full)``: blocks inside Nk that every row of the query block sees whole (no mask);
- ``[full, hi)``: blocks on the causal diagonal or holding Nk's ragged tail (masked).

With ``CAUSAL`` blocks wholly above the diagonal (from ``hi`` on) are never visited. A
``@triton.jit`` helper: inlined where it is called, so the compiled kernels are those
the bounds written out in each kernel gave; interpreted launches run its twin
(:mod:`flashbench.kernels.interpreter`).
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["key_phases", "variant_phases", "key_mask", "merge_sink", "masked_load"]


@triton.jit
def key_phases(start_m, N_Q, N_K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               CAUSAL: tl.constexpr):
    """``(causal_offset, full, hi)`` for query block ``start_m`` (module docstring):
    ``causal_offset = Nk - Nq``, the unmasked phase ``[0, full)``, the masked
    ``[full, hi)``."""
    causal_offset = N_K - N_Q
    full = (N_K // BLOCK_N) * BLOCK_N
    hi = N_K
    if CAUSAL:
        first_row_limit = start_m * BLOCK_M + causal_offset + 1  # keys the first row sees
        full = tl.minimum(full, (tl.maximum(first_row_limit, 0) // BLOCK_N) * BLOCK_N)
        hi = tl.minimum(hi, tl.maximum((start_m + 1) * BLOCK_M + causal_offset, 0))
    return causal_offset, full, hi


@triton.jit
def variant_phases(start_m, N_Q, N_K, LEFT, RIGHT, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, WINDOW: tl.constexpr):
    """``(causal_offset, lo, a_end, u1, hi)``: the key blocks of query block ``start_m`` in
    three phases, masked ``[lo, a_end)``, unmasked ``[a_end, u1)``, masked ``[u1', hi)`` with
    ``u1' = max(u1, a_end)``. Without ``WINDOW`` these are :func:`key_phases`' two
    (``lo = a_end = 0``). With a window (``LEFT``, ``RIGHT`` >= 0, a huge number for an
    unbounded side; :class:`flashbench.inputs.variant.Variant`) the blocks left of the
    first row's window and right of the last row's are never visited, so the work grows
    with the window, not with Nk; the first phase holds the blocks some row's left edge
    cuts, the last those on the right edge, the causal diagonal or Nk's ragged tail."""
    causal_offset, full, hi = key_phases(start_m, N_Q, N_K, BLOCK_M, BLOCK_N, CAUSAL)
    lo = 0
    u0 = 0
    if WINDOW:
        m0 = start_m * BLOCK_M
        m1 = m0 + BLOCK_M
        lo = (tl.maximum(m0 + causal_offset - LEFT, 0) // BLOCK_N) * BLOCK_N
        u0 = tl.maximum(tl.cdiv(tl.maximum(m1 - 1 + causal_offset - LEFT, 0), BLOCK_N) * BLOCK_N,
                        lo)
        hi = tl.minimum(hi, tl.maximum(m1 + causal_offset + RIGHT, 0))
        full = tl.minimum(full, (tl.maximum(m0 + causal_offset + RIGHT + 1, 0) // BLOCK_N)
                          * BLOCK_N)
    a_end = tl.minimum(u0, hi)
    return causal_offset, lo, a_end, full, hi


@triton.jit
def key_mask(rows, cols, n_k, causal_offset, left, right, CAUSAL: tl.constexpr,
             WINDOW: tl.constexpr):
    """Which (query row, key) pairs of a masked block count: ``cols < n_k`` (Nk's ragged
    tail), and with ``CAUSAL`` ``cols <= rows + causal_offset``, with ``WINDOW`` ``rows +
    causal_offset - left <= cols <= rows + causal_offset + right`` (the bounds of
    :class:`flashbench.inputs.variant.Variant`). ``rows`` and ``cols`` come broadcastable to
    the block: [BLOCK_M, 1] and [1, BLOCK_N] for S, [1, BLOCK_M] and [BLOCK_N, 1] for S^T."""
    keep = cols < n_k
    if CAUSAL:
        keep = keep & (cols <= rows + causal_offset)
    if WINDOW:
        keep = keep & (cols >= rows + (causal_offset - left))
        keep = keep & (cols <= rows + (causal_offset + right))
    return keep


@triton.jit
def merge_sink(acc, l_i, m_i, sink):
    """A sink logit (natural log) joins the log2-domain statistics as a key with no value,
    as :func:`flashbench.reference.streaming.finish` does: ``m' = max(m, sink)``,
    ``l' = 2^(m - m') l + 2^(sink - m')``, acc rescaled by ``2^(m - m')``."""
    sink = sink * 1.4426950408889634  # log2(e)
    m_new = tl.maximum(m_i, sink)
    m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.math.exp2(m_i - m_ref)
    l_i = l_i * alpha + tl.math.exp2(sink - m_ref)
    return acc * alpha[:, None], l_i, m_new


@triton.jit
def masked_load(ptrs, a, b, USE_A: tl.constexpr, USE_B: tl.constexpr):
    """``tl.load(ptrs)`` masked by ``a`` when USE_A (a block's tail rows or keys) and by
    ``b`` when USE_B (head columns past d on a padded width, :mod:`.headdim`), zeros where
    masked; with neither, the unmasked load the kernels had before padding."""
    if USE_A:
        if USE_B:
            x = tl.load(ptrs, mask=a & b, other=0.0)
        else:
            x = tl.load(ptrs, mask=a, other=0.0)
    else:
        if USE_B:
            x = tl.load(ptrs, mask=b, other=0.0)
        else:
            x = tl.load(ptrs)
    return x
