"""The softcap inside the Triton kernels: ``cap * tanh(x)`` accurate to about an ulp in fp32.

``2 sigmoid(2x) - 1`` (the kernels' first tanh) loses tanh's relative accuracy near 0,
where it cancels: an absolute error of about eps, which the cap multiplies (at softcap 30
in fp32 the forward read 2x the standard's error and failed the baseline rule). Here
|x| < 0.75 takes tanh's odd Taylor series to x^23 and larger |x| takes
``1 - 2 / (exp(2|x|) + 1)``, which cancels little there (tanh(0.75) = 0.64); |x| is
clipped at 15 (tanh(15) rounds to 1 in fp32: no overflow), a NaN stays NaN. At most
1.4 ulp from float64's tanh in an fp32 emulation (tests/test_variants_triton.py holds it
to 2 under the interpreter). Triton has no portable tanh (libdevice's is CUDA's and
absent from the interpreter), so it is written here, once, for every kernel.
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["tanh"]

@triton.jit
def tanh(x):
    """tanh of fp32 ``x``, elementwise (module docstring)."""
    a = tl.abs(x)
    xs = tl.where(a < 0.75, x, 0.0)  # the series' branch sees no large x (no overflow)
    x2 = xs * xs  # the series' coefficients (Bernoulli numbers), x^23 down to x^3:
    p = -113927491862 / 2900518163668125
    p = p * x2 + 18888466084 / 194896477400625
    p = p * x2 - 443861162 / 1856156927625
    p = p * x2 + 6404582 / 10854718875
    p = p * x2 - 929569 / 638512875
    p = p * x2 + 21844 / 6081075
    p = p * x2 - 1382 / 155925
    p = p * x2 + 62 / 2835
    p = p * x2 - 17 / 315
    p = p * x2 + 2 / 15
    p = p * x2 - 1 / 3
    small = xs + xs * (x2 * p)
    big = 1.0 - 2.0 / (tl.exp(2.0 * tl.where(a > 15.0, 15.0, a)) + 1.0)  # NaN stays NaN
    return tl.where(a < 0.75, small, tl.where(x < 0, -big, big))
