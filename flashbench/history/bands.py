"""Error bands over history: the band of each dtype x N x dist x causal per commit.

The bands suite's tracks (:data:`flashbench.history.suites.BANDS`: |O - O_fp64| and the
other quantities) say what they hold in their parameters:
``kernel``, ``dtype``, ``N`` (keys per query row), ``dist``, ``causal``, ``stat`` (p50/p99/max).

- :func:`band_history`: one row per machine x cpu x commit x cell x quantity with the
  band's p50, p99 and max as columns, in history order.
- :func:`widened`: cells whose band's upper edge (max or p99) rose since the previous
  commit by more than ``min_change`` (relative); :func:`widened_markdown` lists them.
- :func:`latest_bands`: the latest commit's bands as records that
  :func:`flashbench.cli.bands_tables.render_table` prints.
The report draws these rows with :func:`flashbench.history.plots.plot_bands`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from flashbench.history import suites
from flashbench.history.plots import commit_order
from flashbench.history.summaries import with_identity

__all__ = ["band_history", "widened", "widened_markdown", "latest_bands", "BAND_TRACK", "CELL"]

BAND_TRACK = suites.BANDS  # the quantity a bands track records, from its method name
CELL = ["machine", "cpu", "kernel", "dtype", "N", "dist", "causal", "quantity"]
STATS = ("p50", "p99", "max")
_COLUMNS = [*CELL, "commit", "date", "x", "unit", *STATS]


def band_history(df: pd.DataFrame) -> pd.DataFrame:
    """The bands tracks of the history frame, one row per commit x cell x quantity.

    Columns: machine, cpu, kernel, dtype, N, dist, causal, quantity ("o_abs", "o_rel",
    "lse_abs", "o_ratio"), commit, date (of the commit's first result), x (the
    commit's position in history, 0 = oldest), unit, p50, p99, max. Rows with status
    other than "ok" are left out; a stat not recorded is NaN.
    """
    if df.empty or "stat" not in df.columns:
        return pd.DataFrame(columns=_COLUMNS)
    df = with_identity(df)
    names = {b: BAND_TRACK.search(b) for b in df["benchmark"].astype(object).unique()
             if isinstance(b, str)}
    quantity = {b: f"{m['tensor']}_{m['metric']}" for b, m in names.items() if m}
    ok = df["benchmark"].astype(object).map(quantity).notna() & (df["status"] == "ok") \
        & df["stat"].isin(STATS)
    rows = df.loc[ok].copy()
    if rows.empty:
        return pd.DataFrame(columns=_COLUMNS)
    for c in CELL[2:-1]:
        if c not in rows:
            rows[c] = None
    rows["quantity"] = rows["benchmark"].astype(object).map(quantity)
    order = commit_order(df)
    rows["x"] = rows["commit"].astype(object).map(order).astype("int64")
    first = df.groupby("commit", observed=True)["date"].min()
    keys = [*CELL, "commit", "x"]
    for c in ("machine", "cpu", "commit"):
        rows[c] = rows[c].astype(object)
    wide = rows.pivot_table(index=keys, columns="stat", values="value", aggfunc="last",
                            dropna=False, observed=True)
    wide = wide.reindex(columns=list(STATS)).reset_index()
    wide.columns.name = None
    wide = wide.dropna(subset=list(STATS), how="all")
    units = rows.groupby("quantity")["unit"].last().astype(object)
    wide["unit"] = wide["quantity"].map(units)
    wide["date"] = wide["commit"].map(first.astype(object).to_dict())
    return wide.sort_values([*CELL, "x"], kind="stable", ignore_index=True)[_COLUMNS]


def widened(history: pd.DataFrame, min_change: float = 0.01) -> pd.DataFrame:
    """Cells whose band's upper edge rose at the latest commit against the previous one.

    A cell widened when its ``max`` or its ``p99`` exceeds the previous commit's by
    more than ``min_change`` (relative; seeded measurements repeat exactly on one
    machine, so any real change shows). Columns: the cell, previous_commit, commit,
    and the previous and latest p50 / p99 / max, change (latest max / previous max).
    """
    if not (isinstance(min_change, int | float) and 0 <= min_change < 10):
        raise ValueError(f"min_change must be a number in [0, 10), got {min_change!r}")
    cols = [*CELL, "previous_commit", "commit", *(f"previous_{s}" for s in STATS), *STATS,
            "change"]
    if history.empty:
        return pd.DataFrame(columns=cols)
    out = []
    for key, g in history.groupby(CELL, dropna=False, sort=True):
        if len(g) < 2:
            continue
        prev, last = g.iloc[-2], g.iloc[-1]
        if any(last[s] > prev[s] * (1 + min_change) for s in ("max", "p99")):
            row = dict(zip(CELL, key, strict=True))
            row.update(previous_commit=prev["commit"], commit=last["commit"],
                       **{f"previous_{s}": prev[s] for s in STATS},
                       **{s: last[s] for s in STATS},
                       change=last["max"] / prev["max"] if prev["max"] else np.inf)
            out.append(row)
    return pd.DataFrame(out, columns=cols)


def widened_markdown(history: pd.DataFrame, min_change: float = 0.01) -> str:
    """A Markdown list of the cells that widened at the latest commit (:func:`widened`)."""
    w = widened(history, min_change)
    if w.empty:
        return f"No band widened since the previous commit (by more than {min_change:.0%})."
    lines = [f"Bands that widened since the previous commit (max or p99 up by more than "
             f"{min_change:.0%}):", ""]
    for r in w.itertuples(index=False):
        machine = r.machine if not isinstance(r.cpu, str) else f"{r.machine} ({r.cpu})"
        lines.append(
            f"- {r.kernel} {r.dtype} N={r.N} {r.dist}{' causal' if r.causal else ''} "
            f"{r.quantity}: max {r.previous_max:.3g} -> {r.max:.3g} (x{r.change:.2f}), "
            f"p99 {r.previous_p99:.3g} -> {r.p99:.3g}; `{str(r.previous_commit)[:8]}` -> "
            f"`{str(r.commit)[:8]}` on {machine}")
    return "\n".join(lines)


def latest_bands(history: pd.DataFrame) -> list[dict]:
    """The latest commit's bands (per machine and cpu: the most recent machine's), as
    records for :func:`flashbench.cli.bands_tables.render_table`: kernel, dtype, n, dist,
    causal, tensor "o" and "lse", versus "fp64", abs_/rel_ p50 / p99 / max, ratios,
    eps (the registry's), commit, machine."""
    from flashbench.inputs.precision import PRECISIONS

    if history.empty:
        return []
    latest = history[history["x"] == history["x"].max()]
    machine = latest.sort_values("date").iloc[-1][["machine", "cpu"]]
    latest = latest[(latest["machine"] == machine["machine"])
                    & (latest["cpu"].astype(object).fillna("") == (machine["cpu"] or ""))]
    records = {}
    for r in latest.itertuples(index=False):
        tensor, metric = r.quantity.split("_", 1)
        key = (r.kernel, r.dtype, r.N, r.dist, r.causal, tensor)
        prec = PRECISIONS.get(r.dtype)
        rec = records.setdefault(key, {
            "kernel": r.kernel, "dtype": r.dtype, "n": r.N, "dist": r.dist, "causal": r.causal,
            "tensor": tensor, "versus": "fp64", "seeds": None, "elements": None,
            "eps": prec.eps if prec else float("nan"), "commit": r.commit,
            "machine": r.machine, "ratio_p50": None, "ratio_max": None,
            **{f"{m}_{s}": float("nan") for m in ("abs", "rel") for s in STATS}})
        if metric == "ratio":
            rec["ratio_p50"], rec["ratio_max"] = r.p50, r.max
        else:
            rec.update({f"{metric}_{s}": getattr(r, s) for s in STATS})
    return list(records.values())
