"""The shipped tolerance table, and :func:`tolerance` for tests.

``flashbench/data/tolerances.json`` holds, per dtype x N x distribution x causal and for
O and LSE, the *edges* of the flash model's measured band (:mod:`flashbench.bands.measure`:
the max over every element of every seed, and the pooled p99 / p50; a causal cell's edge
is at least the non-causal cell's) and the safety factor :data:`SAFETY` that
:func:`tolerance` multiplies them by; :func:`build_table` / :func:`write_table` make it
(``tools/data/make_tolerances.py``). :func:`tolerance` takes ``n`` as the keys a query row
sums over: log-log interpolation between tabulated N, the smallest N's edge below it,
ValueError above the largest; ``causal=True`` takes the largest edge over the row lengths
its ``nq`` bottom-right rows see. Measured at d = 64; another head dim (``d``, ``dv``) is
measured on the fly as the table measures its cells (kept in the bands' disk cache). No
torch, no pandas: importing this module (``flashbench.tolerance``) is cheap.
A test's use, the rules and why the factor is 2: docs/bands.md ("Tolerances for your
tests").
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from importlib import resources
from pathlib import Path

__all__ = ["tolerance", "load_table", "build_table", "write_table", "TABLE_METRICS", "SAFETY",
           "TABLE_PATH"]

# metric name (as flashbench.accuracy.error_stats names it) -> the Band field of its edge
TABLE_METRICS = {"max_abs": "abs_max", "abs_p99": "abs_p99", "abs_p50": "abs_p50",
                 "rel_max": "rel_max", "rel_p99": "rel_p99", "rel_p50": "rel_p50"}
SAFETY = 2.0  # tolerance = edge x SAFETY (docs/bands.md: "Why a factor 2, and how many seeds")
TENSORS = ("o", "lse")
TABLE_PATH = "data/tolerances.json"  # inside the flashbench package
VERSION = 1
HEAD_DIM_TABLE = 64  # the head dim the shipped table was measured at (bands.measure.HEAD_DIM)


def _default_path():
    return resources.files("flashbench").joinpath(TABLE_PATH)


@lru_cache(maxsize=4)
def _load(path: str | None) -> dict:
    source = _default_path() if path is None else Path(path)
    try:
        table = json.loads(source.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"tolerance table {source}: cannot be read: {exc}") from None
    if not isinstance(table, dict) or table.get("version") != VERSION or "cells" not in table:
        raise ValueError(f"tolerance table {source}: not a version-{VERSION} table")
    index = {}
    for cell in table["cells"]:
        index[(cell["dtype"], cell["dist"], cell["causal"], cell["tensor"], cell["n"])] = cell
    table["_index"] = index
    return table


def load_table(path: str | Path | None = None) -> dict:
    """The tolerance table (the shipped one by default) as a dict: ``version``,
    ``safety``, ``dtypes``, ``n``, ``dists``, ``causal``, ``method``, ``command``,
    ``cells`` (one dict per dtype x n x dist x causal x tensor with the edges)."""
    table = _load(None if path is None else str(path))
    return {k: v for k, v in table.items() if k != "_index"}


def _check_choice(name: str, value, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {list(allowed)}, got {value!r}")


def _edge(t: dict, key: tuple, field: str, m: float, grid: list[int]) -> float:
    """The edge for rows of ``m`` keys: the cell's at a tabulated N, log-log interpolated
    between the two neighbouring N (linear in log N where an edge is 0), the smallest
    N's below it."""
    def at(g):
        cell = t["_index"].get((*key, g))
        if cell is None:
            dtype, dist, causal, tensor = key
            raise ValueError(f"the tolerance table has no cell dtype={dtype} N={g} "
                             f"dist={dist} causal={causal} tensor={tensor}")
        return float(cell[field])

    if m <= grid[0]:
        return at(grid[0])
    hi = next(g for g in grid if g >= m)
    lo = max(g for g in grid if g <= m)
    if lo == hi:
        return at(lo)
    a, b = at(lo), at(hi)
    f = math.log(m / lo) / math.log(hi / lo)
    if a > 0 and b > 0:
        return math.exp(math.log(a) + f * (math.log(b) - math.log(a)))
    return a + f * (b - a)


