"""The band of one case: a correct flash kernel's error statistics on that exact problem.

For a case (shape, distribution, causal, and an attention variant: window, softcap, sinks,
a packed varlen batch) and a dtype, the flash model (its backward for dq, dk, dv) runs with
that variant on :func:`band_seeds` seeds of the case's problem (:func:`band_shape`: its Nq,
Nk, d, dv on at least :data:`BAND_ROWS` query rows; a packed batch whole, per sequence),
each against the float64 reference of its dtype-rounded inputs. A statistic's *edge* is its
largest value over the seeds; the band rule (:mod:`flashbench.accuracy.bandrule`) compares
a kernel with them. The edges come from the shipped table ``flashbench/data/case_bands.json``
(plain cases: ``python -m tools.data.make_tolerances --cases``), else are measured on the fly (never
interpolated; a variant's never a plain one), cached per case and variant in memory and in
``$FLASHBENCH_CACHE`` (default ``~/.cache/flashbench``; :mod:`flashbench.bands.cache`),
keyed by the flash models' fingerprint and their code's (:func:`source_fingerprint`). A
case the machine cannot measure in memory is a ValueError.
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import lru_cache
from importlib import resources
from pathlib import Path

import numpy as np

from flashbench import numerics, reference
from flashbench.accuracy import error_stats
from flashbench.bands.cache import cached_band
from flashbench.bands.measure import caller_inputs, single_threaded_blas
from flashbench.inputs import DISTRIBUTIONS, Shape, make_qkv
from flashbench.inputs.lengths import lengths_text
from flashbench.inputs.precision import Precision, get_precision
from flashbench.inputs.problem import make_varlen_qkv, sink_logits, softcap_gain
from flashbench.inputs.variant import Variant
from flashbench.reference.varlen import per_sequence, per_sequence_grad

__all__ = ["CASE_SEEDS", "BAND_TOTAL_ROWS", "MAX_SEEDS", "band_seeds", "SEED0", "EDGE_STATS",
           "FORWARD", "BACKWARD", "BAND_ROWS", "band_shape", "case_band",
           "measure_case_band", "band_key", "memory_needed", "memory_limit", "CASE_TABLE",
           "write_case_table", "fingerprint", "variant_fingerprint", "variant_kwargs",
           "cached_band", "size_refusal", "source_fingerprint"]

CASE_SEEDS = 8  # seeds per band at least (studies/band_calibration.py: the edge of 8 seeds)
BAND_TOTAL_ROWS = 8192  # query rows over all seeds: a small problem gets more seeds
MAX_SEEDS = 256
SEED0 = 1000  # the band's seeds are SEED0.. (the check judges seed 0: fresh draws)
EDGE_STATS = ("max_abs", "rmse", "abs_p99", "abs_p50")  # statistics kept per seed
FORWARD, BACKWARD = ("o", "lse"), ("dq", "dk", "dv")
BAND_ROWS = 1024  # query rows (B * H * Nq) a band seed keeps at least, where the case has them
CASE_TABLE = "data/case_bands.json"  # inside the flashbench package
VERSION = 1
ONESHOT_BYTES = 1 << 30
MAX_SEED_FLOPS = 1 << 38  # a band seed's matmul work at most (~10 s here): else ValueError


def band_key(shape: Shape, dist: str, causal: bool, dtype: str | Precision, grad: bool = False,
             window: tuple[int, int] = (-1, -1), softcap: float | None = None,
             sinks: bool = False, varlen: tuple[int, ...] | None = None,
             varlen_k: tuple[int, ...] | None = None) -> str:
    """The text key of a band: ``dtype|shape|dist|causal|fwd or bwd``, and with a variant
    ``|window=(L,R) softcap=C sinks varlen=N1,N2`` (C exact: softcap 30 is not 30.5; key
    lengths that differ: ``varlen=Q1:K1,N2``)."""
    name = dtype.name if isinstance(dtype, Precision) else dtype
    key = f"{name}|{shape.label()}|{dist}|{'causal' if causal else 'full'}|" \
          f"{'bwd' if grad else 'fwd'}"
    extra = ([f"window=({window[0]},{window[1]})"] if tuple(window) != (-1, -1) else []) + (
        [f"softcap={float(softcap)!r}"] if softcap is not None else []) + (
        ["sinks"] if sinks else []) + (
        [f"varlen={lengths_text(varlen, varlen_k)}"] if varlen is not None else [])
    return f"{key}|{' '.join(extra)}" if extra else key


def variant_kwargs(heads: int, seed: int, window: tuple[int, int] = (-1, -1),
                   softcap: float | None = None, sinks: bool = False, keys: int = 1) -> dict:
    """The variant's keywords of one seed's problem (those of ``flashbench check``'s case,
    :meth:`flashbench.measure.records.Case.kwargs`): the window and softcap where set, and
    with ``sinks`` one logit per query head beside ``keys`` keys (:func:`sink_logits`)."""
    kw = {}
    if tuple(window) != (-1, -1):
        kw["window"] = tuple(window)
    if softcap is not None:
        kw["softcap"] = softcap
    if sinks:
        kw["sinks"] = sink_logits(heads, seed, keys, softcap)
    return kw


def band_shape(shape: Shape, grad: bool = False) -> Shape:
    """The problem a band seed draws for a case of ``shape``: the same Nq, Nk, d, dv; B = 1
    and as many heads as keep :data:`BAND_ROWS` query rows (at most the case's B * H); plain
    heads for O and LSE (grouped-query heads are numerically the same), for a gradient band
    (``grad``) whole groups of a grouped-query case's query heads per key/value head: dk and
    dv sum over the group (drawn as plain heads, the flash model's own GQA dk, dv read
    1.84-1.99x their band at 1x16/2x256x256x64 bf16, and check FAILed it and every correct
    kernel there)."""
    rows = shape.B * shape.H * shape.Nq
    if rows <= BAND_ROWS:
        return shape
    group = shape.H // shape.kv_heads if grad else 1
    heads = min(shape.B * shape.H, -(-BAND_ROWS // shape.Nq))
    heads = -(-heads // group) * group
    return Shape(1, heads, shape.Nq, shape.Nk, shape.d, shape.dv,
                 Hkv=heads // group if group > 1 else None)


def band_seeds(shape: Shape) -> int:
    """Seeds of a case's band: :data:`CASE_SEEDS`, or enough for :data:`BAND_TOTAL_ROWS`
    query rows in all (at most :data:`MAX_SEEDS`): a problem of 40 rows with 0.1% outliers
    varies far more from seed to seed than one of 1024. More seeds only raise the edges."""
    b = band_shape(shape)
    return min(MAX_SEEDS, max(CASE_SEEDS, -(-BAND_TOTAL_ROWS // (b.B * b.H * b.Nq))))


def memory_needed(shape: Shape, grad: bool = False) -> int:
    """Bytes one seed of the band holds at its peak, estimated: float64 q, k, v (and dO,
    O) with their rounded copies, the streamed reference and the model's fp32 tiles (the
    one-shot reference, used up to :data:`ONESHOT_BYTES`, is below the limit anyway)."""
    rows = shape.B * shape.H * shape.Nq
    kv = shape.B * shape.kv_heads * shape.Nk
    elems = rows * (shape.d + 2 * shape.head_dim_v) + kv * (shape.d + shape.head_dim_v)
    tiles = rows * 128 * 4 * 6  # score / P tiles of the streamed models and reference
    return int(elems * 8 * (8 if grad else 5) + tiles)


def memory_limit() -> int:
    """A quarter of this machine's physical memory (bytes), or 4 GiB where unknown."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 4
    except (ValueError, OSError, AttributeError):
        return 4 << 30


