"""The history report's plots, as small multiples: errors.png, rules.png, bands.png, tflops.png.

One panel per problem (accuracy: per dtype; rules: per rule x tensor; bands: per dtype x
distribution; throughput: per shape x direction), the legend outside the panels, commits on the x
axis in history order (date of their first results file) and labelled by short hash
and date, one colour family per measurement machine (shades within it for the series
of that machine), causal rows dashed. Titles, panels and labels come from the data.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from flashbench.history.suites import BAND_PAIRS, MAIN_METRIC, accuracy_metric, rule_limit
from flashbench.history.summaries import IDENTITY, flags, names, per_name, with_identity

WIDTH = 11.0  # inches at DPI: 1100 px, the width a Markdown page shows without scaling
DPI = 100
FAMILIES = ("Blues", "Oranges", "Greens", "Purples", "Reds", "Greys")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def commit_order(df: pd.DataFrame) -> dict:
    """commit -> its position in history (0 = oldest, by date of its first result)."""
    first = df.sort_values("date", kind="stable").drop_duplicates("commit")
    return {c: i for i, c in enumerate(first["commit"].astype(object))}


def commit_labels(df: pd.DataFrame) -> dict:
    """position in history -> "abc1234\\nMM-DD" (short hash, date of its first result)."""
    first = df.sort_values("date", kind="stable").drop_duplicates("commit")
    return {i: f"{str(c)[:7]}\n{d:%m-%d}" for i, (c, d) in
            enumerate(zip(first["commit"].astype(object), first["date"], strict=True))}


def by_commit(g: pd.DataFrame, order: dict) -> pd.DataFrame:
    """``g`` in history order with its commit's position as column ``x`` (the plots'
    axis; the commit column may be a Categorical, whose own order is by hash)."""
    x = g["commit"].astype(object).map(order).astype("int64")
    return g.assign(x=x.to_numpy()).sort_values("x", kind="stable")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def machine_name(machine, cpu) -> str:
    return f"{machine}" + (f" ({cpu})" if isinstance(cpu, str) else "")


def _key(values) -> tuple:
    """A series key with NaN as None (NaN != NaN would miss every dict lookup)."""
    return tuple(None if isinstance(v, float) and v != v else v for v in values)


def machine_order(df: pd.DataFrame) -> list[tuple]:
    """Every (machine, cpu) of a frame, GPU machines (a cpu field naming a GPU) first:
    the order colour families are handed out in, the same in every plot of a report."""
    ids = with_identity(df)[IDENTITY].astype(object).drop_duplicates()
    return sorted({_key(m) for m in ids.itertuples(index=False, name=None)}, key=_gpu_first)


def _gpu_first(machine: tuple) -> tuple:
    name, cpu = str(machine[0]), str(machine[1])
    return ("GPU:" not in cpu and name.startswith("cpu-"), name, cpu)


def palette(series: list[tuple], machines: list[tuple] | None = None) -> dict:
    """series key (machine, cpu, *rest) -> (colour, marker): one colour family per
    machine, in ``machines`` order (default: the series' machines, GPU machines first),
    a shade and a marker per series within it."""
    plt = _pyplot()
    found = {s[:2] for s in series}
    order = list(machines or []) + sorted(found - set(machines or []), key=_gpu_first)
    out = {}
    for k, m in enumerate(order):  # a machine keeps its family in every plot
        if m not in found:
            continue
        cmap = plt.get_cmap(FAMILIES[k % len(FAMILIES)])
        mine = [s for s in series if s[:2] == m]
        for i, s in enumerate(mine):
            shade = 0.5 + 0.45 * (i / (len(mine) - 1) if len(mine) > 1 else 0.5)
            out[s] = (cmap(shade), MARKERS[i % len(MARKERS)])
    return out


def _grid(panels: int, cols: int, height: float = 2.5):
    plt = _pyplot()
    cols = max(1, min(cols, panels))
    rows = -(-panels // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(WIDTH, height * rows + 0.6),
                             squeeze=False)
    for ax in list(axes.flat)[panels:]:
        ax.set_visible(False)
    return fig, axes


def _commit_axis(ax, labels: dict, xs) -> None:
    """The panel's own commits on its x axis, at most 4 labelled (short hash and date;
    the latest always)."""
    xs = sorted({int(x) for x in xs if x == x})
    if not xs:
        return
    step = max(1, -(-len(xs) // 4))
    ticks = xs[::-1][::step][::-1]
    ax.set_xticks(ticks)
    ax.set_xticklabels([labels.get(x, str(x)) for x in ticks], fontsize=6)
    ax.set_xlim(min(xs) - 0.5, max(xs) + 0.5)


def _log_if_wide(ax, values) -> None:
    v = np.asarray([x for x in values if np.isfinite(x) and x > 0])
    if len(v) and v.max() / v.min() > 20:
        _log(ax)


def _log(ax) -> None:
    ax.set_yscale("log")


def _minor_labels(ax) -> None:
    """Log axes spanning a decade or more: labels at powers of ten only (minor labels
    crowd a small panel); narrower ones keep matplotlib's minor labels."""
    from matplotlib.ticker import NullFormatter

    lo, hi = ax.get_ylim()
    if ax.get_yscale() == "log" and lo > 0 and hi / lo >= 10:
        ax.yaxis.set_minor_formatter(NullFormatter())


