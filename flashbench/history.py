"""asv results as one tidy pandas DataFrame, and the summaries kernel engineers read.

:func:`load_results` reads every ``<machine>/*.json`` results file (asv results
schema version 2) under a results folder, with ``benchmarks.json`` for parameter
names, types and units. One row per benchmark x parameter combination x results
file, columns:

    machine, env, commit, date (UTC), file, benchmark, type, unit, <one column per
    parameter, values parsed from their reprs>, value, status, ci_99_a, ci_99_b,
    q25, q75, number, repeat, samples, version

``status`` keeps asv's outcomes apart: "ok" (a number), "skipped" (asv wrote NaN:
setup raised NotImplementedError), "failed" (asv wrote null), "missing" (the file
lists fewer results than the parameter grid). A file that is not valid JSON, is
truncated, has another schema version or lacks the keys of a results file is
reported by a :class:`ResultsWarning` (path and reason) and skipped; the rest
loads. Unknown keys and unknown result columns are ignored.

Summaries of that frame (each a DataFrame):

- :func:`error_bands`: accuracy tracks per machine x kernel x dtype x causal x
  metric over history: p50 / p99 / max, latest, inside the band of earlier commits.
- :func:`throughput`: timings with a known problem shape -> TFLOP/s first / best /
  latest, change %, and % of the same run's measured matmul peak where recorded.
- :func:`steps`: commits where a series' level moved beyond its noise (asv's own
  step detection, :func:`asv.step_detect.detect_steps`).
"""

from __future__ import annotations

import ast
import itertools
import json
import math
import re
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from flashbench.inputs import Shape

__all__ = ["ResultsWarning", "load_results", "error_bands", "throughput", "steps",
           "FIXED_COLUMNS"]

FIXED_COLUMNS = ["machine", "env", "commit", "date", "file", "benchmark", "type", "unit",
                 "value", "status", "ci_99_a", "ci_99_b", "q25", "q75", "number", "repeat",
                 "samples", "version"]
_STAT_COLUMNS = {"stats_ci_99_a": "ci_99_a", "stats_ci_99_b": "ci_99_b", "stats_q_25": "q25",
                 "stats_q_75": "q75", "stats_number": "number", "stats_repeat": "repeat",
                 "samples": "samples"}


class ResultsWarning(UserWarning):
    """A results file that could not be read; the message names the file and the reason."""


def _literal(text, cache: dict):
    """A parameter value from its repr ("'fp16'" -> 'fp16', "1024" -> 1024); else the text."""
    try:
        return cache[text]
    except KeyError:
        pass
    try:
        value = ast.literal_eval(text) if isinstance(text, str) else text
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        value = text
    cache[text] = value
    return value


def _read_benchmarks(root: Path) -> dict:
    path = root / "benchmarks.json"
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as exc:
        warnings.warn(f"{path}: skipped: {exc}", ResultsWarning, stacklevel=3)
        return {}
    return {k: v for k, v in data.items() if isinstance(v, dict)}


def _read_results_file(path: Path) -> dict:
    """Parsed results file; raises ValueError with the reason it cannot be used."""
    try:
        data = json.loads(path.read_text())
    except UnicodeDecodeError as exc:
        raise ValueError(f"not text: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON (truncated or corrupt): {exc}") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    if data.get("version") != 2:
        raise ValueError(f"results schema version {data.get('version')!r}, expected 2")
    missing = [k for k in ("commit_hash", "env_name", "date", "params", "results",
                           "result_columns") if k not in data]
    if missing:
        raise ValueError(f"missing keys {missing}")
    if not isinstance(data["results"], dict) or not isinstance(data["result_columns"], list):
        raise ValueError("'results' must be an object and 'result_columns' a list")
    return data


def _status(value) -> str:
    if value is None:
        return "failed"
    if isinstance(value, float) and math.isnan(value):
        return "skipped"
    return "ok"