def size_refusal(shape: Shape, grad: bool = False) -> str | None:
    """Why this machine cannot measure the band of a case of ``shape`` (its forward's, or
    with ``grad`` its gradients'), or None where it can: a seed's memory over
    :func:`memory_limit`, or its matmul work over :data:`MAX_SEED_FLOPS`. Cheap: ``flashbench
    check`` asks it of every case before any work (a refusal after a minute's reference and
    forward band, as a large grouped-query backward met, helps no one)."""
    b = band_shape(shape, grad)
    need, limit = memory_needed(b, grad), memory_limit()
    if need > limit:
        return (f"shape {shape.label()}: its band cannot be measured in memory here "
                f"(about {need / 2**30:.1f} GiB a seed, limit {limit / 2**30:.1f} GiB, "
                f"a quarter of this machine's memory); judge a smaller shape")
    flops = 2 * b.B * b.H * b.Nq * b.Nk * (b.d + b.head_dim_v) * (3 if grad else 1)
    if flops > MAX_SEED_FLOPS:
        what = "gradient band" if grad else "band"
        return (f"shape {shape.label()}: its {what} is too large to measure here "
                f"({flops:.1e} flops a seed on the CPU, limit {MAX_SEED_FLOPS:.1e}, "
                f"{band_seeds(shape)} seeds); judge a shape with fewer query rows or keys")
    return None


