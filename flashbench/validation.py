"""Argument checks shared by the NumPy reference and the precision models.

Every check raises TypeError (wrong kind of thing) or ValueError (right kind, wrong
value or shape) with a message that names the argument and what was expected.
"""

from __future__ import annotations

import numbers

import ml_dtypes
import numpy as np

_EXTRA_FLOATS = {np.dtype(ml_dtypes.bfloat16)}


def as_float_array(x, name: str, dtype=np.float64) -> np.ndarray:
    """Convert a real numeric array-like to ``dtype``; TypeError for anything else."""
    arr = np.asarray(x)
    kind = arr.dtype.kind
    if not (kind in "fiu" or arr.dtype in _EXTRA_FLOATS):
        raise TypeError(
            f"{name} must be a real numeric array (float, int or bfloat16), got dtype {arr.dtype}"
        )
    return arr.astype(dtype, copy=False)


def check_block(block) -> int:
    """A streaming block size: an int >= 1."""
    if isinstance(block, bool) or not isinstance(block, numbers.Integral):
        raise TypeError(f"block must be an int >= 1, got {type(block).__name__} {block!r}")
    if block < 1:
        raise ValueError(f"block must be >= 1, got {block}")
    return int(block)


def check_scale(scale, d: int) -> float:
    """The softmax scale: None means 1/sqrt(d); otherwise a finite real number."""
    if scale is None:
        return 1.0 / float(np.sqrt(d))
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale must be a real number or None, got {type(scale).__name__}")
    if not np.isfinite(scale):
        raise ValueError(f"scale must be finite, got {scale}")
    return float(scale)


def check_finite(x: np.ndarray, name: str) -> None:
    if not np.all(np.isfinite(x)):
        bad = int(np.size(x) - np.count_nonzero(np.isfinite(x)))
        raise ValueError(f"{name} has {bad} non-finite value(s) (inf or nan)")


def check_rows(x, name: str = "x", dtype=np.float64, finite: bool = False) -> np.ndarray:
    """A softmax input: at least 1-D with a non-empty last axis."""
    arr = as_float_array(x, name, dtype)
    if arr.ndim < 1 or arr.shape[-1] < 1:
        raise ValueError(f"{name} must have shape [..., N] with N >= 1, got shape {arr.shape}")
    if finite:
        check_finite(arr, name)
    return arr


def check_qkv(q, k, v, dtype=np.float64, finite: bool = False):
    """Validate q [..., Nq, d], k [..., Nk, d], v [..., Nk, dv] and return them as ``dtype``.

    Leading dims must broadcast against each other like numpy matmul. With
    ``finite=True`` any inf or nan in the inputs is a ValueError.
    """
    q = as_float_array(q, "q", dtype)
    k = as_float_array(k, "k", dtype)
    v = as_float_array(v, "v", dtype)
    for name, arr, want in (("q", q, "[..., Nq, d]"), ("k", k, "[..., Nk, d]"),
                            ("v", v, "[..., Nk, dv]")):
        if arr.ndim < 2:
            raise ValueError(f"{name} must have shape {want} (at least 2-D), got shape {arr.shape}")
        if 0 in arr.shape[-2:]:
            raise ValueError(f"{name} must have non-empty last two dims {want}, got {arr.shape}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must share the head dim d: q has d={q.shape[-1]} (shape {q.shape}), "
            f"k has d={k.shape[-1]} (shape {k.shape})"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must share the key count Nk: k has Nk={k.shape[-2]} (shape {k.shape}), "
            f"v has Nk={v.shape[-2]} (shape {v.shape})"
        )
    try:
        np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except ValueError:
        raise ValueError(
            f"leading (batch) dims of q {q.shape[:-2]}, k {k.shape[:-2]} and v {v.shape[:-2]} "
            "do not broadcast"
        ) from None
    if finite:
        for name, arr in (("q", q), ("k", k), ("v", v)):
            check_finite(arr, name)
    return q, k, v
