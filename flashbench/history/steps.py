"""Steps: commits where a series' level moved beyond its noise.

Generic: a series is one measurement machine (machine, cpu) x env x benchmark x
parameter combination (``params``), whatever the suite.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd

from flashbench.history.summaries import IDENTITY, codes, finite_ok, with_identity

_WINDOW = 5  # points per median window of the step screen
COLUMNS = [*IDENTITY, "env", "benchmark", "params", "commit", "date", "before", "after",
           "change_pct", "noise", "unit", "code_changed", "host_changed"]


def flagged(jumps: pd.DataFrame, column: str) -> pd.Series:
    """A steps table's ``column`` (code_changed, host_changed) as booleans: True where it
    is, False where it is False, unknown (NA) or absent."""
    if column not in jumps:
        return pd.Series(False, index=jumps.index)
    return jumps[column].astype(object).fillna(False).astype(bool)


def maybe_steps(x: np.ndarray, min_change: float) -> bool:
    """Cheap screen: could ``x`` hold a level change beyond its noise?

    Compares medians of up to 5 points before and after every position against 4x
    the series' robust noise (1.4826 * median |consecutive difference| / sqrt(2))
    and ``min_change``. Series that pass go to asv's step detection.
    """
    n = len(x)
    w = min(_WINDOW, n // 2)
    med = np.median(np.lib.stride_tricks.sliding_window_view(x, w), axis=1)
    before, after = med[: n - 2 * w + 1], med[w:]
    noise = 1.4826 * np.median(np.abs(np.diff(x))) / math.sqrt(2)
    jump = np.abs(after - before)
    return bool(np.any((jump > 4 * noise) & (jump > min_change * np.abs(before))))


def median5(x: np.ndarray) -> np.ndarray:
    """The median of every 5 consecutive values of ``x`` (``np.median`` of its sliding
    windows, as a min/max network in three buffers: no (n, 5) copy, no partition)."""
    a, b, c, d, e = (x[k:len(x) - 4 + k] for k in range(5))
    lo, hi, t = np.minimum(a, b), np.maximum(a, b), np.minimum(c, d)
    np.maximum(lo, t, out=lo)  # the larger of the two pairs' minima
    np.maximum(c, d, out=t)
    np.minimum(hi, t, out=hi)  # the smaller of the two pairs' maxima
    np.minimum(lo, hi, out=t)  # then the median of (lo, hi, e)
    np.maximum(lo, hi, out=lo)
    np.minimum(lo, e, out=lo)
    return np.maximum(t, lo, out=t)


def series_ids(df: pd.DataFrame, key: list[str], rows: np.ndarray) -> np.ndarray:
    """Per row of ``rows`` an int64 id of its values in the ``key`` columns (NaN a value
    too), in the order of the columns' codes: one product of codes, no groupby."""
    ids, size = np.zeros(len(rows), np.int64), 1
    for column in key:
        code, values = codes(df[column])
        if size * (len(values) + 1) >= 2**62:  # keep the product in int64
            ids = np.unique(ids, return_inverse=True)[1].astype(np.int64)
            size = int(ids.max()) + 1 if len(ids) else 1
        ids = ids * (len(values) + 1) + (code[rows] + 1)
        size *= len(values) + 1
    return ids