def _check(shape, dist, causal, dtype, grad, window, softcap, sinks, varlen,
           varlen_k=None) -> Precision:
    """The case's arguments checked (errors name them); returns the dtype's Precision."""
    if not isinstance(shape, Shape):
        raise TypeError(f"shape must be a flashbench.inputs.Shape, got {type(shape).__name__}")
    if dist not in DISTRIBUTIONS:
        raise ValueError(f"dist must be one of {DISTRIBUTIONS}, got {dist!r}")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {causal!r}")
    prec = get_precision(dtype)  # the door: ValueError naming the known dtypes
    if prec.name == "fp64":
        raise ValueError("dtype fp64 has no band: its flash model equals the reference")
    if not isinstance(sinks, bool):
        raise TypeError(f"sinks must be a bool (seeded N(0, 1) logits per head), got {sinks!r}")
    Variant(causal=causal, window=window, softcap=softcap)  # ValueError naming a bad one
    if varlen is not None and (not isinstance(varlen, tuple) or not varlen or any(
            isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in varlen)
            or sum(varlen) < 1):
        raise ValueError(f"varlen must be a tuple of sequence lengths >= 0 (not all 0), "
                         f"got {varlen!r}")
    if varlen_k is not None and (varlen is None or not isinstance(varlen_k, tuple) or len(
            varlen_k) != len(varlen) or any(isinstance(n, bool) or not isinstance(n, int)
                                            or n < 0 for n in varlen_k)):
        raise ValueError(f"varlen_k must be a tuple of key lengths >= 0, one per sequence of "
                         f"varlen {varlen!r}, got {varlen_k!r}")
    if grad and prec.name not in numerics.GRAD_DTYPES:
        raise ValueError(f"dtype {prec.name!r} has no backward model: no gradient band "
                         f"(dtypes with one: {[d for d in numerics.GRAD_DTYPES if d != 'fp64']})")
    refusal = size_refusal(shape, grad)
    if refusal is not None:
        raise ValueError(refusal)
    return prec


def _seed_stats(shape, dist, causal, prec: Precision, grad, seed, block,
                variant: dict) -> dict[str, dict]:
    variant = dict(variant)
    lengths, keys = variant.pop("varlen"), variant.pop("varlen_k", None)
    shape = shape if lengths is not None else band_shape(shape, grad)
    most = shape.Nk if lengths is None else max(keys or lengths, default=1)  # a row's keys
    kw = {"causal": causal, **variant_kwargs(shape.H, seed, **variant, keys=most)}
    # the one-shot reference where its Nq x Nk matrices fit in ONESHOT_BYTES (faster), else
    # the streamed one (equal to 1e-13)
    oneshot = shape.B * shape.H * shape.Nq * shape.Nk * 8 * 4 <= ONESHOT_BYTES
    if lengths is not None:  # a packed batch: the flash model per sequence
        *qkv, cu, cu_k = make_varlen_qkv(lengths, shape, dist, seed, keys,
                                         softcap=variant.get("softcap"))
        q, k, v = (caller_inputs(prec, x) for x in qkv)
        if grad:  # dO as the check's (measure.varlen.varlen_grad_output)
            do = caller_inputs(prec, np.random.default_rng(seed + 1).standard_normal(
                (sum(lengths), shape.H, shape.head_dim_v)))
            ref = reference.varlen_attention_grad(q, k, v, do, cu, cu_k, **kw)
            out = per_sequence_grad(numerics.flash_model_grad, q, k, v, do, cu, cu_k,
                                    dtype=prec, block=block, **kw)
            names = BACKWARD
        else:
            ref = reference.varlen_attention(q, k, v, cu, cu_k, **kw)
            out = per_sequence(numerics.flash_model, q, k, v, cu, cu_k, dtype=prec,
                               block=block, **kw)
            names = FORWARD
    elif not grad:
        q, k, v = (caller_inputs(prec, x) for x in make_qkv(shape, dist, seed,
                                                             softcap=variant.get("softcap")))
        ref = (reference.attention(q, k, v, **kw) if oneshot
               else reference.online_attention(q, k, v, **kw))
        out = numerics.flash_model(q, k, v, prec, block=block, **kw)
        names = FORWARD
    else:
        q, k, v = (caller_inputs(prec, x) for x in make_qkv(shape, dist, seed,
                                                             softcap=variant.get("softcap")))
        do = caller_inputs(prec, np.random.default_rng(seed + 1).standard_normal(
            (shape.B, shape.H, shape.Nq, shape.head_dim_v)))
        if oneshot:
            ref = reference.attention_grad(q, k, v, do, **kw)
        else:
            o, lse = reference.online_attention(q, k, v, **kw)
            ref = reference.online_attention_grad(q, k, v, o, lse, do, **kw)
        out = numerics.flash_model_grad(q, k, v, do, prec, block=block, **kw)
        names = BACKWARD  # dsinks (with sinks) is not judged by the band rule
    stats = [error_stats(out[i], ref[i]) for i in range(len(names))]
    return {name: {s: st[s] for s in EDGE_STATS} for name, st in zip(names, stats, strict=True)}