def tolerance(dtype: str, n: int, dist: str = "normal", metric: str = "max_abs",
              causal: bool = False, tensor: str = "o", nq: int | None = None,
              table: str | Path | None = None, d: int | None = None,
              dv: int | None = None) -> float:
    """Tolerance for ``error_stats(out, ref)[metric]`` of a flash kernel in ``dtype`` whose
    query rows sum over ``n`` keys: the measured band's upper edge x the table's
    safety factor (the rules, the table and an example test: docs/bands.md).

    ``metric``: "max_abs" (default), "abs_p99", "abs_p50", "rel_max", "rel_p99",
    "rel_p50" (relative error floored at 0.1 RMS(ref), as error_stats); the
    percentiles are for tests of at least ~10^4 elements (a small test's p99 is
    nearly its max). ``causal``: bottom-right causal; its ``nq`` query rows (default
    ``n``: a square problem) see ``n - nq + 1`` up to ``n`` keys, and the edge is the
    largest over that range. ``tensor``: "o" or "lse". ``table``: another table file
    (default: the shipped one). ``d``, ``dv``: the head dims, when not the table's d = 64:
    the edges are then measured on the fly as the shipped table measured its own (its seeds
    per cell, a causal cell's edge at least the non-causal one's, the envelope over the
    row lengths ``nq`` gives, at the row lengths the table would read; ``table`` with them
    is an error), seconds to a minute the first time on a machine (the bands' disk cache).
    ValueError for a dtype, N, dist, metric or tensor the table does not cover.
    """
    fly = (d, dv) not in ((None, None), (HEAD_DIM_TABLE, None), (HEAD_DIM_TABLE, HEAD_DIM_TABLE))
    if fly and table is not None:
        raise ValueError(f"table is a table of d = {HEAD_DIM_TABLE}: with d={d}, dv={dv} the "
                         "edges are measured, not read (pass one or the other)")
    t = _load(None if table is None else str(table))
    _check_choice("dtype", dtype, t["dtypes"])
    _check_choice("dist", dist, t["dists"])
    _check_choice("metric", metric, list(TABLE_METRICS))
    _check_choice("tensor", tensor, TENSORS)
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {causal!r}")
    if causal not in t["causal"]:
        raise ValueError(f"causal={causal} is not in the table (it covers {t['causal']})")
    grid = sorted(t["n"])
    top = math.inf if fly else grid[-1]  # measured at any N; the table reads only its own
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= top:
        raise ValueError(f"n (keys per query row) must be an int in [1, {grid[-1]}] "
                         f"(the table's N: {grid}), got {n!r}" if top == grid[-1] else
                         f"n (keys per query row) must be an int >= 1, got {n!r}")
    if nq is not None and (isinstance(nq, bool) or not isinstance(nq, int) or nq < 1):
        raise ValueError(f"nq (query rows) must be an int >= 1 or None, got {nq!r}")
    low = max(1, n - (n if nq is None else nq) + 1) if causal else n
    points = [low, n, *(g for g in grid if low < g < n)]
    key, field = (dtype, dist, causal, tensor), TABLE_METRICS[metric]
    if fly:  # at each row length the table reads: its N below the smallest, else the m keys
        measured = sorted({max(m, grid[0]) for m in points})
        return max(_measured_edge(dtype, m, dist, c, tensor, field,
                                  HEAD_DIM_TABLE if d is None else d, dv, _table_seeds(m))
                   for m in measured for c in {False, causal}) * SAFETY
    return max(_edge(t, key, field, m, grid) for m in points) * float(t["safety"])


def _table_seeds(n: int) -> int:
    """The seeds the shipped table measured a cell of ``n`` keys over (its ``seeds``: 64,
    4x as many below N = 256, where cells are cheap: tools/data/make_tolerances.py)."""
    return 256 if n < 256 else 64


