"""Seeded attention inputs: the distributions and shapes accuracy is judged on.

Every generator returns float64 NumPy arrays ``q [B, H, Nq, d]``, ``k [B, H, Nk, d]``,
``v [B, H, Nk, dv]`` drawn from ``numpy.random.default_rng(seed)``: the same seed always
gives the same arrays, on every machine. Distributions (``dist``):

- ``"normal"``: every entry N(0, 1).
- ``"outliers"``: FlashAttention-3's accuracy benchmark: N(0, 1) plus, with
  probability 0.001 per entry, an extra N(0, 100) term (standard deviation 10).
- ``"large-logits"``: q and k scaled so the scaled scores have standard deviation
  ``logit_std`` (default 2000, tails near 1e4): they push fp16 scores toward its
  largest finite value (65504) and make softmax rows nearly one-hot.

With a softcap c, q and k are scaled so the scores bend under it (:func:`softcap_gain`);
sinks are drawn to weigh beside the keys (:func:`sink_logits`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

__all__ = ["Shape", "DISTRIBUTIONS", "PASS_FLOPS", "make_qkv", "make_varlen_qkv", "ODD_SHAPES",
           "softcap_gain", "sink_logits"]

DISTRIBUTIONS = ("normal", "outliers", "large-logits")


# FLOPs of each pass as a multiple of the forward's (FlashAttention's convention, so that
# figures compare with its papers': the backward's five matmuls cost 2.5 forwards where
# d = dv; with dv != d they cost 2 pairs x (3 d + 2 dv), more: 9.1% at 96/32, 3.8% at
# 192/128, which the convention leaves out)
PASS_FLOPS = {"fwd": 1.0, "bwd": 2.5, "fwd+bwd": 3.5}
_SPEC = re.compile(r"^(\d+)x(\d+)(?:/(\d+))?((?:x\d+){2,4})(?:/(\d+))?$")


@dataclass(frozen=True)
class Shape:
    """An attention problem size: batch B, query heads H, Nq queries, Nk keys, head dims
    d and dv, and Hkv key/value heads (grouped-query attention; None means Hkv == H).

    Query head h reads key/value head ``h // (H // Hkv)``; Hkv must divide H.
    """

    B: int
    H: int
    Nq: int
    Nk: int
    d: int
    dv: int | None = None
    Hkv: int | None = None

    def __post_init__(self):
        for name in ("B", "H", "Nq", "Nk", "d"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Shape.{name} must be an int >= 1, got {value!r}")
        for name in ("dv", "Hkv"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):
                raise ValueError(f"Shape.{name} must be an int >= 1 or None, got {value!r}")
        if self.Hkv is not None and self.H % self.Hkv:
            raise ValueError(f"Shape.Hkv={self.Hkv} must divide the query heads H={self.H}")

    @property
    def head_dim_v(self) -> int:
        return self.d if self.dv is None else self.dv

    @property
    def kv_heads(self) -> int:
        """Key/value heads: Hkv, or H without grouping."""
        return self.H if self.Hkv is None else self.Hkv

    def flops(self, causal: bool = False, direction: str = "fwd") -> float:
        """FLOPs of one pass: 2 matmuls x 2 FLOPs per multiply-add over every visible pair.

        Forward: 4 * B * H * d * pairs (with dv != d: 2 * B * H * (d + dv) * pairs),
        counted per query head (grouped-query attention does the same arithmetic),
        where pairs counts only the unmasked (query, key) pairs: about half of
        Nq * Nk when causal. ``direction`` "bwd" counts 2.5x and "fwd+bwd" 3.5x
        the forward (:data:`PASS_FLOPS`).
        """
        if direction not in PASS_FLOPS:
            raise ValueError(f"direction must be one of {list(PASS_FLOPS)}, got {direction!r}")
        return PASS_FLOPS[direction] * 2.0 * self.B * self.H * (self.d + self.head_dim_v) * (
            visible_pairs(self.Nq, self.Nk, causal))

    def label(self) -> str:
        dv = "" if self.dv is None else f" dv={self.dv}"
        kv = "" if self.Hkv is None else f" Hkv={self.Hkv}"
        return f"B={self.B} H={self.H}{kv} Nq={self.Nq} Nk={self.Nk} d={self.d}{dv}"

    def spec(self) -> str:
        """Compact text form, read back by :meth:`parse`: ``BxH[/Hkv]xNqxNkxd[/dv]``
        (``1x8x1024x1024x192/128``: d = 192, dv = 128)."""
        kv = "" if self.Hkv is None else f"/{self.Hkv}"
        dv = "" if self.dv is None else f"/{self.dv}"
        return f"{self.B}x{self.H}{kv}x{self.Nq}x{self.Nk}x{self.d}{dv}"

    @classmethod
    def parse(cls, text: str) -> Shape:
        """``BxHxNxd`` or ``BxHxNqxNkxd``; ``H/Hkv`` in place of H for grouped-query
        attention (``1x32/8x4096x128``), ``d/dv`` in place of d for a value head dim
        (``1x8x1024x192/128``). The older ``BxHxNqxNkxdxdv`` still reads. ValueError
        otherwise."""
        m = _SPEC.match(text.strip()) if isinstance(text, str) else None
        if m is None:
            raise ValueError(f"shape must be BxHxNxd or BxHxNqxNkxd (H may be H/Hkv, d may be "
                             f"d/dv), integers, got {text!r}")
        b, h, hkv = int(m[1]), int(m[2]), None if m[3] is None else int(m[3])
        rest = [int(x) for x in m[4].split("x")[1:]]
        if len(rest) == 2:
            rest = [rest[0], rest[0], rest[1]]
        if len(rest) == 4 and m[5] is not None:
            raise ValueError(f"shape gives dv twice (xdv and /dv): {text!r}")
        dv = rest[3] if len(rest) == 4 else None if m[5] is None else int(m[5])
        return cls(b, h, *rest[:3], dv=dv, Hkv=hkv)


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


def softcap_gain(softcap: float | None, dist: str = "normal") -> float:
    """The factor on q and k of a case with a softcap c: sqrt(max(1, c / 4)), so that the
    scaled scores have standard deviation max(1, c / 4) and the cap bends them (1 without a
    cap, and for ``large-logits``, whose scores are larger still). On N(0, 1) inputs a cap
    of 50 (Gemma 2's) moves O by less than bf16's rounding: a bf16 kernel that skipped it
    PASSed `check` (causal) and `speed` (a probe, 2026-12-08); at c / 4 it reads 35-100x
    the flash model's error (studies/softcap_inputs.py)."""
    if softcap is None or dist == "large-logits":
        return 1.0
    return float(np.sqrt(max(1.0, float(softcap) / 4.0)))


def sink_logits(heads: int, seed: int, keys: int, softcap: float | None = None) -> np.ndarray:
    """A case's sinks: one logit per query head, N(0, 1) from ``default_rng(seed + 2)`` plus
    log(``keys``) - 2, so that beside a row of that many keys of N(0, 1) scores (exp(s)
    averages e^(1/2)) a sink takes about 8% (its median). Plain N(0, 1) sinks beside 1,024
    keys weighed 1/1,700 of a row, under bf16's rounding: a bf16 kernel that skipped them,
    returning O alone, PASSed check without a causal mask (a probe, 2026-12-08). With a
    ``softcap``, whose case draws larger scores (:func:`softcap_gain`), the row's log-sum-exp
    is a draw of ``keys`` capped scores (``default_rng(seed + 3)``) in place of log(keys) +
    1/2: beside them the first sinks weighed 1e-7 at a cap of 30 (a fresh-eyes review)."""
    n = max(int(keys), 1)
    typical = np.log(n) + 0.5  # log(n E[exp(s)]), s ~ N(0, 1)
    if softcap is not None:
        import scipy.special

        s = softcap_gain(softcap) ** 2 * np.random.default_rng(seed + 3).standard_normal(n)
        typical = float(scipy.special.logsumexp(softcap * np.tanh(s / softcap)))
    return np.random.default_rng(seed + 2).standard_normal(heads) + typical - 2.5


def make_qkv(shape: Shape, dist: str = "normal", seed: int = 0, logit_std: float = 2000.0,
             softcap: float | None = None):
    """Draw (q, k, v) of ``shape`` from ``dist`` (module docstring), float64, seeded; with
    ``softcap``, q and k times :func:`softcap_gain` (the same draws, scaled).

    k and v have ``shape.kv_heads`` heads (fewer than q's under grouped-query attention).
    """
    if not isinstance(shape, Shape):
        raise TypeError(f"shape must be a flashbench.inputs.Shape, got {type(shape).__name__}")
    if dist not in DISTRIBUTIONS:
        raise ValueError(f"dist must be one of {DISTRIBUTIONS}, got {dist!r}")
    rng = np.random.default_rng(seed)
    q = _draw(rng, (shape.B, shape.H, shape.Nq, shape.d), dist, logit_std, "q")
    k = _draw(rng, (shape.B, shape.kv_heads, shape.Nk, shape.d), dist, logit_std, "k")
    v = _draw(rng, (shape.B, shape.kv_heads, shape.Nk, shape.head_dim_v), dist, logit_std, "v")
    gain = softcap_gain(softcap, dist)
    return (q, k, v) if gain == 1.0 else (q * gain, k * gain, v)


def make_varlen_qkv(lengths, shape: Shape, dist: str = "normal", seed: int = 0,
                    key_lengths=None, softcap: float | None = None):
    """A packed batch (FlashAttention's varlen layout) of sequences of ``lengths`` queries
    and ``key_lengths`` keys (None: the same) with ``shape``'s H, Hkv, d, dv: (q [total_q,
    H, d], k, v [total_k, Hkv, d or dv] float64, cu_seqlens_q, cu_seqlens_k int64 [len +
    1]), drawn as one problem of total_q queries on total_k keys by :func:`make_qkv` (with
    ``softcap``'s gain) and cut
    at cu_seqlens (equal lengths: the same draw as one total x total problem)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    keys = lengths if key_lengths is None else np.asarray(key_lengths, dtype=np.int64)
    packed = Shape(1, shape.H, int(lengths.sum()), int(keys.sum()), shape.d, shape.dv,
                   Hkv=shape.Hkv)
    q, k, v = (np.ascontiguousarray(np.swapaxes(x[0], 0, 1))
               for x in make_qkv(packed, dist, seed, softcap=softcap))
    return (q, k, v, np.concatenate([[0], np.cumsum(lengths)]),
            np.concatenate([[0], np.cumsum(keys)]))


# Shapes that catch tail-block, mask-alignment and head-dim bugs.
ODD_SHAPES = (
    Shape(1, 1, 1, 1, 16),
    Shape(1, 2, 17, 17, 16),
    Shape(2, 1, 129, 129, 64),
    Shape(1, 2, 17, 129, 32),  # Nq < Nk: causal rows see Nk - Nq extra keys
    Shape(1, 2, 129, 17, 32),  # Nq > Nk: the first 112 causal rows see nothing
    Shape(1, 1, 33, 65, 64, 16),  # dv != d
)
