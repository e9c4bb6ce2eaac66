"""Seeded attention inputs: the distributions and shapes accuracy is judged on.

Every generator returns float64 NumPy arrays ``q [B, H, Nq, d]``, ``k [B, H, Nk, d]``,
``v [B, H, Nk, dv]`` drawn from ``numpy.random.default_rng(seed)``: the same seed
always gives the same arrays, on every machine.

Distributions (``dist``):

- ``"normal"``: every entry N(0, 1).
- ``"outliers"``: FlashAttention-3's accuracy benchmark: N(0, 1) plus, with
  probability 0.001 per entry, an extra N(0, 100) term (standard deviation 10).
- ``"large-logits"``: q and k scaled so the scaled scores have standard deviation
  ``logit_std`` (default 2000, tails near 1e4): they push fp16 scores toward its
  largest finite value (65504) and make softmax rows nearly one-hot.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Shape", "DISTRIBUTIONS", "make_qkv", "ODD_SHAPES"]

DISTRIBUTIONS = ("normal", "outliers", "large-logits")


@dataclass(frozen=True)
class Shape:
    """An attention problem size: batch B, heads H, Nq queries, Nk keys, head dims d and dv."""

    B: int
    H: int
    Nq: int
    Nk: int
    d: int
    dv: int | None = None

    def __post_init__(self):
        for name in ("B", "H", "Nq", "Nk", "d"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Shape.{name} must be an int >= 1, got {value!r}")
        if self.dv is not None and (not isinstance(self.dv, int) or self.dv < 1):
            raise ValueError(f"Shape.dv must be an int >= 1 or None, got {self.dv!r}")

    @property
    def head_dim_v(self) -> int:
        return self.d if self.dv is None else self.dv

    def flops(self, causal: bool = False) -> float:
        """Forward FLOPs: 2 matmuls x 2 FLOPs per multiply-add over every visible (q, k) pair.

        4 * B * H * d * pairs (with dv != d: 2 * B * H * (d + dv) * pairs), where pairs
        counts only the unmasked pairs: about half of Nq * Nk when causal.
        """
        return 2.0 * self.B * self.H * (self.d + self.head_dim_v) * visible_pairs(
            self.Nq, self.Nk, causal)

    def label(self) -> str:
        dv = "" if self.dv is None else f" dv={self.dv}"
        return f"B={self.B} H={self.H} Nq={self.Nq} Nk={self.Nk} d={self.d}{dv}"


def visible_pairs(nq: int, nk: int, causal: bool) -> int:
    """Number of (query, key) pairs the mask leaves visible (bottom-right causal)."""
    if not causal:
        return nq * nk
    offset = nk - nq  # query i sees keys 0..min(i + offset, nk - 1)
    i = np.arange(nq)
    return int(np.clip(i + offset + 1, 0, nk).sum())


def _draw(rng: np.random.Generator, shape, dist: str, logit_std: float, role: str):
    x = rng.standard_normal(shape)
    if dist == "outliers":
        x += rng.standard_normal(shape) * 10.0 * (rng.random(shape) < 1e-3)
    elif dist == "large-logits" and role in ("q", "k"):
        # q.k / sqrt(d) has std (sigma^2); scale q and k by sqrt(logit_std) each.
        x *= np.sqrt(logit_std)
    return x


def make_qkv(shape: Shape, dist: str = "normal", seed: int = 0, logit_std: float = 2000.0):
    """Draw (q, k, v) of ``shape`` from ``dist`` (module docstring), float64, seeded."""
    if not isinstance(shape, Shape):
        raise TypeError(f"shape must be a flashbench.inputs.Shape, got {type(shape).__name__}")
    if dist not in DISTRIBUTIONS:
        raise ValueError(f"dist must be one of {DISTRIBUTIONS}, got {dist!r}")
    rng = np.random.default_rng(seed)
    q = _draw(rng, (shape.B, shape.H, shape.Nq, shape.d), dist, logit_std, "q")
    k = _draw(rng, (shape.B, shape.H, shape.Nk, shape.d), dist, logit_std, "k")
    v = _draw(rng, (shape.B, shape.H, shape.Nk, shape.head_dim_v), dist, logit_std, "v")
    return q, k, v


# Shapes that catch tail-block, mask-alignment and head-dim bugs.
ODD_SHAPES = (
    Shape(1, 1, 1, 1, 16),
    Shape(1, 2, 17, 17, 16),
    Shape(2, 1, 129, 129, 64),
    Shape(1, 2, 17, 129, 32),  # Nq < Nk: causal rows see Nk - Nq extra keys
    Shape(1, 2, 129, 17, 32),  # Nq > Nk: the first 112 causal rows see nothing
    Shape(1, 1, 33, 65, 64, 16),  # dv != d
)
