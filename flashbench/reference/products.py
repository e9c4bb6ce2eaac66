"""The matrix product of the float64 reference and of every precision model, summed in one
order at every size: a small float32 product is padded with zeros until BLAS takes its
regular path. OpenBLAS (x86, this machine's SkylakeX kernels) multiplies a small product
(q k^T with M x N under about 1,200, as numpy calls it) with another kernel, and a single
row as a matrix-vector product, each summing d in another order: their fp32 error is
0.3-0.5x a sequential fp32 sum's, where the padded product's is 0.96-1.0x (d <= 256). A
kernel sums like the latter, so the models' yardsticks at small shapes were 2-3x too strict
(a red team, 2026-12-06: correct fp32 kernels, flashbench's own among them, FAILed every
case of 34 keys or fewer). docs/numerics.md ("One order of summation");
tests/test_products.py holds the machine's BLAS to it (other cores may choose otherwise).
"""

from __future__ import annotations

import numpy as np

__all__ = ["matmul", "SMALL"]

SMALL = 64 * 64  # an fp32 product with M x N under this, or M or N of 1, is padded


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.matmul(a, b)`` ([..., M, K] @ [..., K, N]); in float32, a small product (M x N
    under :data:`SMALL`, or M or N of 1) is computed inside a larger one (zero rows of
    ``a``, zero columns of ``b``, both contiguous: N at least 64, M at least 2 and M x N at
    least SMALL, so a decode's few rows over many keys grow to 2, not 64), so every size
    sums K in one order. float64, and 1-D operands, as they are."""
    if np.result_type(a, b) != np.float32 or a.ndim < 2 or b.ndim < 2:
        return np.matmul(a, b)
    m, n = a.shape[-2], b.shape[-1]
    if m * n >= SMALL and min(m, n) > 1:
        return np.matmul(a, b)
    np_ = max(n, 64)
    mp = max(m, 2, -(-SMALL // np_))
    ap = np.zeros(a.shape[:-2] + (mp, a.shape[-1]), np.float32)
    ap[..., :m, :] = a
    bp = np.zeros(b.shape[:-1] + (np_,), np.float32)
    bp[..., :n] = b
    return np.matmul(ap, bp)[..., :m, :n].copy()  # a copy: the padded product is freed