def _finish(fig, axes, handles: dict, title: str, path: Path, note: str = "") -> None:
    """Legends below the panels (outside the data), one per machine ({machine: {label:
    handle}}) side by side, a title; saved at :data:`DPI`."""
    for ax in axes.flat:
        if ax.get_visible():
            ax.grid(alpha=0.3)
            ax.tick_params(labelsize=7, which="both")
            _minor_labels(ax)
    cols = {m: -(-len(h) // 8) if len(handles) < 3 else 1 for m, h in handles.items()}
    rows = max(-(-len(h) // cols[m]) for m, h in handles.items()) + 1
    legend_in = 0.15 * rows + 0.2
    height = fig.get_figheight() + legend_in
    fig.set_figheight(height)
    for k, (machine, entries) in enumerate(handles.items()):
        fig.legend(list(entries.values()), list(entries), loc="upper left", title=machine,
                   title_fontsize=7, fontsize=7, frameon=False, alignment="left",
                   ncol=cols[machine], bbox_to_anchor=(0.01 + k / len(handles),
                                                       (legend_in - 0.05) / height))
    fig.suptitle(title + (f"\n{note}" if note else ""), fontsize=10)
    fig.tight_layout(rect=(0, legend_in / height, 1, 1))
    fig.savefig(path, dpi=DPI)
    _pyplot().close(fig)


def _machine_titles(series) -> dict:
    """(machine, cpu) -> the legend title: the name, with the processor where the name
    also holds another processor's results."""
    names_ = [s[0] for s in {s[:2] for s in series}]
    return {s[:2]: machine_name(*s[:2]) if names_.count(s[0]) > 1 else str(s[0])
            for s in series}


def _line(ax, g, y, colour, marker, causal=False):
    return ax.plot(g["x"], g[y], color=colour, marker=marker, markersize=3, lw=1.2,
                   linestyle="--" if causal else "-")[0]


def _dtype_order(dtypes) -> list[str]:
    from flashbench.inputs.precision import DTYPES  # the registry's order: fp64, fp32, tf32, ...

    known = [d for d in DTYPES if d in dtypes]
    return known + sorted(d for d in dtypes if d not in known)


def plot_errors(df: pd.DataFrame, path: Path) -> bool:
    """The main accuracy metric over commits, one panel per dtype (non-causal rows), a
    line per machine x kernel (x shape, dist where several). False: nothing to plot."""
    metric = {b: isinstance(b, str) and accuracy_metric(b) == MAIN_METRIC
              for b in names(df["benchmark"])}
    rows = flags(df["benchmark"], metric) & (df["status"] == "ok").to_numpy()
    acc = with_identity(df.loc[rows])
    if acc.empty:
        return False
    for c in ("kernel", "dtype", "causal", "shape", "dist"):
        if c not in acc:
            acc[c] = None
    if acc["causal"].eq(False).any():
        acc = acc[acc["causal"].eq(False)]
    acc = acc.astype({c: object for c in (*IDENTITY, "kernel", "shape", "dist", "dtype")})
    order, labels = commit_order(df), commit_labels(df)
    dtypes = _dtype_order({d for d in acc["dtype"] if isinstance(d, str)}) or [None]
    several = {c: acc[c].nunique(dropna=False) > 1 for c in ("shape", "dist")}
    keys = [*IDENTITY, "kernel", "shape", "dist"]
    series = [_key(s) for s in acc[keys].drop_duplicates().itertuples(index=False, name=None)]
    style, titles = palette(series, machine_order(df)), _machine_titles(series)
    fig, axes = _grid(len(dtypes), 3)
    handles: dict = {}
    for ax, dtype in zip(axes.flat, dtypes, strict=False):
        sub = acc if dtype is None else acc[acc["dtype"] == dtype]
        for key, g in sub.groupby(keys, observed=True, dropna=False, sort=True):
            g = by_commit(g, order)
            machine, cpu, kernel, shape, dist = key
            label = " ".join(str(v) for v, show in ((kernel, True), (shape, several["shape"]),
                                                     (dist, several["dist"]))
                             if show and isinstance(v, str))
            handles.setdefault(titles[(machine, cpu)], {})[label] = _line(
                ax, g, "value", *style[_key(key)])
        _log(ax)
        ax.set_title(dtype or "dtype not recorded", fontsize=9)
        _commit_axis(ax, labels, sub["commit"].astype(object).map(order))
    unit = acc["unit"].dropna().astype(object).unique() if "unit" in acc else []
    for row in axes:
        row[0].set_ylabel(f"{unit[0] if len(unit) else MAIN_METRIC}", fontsize=8)
    shapes = sorted({s for s in acc["shape"] if isinstance(s, str)})
    _finish(fig, axes, handles, "Accuracy over history: max |O - O_fp64| (unitless), "
            "non-causal", path, f"shape {', '.join(shapes) or 'not recorded'}")
    return True


def plot_rule_ratios(df: pd.DataFrame, path: Path) -> bool:
    """Both rules over commits: per tensor (O, LSE, dq, dk, dv) the baseline rule's ratio
    (kernel / same-dtype standard) beside the band rule's, a line per machine x kernel x
    dtype, causal dashed, each rule's limit dotted. False: no rule-ratio tracks."""
    wanted = {*BAND_PAIRS, *BAND_PAIRS.values()}
    metric = {b: accuracy_metric(b) if isinstance(b, str) else None for b in names(df["benchmark"])}
    rows = flags(df["benchmark"], {b: m in wanted for b, m in metric.items()})
    acc = with_identity(df.loc[rows & (df["status"] == "ok").to_numpy()])
    if acc.empty:
        return False
    acc = acc.assign(metric=per_name(acc["benchmark"], metric))
    for c in ("kernel", "dtype", "causal"):
        if c not in acc:
            acc[c] = None
    acc = acc.astype({c: object for c in (*IDENTITY, "kernel", "dtype")})
    panels = [m for pair in BAND_PAIRS.items() for m in pair if acc["metric"].eq(m).any()]
    order, labels = commit_order(df), commit_labels(df)
    keys = [*IDENTITY, "kernel", "dtype"]
    series = [_key(s) for s in acc[keys].drop_duplicates().itertuples(index=False, name=None)]
    style, titles = palette(series, machine_order(df)), _machine_titles(series)
    fig, axes = _grid(len(panels), 2)
    handles: dict = {}
    for ax, name in zip(axes.flat, panels, strict=False):
        sub = acc[acc["metric"] == name]
        for (*key, causal), g in sub.groupby([*keys, "causal"], dropna=False, sort=True):
            machine, cpu, kernel, dtype = key
            line = _line(ax, by_commit(g, order), "value", *style[_key(key)], causal=causal)
            handles.setdefault(titles[(machine, cpu)], {}).setdefault(f"{kernel} {dtype}", line)
        ax.axhline(rule_limit(name), color="k", linestyle=":", lw=1)
        _log_if_wide(ax, [*sub["value"], rule_limit(name)])
        ax.set_title(f"{name} (limit {rule_limit(name):g})", fontsize=8)
        _commit_axis(ax, labels, sub["commit"].astype(object).map(order))
    _finish(fig, axes, handles, "The two rules over history: baseline ratio (kernel / "
            "same-dtype standard error) and band-rule ratio", path,
            "dotted: the rule's limit; solid: non-causal, dashed: causal")
    return True


def plot_tflops(points: pd.DataFrame, df: pd.DataFrame, path: Path) -> bool:
    """TFLOP/s over commits: one panel per shape x direction (GPU machines' first), a
    line per machine x backend x dtype x variant, causal dashed. False: nothing to plot."""
    if points.empty:
        return False
    pts = with_identity(points).astype({c: object for c in IDENTITY})
    order, labels = commit_order(df), commit_labels(df)
    gpu = pts.groupby(["shape", "direction"])["cpu"].agg(
        lambda c: any("GPU:" in str(x) for x in c))
    panels = sorted(gpu.index, key=lambda k: (not gpu[k], k[0], k[1]))
    keys = [*IDENTITY, "backend", "dtype", "variant"]
    series = [_key(s) for s in pts[keys].drop_duplicates().itertuples(index=False, name=None)]
    style, titles = palette(series, machine_order(df)), _machine_titles(series)
    fig, axes = _grid(len(panels), 3)
    handles: dict = {}
    for ax, (shape, direction) in zip(axes.flat, panels, strict=False):
        sub = pts[(pts["shape"] == shape) & (pts["direction"] == direction)]
        for (*key, causal), g in sub.groupby([*keys, "causal"], dropna=False, sort=True):
            g = by_commit(g, order)
            machine, cpu, backend, dtype, variant = key
            label = (f"{backend}{f' {dtype}' if isinstance(dtype, str) else ''}"
                     f"{f' {variant}' if variant else ''}")
            line = _line(ax, g, "tflops", *style[_key(key)], causal=causal)
            handles.setdefault(titles[(machine, cpu)], {}).setdefault(label, line)
        _log_if_wide(ax, sub["tflops"])
        ax.set_title(f"{shape.replace(' Nk=', '/')} {direction}", fontsize=8)
        _commit_axis(ax, labels, sub["commit"].astype(object).map(order))
    for row in axes:
        row[0].set_ylabel("TFLOP/s", fontsize=8)
    _finish(fig, axes, handles, "Throughput over history: TFLOP/s = FLOPs of the shape "
            "(visible pairs) / recorded seconds", path, "solid: non-causal, dashed: causal")
    return True


def plot_bands(history: pd.DataFrame, path, quantity: str = "o_abs",
               kernel: str = "flash_model", machines: list[tuple] | None = None) -> bool:
    """The bands suite's bands over commits: one panel per dtype x distribution, per N
    (a shade of the machine's colour, darker for larger N) the p50..max range shaded and
    the p99 as a line; non-causal rows (causal where there are none). ``machines``:
    :func:`machine_order` of the whole frame (the report's colours). False: nothing."""
    h = history[(history["quantity"] == quantity) & (history["kernel"] == kernel)]
    if h.empty:
        return False
    if h["causal"].eq(False).any():
        h = h[h["causal"].eq(False)]
    h = h.astype({c: object for c in IDENTITY})
    dtypes = _dtype_order(set(h["dtype"]))
    dists = sorted(set(h["dist"]), key=str)
    keys = [*IDENTITY, "N"]
    series = sorted((_key(s) for s in h[keys].drop_duplicates().itertuples(index=False,
                                                                           name=None)),
                    key=lambda s: (str(s[0]), str(s[1]), s[2]))
    style, titles = palette(series, machines), _machine_titles(series)
    fig, axes = _grid(len(dtypes) * len(dists), len(dists), height=2.2)
    labels = {}
    for c, x, d in h[["commit", "x", "date"]].drop_duplicates("commit").itertuples(index=False):
        labels[int(x)] = f"{str(c)[:7]}\n{pd.Timestamp(d):%m-%d}"
    handles: dict = {}
    for ax, (dtype, dist) in zip(axes.flat, [(t, s) for t in dtypes for s in dists],
                                 strict=False):
        sub = h[(h["dtype"] == dtype) & (h["dist"] == dist)]
        for key, g in sub.groupby(keys, dropna=False, sort=True):
            g = g.sort_values("x")
            colour, marker = style[_key(key)]
            ax.fill_between(g["x"], g["p50"], g["max"], color=colour, alpha=0.12, lw=0)
            ax.plot(g["x"], g["max"], color=colour, lw=0.6, linestyle=":")
            handles.setdefault(titles[key[:2]], {})[f"N={key[2]}"] = _line(
                ax, g, "p99", colour, marker)
        _log(ax)
        ax.set_title(f"{dtype} {dist}", fontsize=8)
        _commit_axis(ax, labels, sub["x"])
    unit = h["unit"].dropna().iloc[-1] if h["unit"].notna().any() else quantity
    for row in axes:
        row[0].set_ylabel(str(unit), fontsize=8)
    _finish(fig, axes, handles, f"Error bands over history ({kernel}, {quantity}): shaded "
            "p50..max over seeds (dotted: max), line p99", path)
    return True
