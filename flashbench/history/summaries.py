"""Summaries of the tidy frame: accuracy error bands and throughput (TFLOP/s) trends.

Every summary keeps measurement machines apart by their identity, (machine, cpu):
one machine name given to two processors is two machines here (:func:`identities`).
A parameter combination is the ``params`` column, asv's own spelling;
:func:`parse_params` reads it back into values.

Throughput is computed for every timing (unit "seconds": ``time_`` benchmarks and
tracks in seconds) whose parameters say what problem it ran: ``shape``
(:meth:`flashbench.inputs.Shape.spec` text), and where they apply ``causal`` and
``direction`` (fwd, bwd, fwd+bwd); FLOPs = ``Shape.parse(shape).flops(causal,
direction)``. Results of the suites from before they recorded a shape get theirs
from :mod:`flashbench.history.suites`.
"""

from __future__ import annotations

import ast
import re

import numpy as np
import pandas as pd

from flashbench.history.frame import objects
from flashbench.history.suites import (
    ACCURACY_LABELS,
    BACKEND_COLUMNS,
    accuracy_metric,
    is_matmul_peak,
    legacy_problem,
    legacy_shaped,
    matmul_peak,
    role,
)
from flashbench.inputs.problem import PASS_FLOPS, Shape

IDENTITY = ["machine", "cpu"]  # a measurement machine: its name and its processor
_RUN = [*IDENTITY, "env", "commit"]  # one run: one results file
_PROBLEM = ("shape", "dtype", "causal", "direction")  # the parameters that size a timing
_PARSED: dict = {}
_SHAPES: dict = {}


def parse_params(label) -> dict | None:
    """A ``params`` label (``"dtype='bf16', N=1024"``) as {name: value}; {} for "",
    None where it is not asv's spelling of literal values."""
    try:
        return _PARSED[label]
    except KeyError:
        pass
    except TypeError:
        return None
    values = None
    if label == "":
        values = {}
    elif isinstance(label, str):
        try:
            call = ast.parse(f"f({label})", mode="eval").body
            if isinstance(call, ast.Call) and not call.args:
                values = {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords}
        except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
            values = None
    _PARSED[label] = values
    return values


def names(column: pd.Series) -> list:
    """The distinct values of a column (a Categorical's categories, no scan)."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        return list(column.cat.categories)
    return list(pd.unique(column))


def per_name(column: pd.Series, values: dict) -> np.ndarray:
    """``values[name]`` for every row's value of ``column`` (None where absent), objects."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        table = objects([values.get(c) for c in column.cat.categories] + [None])
        return table[column.cat.codes.to_numpy()]  # code -1 (NaN) -> the trailing None
    return objects([values.get(c) for c in column])


def flags(column: pd.Series, values: dict) -> np.ndarray:
    """``bool(values.get(name))`` for every row's value of ``column``, a bool array."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        table = np.array([bool(values.get(c)) for c in column.cat.categories] + [False])
        return table[column.cat.codes.to_numpy()]  # code -1 (NaN) -> the trailing False
    return per_name(column, values).astype(bool)


def by_pair(which: np.ndarray, values: list) -> pd.Categorical:
    """Per row ``values[which[row]]`` as a Categorical (None -> NaN): ``values`` holds
    one value per distinct pair (:func:`combinations`), so pandas meets only those."""
    cat = pd.Categorical(values)
    return pd.Categorical.from_codes(cat.codes[which], dtype=cat.dtype, validate=False)


def name_labels(column: pd.Series, values: dict) -> pd.Categorical:
    """:func:`per_name` as a Categorical (None -> NaN), without an object per row."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        return by_pair(column.cat.codes.to_numpy(),
                       [values.get(c) for c in column.cat.categories] + [None])
    return pd.Categorical(per_name(column, values))


