"""The band of one decode case: a correct split-KV decode kernel's error statistics there.

For a decode case (:class:`flashbench.measure.decode.DecodeCase`: batch, heads, Nq, d/dv
(absorbed MLA or not), the ragged cache lengths, page size, causal, distribution) and a
dtype, the split model (:func:`flashbench.numerics.split_decode_model`,
:data:`DECODE_SPLITS` splits, fp32 partials) runs on :func:`decode_band_seeds` seeds
(SEED0..) of the case's own problem, each against the float64 decode of its dtype-rounded
inputs; a statistic's edge is its largest value over the seeds, as for the forward
(:mod:`flashbench.bands.case`). No table is shipped: a band is seconds a case, measured on
the fly at the case's own d/dv and cached (memory and ``$FLASHBENCH_CACHE``) under the
split model's :func:`decode_fingerprint`.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

import numpy as np

from flashbench import numerics, reference
from flashbench.accuracy import error_stats
from flashbench.bands.cache import cached_band
from flashbench.bands.case import (
    BAND_TOTAL_ROWS,
    CASE_SEEDS,
    EDGE_STATS,
    FORWARD,
    MAX_SEED_FLOPS,
    MAX_SEEDS,
    SEED0,
    source_fingerprint,
)
from flashbench.bands.measure import caller_inputs, single_threaded_blas
from flashbench.inputs.kvcache import make_decode
from flashbench.inputs.precision import Precision, get_precision

__all__ = ["DECODE_SPLITS", "BAND_DTYPES", "decode_band", "measure_decode_band",
           "decode_band_seeds", "decode_band_key", "decode_fingerprint", "decode_case_inputs"]

DECODE_SPLITS = 4  # the split model's splits (the check's split_model row too)
DECODE_DTYPES = ("fp32", "tf32", "fp16", "bf16")  # what the split model computes in
# the dtypes the check judges by the band rule: in fp32 and tf32 the error is the fp32 dot's
# summation order, which the model (one order) does not span (docs/decode.md)
BAND_DTYPES = ("fp16", "bf16")


def decode_band_seeds(case) -> int:
    """Seeds of a decode case's band: :data:`~flashbench.bands.case.CASE_SEEDS`, or enough
    for BAND_TOTAL_ROWS query rows (B x H x Nq) in all, at most MAX_SEEDS."""
    return min(MAX_SEEDS, max(CASE_SEEDS, -(-BAND_TOTAL_ROWS // (case.B * case.H * case.Nq))))


def decode_band_key(case, dtype: str | Precision) -> str:
    """``dtype|decode <spec>|dist|causal or full|splits=S``."""
    name = get_precision(dtype).name
    return (f"{name}|decode {case.spec()}|{case.dist}|{'causal' if case.causal else 'full'}|"
            f"splits={DECODE_SPLITS}")


def decode_case_inputs(case, seed: int):
    """float64 ``(q, k_cache, v_cache, cache_seqlens, block_table)`` of a decode case; in
    the absorbed MLA form v_cache is a view of k_cache's first dv columns (the same
    numbers the reference's ``v=None, dv=`` form reads, and a view the backends are handed
    as one: :func:`flashbench.measure.decode.handed_decode`)."""
    q, k, v, lens, table = make_decode(case.B, case.H, case.Hkv, case.Nq, case.d, case.lens,
                                       case.page_size, dist=case.dist, seed=seed,
                                       dv=case.dv)
    return q, k, k[..., :case.dv] if case.absorbed else v, lens, table


def _check(case, dtype) -> Precision:
    prec = get_precision(dtype)  # the door: ValueError naming the known dtypes
    if prec.name not in DECODE_DTYPES:
        raise ValueError(f"dtype {prec.name!r} has no decode band (the split model computes "
                         f"in {DECODE_DTYPES}; fp64 equals the reference)")
    flops = 2 * case.B * case.H * case.Nq * max(case.lens) * (case.d + case.dv)
    if flops > MAX_SEED_FLOPS:
        raise ValueError(f"decode case {case.spec()}: its band is too large to measure here "
                         f"({flops:.1e} flops a seed on the CPU, limit {MAX_SEED_FLOPS:.1e}); "
                         f"judge a case with fewer query rows or keys")
    return prec


def _seed_stats(case, prec: Precision, seed: int) -> dict[str, dict]:
    q, k, v, lens, table = decode_case_inputs(case, seed)
    given = [caller_inputs(prec, x) for x in (q, k)]
    given.append(None if case.absorbed else caller_inputs(prec, v))  # absorbed: v=None, dv=
    ref = reference.decode_attention(*given, lens, table, causal=case.causal, dv=case.dv)
    out = numerics.split_decode_model(*given, lens, table, dtype=prec, causal=case.causal,
                                      num_splits=DECODE_SPLITS, dv=case.dv)
    stats = [error_stats(out[i], ref[i]) for i in range(2)]
    return {t: {s: st[s] for s in EDGE_STATS} for t, st in zip(FORWARD, stats, strict=True)}


def measure_decode_band(case, dtype: str | Precision, seeds: int | None = None) -> dict:
    """Measure a decode band now (module docstring): ``{"key", "seeds", "source":
    "measured", "edges": {"o"/"lse": {stat: largest over seeds}}, "per_seed": {...}}``."""
    prec = _check(case, dtype)
    seeds = decode_band_seeds(case) if seeds is None else seeds
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 2:
        raise ValueError(f"seeds must be an int >= 2, got {seeds!r}")
    with single_threaded_blas():
        runs = [_seed_stats(case, prec, SEED0 + i) for i in range(seeds)]
    per_seed = {t: {s: [r[t][s] for r in runs] for s in EDGE_STATS} for t in FORWARD}
    edges = {t: {s: float(max(v)) for s, v in stats.items()} for t, stats in per_seed.items()}
    return {"key": decode_band_key(case, prec), "seeds": seeds, "source": "measured",
            "edges": edges, "per_seed": per_seed}


@lru_cache(maxsize=1)
def decode_fingerprint() -> str:
    """A short hash of the split model's outputs on a fixed small paged case, each dtype
    it computes in: the disk cache of decode bands is keyed by it."""
    q, k, v, lens, table = make_decode(2, 4, 2, 2, 16, (70, 9), 16, seed=7)
    h = hashlib.sha256()
    for dtype in DECODE_DTYPES:
        for x in numerics.split_decode_model(q, k, v, lens, table, dtype=dtype, causal=True,
                                             num_splits=3, block=16):
            h.update(np.ascontiguousarray(np.asarray(x, dtype=np.float64)).tobytes())
    return h.hexdigest()[:16]


def decode_band(case, dtype: str | Precision, cache: bool = True) -> dict:
    """The band of a decode case in ``dtype``: from memory or the disk cache, else measured
    (:func:`measure_decode_band`); ``cache`` False: not read from or written to disk."""
    prec = _check(case, dtype)
    return cached_band(decode_band_key(case, prec), decode_band_seeds(case),
                       lambda: f"{decode_fingerprint()}|{source_fingerprint()}",
                       lambda: measure_decode_band(case, prec), cache)
