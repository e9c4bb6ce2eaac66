"""Steps: commits where a series' level moved beyond its noise.

Generic: a series is one measurement machine (machine, cpu) x env x benchmark x
parameter combination (``params``), whatever the suite.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd

from flashbench.history.summaries import IDENTITY, with_identity

_WINDOW = 5  # points per median window of the step screen
COLUMNS = [*IDENTITY, "env", "benchmark", "params", "commit", "date", "before", "after",
           "change_pct", "noise", "unit"]


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
    series = np.repeat(np.arange(len(lengths)), lengths)
    inner = series[1:] == series[:-1]  # consecutive points of one series
    diffs = pd.Series(np.abs(np.diff(values))[inner]).groupby(series[1:][inner]).median()
    noise = np.full(len(lengths), np.nan)
    noise[diffs.index.to_numpy()] = 1.4826 * diffs.to_numpy() / math.sqrt(2)
    med = np.median(np.lib.stride_tricks.sliding_window_view(values, w), axis=1)
    at = np.arange(w, n - w + 1)  # a level change between points at-1 and at
    at = at[(series[at - w] == series[at + w - 1]) & full[series[at]]]
    before, after, which = med[at - w], med[at], series[at]
    jump = np.abs(after - before)
    out[which[(jump > 4 * noise[which]) & (jump > min_change * np.abs(before))]] = True
    return out


def steps(df: pd.DataFrame, min_change: float = 0.01) -> pd.DataFrame:
    """Commits where a series' level moved beyond its noise.

    A series is one machine x cpu x env x benchmark x parameter combination,
    ordered by commit date. asv's :func:`~asv.step_detect.detect_steps` fits it with
    a piecewise-constant function (each piece: mean level and its mean absolute
    deviation, the noise); a step is reported where consecutive pieces differ by
    more than both pieces' noise and by more than ``min_change`` (relative). A cheap
    median screen (:func:`screen`) first drops series that cannot hold such a
    step, so long histories stay fast. Columns: machine, cpu, env, benchmark,
    params, commit (first commit at the new level), date, before, after,
    change_pct, noise, unit.
    """
    key = [*IDENTITY, "env", "benchmark", "params"]
    df = with_identity(df)
    ok = df.loc[(df["status"] == "ok").to_numpy(),
                [c for c in [*key, "commit", "date", "value", "unit"] if c in df.columns]]
    if ok.empty:
        return pd.DataFrame(columns=COLUMNS)
    series = ok.groupby(key, sort=False, observed=True, dropna=False).ngroup()
    dates = ok["date"].astype("int64").to_numpy()  # datetime64 -> integers, same order
    order = np.lexsort((dates, series.to_numpy()))  # by series, then by date
    values = ok["value"].to_numpy(float)[order]
    bounds = np.flatnonzero(np.diff(series.to_numpy()[order])) + 1
    rows = []
    lengths = np.diff(np.concatenate([[0], bounds, [len(values)]]))
    candidates = screen(values, lengths.astype(np.int64), min_change)
    for positions, x, maybe in zip(np.split(order, bounds), np.split(values, bounds),
                                   candidates, strict=True):
        if not maybe:
            continue
        from asv.step_detect import detect_steps  # 0.2-0.4 s import: only when needed

        pieces = detect_steps(list(x))
        for (_, _, v0, _, e0), (l1, _, v1, _, e1) in itertools.pairwise(pieces):
            noise = max(e0, e1)
            if abs(v1 - v0) > noise and abs(v1 - v0) > min_change * abs(v0):
                first = ok.iloc[positions[l1]]
                rows.append({"machine": first["machine"], "cpu": first["cpu"],
                             "env": first["env"], "benchmark": first["benchmark"],
                             "params": first["params"], "commit": str(first["commit"])[:8],
                             "date": first["date"], "before": v0, "after": v1,
                             "change_pct": 100 * (v1 / v0 - 1) if v0 else math.inf,
                             "noise": noise, "unit": first["unit"]})
    return pd.DataFrame(rows, columns=COLUMNS)
