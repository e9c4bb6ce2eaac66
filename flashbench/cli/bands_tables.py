"""Rendering of measured bands: a DataFrame, the lecture's table, JSON.

Measuring apart from reporting: :mod:`flashbench.bands.measure` returns
:class:`~flashbench.bands.measure.Band` records; this module only arranges them.
"""

from __future__ import annotations

import math

import pandas as pd
from tabulate import tabulate

__all__ = ["bands_frame", "render_table", "to_json"]

_LABELS = ["kernel", "dtype", "n", "dist", "causal", "tensor", "versus"]
_STATS = ["abs_p50", "abs_p99", "abs_max", "rel_p50", "rel_p99", "rel_max"]


def bands_frame(bands) -> pd.DataFrame:
    """One row per Band: its labels, seeds, elements, eps, the six statistics, the same
    in eps (``<stat>_eps``) and the baseline ratios (per-seed lists left out)."""
    rows = []
    for b in bands:
        d = b.as_dict() if hasattr(b, "as_dict") else dict(b)
        row = {k: d.get(k) for k in [*_LABELS, "seeds", "elements", "eps", *_STATS,
                                     "ratio_p50", "ratio_max"]}
        row.update({f"{s}_eps": d[s] / d["eps"] for s in _STATS})
        rows.append(row)
    return pd.DataFrame(rows)


def _num(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return f"{x:.2g}" if abs(x) >= 0.1 and abs(x) < 1000 else f"{x:.1e}"


def _triple(row, stats) -> str:
    return " / ".join(_num(row[s]) for s in stats)


def render_table(bands, tensor: str = "o", kernel: str = "flash_model") -> str:
    """The lecture's table for one kernel and tensor: a row per dtype x N x dist x
    causal, the p50 / p99 / max of the absolute and relative error, each also in eps,
    the baseline ratio and, where measured, the error against the same-dtype one-shot
    attention (the lecture's "bf16 vs bf16 blockwise")."""
    df = bands_frame(bands)
    if df.empty:
        return "_no bands measured_"
    main = df[(df["kernel"] == kernel) & (df["tensor"] == tensor) & (df["versus"] == "fp64")]
    oneshot = df[(df["kernel"] == kernel) & (df["tensor"] == tensor)
                 & (df["versus"] == "standard_model")].set_index(["dtype", "n", "dist", "causal"])
    unrounded = df[(df["kernel"] == kernel) & (df["tensor"] == tensor)
                   & (df["versus"] == "fp64-unrounded")].set_index(["dtype", "n", "dist", "causal"])
    lines = []
    for _, r in main.iterrows():
        key = (r["dtype"], r["n"], r["dist"], r["causal"])
        # |err| escaped: a Markdown table (its pipes shifted the columns, a probe)
        line = {"dtype": r["dtype"], "N": r["n"], "dist": r["dist"],
                "causal": "yes" if r["causal"] else "no",
                "\\|err\\| p50 / p99 / max": _triple(r, ["abs_p50", "abs_p99", "abs_max"]),
                "in eps": _triple(r, ["abs_p50_eps", "abs_p99_eps", "abs_max_eps"]),
                "rel p50 / p99 / max": _triple(r, ["rel_p50", "rel_p99", "rel_max"]),
                "rel in eps": _triple(r, ["rel_p50_eps", "rel_p99_eps", "rel_max_eps"]),
                "ratio p50 / max": f"{_num(r['ratio_p50'])} / {_num(r['ratio_max'])}"}
        if not unrounded.empty:
            line["max vs unrounded"] = _num(unrounded.loc[key, "abs_max"]) \
                if key in unrounded.index else "-"
        if not oneshot.empty:
            line["max vs one-shot"] = _num(oneshot.loc[key, "abs_max"]) \
                if key in oneshot.index else "-"
        lines.append(line)
    if not lines:
        return f"_no {kernel} bands of {tensor} against fp64_"
    return tabulate(lines, headers="keys", tablefmt="github", disable_numparse=True)


def legend(seeds: int | None, rows: int | None, tensor: str = "o") -> str:
    """What the table's columns mean, in a few lines (units and method)."""
    what = "O" if tensor == "o" else "LSE"
    return "\n".join([
        f"Error of {what} against the float64 reference of the same (dtype-rounded) inputs, "
        f"unitless; p50 / p99 / max over every element of "
        f"{seeds if seeds is not None else 'all'} seeds x {rows or 'all'} query rows pooled.",
        "rel: |err| / max(|ref|, 0.1 RMS(ref)); in eps: divided by the dtype's machine "
        "epsilon; ratio: per-seed max |err| / same-dtype standard_model's (median / max "
        "over seeds; the baseline rule passes at <= 2).",
        "max vs one-shot: max |flash - standard_model| in the same dtype (the lecture's "
        "'bf16 vs bf16 blockwise'); max vs unrounded: against the reference of the "
        "unrounded draws (input rounding included)."])


def to_json(bands, meta: dict | None = None) -> dict:
    """JSON-ready dict: ``meta`` (how it was measured) and ``bands`` (one dict per Band,
    with the per-seed maxima; non-finite floats as the strings 'inf' / 'nan')."""
    def clean(x):
        if isinstance(x, float) and not math.isfinite(x):
            return str(x)
        if isinstance(x, list | tuple):
            return [clean(v) for v in x]
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        return x

    rows = [b.as_dict() if hasattr(b, "as_dict") else dict(b) for b in bands]
    return clean({"meta": meta or {}, "bands": rows})