def with_identity(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with a ``cpu`` column (NaN: not recorded) if it has none."""
    return df if "cpu" in df.columns else df.assign(cpu=None)


def identities(df: pd.DataFrame) -> pd.DataFrame:
    """One row per measurement machine (machine, cpu) with its number of results files,
    and ``shared``: whether its machine name also names another processor."""
    files = (with_identity(df).groupby(IDENTITY, observed=True, dropna=False)["file"]
             .nunique().rename("files").reset_index())
    files["shared"] = files.groupby("machine", observed=True)["cpu"].transform("size") > 1
    return files.astype({"machine": object, "cpu": object})


# what a measurement of each asv type gives, (above, at most): a time 10 ps - 11.6 days, a
# size up to 1 EB, a track (an error, a ratio, bytes) 0 or more; docs/history.md
PLAUSIBLE = {"time": (1e-11, 1e6), "peakmemory": (0.0, 1e18), "memory": (0.0, 1e18),
             "track": (-5e-324, np.inf)}  # (the float below 0: 0 itself is exact)


def finite_ok(df: pd.DataFrame) -> np.ndarray:
    """Per row: status "ok", a finite value, one a measurement gives (:data:`PLAUSIBLE`):
    others are left out of steps and trends (an infinite one grew asv's step solver
    without bound; an edited file's 1e-300 s read "best inf TFLOP/s", docs/history.md)."""
    value = df["value"].to_numpy(float)
    ok = (df["status"] == "ok").to_numpy() & np.isfinite(value)
    if "type" in df.columns:
        kind = df["type"].astype(object).to_numpy()
        with np.errstate(invalid="ignore"):
            for name, (lo, hi) in PLAUSIBLE.items():
                ok &= (kind != name) | ((value > lo) & (value <= hi))
    return ok


def ok_rows(df: pd.DataFrame, benchmarks, columns: list[str]) -> pd.DataFrame:
    """Rows with status "ok" and a finite value (:func:`finite_ok`) of ``benchmarks``
    (names), date-sorted, only ``columns`` that exist (with ``cpu``)."""
    df = with_identity(df)
    mask = df["benchmark"].isin(list(benchmarks)).to_numpy() & finite_ok(df)
    keep = [c for c in dict.fromkeys(["date", *columns]) if c in df.columns]
    return df.loc[mask, keep].sort_values("date", kind="stable")


def codes(column: pd.Series, wide: bool = True) -> tuple[np.ndarray, list]:
    """(per row an int64 code, -1 for NaN; the distinct values the codes index): a
    Categorical's own codes (not widened unless ``wide``: to index a table they need
    not be) and categories, else factorized."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        found = column.cat.codes.to_numpy()
        return found.astype(np.int64) if wide else found, list(column.cat.categories)
    found, uniques = pd.factorize(column.to_numpy(dtype=object))
    return found.astype(np.int64), list(uniques)


def combinations(frame: pd.DataFrame) -> tuple[np.ndarray, list[tuple]]:
    """(per row the index of its (benchmark, params) pair, the distinct pairs)."""
    b, benches = codes(frame["benchmark"])
    p, labels = codes(frame["params"])
    benches, labels = [*benches, None], [*labels, None]  # code -1 -> None
    key = b * len(labels) + (p % len(labels))
    unique, which = np.unique(key, return_inverse=True)
    return which, [(benches[k // len(labels)] if k >= 0 else None, labels[k % len(labels)])
                   for k in unique.tolist()]


def error_bands(df: pd.DataFrame) -> pd.DataFrame:
    """Accuracy tracks over history, one row per machine x cpu x metric x parameter
    combination.

    Columns: machine, cpu, kernel, dtype, causal, shape, dist (the accuracy parameters
    where recorded), metric, params (the whole combination), commits (how many recorded
    it), p50, p99, max (over all commits), band_lo / band_hi (min / max of the finite
    values of the commits before the latest), latest, latest_commit, latest_status (the
    newest commit's outcome: "ok", asv's "failed" / "skipped" / "missing", or "non-finite"
    for an inf or NaN error; latest is NaN unless "ok" or "non-finite", never an older
    commit's value), inside (latest within [band_lo, band_hi], up to 1e-8 of the
    edge; NA with one commit; False when latest_status is not "ok"), o_ratio / lse_ratio
    (latest baseline-rule ratio of the same combination: kernel error / same-dtype
    standard_model error, passes at <= 2), o_band / lse_band (latest band-rule ratio,
    passes at <= 1; NaN before the band rule), unit, role ("study" for a study's result,
    "peer" for torch's own attention, None for flashbench's: suites.role).
    """
    labels = [*IDENTITY, *ACCURACY_LABELS, "metric", "params"]
    columns = labels + ["commits", "p50", "p99", "max", "band_lo", "band_hi", "latest",
                        "latest_commit", "latest_status", "inside", "o_ratio", "lse_ratio",
                        "o_band", "lse_band", "unit", "role"]
    hits = {b: m for b in names(df["benchmark"]) if isinstance(b, str)
            and (m := accuracy_metric(b))}
    every = with_identity(df)
    every = every.loc[every["benchmark"].isin(list(hits)).to_numpy(),
                      [c for c in dict.fromkeys(["date", *_RUN, "benchmark", "params", "unit",
                                                 "value", "status", *ACCURACY_LABELS])
                       if c in every.columns]].sort_values("date", kind="stable")
    value = every["value"].to_numpy(float)
    ok = (every["status"] == "ok").to_numpy() & ~(value < 0)  # none is (PLAUSIBLE): out
    if not ok.any():
        return pd.DataFrame(columns=columns)
    every = every.assign(metric=name_labels(every["benchmark"], hits))
    keys = [*IDENTITY, "metric", "params"]
    # one id per series, so that every column below lines up whatever the keys hold
    gid = every.groupby(keys, observed=True, dropna=False, sort=True).ngroup().to_numpy()
    every = every.assign(gid=gid)
    last = (every.groupby("gid").cumcount(ascending=False) == 0).to_numpy()
    g = every["value"].where(ok).groupby(gid)
    bands = pd.DataFrame({"commits": g.count(), "p50": g.median(), "max": g.max(),
                          "p99": g.quantile(0.99)})
    earlier = every["value"].where(ok & ~last & np.isfinite(value)).groupby(gid)
    bands["band_lo"], bands["band_hi"] = earlier.min(), earlier.max()
    first = every[every.groupby("gid").cumcount() == 0].set_index("gid")
    for c in [*keys, *ACCURACY_LABELS]:
        bands[c] = first[c].astype(object) if c in first else None
    bands["role"] = pd.Series([role(str(b), str(p)) for b, p in zip(  # by gid, as bands
        first["benchmark"], first["params"], strict=True)], index=first.index, dtype=object)
    newest = every[last].set_index("gid").sort_index()  # in gid order, as bands
    bands["unit"] = newest["unit"].astype(object)
    status = newest["status"].astype(object).to_numpy()
    latest = newest["value"].to_numpy(float)
    status = np.where((status == "ok") & ~np.isfinite(latest), "non-finite", status)
    status = np.where((status == "ok") & (latest < 0), "below 0", status)
    bands["latest"] = np.where(np.isin(status, ["ok", "non-finite"]), latest, np.nan)
    bands["latest_commit"] = newest["commit"].astype(object).str[:8]
    bands["latest_status"] = status
    bands = bands[bands["commits"] > 0]
    # within 1e-8 of the edge it passed is inside: the float64 reference's own rounding (a
    # host's BLAS order) moved an fp32 kernel's 4.78e-7 by 1.2e-9 of itself, "more error
    # than ever before" (a probe, 2026-12-07); each edge scales its own (a review: 1e-6 of
    # band_hi let a 100x smaller latest read inside a [1e-10, 1e-3] band)
    inside = ((bands["band_lo"] * (1 - 1e-8) <= bands["latest"])
              & (bands["latest"] <= bands["band_hi"] * (1 + 1e-8))).astype(object)
    inside[bands["band_hi"].isna()] = pd.NA
    inside[bands["latest_status"] != "ok"] = False
    bands["inside"] = inside
    bands = bands.reset_index(drop=True)
    for metric, column in (("o_baseline_ratio", "o_ratio"), ("lse_baseline_ratio", "lse_ratio"),
                           ("o_band_ratio", "o_band"), ("lse_band_ratio", "lse_band")):
        ratio = bands.loc[bands["metric"] == metric, [*IDENTITY, "params", "latest"]]
        bands = bands.merge(ratio.rename(columns={"latest": column}),
                            on=[*IDENTITY, "params"], how="left")
    return bands.sort_values(labels, kind="stable", ignore_index=True)[columns]


def _shape(spec: str) -> Shape | None:
    if spec not in _SHAPES:
        try:
            _SHAPES[spec] = Shape.parse(spec)
        except ValueError:
            _SHAPES[spec] = None
    return _SHAPES[spec]


def problem(benchmark: str, label) -> tuple | None:
    """(backend, dtype, shape label, causal, direction, variant, FLOPs) of a timing's
    parameter combination, None where it records no known problem shape.

    backend: the first of :data:`~flashbench.history.suites.BACKEND_COLUMNS` held as
    text, else the benchmark's method name; variant: the other parameters ("block=64").
    """
    params = parse_params(label)
    if params is None:
        return None
    used = set(_PROBLEM)
    dtype = params.get("dtype")
    if isinstance(params.get("shape"), str):
        shape = _shape(params["shape"])
    elif old := legacy_problem(benchmark, params):
        shape, old_dtype, old_params = old
        dtype = dtype if isinstance(dtype, str) else old_dtype
        used.update(old_params)
    else:
        return None
    direction = params.get("direction", "fwd")
    if shape is None or not isinstance(direction, str) or direction not in PASS_FLOPS:
        return None
    causal = params.get("causal") is True
    column = next((c for c in BACKEND_COLUMNS if isinstance(params.get(c), str)), None)
    backend = params[column] if column else benchmark.rsplit(".", 1)[-1]
    used.add(column)
    variant = ", ".join(f"{k}={v!r}" for k, v in params.items() if k not in used)
    causal, flops = _masked(shape, causal, direction, params.get("variant"))
    return (backend, dtype if isinstance(dtype, str) else None, shape.label(), causal,
            direction, variant, flops)


def _masked(shape: Shape, causal: bool, direction: str, variant) -> tuple[bool, float]:
    """(causal, FLOPs) of a case whose ``variant`` parameter (a label such as "causal
    window=(256,0)") may mask it: the pairs its window and causal mask leave visible, as
    speed counts them (every N x N pair was counted: a window of 256 in 4096 read 16x the
    TFLOP/s it did)."""
    if not isinstance(variant, str):
        return causal, shape.flops(causal, direction)
    window = re.search(r"window=\((-?\d+),\s*(-?\d+)\)", variant)
    causal = causal or "causal" in variant.split()
    if window is None:
        return causal, shape.flops(causal, direction)
    from flashbench.inputs.variant import variant_of

    seen = variant_of(causal, window=(int(window[1]), int(window[2]))).visible_pairs(
        shape.Nq, shape.Nk)
    return causal, shape.flops(False, direction) * seen / (shape.Nq * shape.Nk)


def _timings(df: pd.DataFrame) -> np.ndarray:
    """Rows with status "ok" whose value is a finite time in seconds."""
    method = {b: isinstance(b, str) and b.rsplit(".", 1)[-1].startswith("time_")
              for b in names(df["benchmark"])}
    timed = ((df["unit"] == "seconds").to_numpy() | (df["type"] == "time").to_numpy()
             | flags(df["benchmark"], method))
    return timed & finite_ok(df)


def peaks(df: pd.DataFrame) -> pd.DataFrame:
    """Measured matmul TFLOP/s per run and dtype (the best of its matmul-peak timings)."""
    peak = ok_rows(df, [b for b in names(df["benchmark"]) if isinstance(b, str)
                        and is_matmul_peak(b)], [*_RUN, "benchmark", "params", "value"])
    which, pairs = combinations(peak)
    found = [matmul_peak(b, parse_params(p) or {}) for b, p in pairs] + [None]
    known = np.array([f is not None for f in found])[which]
    peak, which = peak[known], which[known]
    flops = np.array([f[0] if f else np.nan for f in found])[which]
    peak = peak.assign(dtype=objects([f[1] if f else None for f in found])[which],
                       peak_tflops=flops / peak["value"].to_numpy(float) * 1e-12)
    peak = peak.astype({c: object for c in _RUN})
    return peak.groupby([*_RUN, "dtype"], dropna=False)["peak_tflops"].max().reset_index()


def throughput_points(df: pd.DataFrame) -> pd.DataFrame:
    """Every timing with a known problem shape as TFLOP/s, and % of the same run's
    measured matmul peak (same dtype where measured, else the run's best), if any."""
    columns = [*_RUN, "date", "benchmark", "params", "backend", "dtype", "shape", "causal",
               "direction", "variant", "value", "tflops", "pct_peak"]
    df = with_identity(df)
    # only a shape parameter or a legacy suite can name a problem: rows of other
    # parameter combinations and benchmarks are dropped before any per-row work
    b, benches = codes(df["benchmark"], wide=False)
    p, labels = codes(df["params"], wide=False)
    legacy = np.array([isinstance(n, str) and legacy_shaped(n) for n in benches] + [False])
    shaped = np.array([isinstance((parse_params(x) or {}).get("shape"), str)
                       for x in labels] + [False])
    rows = _timings(df) & (legacy[b] | shaped[p])  # code -1 -> the trailing False
    extra = [c for c in ("version", "current") if c in df.columns]  # the plots' series
    columns += extra
    sel = df.loc[rows, [*_RUN, "date", "benchmark", "params", "value", *extra]]
    which, pairs = combinations(sel)
    found = [problem(b, p) for b, p in pairs]
    known = np.array([f is not None for f in found] + [False])[which]
    sel, which = sel[known], which[known]
    if sel.empty:
        return pd.DataFrame(columns=columns)
    described = list(zip(*[f if f else (None,) * 7 for f in found], strict=True))
    names_ = ("backend", "dtype", "shape", "causal", "direction", "variant")
    points = sel.assign(**{n: by_pair(which, list(v)) for n, v in zip(names_, described,
                                                                      strict=False)})
    points["causal"] = np.array(described[3], dtype=bool)[which]
    points["tflops"] = (np.array(described[6], dtype=float)[which]
                        / points["value"].to_numpy(float) * 1e-12)
    points = points.sort_values("date", kind="stable", ignore_index=True)
    measured = peaks(df)
    if measured.empty:
        points["pct_peak"] = np.nan
        return points[columns]
    runs = points[_RUN].astype(object)
    same = runs.assign(dtype=points["dtype"]).merge(measured, on=[*_RUN, "dtype"], how="left")
    best = runs.merge(measured.groupby(_RUN, dropna=False)["peak_tflops"].max().reset_index(),
                      on=_RUN, how="left")
    peak = same["peak_tflops"].fillna(best["peak_tflops"]).to_numpy(float)
    points["pct_peak"] = 100 * points["tflops"].to_numpy(float) / peak
    return points[columns]


def throughput(df: pd.DataFrame, points: pd.DataFrame | None = None) -> pd.DataFrame:
    """TFLOP/s trends per machine x cpu x backend x dtype x shape x causal x direction
    (x variant: the timing's other parameters, "" without).

    FLOPs = :meth:`flashbench.inputs.Shape.flops`: 4 * B * H * d * visible (query,
    key) pairs (about half when causal; 2.5x for the backward, 3.5x for both);
    TFLOP/s = FLOPs / recorded seconds. ``points``: :func:`throughput_points` of
    ``df`` when the caller has it already. Columns: commits, first, best, latest
    (TFLOP/s), change_pct (latest vs first), latest_pct_peak (% of the same run's
    measured matmul TFLOP/s, where recorded), latest_commit.
    """
    pts = throughput_points(df) if points is None else points
    pts = pts.sort_values("date", kind="stable")
    keys = [*IDENTITY, "backend", "dtype", "shape", "causal", "direction", "variant"]
    tail = ["commits", "first", "best", "latest", "change_pct", "latest_pct_peak",
            "latest_commit"]
    if pts.empty:
        return pd.DataFrame(columns=keys + tail)
    g = pts.groupby(keys, sort=True, observed=True, dropna=False)
    out = g.agg(commits=("commit", "nunique"), first=("tflops", "first"),
                best=("tflops", "max"),
                latest=("tflops", "last"), latest_pct_peak=("pct_peak", "last"),
                latest_commit=("commit", "last")).reset_index()
    out["change_pct"] = 100 * (out["latest"] / out["first"] - 1)
    out["latest_commit"] = out["latest_commit"].astype(object).str[:8]
    return out[keys + tail]