def measure_case_band(shape: Shape, dist: str, causal: bool, dtype: str | Precision,
                      grad: bool = False, seeds: int | None = None, block: int = 64, *,
                      window: tuple[int, int] = (-1, -1), softcap: float | None = None,
                      sinks: bool = False, varlen: tuple[int, ...] | None = None,
                      varlen_k: tuple[int, ...] | None = None) -> dict:
    """Measure a band now (module docstring): ``{"key", "seeds", "source": "measured",
    "edges": {tensor: {stat: largest over seeds}}, "per_seed": {tensor: {stat: [...]}}}``.
    ``window``, ``softcap``, ``sinks`` (a bool: seeded logits, :func:`variant_kwargs`): the
    variant the flash model runs with; ``varlen``: a packed batch of these lengths with
    ``shape``'s H, Hkv, d (:func:`flashbench.inputs.problem.make_varlen_qkv`), ``varlen_k``
    its key lengths where they differ."""
    variant = {"window": window, "softcap": softcap, "sinks": sinks, "varlen": varlen,
               "varlen_k": varlen_k}
    prec = _check(shape, dist, causal, dtype, grad, **variant)
    seeds = band_seeds(shape) if seeds is None else seeds
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 2:
        raise ValueError(f"seeds must be an int >= 2, got {seeds!r}")
    with single_threaded_blas():
        runs = [_seed_stats(shape, dist, causal, prec, grad, SEED0 + i, block, variant)
                for i in range(seeds)]
    per_seed = {t: {s: [r[t][s] for r in runs] for s in EDGE_STATS} for t in runs[0]}
    edges = {t: {s: float(max(v)) for s, v in stats.items()} for t, stats in per_seed.items()}
    return {"key": band_key(shape, dist, causal, prec, grad, **variant), "seeds": seeds,
            "source": "measured", "edges": edges, "per_seed": per_seed}


