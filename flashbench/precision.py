"""The floating-point formats flashbench models, and how values are rounded to them.

A :class:`Precision` names a format a kernel computes in ("fp64", "fp32", "tf32",
"fp16", "bf16") and holds three facts about it:

- ``storage``: the NumPy dtype tensors of that precision are stored in. tf32 is a
  tensor-core *compute* mode, not a storage format: tf32 kernels store float32.
- ``eps``: machine epsilon of the format's significand (the gap between 1.0 and the
  next representable number): 2**-52, 2**-23, 2**-10, 2**-10, 2**-7. Error reports
  express errors "in eps" with this number; for tf32 it is the operand precision
  of the matmuls, the limiting rounding step.
- ``operand``: rounds an array to the values a matmul in this precision sees (for
  tf32: fp32 values rounded to a 10-bit mantissa, as tensor cores do) and returns
  them in the compute dtype, float32 (float64 for fp64), the dtype models multiply in.
- ``torch_name``: the torch dtype (an attribute of ``torch``) that kernels store this
  precision's tensors in ("float32" for tf32), or None where torch has none. Only
  the torch side resolves it (:func:`flashbench.kernels.checks.torch_dtype`): the
  NumPy side never imports torch.
- ``checked``: whether ``flashbench check`` and the accuracy suites judge it by default.

This registry is the one list of dtype names: every other list (the check's
defaults, the CLI's choices, the asv suites' parameters, the torch dtypes) is read
from it. :data:`DTYPES` holds every name, :data:`CHECK_DTYPES` the default judged ones.

NumPy note: ml_dtypes provides bfloat16; numpy float16 matmul has no BLAS, so the
models round with casts and multiply in float32, which is exact for products of
fp16, bf16 and tf32 operands (at most 22 significand bits).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import ml_dtypes
import numpy as np

__all__ = ["Precision", "PRECISIONS", "DTYPES", "CHECK_DTYPES", "get_precision", "round_to_tf32"]


def round_to_tf32(x: np.ndarray) -> np.ndarray:
    """Round float32 values to tf32 (8-bit exponent, 10-bit mantissa), nearest-even.

    Returns float32 whose low 13 mantissa bits are zero. Infinities and NaNs pass
    through unchanged; values that round past float32's largest finite number
    become inf, as the hardware conversion does.
    """
    x32 = np.ascontiguousarray(x, dtype=np.float32)
    bits = x32.view(np.uint32)
    finite = np.isfinite(x32)
    lsb = (bits >> np.uint32(13)) & np.uint32(1)
    rounded = (bits + np.uint32(0x0FFF) + lsb) & np.uint32(0xFFFFE000)
    return np.where(finite, rounded, bits).view(np.float32)


def _via(storage) -> Callable[[np.ndarray], np.ndarray]:
    def operand(x: np.ndarray) -> np.ndarray:
        return np.asarray(x).astype(storage).astype(np.float32)

    return operand


@dataclass(frozen=True)
class Precision:
    """One modelled floating-point format (see the module docstring)."""

    name: str
    storage: type
    eps: float
    operand: Callable[[np.ndarray], np.ndarray]
    torch_name: str | None = None
    checked: bool = False

    @property
    def compute(self) -> type:
        """dtype the models multiply and accumulate in: float64 for fp64, else float32."""
        return np.float64 if self.name == "fp64" else np.float32

    def store(self, x: np.ndarray) -> np.ndarray:
        """Round ``x`` to the storage dtype and return it in that dtype."""
        return np.asarray(x).astype(self.storage)

    def stored(self, x: np.ndarray) -> np.ndarray:
        """Round ``x`` to the storage dtype and return it in the compute dtype."""
        return self.store(x).astype(self.compute)


PRECISIONS: dict[str, Precision] = {
    "fp64": Precision("fp64", np.float64, 2.0**-52, lambda x: np.asarray(x, dtype=np.float64),
                      "float64"),
    "fp32": Precision("fp32", np.float32, 2.0**-23, _via(np.float32), "float32", True),
    "tf32": Precision("tf32", np.float32, 2.0**-10, round_to_tf32, "float32", True),
    "fp16": Precision("fp16", np.float16, 2.0**-10, _via(np.float16), "float16", True),
    "bf16": Precision("bf16", ml_dtypes.bfloat16, 2.0**-7, _via(ml_dtypes.bfloat16),
                      "bfloat16", True),
}
DTYPES: tuple[str, ...] = tuple(PRECISIONS)
CHECK_DTYPES: tuple[str, ...] = tuple(n for n, p in PRECISIONS.items() if p.checked)


def get_precision(dtype: str | Precision) -> Precision:
    """Look up a precision by name; raises ValueError naming the known ones."""
    if isinstance(dtype, Precision):
        return dtype
    if not isinstance(dtype, str) or dtype not in PRECISIONS:
        raise ValueError(f"dtype must be one of {sorted(PRECISIONS)}, got {dtype!r}")
    return PRECISIONS[dtype]
