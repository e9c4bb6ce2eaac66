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
import gc
import itertools
import json
import math
import re
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

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


_NONFINITE_VALUES = {"NaN": math.nan, "Inf": math.inf, "-Inf": -math.inf}


def _parse_json(raw: bytes):
    """json.loads, through orjson when it is installed (3x faster on big corpora).

    asv writes NaN and +-Infinity, which strict JSON (orjson) rejects: they are
    quoted first and turned back into floats where values are read. Quoting a
    token inside a string breaks that string, so such a file fails orjson and is
    parsed again by the standard library, which reads it exactly.
    """
    try:
        import orjson
    except ImportError:
        return json.loads(raw)
    try:
        quoted = (raw.replace(b"NaN", b'"NaN"').replace(b"-Infinity", b'"-Inf"')
                  .replace(b"Infinity", b'"Inf"'))
        return orjson.loads(quoted)
    except orjson.JSONDecodeError:
        return json.loads(raw)


def _read_results_file(path: Path) -> dict:
    """Parsed results file; raises ValueError with the reason it cannot be used."""
    try:
        data = _parse_json(path.read_bytes())
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


_ENTRY_COLUMNS = ["file", "benchmark", "version"]  # per (file, benchmark) entry
_FIXED = frozenset(FIXED_COLUMNS)


def _param_grid(names: list[str], params: list, cache: dict, grids: dict) -> dict[str, list]:
    """Parsed parameter columns of a benchmark's grid, in asv's (itertools.product) order."""
    key = tuple(names)
    known = grids.get(key)
    if known is not None and known[0] == params:  # the same grid as last time: reuse
        return known[1]
    combos = list(itertools.product(*params))
    grid = {name: _objects([_literal(c[k], cache) for c in combos])
            for k, name in enumerate(names)}
    grids[key] = (params, grid)
    return grid


def load_results(path) -> pd.DataFrame:
    """Every results file under ``path`` as one tidy DataFrame (module docstring).

    The frame's ``attrs["skipped_files"]`` lists ``(file, reason)`` for every file
    that was reported and skipped; ``attrs["param_columns"]`` names the parameter
    columns. Built column-wise: per-benchmark values are repeated over the parameter
    grid at the end, and each distinct grid is parsed once.
    """
    root = Path(path)
    if not root.is_dir():
        raise ValueError(f"results path {str(root)!r} is not a directory")
    meta = _read_benchmarks(root)
    entries: dict[str, list] = {c: [] for c in _ENTRY_COLUMNS}  # repeated over each grid
    sizes: list[int] = []
    per_row: dict[str, list] = {"value": [], **{c: [] for c in _STAT_COLUMNS.values()}}
    param_cols: dict[str, tuple[list, list]] = {}  # name -> (row indices, values)
    skipped: list[tuple[str, str]] = []
    cache: dict = {}
    grids: dict = {}
    gc_was_enabled = gc.isenabled()
    gc.disable()  # millions of small containers, none cyclic: collection only slows this
    try:
        return _load(root, meta, entries, sizes, per_row, param_cols, skipped, cache, grids)
    finally:
        if gc_was_enabled:
            gc.enable()


def _load(root, meta, entries, sizes, per_row, param_cols, skipped, cache, grids):
    files: list[tuple] = []  # per file: machine, env, commit, date, file
    entry_file, entry_bench, entry_version = entries["file"], entries["benchmark"], \
        entries["version"]
    names_cache: dict = {}
    values, stats = per_row["value"], [(short, per_row[short]) for short in
                                       _STAT_COLUMNS.values()]
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
        where = {name: i for i, name in enumerate(data["result_columns"])}
        if "result" not in where:
            continue
        fidx = len(files)
        files.append((data["params"].get("machine", file.parent.name)
                      if isinstance(data["params"], dict) else file.parent.name,
                      data["env_name"], data["commit_hash"], data["date"],
                      str(file.relative_to(root))))
        i_result, i_params, i_version = where["result"], where.get("params"), where.get("version")
        stat_at = [(column, where.get(long)) for (long, _), (_, column) in
                   zip(_STAT_COLUMNS.items(), stats, strict=True)]
        for bench, row in data["results"].items():
            if not isinstance(row, list) or len(row) <= i_result:
                continue
            width = len(row)
            results = row[i_result]
            if not isinstance(results, list):
                results = [results]
            params = row[i_params] if i_params is not None and i_params < width else None
            if not isinstance(params, list):
                params = []
            m = 1
            for p in params:
                m *= len(p)
            got = results[:m]
            values += got
            if len(got) < m:
                values += [_MISSING] * (m - len(got))
            for column, i in stat_at:
                stat = row[i] if i is not None and i < width else None
                if isinstance(stat, list):
                    if len(stat) == m:
                        column += stat
                    else:
                        column += stat[:m] + [None] * (m - len(stat[:m]))
                else:
                    column += [None] * m
            entry_file.append(fidx)
            entry_bench.append(bench)
            entry_version.append(row[i_version] if i_version is not None and i_version < width
                                 else None)
            sizes.append(m)
            if params:
                key = (bench, len(params))
                names = names_cache.get(key)
                if names is None:
                    names = list(meta.get(bench, {}).get("param_names") or [])[:len(params)]
                    names += [f"param{i + 1}" for i in range(len(names), len(params))]
                    names = [f"param_{p}" if p in _FIXED else p for p in names]
                    names_cache[key] = names
                for name, grid in _param_grid(names, params, cache, grids).items():
                    spans, vals = param_cols.setdefault(name, ([], []))
                    spans.append((n, m))
                    vals.append(grid)
            n += m
    return _assemble(files, meta, entries, sizes, per_row, param_cols, n, skipped)