def load_results(path) -> pd.DataFrame:
    """Every results file under ``path`` as one tidy DataFrame (module docstring).

    The frame's ``attrs["skipped_files"]`` lists ``(file, reason)`` for every file
    that was reported and skipped.
    """
    root = Path(path)
    if not root.is_dir():
        raise ValueError(f"results path {str(root)!r} is not a directory")
    meta = _read_benchmarks(root)
    cols: dict[str, list] = {c: [] for c in FIXED_COLUMNS}
    param_cols: dict[str, tuple[list, list]] = {}  # name -> (row indices, values)
    skipped: list[tuple[str, str]] = []
    cache: dict = {}
    n = 0
    for file in sorted(root.glob("*/*.json")):
        if file.name == "machine.json":
            continue
        try:
            data = _read_results_file(file)
        except (OSError, ValueError) as exc:
            skipped.append((str(file), str(exc)))
            warnings.warn(f"{file}: skipped: {exc}", ResultsWarning, stacklevel=2)
            continue
        columns = data["result_columns"]
        where = {name: i for i, name in enumerate(columns)}
        machine = data["params"].get("machine", file.parent.name) if isinstance(
            data["params"], dict) else file.parent.name
        date = data["date"]
        relpath = str(file.relative_to(root))
        for bench, row in data["results"].items():
            if not isinstance(row, list) or "result" not in where:
                continue
            info = meta.get(bench, {})

            def col(name, row=row, where=where):
                i = where.get(name)
                return row[i] if i is not None and i < len(row) else None

            results = col("result")
            params = col("params") or []
            if not isinstance(results, list):
                results = [results]
            names = list(info.get("param_names") or [])
            names += [f"param{i + 1}" for i in range(len(names), len(params))]
            names = [f"param_{p}" if p in cols else p for p in names]
            combos = list(itertools.product(*params)) if params else [()]
            m = len(combos)
            got = results[:m]
            values = got + [None] * (m - len(got))
            status = [_status(v) for v in got] + ["missing"] * (m - len(got))
            cols["machine"] += [machine] * m
            cols["env"] += [data["env_name"]] * m
            cols["commit"] += [data["commit_hash"]] * m
            cols["date"] += [date] * m
            cols["file"] += [relpath] * m
            cols["benchmark"] += [bench] * m
            cols["type"] += [info.get("type")] * m
            cols["unit"] += [info.get("unit")] * m
            cols["value"] += [v if s == "ok" else np.nan for v, s in zip(values, status,
                                                                          strict=True)]
            cols["status"] += status
            for long, short in _STAT_COLUMNS.items():
                stat = col(long)
                if isinstance(stat, list):
                    cols[short] += stat[:m] + [None] * (m - len(stat[:m]))
                else:
                    cols[short] += [None] * m
            cols["version"] += [col("version")] * m
            for k, name in enumerate(names[:len(params)]):
                rows, vals = param_cols.setdefault(name, ([], []))
                rows.extend(range(n, n + m))
                vals.extend(_literal(combo[k], cache) for combo in combos)
            n += m
    frame = pd.DataFrame(cols)
    for name, (rows, values) in param_cols.items():
        column = np.full(n, None, dtype=object)
        column[rows] = values
        frame[name] = column
    frame["date"] = pd.to_datetime(frame["date"], unit="ms", utc=True)
    for c in ("value", "ci_99_a", "ci_99_b", "q25", "q75", "number", "repeat"):
        frame[c] = pd.to_numeric(frame[c], errors="coerce")
    frame.attrs["skipped_files"] = skipped
    frame.attrs["param_columns"] = list(param_cols)
    return frame


# --------------------------------------------------------------------------- summaries

