"""The matrix product of the float64 reference and of every precision model, summed in one
order at every size: a small float32 product is padded with zeros until BLAS takes its
regular path. OpenBLAS multiplies a small product (q k^T with M x N under about 1,200,
as numpy calls it) with another kernel, and a single row as a matrix-vector product,
each summing d in another order: their fp32 error is 0.3-0.5x a sequential fp32 sum's,
where the regular path's is 0.96-1.0x (d <= 256). A kernel sums like the latter, so the
models' yardsticks at small shapes were 2-3x too strict (a red team, 2026-12-06: correct
fp32 kernels, flashbench's own among them, FAILed every case of 34 keys or fewer).
docs/numerics.md ("One order of summation"); tests/test_products.py holds this machine's
BLAS to it.
"""

from __future__ import annotations

import numpy as np

__all__ = ["matmul", "SMALL"]

SMALL = 64 * 64  # an fp32 product with M x N under this, or M or N of 1, is padded


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.matmul(a, b)`` ([..., M, K] @ [..., K, N]); in float32, a small product is
    computed inside one of at least 64 x 64 (zero rows of ``a``, zero columns of ``b``,
    both contiguous), so every size sums K in BLAS's regular order. float64 as it is."""
    m, n = a.shape[-2], b.shape[-1]
    if np.result_type(a, b) != np.float32 or (m * n >= SMALL and min(m, n) > 1):
        return np.matmul(a, b)
    mp, np_ = max(m, 64), max(n, 64)
    ap = np.zeros(a.shape[:-2] + (mp, a.shape[-1]), np.float32)
    ap[..., :m, :] = a
    bp = np.zeros(b.shape[:-1] + (np_,), np.float32)
    bp[..., :n] = b
    return np.ascontiguousarray(np.matmul(ap, bp)[..., :m, :n])