def _objects(values: list) -> np.ndarray:
    """1-D object array of ``values`` (lists and tuples stay elements, never new axes)."""
    return np.fromiter(values, dtype=object, count=len(values))


class _Missing:
    """Marker for grid points a results file does not list (its result list is short)."""


_MISSING = _Missing()


def _assemble(files, meta, entries, sizes, per_row, param_cols, n, skipped) -> pd.DataFrame:
    counts = np.asarray(sizes, dtype=np.int64)
    file_idx = np.asarray(entries["file"], dtype=np.int64)
    per_file = list(zip(*files, strict=True)) if files else [()] * 5
    bench = pd.Series(entries["benchmark"], dtype=object)
    entry_cols = {name: np.asarray(col, dtype=object)[file_idx] if len(file_idx) else
                  np.empty(0, dtype=object)
                  for name, col in zip(("machine", "env", "commit", "date", "file"), per_file,
                                       strict=True)}
    entry_cols["benchmark"] = bench.to_numpy()
    entry_cols["type"] = bench.map(lambda b: meta.get(b, {}).get("type")).to_numpy()
    entry_cols["unit"] = bench.map(lambda b: meta.get(b, {}).get("unit")).to_numpy()
    entry_cols["version"] = _objects(entries["version"])
    frame = pd.DataFrame({c: np.repeat(v, counts) for c, v in entry_cols.items()})
    raw = _objects(per_row.pop("value"))
    for text, number in _NONFINITE_VALUES.items():  # quoted by _parse_json
        raw[raw == text] = number
    missing = np.fromiter((v is _MISSING for v in raw), bool, n)
    failed = np.fromiter((v is None for v in raw), bool, n)
    raw[missing | failed] = np.nan
    value = pd.to_numeric(pd.Series(raw), errors="coerce").to_numpy(float)
    status = np.where(missing, "missing", np.where(failed, "failed",
                                                   np.where(np.isnan(value), "skipped", "ok")))
    frame["value"] = value
    frame["status"] = status
    for c, v in per_row.items():
        frame[c] = _objects(v)
    for name, (spans, values) in param_cols.items():
        column = np.full(n, None, dtype=object)
        for (start, m), vals in zip(spans, values, strict=True):
            column[start:start + m] = vals
        frame[name] = column
    frame = frame[FIXED_COLUMNS + list(param_cols)]
    frame["date"] = pd.to_datetime(frame["date"].astype("int64"), unit="ms", utc=True)
    for c in ("ci_99_a", "ci_99_b", "q25", "q75", "number", "repeat"):
        frame[c] = pd.to_numeric(frame[c].replace(_NONFINITE_VALUES), errors="coerce")
    frame.attrs["skipped_files"] = skipped
    frame.attrs["param_columns"] = list(param_cols)
    return frame


# --------------------------------------------------------------------------- summaries