ACCURACY = re.compile(r"TrackAccuracy\.track_(?P<metric>\w+)$")
MATMUL_PEAK = re.compile(r"TrackMatmulPeak\.track_matmul_bf16_(?P<n>\d+)$")
# Benchmarks whose timings have a known attention shape: name pattern -> shape of params.
SHAPES: list[tuple[re.Pattern, Callable[[dict], Shape]]] = [
    (re.compile(r"TrackDeviceTime\.track_device_time$"),
     lambda p: Shape(max(1, 16384 // int(p["N"])), 16, int(p["N"]), int(p["N"]), int(p["d"]))),
    (re.compile(r"TimeCPUBackend\.time_backend$"),
     lambda p: Shape(1, 8, int(p["N"]), int(p["N"]), 64)),
    (re.compile(r"TimeAttention\.time_attention$"),
     lambda p: Shape(1, 1, int(p["N"]), int(p["N"]), int(p["d"]))),
]


def _ok(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["status"] == "ok"].sort_values("date", kind="stable")


def error_bands(df: pd.DataFrame) -> pd.DataFrame:
    """Accuracy tracks over history, one row per machine x kernel x dtype x causal x metric.

    Columns: commits (how many recorded it), p50, p99, max (over all commits),
    band_lo / band_hi (min / max over the commits before the latest), latest,
    latest_commit, inside (latest within [band_lo, band_hi]; NA with one commit),
    o_ratio / lse_ratio (latest baseline-rule ratio of that kernel x dtype x causal:
    kernel error / same-dtype standard_model error, passes at <= 2), unit.
    """
    acc = _ok(df)
    metric = acc["benchmark"].str.extract(ACCURACY)["metric"]
    acc = acc.assign(metric=metric)[metric.notna()]
    keys = ["machine", "kernel", "dtype", "causal", "metric"]
    if acc.empty or not set(keys[1:4]) <= set(acc.columns):
        return pd.DataFrame(columns=keys + ["commits", "p50", "p99", "max", "band_lo",
                                            "band_hi", "latest", "latest_commit", "inside",
                                            "o_ratio", "lse_ratio", "unit"])
    rows = []
    for key, g in acc.groupby(keys, sort=True, dropna=False):
        v = g["value"].to_numpy(float)
        earlier = v[:-1]
        latest = v[-1]
        lo, hi = (earlier.min(), earlier.max()) if earlier.size else (np.nan, np.nan)
        tol = 1e-9 * max(abs(hi), 1e-300) if earlier.size else 0.0
        inside = pd.NA if not earlier.size else bool(lo - tol <= latest <= hi + tol)
        rows.append(dict(zip(keys, key, strict=True), commits=len(v),
                         p50=np.percentile(v, 50), p99=np.percentile(v, 99), max=v.max(),
                         band_lo=lo, band_hi=hi, latest=latest,
                         latest_commit=g["commit"].iloc[-1][:8], inside=inside,
                         unit=g["unit"].iloc[-1]))
    bands = pd.DataFrame(rows)
    ratios = bands[bands["metric"].isin(["o_baseline_ratio", "lse_baseline_ratio"])]
    ratios = ratios.pivot_table(index=keys[:4], columns="metric", values="latest",
                                dropna=False).reset_index()
    ratios = ratios.rename(columns={"o_baseline_ratio": "o_ratio",
                                    "lse_baseline_ratio": "lse_ratio"})
    for c in ("o_ratio", "lse_ratio"):
        if c not in ratios:
            ratios[c] = np.nan
    return bands.merge(ratios[keys[:4] + ["o_ratio", "lse_ratio"]], on=keys[:4], how="left")


def _peaks(ok: pd.DataFrame) -> pd.DataFrame:
    """Measured bf16 matmul TFLOP/s per (machine, env, commit), from TrackMatmulPeak."""
    m = ok["benchmark"].str.extract(MATMUL_PEAK)["n"]
    peak = ok[m.notna()].assign(n=m[m.notna()].astype(float))
    peak = peak.assign(peak_tflops=2 * peak["n"] ** 3 / peak["value"] * 1e-12)
    return peak[["machine", "env", "commit", "peak_tflops"]]


def throughput_points(df: pd.DataFrame) -> pd.DataFrame:
    """Every timing with a known shape as TFLOP/s (and % of the run's matmul peak, if any)."""
    ok = _ok(df)
    parts = []
    for pattern, shape_of in SHAPES:
        sel = ok[ok["benchmark"].str.contains(pattern)]
        if sel.empty:
            continue
        records = sel.to_dict("records")
        shapes = [shape_of(r) for r in records]
        causal = [bool(r.get("causal") or False) for r in records]
        part = sel.assign(
            backend=[r.get("backend") or r.get("impl") or r["benchmark"].split(".")[-1]
                     for r in records],
            dtype=[r.get("dtype") if isinstance(r.get("dtype"), str) else "fp64"
                   for r in records],
            causal=causal, shape=[s.label() for s in shapes],
            tflops=[s.flops(c) / v * 1e-12 for s, c, v in zip(shapes, causal, sel["value"],
                                                              strict=True)])
        parts.append(part)
    if not parts:
        return pd.DataFrame(columns=["machine", "env", "commit", "date", "backend", "dtype",
                                     "shape", "causal", "tflops", "pct_peak"])
    points = pd.concat(parts, ignore_index=True)
    points = points.merge(_peaks(ok), on=["machine", "env", "commit"], how="left")
    points["pct_peak"] = 100 * points["tflops"] / points["peak_tflops"]
    return points[["machine", "env", "commit", "date", "benchmark", "backend", "dtype", "shape",
                   "causal", "value", "tflops", "pct_peak"]]


def throughput(df: pd.DataFrame) -> pd.DataFrame:
    """TFLOP/s trends per machine x backend x dtype x shape x causal.

    FLOPs = 4 * B * H * d * visible (query, key) pairs (about half when causal);
    TFLOP/s = FLOPs / recorded seconds. Columns: commits, first, best, latest
    (TFLOP/s), change_pct (latest vs first), latest_pct_peak (% of the same run's
    measured bf16 matmul TFLOP/s, GPU runs only), latest_commit.
    """
    pts = throughput_points(df).sort_values("date", kind="stable")
    keys = ["machine", "backend", "dtype", "shape", "causal"]
    if pts.empty:
        return pd.DataFrame(columns=keys + ["commits", "first", "best", "latest",
                                            "change_pct", "latest_pct_peak", "latest_commit"])
    g = pts.groupby(keys, sort=True)
    out = g.agg(commits=("tflops", "size"), first=("tflops", "first"), best=("tflops", "max"),
                latest=("tflops", "last"), latest_pct_peak=("pct_peak", "last"),
                latest_commit=("commit", "last")).reset_index()
    out["change_pct"] = 100 * (out["latest"] / out["first"] - 1)
    out["latest_commit"] = out["latest_commit"].str[:8]
    return out[keys + ["commits", "first", "best", "latest", "change_pct", "latest_pct_peak",
                       "latest_commit"]]


def _param_label(row: dict, params: list[str]) -> str:
    return ", ".join(f"{p}={row[p]}" for p in params if row.get(p) is not None)


def _maybe_steps(x: np.ndarray, min_change: float) -> bool:
    """Cheap screen: could ``x`` hold a level change beyond its noise?

    Compares medians of up to 5 points before and after every position against 3x
    the series' robust noise (1.4826 * median |consecutive difference| / sqrt(2))
    and ``min_change``. Series that pass go to asv's step detection.
    """
    n = len(x)
    w = min(5, n // 2)
    windows = np.lib.stride_tricks.sliding_window_view(x, w)
    med = np.median(windows, axis=1)
    before, after = med[: n - 2 * w + 1], med[w:]
    noise = 1.4826 * np.median(np.abs(np.diff(x))) / math.sqrt(2)
    jump = np.abs(after - before)
    return bool(np.any((jump > 3 * noise) & (jump > min_change * np.abs(before))))


def steps(df: pd.DataFrame, min_change: float = 0.01) -> pd.DataFrame:
    """Commits where a series' level moved beyond its noise.

    A series is one machine x env x benchmark x parameter combination, ordered by
    commit date. asv's :func:`~asv.step_detect.detect_steps` fits it with a
    piecewise-constant function (each piece: mean level and its mean absolute
    deviation, the noise); a step is reported where consecutive pieces differ by
    more than both pieces' noise and by more than ``min_change`` (relative). A cheap
    median screen (:func:`_maybe_steps`) first drops series that cannot hold such a
    step, so long histories stay fast. Columns: machine, env, benchmark, params,
    commit (first commit at the new level), date, before, after, change_pct,
    noise, unit.
    """
    from asv.step_detect import detect_steps

    params = [c for c in df.attrs.get("param_columns", []) if c in df.columns]
    ok = _ok(df)
    rows = []
    key = ["machine", "env", "benchmark"]
    for _, g in ok.groupby(key + params, sort=False, dropna=False):
        values = g["value"].to_numpy(float)
        if len(values) < 3 or not _maybe_steps(values, min_change):
            continue
        pieces = detect_steps(list(values))
        for (_, _, v0, _, e0), (l1, _, v1, _, e1) in itertools.pairwise(pieces):
            noise = max(e0, e1)
            if abs(v1 - v0) > noise and abs(v1 - v0) > min_change * abs(v0):
                first = g.iloc[l1]
                rows.append({"machine": first["machine"], "env": first["env"],
                             "benchmark": first["benchmark"],
                             "params": _param_label(first.to_dict(), params),
                             "commit": first["commit"][:8], "date": first["date"],
                             "before": v0, "after": v1,
                             "change_pct": 100 * (v1 / v0 - 1) if v0 else math.inf,
                             "noise": noise, "unit": first["unit"]})
    return pd.DataFrame(rows, columns=["machine", "env", "benchmark", "params", "commit", "date",
                                       "before", "after", "change_pct", "noise", "unit"])