def screen(values: np.ndarray, lengths: np.ndarray, min_change: float) -> np.ndarray:
    """:func:`maybe_steps` of every series at once; ``values`` holds the series one
    after another (``lengths`` points each). Returns one bool per series."""
    n, w = len(values), _WINDOW
    out = np.zeros(len(lengths), bool)
    starts = np.concatenate([[0], np.cumsum(lengths)])[:-1]
    for k in np.flatnonzero((lengths >= 3) & (lengths < 2 * w)):  # short: own window size
        out[k] = maybe_steps(values[starts[k]:starts[k] + lengths[k]], min_change)
    full = lengths >= 2 * w
    if not full.any():
        return out
    series = np.repeat(np.arange(len(lengths), dtype=np.int32 if len(lengths) < 2**31
                                 else np.int64), lengths)
    inner = series[1:] == series[:-1]  # consecutive points of one series
    diffs = np.abs(np.diff(values))
    diffs = pd.Series(diffs[inner]).groupby(series[1:][inner]).median()
    noise = np.full(len(lengths), np.nan)
    noise[diffs.index.to_numpy()] = 1.4826 * diffs.to_numpy() / math.sqrt(2)
    del diffs, inner
    med = median5(values)
    # a level change between points at-1 and at, for at = w .. n-w: windows in one series
    inside = series[:n - 2 * w + 1] == series[2 * w - 1:]
    inside &= np.repeat(full, lengths)[w:n - w + 1]
    at = np.flatnonzero(inside) + w
    del inside
    before, after, which = med[at - w], med[at], series[at]
    jump = np.abs(after - before)
    out[which[(jump > 4 * noise[which]) & (jump > min_change * np.abs(before))]] = True
    return out


def steps(df: pd.DataFrame, min_change: float = 0.01, host=None) -> pd.DataFrame:
    """Commits where a series' level moved beyond its noise.

    A series is one machine x cpu x env x benchmark x parameter combination,
    ordered by commit date. asv's :func:`~asv.step_detect.detect_steps` fits it with
    a piecewise-constant function (each piece: mean level and its mean absolute
    deviation, the noise); a step is reported where consecutive pieces differ by
    more than both pieces' noise and by more than ``min_change`` (relative). A cheap
    median screen (:func:`screen`) first drops series that cannot hold such a
    step, so long histories stay fast. Columns: machine, cpu, env, benchmark,
    params, commit (first commit at the new level), date, before, after,
    change_pct, noise, unit, code_changed (True where asv's version of the benchmark, a
    hash of its code, differs across the step: the benchmark changed there, not only the
    code it measures; a probe found a +34.9% step so attributed with nothing said). Only
    "ok" rows with a finite value count (an infinite one
    made asv's solver grow past 20 GB; :func:`~flashbench.history.summaries.finite_ok`).
    ``host``: a results file's host (``file`` -> text, None unknown), read for the steps'
    files only; ``host_changed`` is True where the points before and after the step came
    from two hosts under one machine name (else False; NA where a host is unknown).
    """
    key = [*IDENTITY, "env", "benchmark", "params"]
    df = with_identity(df)
    rows = np.flatnonzero(finite_ok(df))  # never an infinite value into asv's solver
    if not len(rows):
        return pd.DataFrame(columns=COLUMNS)
    series = series_ids(df, key, rows)
    dates = df["date"].array.asi8[rows] if isinstance(df["date"].dtype, pd.DatetimeTZDtype) \
        else df["date"].astype("int64").to_numpy()[rows]  # datetime64 -> integers, same order
    order = np.lexsort((dates, series))  # by series, then by date
    del dates
    rows = rows[order]
    bounds = np.flatnonzero(np.diff(series[order])) + 1
    del series, order
    values = df["value"].to_numpy(float)[rows]
    lengths = np.diff(np.concatenate([[0], bounds, [len(values)]]))
    candidates = np.flatnonzero(screen(values, lengths.astype(np.int64), min_change))
    starts = np.concatenate([[0], bounds])
    found = []
    for k in candidates:
        from asv.step_detect import detect_steps  # 0.2-0.4 s import: only when needed

        first, x = starts[k], values[starts[k]:starts[k] + lengths[k]]
        pieces = detect_steps(x.tolist())
        for (_, _, v0, _, e0), (l1, _, v1, _, e1) in itertools.pairwise(pieces):
            noise = max(e0, e1)
            if abs(v1 - v0) > noise and abs(v1 - v0) > min_change * abs(v0):
                found.append((rows[first + l1], rows[first + l1 - 1], v0, v1, noise))
    if not found:
        return pd.DataFrame(columns=COLUMNS)
    at, prev, v0, v1, noise = (np.array(c) for c in zip(*found, strict=True))
    out = df.iloc[at][[c for c in [*key, "commit", "date", "unit"] if c in df.columns]]
    out = out.astype({c: object for c in out.columns if c != "date"})
    out["commit"] = out["commit"].map(lambda c: str(c)[:8])
    with np.errstate(divide="ignore"):
        change = np.where(v0 != 0, 100 * (v1 / np.where(v0 != 0, v0, 1) - 1), math.inf)
    out = out.assign(before=v0, after=v1, change_pct=change, noise=noise)
    if "version" in df.columns:  # asv's hash of the benchmark's code, before and at the step
        version = df["version"].astype(object).to_numpy()
        out["code_changed"] = [isinstance(a, str) and isinstance(b, str) and a != b
                               for a, b in zip(version[prev], version[at], strict=True)]
    if host is not None and "file" in df.columns:  # a host's change read as the commit's
        files = df["file"].astype(object).to_numpy()
        hosts = [(host(files[p]), host(files[a])) for p, a in zip(prev, at, strict=True)]
        out["host_changed"] = [None if a is None or b is None else a != b for a, b in hosts]
    return out.reindex(columns=COLUMNS).reset_index(drop=True)