ACCURACY = re.compile(r"TrackAccuracy\.track_(?P<metric>\w+)$")
MATMUL_PEAK = re.compile(r"TrackMatmulPeak\.track_matmul_bf16_(?P<n>\d+)$")
# Benchmarks whose timings have a known attention shape: name pattern -> function of the
# rows' parameter columns giving (B, H, N, d) (every shape here has Nq == Nk == N).
SHAPES: list[tuple[re.Pattern, Callable[[pd.DataFrame], tuple]]] = [
    (re.compile(r"TrackDeviceTime\.track_device_time$"),
     lambda p: (np.maximum(1, 16384 // p["N"]), 16, p["N"], p["d"])),
    (re.compile(r"TimeCPUBackend\.time_backend$"), lambda p: (1, 8, p["N"], 64)),
    (re.compile(r"TimeAttention\.time_attention$"), lambda p: (1, 1, p["N"], p["d"])),
]


def _text(record: dict, *names: str) -> str | None:
    """The first of ``names`` holding a string in ``record`` (missing params are NaN/None)."""
    for name in names:
        value = record.get(name)
        if isinstance(value, str):
            return value
    return None


def _texts(frame: pd.DataFrame, *names: str) -> list[str | None]:
    """Per row, the first of the columns ``names`` holding a string (see :func:`_text`)."""
    present = [c for c in names if c in frame]
    return [_text(r, *present) for r in frame[present].to_dict("records")]


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
    acc = acc.assign(last=acc.groupby(keys, dropna=False).cumcount(ascending=False) == 0)
    g = acc.groupby(keys, sort=True, dropna=False)
    bands = g["value"].agg(commits="size", p50="median", max="max", latest="last")
    bands["p99"] = g["value"].quantile(0.99)
    earlier = acc[~acc["last"]].groupby(keys, sort=True, dropna=False)["value"]
    bands["band_lo"], bands["band_hi"] = earlier.min(), earlier.max()
    bands["latest_commit"] = g["commit"].last().str[:8]
    bands["unit"] = g["unit"].last()
    tol = 1e-9 * bands["band_hi"].abs().clip(lower=1e-300)
    inside = ((bands["band_lo"] - tol <= bands["latest"])
              & (bands["latest"] <= bands["band_hi"] + tol)).astype(object)
    inside[bands["band_hi"].isna()] = pd.NA
    bands["inside"] = inside
    bands = bands.reset_index()[keys + ["commits", "p50", "p99", "max", "band_lo", "band_hi",
                                        "latest", "latest_commit", "inside", "unit"]]
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
        cols = {c: pd.to_numeric(sel[c], errors="coerce").to_numpy() for c in ("N", "d")
                if c in sel}
        b, h, n, d = (np.broadcast_to(np.asarray(x, dtype=float), len(sel))
                      for x in shape_of(cols))
        causal = (sel["causal"].eq(True).to_numpy() if "causal" in sel
                  else np.zeros(len(sel), bool))
        pairs = np.where(causal, n * (n + 1) / 2, n * n)  # visible (query, key) pairs
        labels = [f"B={int(bb)} H={int(hh)} Nq={int(nn)} Nk={int(nn)} d={int(dd)}"
                  for bb, hh, nn, dd in zip(b, h, n, d, strict=True)]
        part = sel.assign(
            backend=[t or name.split(".")[-1] for t, name in
                     zip(_texts(sel, "backend", "impl"), sel["benchmark"], strict=True)],
            dtype=[t or "fp64" for t in _texts(sel, "dtype")],
            causal=causal, shape=labels,
            tflops=4 * b * h * d * pairs / sel["value"].to_numpy(float) * 1e-12)
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


def param_label(row: dict, params: list[str]) -> str:
    """"name=value, ..." of the parameters this row has (absent ones are None or NaN)."""
    return ", ".join(f"{p}={row[p]}" for p in params if row.get(p) is not None
                     and not (isinstance(row[p], float) and math.isnan(row[p])))


def _maybe_steps(x: np.ndarray, min_change: float) -> bool:
    """Cheap screen: could ``x`` hold a level change beyond its noise?

    Compares medians of up to 5 points before and after every position against 4x
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
    return bool(np.any((jump > 4 * noise) & (jump > min_change * np.abs(before))))


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
    key = ["machine", "env", "benchmark"]
    series = ok.groupby(key + params, sort=False, dropna=False).ngroup().to_numpy()
    order = np.argsort(series, kind="stable")  # by series, then by date (ok is date-sorted)
    values = ok["value"].to_numpy(float)[order]
    bounds = np.flatnonzero(np.diff(series[order])) + 1
    rows = []
    for positions, x in zip(np.split(order, bounds), np.split(values, bounds), strict=True):
        if len(x) < 3 or not _maybe_steps(x, min_change):
            continue
        pieces = detect_steps(list(x))
        for (_, _, v0, _, e0), (l1, _, v1, _, e1) in itertools.pairwise(pieces):
            noise = max(e0, e1)
            if abs(v1 - v0) > noise and abs(v1 - v0) > min_change * abs(v0):
                first = ok.iloc[positions[l1]]
                rows.append({"machine": first["machine"], "env": first["env"],
                             "benchmark": first["benchmark"],
                             "params": param_label(first.to_dict(), params),
                             "commit": first["commit"][:8], "date": first["date"],
                             "before": v0, "after": v1,
                             "change_pct": 100 * (v1 / v0 - 1) if v0 else math.inf,
                             "noise": noise, "unit": first["unit"]})
    return pd.DataFrame(rows, columns=["machine", "env", "benchmark", "params", "commit", "date",
                                       "before", "after", "change_pct", "noise", "unit"])