def _measured_edge(dtype: str, n: int, dist: str, causal: bool, tensor: str, field: str,
                   d: int, dv: int | None, seeds: int) -> float:
    """The flash model's band edge at head dims (d, dv), N = n, against float64, over
    ``seeds`` seeds (the table's own cell, measured at another head dim), kept in memory and
    in the bands' disk cache (:func:`flashbench.bands.cache.cached_band`, keyed by the flash
    models' fingerprint): measured once per machine, not once per process."""
    from flashbench.bands.cache import cached_band
    from flashbench.bands.case import fingerprint, source_fingerprint
    from flashbench.bands.measure import measure_bands

    for name, x in (("d", d), ("dv", dv)):
        if x is not None and (isinstance(x, bool) or not isinstance(x, int) or x < 1):
            raise ValueError(f"{name} must be an int >= 1, got {x!r}")
    key = f"tolerance cell {dtype} n={n} {dist} causal={causal} d={d} dv={dv}"

    def measure() -> dict:
        bands = measure_bands(dtypes=[dtype], ns=[n], dists=[dist], causal=[causal], d=d,
                              dv=dv, seeds=seeds)
        return {"key": key, "edges": {b.tensor: {f: getattr(b, f) for f in TABLE_METRICS.values()}
                                      for b in bands if b.kernel == "flash_model"}}

    return float(cached_band(key, seeds, lambda: f"{fingerprint()}|{source_fingerprint()}",
                             measure)["edges"][tensor][field])


def build_table(bands, safety: float = SAFETY, command: str = "", meta: dict | None = None) -> dict:
    """A tolerance table from :class:`flashbench.bands.measure.Band` records: the flash
    model against the float64 reference of its inputs (other records are ignored)."""
    if not (isinstance(safety, int | float) and math.isfinite(safety) and safety >= 1):
        raise ValueError(f"safety must be a finite number >= 1, got {safety!r}")
    cells = []
    for b in bands:
        if b.kernel != "flash_model" or b.versus != "fp64":
            continue
        cell = {"dtype": b.dtype, "n": b.n, "dist": b.dist, "causal": b.causal,
                "tensor": b.tensor, "seeds": b.seeds, "elements": b.elements, "eps": b.eps}
        cell.update({f: getattr(b, f) for f in TABLE_METRICS.values()})
        cells.append(cell)
    if not cells:
        raise ValueError("no flash_model band against fp64 among the records")
    # a causal row is, numerically, a row over its visible keys: its edge is at least
    # the non-causal one (measured on other tiles, another BLAS summation order)
    plain = {(c["dtype"], c["n"], c["dist"], c["tensor"]): c for c in cells if not c["causal"]}
    for c in cells:
        other = plain.get((c["dtype"], c["n"], c["dist"], c["tensor"])) if c["causal"] else None
        if other is not None:
            c.update({f: max(c[f], other[f]) for f in TABLE_METRICS.values()})

    def values(key):
        return sorted({c[key] for c in cells}, key=lambda x: (str(type(x)), x))

    from flashbench.inputs.precision import DTYPES  # the registry's order

    dtypes = [d for d in DTYPES if d in {c["dtype"] for c in cells}]
    return {"version": VERSION, "safety": float(safety), "dtypes": dtypes, "n": values("n"),
            "dists": values("dist"), "causal": values("causal"), "command": command,
            "method": "edges of the flash model's measured bands (flashbench.bands.measure): "
                      "abs_max / rel_max: largest error over every element of every seed; "
                      "*_p99 / *_p50: percentiles over those elements pooled; float64 "
                      "reference of the inputs as the kernel received them; a causal cell's "
                      "edge is at least the non-causal cell's; tolerance = edge x safety",
            **(meta or {}), "cells": cells}


def write_table(table: dict, path: str | Path) -> Path:
    """Write ``table`` as JSON (one cell per line: reviewable diffs); returns the path."""
    path = Path(path)
    cells = table["cells"]
    head = {k: v for k, v in table.items() if k != "cells"}
    text = json.dumps(head, indent=1)[:-2] + ',\n "cells": [\n' + ",\n".join(
        "  " + json.dumps(c, sort_keys=False) for c in cells) + "\n ]\n}\n"
    json.loads(text)  # the hand-made layout must stay valid JSON
    path.write_text(text)
    _load.cache_clear()
    return path
