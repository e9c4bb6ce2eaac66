"""FlashAttention-3's incoherent processing: the seeded orthogonal matrix q and k are both
multiplied by before fp8 quantisation (``(q M)(k M)^T = q k^T``, the outliers spread over
the head dim). One matrix for the FP8 model (:func:`flashbench.numerics.fp8.flash_fp8`) and
the Triton FP8 forward (:mod:`flashbench.kernels.triton_fp8`), so both rotate alike: it lives
here, below both. NumPy only; why: docs/fp8.md.
"""

from __future__ import annotations

import numpy as np

__all__ = ["hadamard", "incoherence_matrix"]


def _sylvester(n: int) -> np.ndarray:
    h = np.ones((1, 1))
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h


def hadamard(d: int) -> np.ndarray:
    """Orthogonal [d, d] Hadamard matrix: Sylvester's H_h / sqrt(h) on the diagonal in
    d / h blocks, h the largest power of two dividing d (one block when d is a power
    of two; the identity when d is odd)."""
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 1:
        raise ValueError(f"d must be an int >= 1, got {d!r}")
    h = int(d) & -int(d)  # largest power of two dividing d
    return np.kron(np.eye(int(d) // h), _sylvester(h) / np.sqrt(h))


def incoherence_matrix(d: int, seed: int = 0) -> np.ndarray:
    """FlashAttention-3's incoherent processing matrix ``M = diag(+-1) @ H`` [d, d],
    float64, orthogonal (``M @ M.T == I``): the signs are drawn from
    ``numpy.random.default_rng(seed)``, H is :func:`hadamard`."""
    signs = np.random.default_rng(seed).choice(np.array([-1.0, 1.0]), size=d)
    return signs[:, None] * hadamard(d)
