"""The key-block phases of one query block, shared by the forward and the backward's dQ kernel.

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

__all__ = ["key_phases"]


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