@lru_cache(maxsize=2)
def _table(path: str | None) -> dict:
    source = resources.files("flashbench").joinpath(CASE_TABLE) if path is None else Path(path)
    try:
        table = json.loads(source.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ValueError(f"case band table {source}: cannot be read: {exc}") from None
    if not isinstance(table, dict) or table.get("version") != VERSION:
        raise ValueError(f"case band table {source}: not a version-{VERSION} table")
    return table.get("bands", {})


@lru_cache(maxsize=1)
def fingerprint() -> str:
    """A short hash of the flash models' outputs on a fixed small input, every dtype: the
    disk cache of measured bands is keyed by it (a changed model measures anew). d = 64:
    at d = 16 OpenBLAS sums small products in one order either way, so the models' change of
    summation order (2026-12-06) left a d = 16 fingerprint, and stale bands, as they were."""
    from flashbench.bands.measure import band_dtypes

    q, k, v = make_qkv(Shape(1, 1, 16, 40, 64), "normal", 7)
    h = hashlib.sha256()
    for dtype in band_dtypes():
        for x in numerics.flash_model(q, k, v, dtype, block=16, causal=True):
            h.update(np.ascontiguousarray(np.asarray(x, dtype=np.float64)).tobytes())
    return h.hexdigest()[:16]


@lru_cache(maxsize=4)
def source_fingerprint(root: Path | None = None) -> str:
    """A short hash of the code that measures a band (this flashbench's numerics, inputs,
    reference, accuracy and bands packages, byte for byte): the disk cache keys every
    measured band by it too. The models' fingerprints run one small input: a red team's
    head (2026-12-08) changed the flash model at softcaps of 10 and more, which the
    fingerprint's softcap of 3 never reached, and read base's cached band. ``root``: the
    flashbench package's folder (this one's by default)."""
    root = Path(__file__).resolve().parents[1] if root is None else Path(root)
    h = hashlib.sha256()
    for package in ("numerics", "inputs", "reference", "accuracy", "bands"):
        for path in sorted((root / package).rglob("*.py")):
            h.update(f"{path.relative_to(root)}\0".encode() + path.read_bytes())
    return h.hexdigest()[:16]


@lru_cache(maxsize=1)
def variant_fingerprint() -> str:
    """:func:`fingerprint` of the flash models with a window, a softcap and sinks, and of a
    softcap's inputs (:func:`~flashbench.inputs.problem.softcap_gain`): the disk cache keys a
    variant's band by both (a changed variant path measures anew)."""
    from flashbench.bands.measure import band_dtypes

    q, k, v = make_qkv(Shape(1, 2, 16, 40, 64), "normal", 7)
    h = hashlib.sha256()
    # and the inputs a softcap's case draws and its sinks (since 2026-12-08: bands before,
    # anew)
    h.update(repr([softcap_gain(c) for c in (1.0, 30.0, 50.0)]).encode())
    h.update(sink_logits(2, 7, 40).tobytes() + sink_logits(2, 7, 40, 30.0).tobytes())
    for dtype in band_dtypes():
        if dtype in numerics.GRAD_DTYPES:  # the fp8 models take causal only
            for x in numerics.flash_model(q, k, v, dtype, block=16, causal=True,
                                          window=(9, 0), softcap=3.0, sinks=[0.5, -1.0]):
                h.update(np.ascontiguousarray(np.asarray(x, dtype=np.float64)).tobytes())
    return h.hexdigest()[:16]


def case_band(shape: Shape, dist: str, causal: bool, dtype: str | Precision,
              grad: bool = False, table: str | Path | None = None, cache: bool = True, *,
              window: tuple[int, int] = (-1, -1), softcap: float | None = None,
              sinks: bool = False, varlen: tuple[int, ...] | None = None,
              varlen_k: tuple[int, ...] | None = None) -> dict:
    """The band of one case: the shipped table's entry (``source`` "table"), else the disk
    cache's or a new measurement (``source`` "measured"; module docstring). ``window``,
    ``softcap``, ``sinks``, ``varlen``, ``varlen_k``: the case's variant
    (:func:`measure_case_band`), in the key."""
    variant = {"window": window, "softcap": softcap, "sinks": sinks, "varlen": varlen,
               "varlen_k": varlen_k}
    prec = _check(shape, dist, causal, dtype, grad, **variant)
    key = band_key(shape, dist, causal, prec, grad, **variant)
    shipped = _table(None if table is None else str(table)).get(key)
    if shipped is not None:
        return {"key": key, "source": "table", **shipped}
    plain = tuple(window) == (-1, -1) and softcap is None and not sinks and varlen is None
    # a grouped-query band's file names the problem drawn (plain heads until 2026-12-06)
    grouped = f"|{band_shape(shape, grad).label()}" if grad and shape.kv_heads != shape.H \
        else ""
    return cached_band(key, band_seeds(shape),
                       lambda: fingerprint() + ("" if plain else f"|{variant_fingerprint()}")
                       + grouped + f"|{source_fingerprint()}",
                       lambda: measure_case_band(shape, dist, causal, prec, grad, **variant),
                       cache)


def write_case_table(bands: list[dict], path: str | Path, command: str = "",
                     seconds: float | None = None) -> Path:
    """Write measured bands (:func:`measure_case_band` results) as the case table: one band
    per line (reviewable diffs), the flash models' :func:`fingerprint` recorded."""
    head = {"version": VERSION, "command": command, "seeds": f"{CASE_SEEDS} or more (band_seeds)",
            "seed0": SEED0, "band_rows": BAND_ROWS, "band_total_rows": BAND_TOTAL_ROWS,
            "fingerprint": fingerprint(), "seconds": seconds,
            "method": "flash model on seeds seed0.. of each case's problem (band_rows query "
                      "rows at least, fewer heads); errors "
                      "against the float64 reference of the dtype-rounded inputs "
                      "(flashbench.accuracy.error_stats); edge = largest over the seeds"}
    lines = [f"  {json.dumps(b['key'])}: " + json.dumps(
        {k: v for k, v in b.items() if k not in ("key", "source")}) for b in bands]
    text = json.dumps(head, indent=1)[:-2] + ',\n "bands": {\n' + ",\n".join(lines) + "\n }\n}\n"
    json.loads(text)  # the hand-made layout must stay valid JSON
    path = Path(path)
    path.write_text(text)
    _table.cache_clear()
    return path
