"""The floating-point formats flashbench models, and how values are rounded to them.

:data:`PRECISIONS` maps each name ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8",
"fp8_e5m2") to a :class:`Precision`: its storage dtype, eps, operand rounding, output
format and torch dtype. It is the one list of dtype names: the check's defaults, the
CLI's choices, the asv suites' parameters and the torch dtypes are read from it
(:data:`DTYPES`, :data:`CHECK_DTYPES`, :data:`FP8_DTYPES`). :func:`get_precision` turns
a name into its Precision where it enters (a Precision passes through).

NumPy only (the torch side resolves ``torch_name``). The models round with casts (ml_dtypes
for bf16 and fp8) and multiply in float32, exact for products of fp16, bf16 and tf32
operands (why: docs/check.md, "The precision models (forward)"); fp8 conversions saturate at
+-max as the GPU's ``cvt.rn.satfinite`` does, where a bare ml_dtypes ``astype`` gives NaN or
inf (docs/fp8.md, "FP8 precisions", with the formats' eps and subnormals).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["Precision", "PRECISIONS", "DTYPES", "CHECK_DTYPES", "FP8_DTYPES", "get_precision",
           "round_to_tf32", "round_to_fp8"]


@functools.cache
def _ml_dtype(name: str) -> type:
    """An ml_dtypes type by name, imported at first use: importing ml_dtypes costs about
    0.6 s here, which every worker process and every CLI start would otherwise pay."""
    import ml_dtypes

    return getattr(ml_dtypes, name)


def _finfo_max(storage) -> float:
    import ml_dtypes

    return float(ml_dtypes.finfo(storage).max)


def _resolved(storage) -> type:
    return _ml_dtype(storage) if isinstance(storage, str) else storage


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
    """Round values to an fp8 format (``storage``: ml_dtypes.float8_e4m3fn or float8_e5m2,
    or its name), nearest-even, saturating at +-max as the GPU's ``cvt.rn.satfinite``
    does; returns float32. Subnormals are kept; NaN stays NaN; +-inf saturates to +-max."""
    storage = _resolved(storage)
    x32 = np.asarray(x, dtype=np.float32)
    top = np.float32(_finfo_max(storage))
    return np.clip(x32, -top, top).astype(storage).astype(np.float32)


def _fp8(storage) -> Callable[[np.ndarray], np.ndarray]:
    def operand(x: np.ndarray) -> np.ndarray:
        return round_to_fp8(x, storage)

    return operand


def _via(storage) -> Callable[[np.ndarray], np.ndarray]:
    def operand(x: np.ndarray) -> np.ndarray:
        return np.asarray(x).astype(_resolved(storage)).astype(np.float32)

    return operand


@dataclass(frozen=True)
class Precision:
    """One modelled floating-point format.

    Attributes:
        name: the registry name.
        format: the NumPy dtype its tensors are stored in, or the name of an ml_dtypes
            one, imported at first use (tf32 is a tensor-core compute mode, not a storage
            format: float32); read it as :attr:`storage`.
        eps: machine epsilon of the limiting rounding step, the unit of errors "in eps":
            for tf32 the matmul operands' (2**-10), for fp8 the stored q, k, v and P's
            (e4m3 2**-3, e5m2 2**-2), not the format O is written in.
        operand: rounds an array to the values a matmul in this precision sees (tf32:
            a 10-bit mantissa, as tensor cores do) and returns them in :attr:`compute`.
            For fp8 it is the bare saturating conversion of unscaled values; the fp8
            models scale first (:mod:`flashbench.numerics.fp8`).
        torch_name: the ``torch`` dtype attribute kernels store it in ("float32" for
            tf32), None where torch has none; resolved only on the torch side
            (:func:`flashbench.kernels.validate.torch_dtype`).
        checked: judged by default by ``flashbench check`` and the accuracy suites.
        output: the precision O is written in when not this one (fp8: "bf16", as
            FlashAttention-3); the baseline rule's absolute floor uses its eps.
    """

    name: str
    format: type | str
    eps: float
    operand: Callable[[np.ndarray], np.ndarray]
    torch_name: str | None = None
    checked: bool = False
    output: str | None = None

    @property
    def storage(self) -> type:
        """The NumPy dtype its tensors are stored in (an ml_dtypes type for bf16 and fp8)."""
        return _resolved(self.format)

    @property
    def max(self) -> float:
        """Largest finite value of the storage format."""
        return _finfo_max(self.storage)

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
    "bf16": Precision("bf16", "bfloat16", 2.0**-7, _via("bfloat16"), "bfloat16", True),
    "fp8": Precision("fp8", "float8_e4m3fn", 2.0**-3, _fp8("float8_e4m3fn"), "float8_e4m3fn",
                     output="bf16"),
    "fp8_e5m2": Precision("fp8_e5m2", "float8_e5m2", 2.0**-2, _fp8("float8_e5m2"),
                          "float8_e5m2", output="bf16"),
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
