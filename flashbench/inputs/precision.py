"""The floating-point formats flashbench models, and how values are rounded to them.

A :class:`Precision` names a format a kernel computes in ("fp64", "fp32", "tf32",
"fp16", "bf16", "fp8", "fp8_e5m2") and holds these facts about it:

- ``storage``: the NumPy dtype tensors of that precision are stored in. tf32 is a
  tensor-core *compute* mode, not a storage format: tf32 kernels store float32.
- ``eps``: machine epsilon of the format's significand (the gap between 1.0 and the
  next representable number): 2**-52, 2**-23, 2**-10, 2**-10, 2**-7, and 2**-3 (e4m3),
  2**-2 (e5m2). Error reports express errors "in eps" with this number; for tf32 it
  is the operand precision of the matmuls, for fp8 that of the stored q, k, v and P:
  in both the limiting rounding step, not the format O is written in.
- ``operand``: rounds an array to the values a matmul in this precision sees (for
  tf32: fp32 values rounded to a 10-bit mantissa, as tensor cores do) and returns
  them in the compute dtype, float32 (float64 for fp64), the dtype models multiply in.
  For fp8 it is the bare conversion of unscaled values, saturating (below); the fp8
  models scale before they convert (:mod:`flashbench.numerics.fp8`).
- ``output``: the precision kernels write O in, when it is not this one: fp8
  kernels write bf16 (FlashAttention-3's FP8 forward returns bfloat16). The
  baseline rule's absolute floor is taken from the output format's eps.
- ``torch_name``: the torch dtype (an attribute of ``torch``) that kernels store this
  precision's tensors in ("float32" for tf32), or None where torch has none. Only
  the torch side resolves it (:func:`flashbench.kernels.checks.torch_dtype`): the
  NumPy side never imports torch.
- ``checked``: whether ``flashbench check`` and the accuracy suites judge it by default.

FP8 (``fp8`` = e4m3, ``ml_dtypes.float8_e4m3fn``, largest finite 448, no inf;
``fp8_e5m2`` = ``ml_dtypes.float8_e5m2``, largest finite 57344, has inf):

- saturation: ``operand`` and :func:`round_to_fp8` clip to +-max before rounding,
  as the GPU's conversion does (PTX ``cvt.rn.satfinite``; torch's CPU cast of e4m3fn
  saturates too). A bare ``astype`` would not: ml_dtypes turns e4m3fn values from
  464 up into NaN and e5m2 values from 61440 up into inf. Without a scale, anything
  beyond max therefore becomes max (an error of any size); with FlashAttention-3's
  scales (amax mapped to max) only rounding of the scaled amax can reach the clip.
- subnormals are kept, not flushed: e4m3's smallest normal is 2**-6 and its
  subnormals step by 2**-9 down to 2**-9; values below 2**-10 round to 0 (2**-10
  itself is a tie and rounds to the even 0). e5m2: normal from 2**-14, subnormal
  step 2**-16.
- NaN stays NaN (the e4m3 NaN encoding; e5m2 NaN).

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

__all__ = ["Precision", "PRECISIONS", "DTYPES", "CHECK_DTYPES", "FP8_DTYPES", "get_precision",
           "round_to_tf32", "round_to_fp8"]


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


def round_to_fp8(x: np.ndarray, storage) -> np.ndarray:
    """Round values to an fp8 format (``storage``: ml_dtypes.float8_e4m3fn or float8_e5m2),
    nearest-even, saturating at +-max as the GPU's ``cvt.rn.satfinite`` does; returns
    float32. Subnormals are kept; NaN stays NaN; +-inf saturates to +-max."""
    x32 = np.asarray(x, dtype=np.float32)
    top = np.float32(ml_dtypes.finfo(storage).max)
    return np.clip(x32, -top, top).astype(storage).astype(np.float32)


def _fp8(storage) -> Callable[[np.ndarray], np.ndarray]:
    def operand(x: np.ndarray) -> np.ndarray:
        return round_to_fp8(x, storage)

    return operand


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
    output: str | None = None

    @property
    def max(self) -> float:
        """Largest finite value of the storage format."""
        return float(ml_dtypes.finfo(self.storage).max)

    @property
    def out(self) -> Precision:
        """The precision O is written in (``output``, else this one)."""
        return self if self.output is None else PRECISIONS[self.output]

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
    "fp8": Precision("fp8", ml_dtypes.float8_e4m3fn, 2.0**-3, _fp8(ml_dtypes.float8_e4m3fn),
                     "float8_e4m3fn", output="bf16"),
    "fp8_e5m2": Precision("fp8_e5m2", ml_dtypes.float8_e5m2, 2.0**-2,
                          _fp8(ml_dtypes.float8_e5m2), "float8_e5m2", output="bf16"),
}
DTYPES: tuple[str, ...] = tuple(PRECISIONS)
CHECK_DTYPES: tuple[str, ...] = tuple(n for n, p in PRECISIONS.items() if p.checked)
FP8_DTYPES: tuple[str, ...] = ("fp8", "fp8_e5m2")  # modelled by flashbench.numerics.fp8


def get_precision(dtype: str | Precision) -> Precision:
    """Look up a precision by name; raises ValueError naming the known ones."""
    if isinstance(dtype, Precision):
        return dtype
    if not isinstance(dtype, str) or dtype not in PRECISIONS:
        raise ValueError(f"dtype must be one of {sorted(PRECISIONS)}, got {dtype!r}")
    return PRECISIONS[dtype]