def current_code(df: pd.DataFrame, declared: np.ndarray | None = None) -> np.ndarray:
    """Which rows were recorded under their benchmark's current code. Where ``declared``
    (per row: the version its folder's benchmarks.json gives the benchmark, None where it
    gives none) names one, a row whose asv version is another is left out, as asv's graphs
    leave it (``Results.get_result_keys``); elsewhere the version of the newest result (by
    commit date, then the version's order) of each measurement machine x env x benchmark
    is current. A trend of 9 points over 3 versions read -29 % where the benchmark itself
    changed (a fresh-eyes probe, 2026-12-07). A row with no version is kept."""
    if "version" not in df.columns or df.empty:
        return np.ones(len(df), dtype=bool)
    d = with_identity(df)
    by = [*IDENTITY, *(["env"] if "env" in d else []), "benchmark"]
    key = d.groupby(by, observed=True, dropna=False, sort=False).ngroup().to_numpy()
    cat = pd.Categorical(d["version"])
    version = cat.codes  # -1: no version recorded
    dates = d["date"].array.asi8 if isinstance(d["date"].dtype, pd.DatetimeTZDtype) \
        else d["date"].astype("int64").to_numpy()  # integers: a sort at C speed
    order = np.lexsort((version, dates, key))  # by series, then date, then version
    ks = key[order]
    ends = np.r_[ks[1:] != ks[:-1], True]  # each series' newest row, in that order
    newest = np.full(key.max() + 1, -1, dtype=version.dtype)
    newest[ks[ends]] = version[order][ends]
    now = newest[key]
    if declared is not None:  # benchmarks.json's version, as a code of the same categories
        codes = pd.Index(cat.categories).get_indexer(declared)  # -1: no row holds it
        given = np.where(pd.notna(declared), np.where(codes >= 0, codes, -2), -1)
        now = np.where(given != -1, given, now)  # -2: a version no row holds
    return (version < 0) | (now == -1) | (version == now)


def declared_versions(df: pd.DataFrame, metas: list[dict], roots: list) -> np.ndarray:
    """Per row, the version its folder's benchmarks.json (``metas[i]`` of ``roots[i]``)
    declares for its benchmark, None where none: one folder's rows are all its; with
    several, a row's ``file`` is the path as given, under its folder."""
    bench = pd.Categorical(df["benchmark"])
    out = np.full(len(df), None, dtype=object)
    files = df["file"].astype(str) if len(metas) > 1 else None
    for i, meta in enumerate(metas):
        per = np.array([meta.get(b, {}).get("version") if isinstance(
            meta.get(b), dict) else None for b in bench.categories] + [None], dtype=object)
        mine = np.ones(len(df), bool) if files is None else files.str.startswith(
            str(roots[i]).rstrip("/") + "/").to_numpy()
        out[mine] = per[bench.codes[mine]]  # code -1: the trailing None
    return out
