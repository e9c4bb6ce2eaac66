"""The sequence lengths of a packed (varlen) batch: a list, or a seeded distribution.

``flashbench check --varlen SPEC`` takes one of:

- ``N1,N2,...``: these lengths (ints >= 0, not all 0), queries and keys alike; an item
  ``Q:K`` gives a sequence Q queries and K keys (``30:45,17,25:9``: a chunk of a prefill on
  a cached prefix, causal aligned bottom-right), so a kernel that mixes ``cu_seqlens_q``
  and ``cu_seqlens_k`` is seen;
- ``uniform:LO-HI:COUNT``: COUNT lengths drawn uniformly from the ints LO..HI (inclusive);
- ``lognormal:MEDIAN:SIGMA:COUNT``: COUNT lengths ``round(exp(N(ln MEDIAN, SIGMA^2)))``, the
  long-tailed mix of packed training data and serving prefills.

A distribution draws from ``numpy.random.default_rng(seed + 3)`` (the inputs take seed, dO
seed + 1, sinks seed + 2), so one seed gives one batch; the check prints the lengths drawn.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["LengthSpec", "parse_lengths", "lengths_text", "SYNTAX", "MAX_COUNT", "MAX_TOTAL"]

SYNTAX = ("N1,N2,... (an item Q:K: Q queries, K keys) or uniform:LO-HI:COUNT or "
          "lognormal:MEDIAN:SIGMA:COUNT")
MAX_COUNT = 4096  # sequences in one drawn batch
MAX_TOTAL = 2 ** 31 - 1  # the packed batch's total length: cu_seqlens are int32


@dataclass(frozen=True)
class LengthSpec:
    """A parsed ``--varlen`` spec: ``kind`` "list" (``params`` the lengths), "uniform"
    (LO, HI) or "lognormal" (MEDIAN, SIGMA), ``count`` lengths; ``keys``: a list's key
    lengths where an item ``Q:K`` makes them differ from the query lengths (else None)."""

    text: str
    kind: str
    params: tuple
    count: int
    keys: tuple[int, ...] | None = None

    @property
    def seeded(self) -> bool:
        return self.kind != "list"

    def draw(self, seed: int = 0) -> tuple[int, ...]:
        """The lengths (a list's as given; a distribution's drawn with ``seed``).
        ValueError where a draw gives only zeros (nothing to attend)."""
        if self.kind == "list":
            return self.params
        rng = np.random.default_rng(seed + 3)
        if self.kind == "uniform":
            lo, hi = self.params
            drawn = rng.integers(lo, hi, size=self.count, endpoint=True)
        else:
            median, sigma = self.params
            drawn = np.rint(rng.lognormal(math.log(median), sigma, size=self.count))
        if not np.all(np.isfinite(drawn)) or drawn.sum(dtype=np.float64) > MAX_TOTAL:
            raise ValueError(f"varlen {self.text!r} drew lengths of total "
                             f"{drawn.sum(dtype=np.float64):.3g} with seed {seed}, past "
                             f"{MAX_TOTAL} (cu_seqlens are int32): lower its MEDIAN or SIGMA")
        lengths = tuple(int(n) for n in drawn)
        if not any(lengths):
            raise ValueError(f"varlen {self.text!r} drew only lengths of 0 with seed {seed}: "
                             "raise its range or COUNT, or take another --seed")
        return lengths


def lengths_text(lengths, keys=None) -> str:
    """Lengths as ``--varlen`` takes them: ``N`` where a sequence's queries and keys agree,
    else ``Q:K`` (``keys`` None: the same as ``lengths``)."""
    keys = lengths if keys is None else keys
    return ",".join(str(q) if q == k else f"{q}:{k}" for q, k in zip(lengths, keys, strict=True))


def _bad(text: str, why: str) -> ValueError:
    return ValueError(f"varlen must be {SYNTAX}; {text!r}: {why}")


def _int(text: str, spec: str, name: str, lo: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise _bad(spec, f"{name} must be an int, got {text!r}") from None
    if value < lo:
        raise _bad(spec, f"{name} must be >= {lo}, got {value}")
    return value


def _float(text: str, spec: str, name: str, positive: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        raise _bad(spec, f"{name} must be a number, got {text!r}") from None
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise _bad(spec, f"{name} must be finite and {'> 0' if positive else '>= 0'}, "
                   f"got {text!r}")
    return value


def _total(value, spec: str, what: str) -> None:
    if value > MAX_TOTAL:
        raise _bad(spec, f"{what} must be at most {MAX_TOTAL} (cu_seqlens are int32), got "
                   f"{value:.4g}")


def _count(text: str, spec: str) -> int:
    count = _int(text, spec, "COUNT", 1)
    if count > MAX_COUNT:
        raise _bad(spec, f"COUNT must be at most {MAX_COUNT}, got {count}")
    return count


def parse_lengths(text: str) -> LengthSpec:
    """A ``--varlen`` spec (module docstring); ValueError naming what is wrong."""
    text = text.strip()
    kind, _, rest = text.partition(":")
    if not rest or kind.replace(",", "").strip().isdigit():  # a list (an item Q:K: its
        # queries and keys; "1,1,40:2" as a list too: "1,1,40" before its first colon)
        pairs = [x.strip().split(":") for x in text.split(",")]
        if any(len(p) > 2 for p in pairs):
            raise _bad(text, "an item is a length N or Q:K")
        lengths = tuple(_int(p[0].strip(), text, "each length", 0) for p in pairs)
        keys = tuple(_int(p[-1].strip(), text, "each key length", 0) for p in pairs)
        if not any(lengths):
            raise _bad(text, "the (query) lengths must not all be 0")
        if not any(keys):
            raise _bad(text, "the key lengths must not all be 0 (no query would see a key)")
        if not any(q and k for q, k in zip(lengths, keys, strict=True)):
            raise _bad(text, "no sequence has both queries and keys (no query would see a "
                       "key: every output row is 0, nothing to judge)")
        _total(sum(lengths), text, "the lengths' total")
        _total(sum(keys), text, "the key lengths' total")
        return LengthSpec(text, "list", lengths, len(lengths),
                          None if keys == lengths else keys)
    parts = rest.split(":")
    if kind == "uniform":
        if len(parts) != 2 or parts[0].count("-") != 1:
            raise _bad(text, "uniform takes LO-HI:COUNT")
        lo, hi = (_int(x, text, name, 0) for x, name in zip(parts[0].split("-"),
                                                            ("LO", "HI"), strict=True))
        if hi < lo or hi < 1:
            raise _bad(text, f"need LO <= HI and HI >= 1, got {lo}-{hi}")
        count = _count(parts[1], text)
        _total(hi * count, text, "HI x COUNT")
        return LengthSpec(text, "uniform", (lo, hi), count)
    if kind == "lognormal":
        if len(parts) != 3:
            raise _bad(text, "lognormal takes MEDIAN:SIGMA:COUNT")
        median = _float(parts[0], text, "MEDIAN", positive=True)
        _total(median, text, "MEDIAN")
        sigma = _float(parts[1], text, "SIGMA", positive=False)
        return LengthSpec(text, "lognormal", (median, sigma), _count(parts[2], text))
    raise _bad(text, f"unknown distribution {kind!r} (uniform or lognormal)")
