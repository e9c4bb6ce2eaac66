"""Round-to-nearest-even in fp32 for interpreted launches.

Triton 3.9's interpreter converts fp32 to bfloat16 by truncation and fp32 to e4m3
(float8e4nv) without round-to-nearest-even (a carry into the exponent is lost,
subnormals are rounded down); the GPU rounds to nearest even. Interpreted launches
therefore round onto the target grid in fp32 first (:func:`round_bf16`,
:func:`round_e4m3`), and the conversion that follows is exact. Compiled launches never
call them (the kernels branch on a constexpr), so the GPU code is the plain conversion.
:func:`accumulate_pv` is the P V step the forward and decode kernels share, with that branch.
The measured defects and the tests that hold the fix: docs/fp8.md ("Interpreter
workarounds").
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["round_bf16", "round_e4m3", "accumulate_pv", "E4M3_MAX"]

E4M3_MAX = 448.0  # largest finite e4m3fn value


@triton.jit
def round_bf16(x):
    """fp32 values rounded to the nearest bfloat16 (ties to even), kept in fp32; NaN
    stays NaN. (Overflow past bf16's largest finite value gives inf, as on the GPU.)"""
    bits = x.to(tl.uint32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return tl.where(x != x, x, bits.to(tl.float32, bitcast=True))


@triton.jit
def round_e4m3(x):
    """fp32 values rounded to the nearest e4m3fn value (ties to even), kept in fp32,
    saturating at +-448 as the GPU's ``cvt.rn.satfinite.e4m3x2.f32`` does; subnormals
    (steps of 2**-9 below 2**-6) kept; NaN stays NaN.

    Adding and subtracting ``c = 2**(e + 20)``, where ``e = max(floor(log2 |x|), -6)``
    is read from the exponent bits, leaves ``|x|`` rounded to a multiple of
    ``2**(e - 3)``, e4m3's step at that exponent, by fp32's own nearest-even rounding
    (the sum lies in [c, 2c), where fp32's step is 2**(e - 3))."""
    a = tl.minimum(tl.abs(x), 448.0)
    e = ((a.to(tl.uint32, bitcast=True) >> 23) & 0xFF).to(tl.int32) - 127
    e = tl.maximum(e, -6)
    c = ((e + (20 + 127)).to(tl.uint32) << 23).to(tl.float32, bitcast=True)
    r = (a + c) - c
    r = tl.where(x < 0, -r, r)
    return tl.where(x != x, x, r)


@triton.jit
def accumulate_pv(acc, p, v, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
                  ROUND: tl.constexpr):
    """acc + P V, P cast to V's dtype first; ``UPCAST``: the product in fp32 ("ieee"), P
    rounded to bf16 first when ``ROUND`` (the interpreter's cast truncates). Shared by the
    forward and decode kernels."""
    if UPCAST:
        if ROUND:
            p = round_bf16(p)
        acc = tl.dot(p.to(v.dtype).to(tl.float32), v.to(tl.float32), acc,
                     input_precision="ieee")
    else:
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=PRECISION)
    return acc
