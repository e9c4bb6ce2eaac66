"""The history report's plots, as small multiples: errors.png, rules.png, bands.png, tflops.png.

One panel per problem (accuracy: per dtype; rules: per rule x tensor; bands: per dtype x
distribution; throughput: per shape x direction), commits on the x axis in history order
(date of their first results file), labelled by short hash and date. One line per
parameter setting and machine; colour by kernel, markers by the other settings, machines
as shaded spans, causal dashed (:mod:`flashbench.history.figure`). ``*_figure`` build the
matplotlib figure (for the tests); ``plot_*`` save it. More: docs/history.md ("Plots").
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from flashbench.history import figure as fg
from flashbench.history.answer import machine_labels
from flashbench.history.suites import BAND_PAIRS, MAIN_METRIC, accuracy_metric, rule_limit
from flashbench.history.summaries import (
    IDENTITY,
    finite_ok,
    flags,
    names,
    per_name,
    with_identity,
)


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




def _by_machine(frame: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """``frame`` with column ``_m``, an integer naming each row's (machine, cpu) (one
    groupby: no tuple per row), and per such integer the sorted x of the other machines'
    rows in it (what :func:`_broken` breaks a line across)."""
    codes = frame.groupby(IDENTITY, observed=True, dropna=False, sort=False).ngroup().to_numpy()
    x = frame["x"].to_numpy(float)
    return frame.assign(_m=codes), {m: np.unique(x[codes != m]) for m in np.unique(codes)}


def _broken(x: np.ndarray, y: np.ndarray, others: np.ndarray):
    """x, y with a NaN between two points that another machine's commits (``others``,
    sorted) lie between: a machine's line crossed the others' spans as if it had measured
    there (a probe read M2's host step as a ramp through M3's span)."""
    if len(x) < 2 or not len(others):
        return x, y
    gap = np.searchsorted(others, x[:-1], "right") < np.searchsorted(others, x[1:], "left")
    if not gap.any():
        return x, y
    at = np.flatnonzero(gap) + 1
    mid = (x[at - 1] + x[at]) / 2
    return np.insert(x, at, mid), np.insert(y, at, np.nan)


def _dtype_order(dtypes) -> list[str]:
    from flashbench.inputs.precision import DTYPES  # the registry's order: fp64, fp32, tf32, ...

    known = [d for d in DTYPES if d in dtypes]
    return known + sorted(d for d in dtypes if d not in known)


VARIED = re.compile(r"window|softcap|sinks")  # a series' other parameters name a variant


class _Series:
    """Draws a panel's series: one line per (machine, cpu, benchmark, params), so never
    two settings on one line; colour by kernel, marker by dtype, causal dashed, peers
    thin, studies dash-dot, a variant's markers hollow. Collects the legends: kernels,
    dtypes, line styles."""

    def __init__(self, kernels, kernel_col: str = "kernel", study: str = "study"):
        self.colours, self.kernel_col, self.study = fg.kernel_colours(kernels), kernel_col, study
        self.kernels: dict = {}
        self.settings: dict = {}
        self.styles: dict = {}
        self.faint: set = set()  # kernels whose legend sample is a faint line, for now

    def draw(self, ax, sub: pd.DataFrame, y: str, order: dict) -> list:
        lines = []
        # a line per benchmark code (asv's version) too: a change of the benchmark's own code
        # is no step of the kernel's, and a result of an earlier code is drawn faint
        keys = [*IDENTITY, "benchmark", "params", *(["version"] if "current" in sub else [])]
        # the columns a line needs, put in history order once: each group keeps that
        # order (a sort per line of every column cost most of a report's plotting time)
        cols = [c for c in dict.fromkeys([*keys, self.kernel_col, "dtype", "causal",
                                          "variant", "commit", "current", y]) if c in sub]
        framed, elsewhere = _by_machine(by_commit(sub[cols], order))
        for _, g in framed.groupby(keys, observed=True, dropna=False, sort=True):
            kernel = g[self.kernel_col].iloc[0] if self.kernel_col in g else None
            kernel = kernel if isinstance(kernel, str) else None
            dtype = g["dtype"].iloc[0] if "dtype" in g else None
            setting = dtype if isinstance(dtype, str) else "dtype not recorded"
            marker = self.settings.setdefault(setting, fg.dtype_marker(setting,
                                                                       self.settings))
            causal = bool(g["causal"].iloc[0]) if "causal" in g and \
                g["causal"].iloc[0] in (True, False) else False
            peer = fg.is_peer(kernel)
            style = "-." if kernel is None else "--" if causal else "-"
            varied = "variant" in g and bool(VARIED.search(str(g["variant"].iloc[0])))
            old = "current" in g and not bool(g["current"].iloc[0])
            x, values = _broken(g["x"].to_numpy(float), g[y].to_numpy(float),
                                elsewhere[g["_m"].iloc[0]])
            line = ax.plot(x, values, color=self.colours.get(kernel, "k"), marker=marker,
                           markersize=3, lw=0.8 if peer else 1.3,
                           alpha=(0.6 if peer else 1) * (0.3 if old else 1),
                           linestyle=style, markerfacecolor="white" if varied else None)[0]
            name = (kernel or self.study) + (" (peer: information only)" if peer else "")
            if old:
                self.styles.setdefault("faint: the benchmark's earlier code", line)
            if name not in self.kernels or not old and name in self.faint:
                self.kernels[name] = line  # a current line is its kernel's legend sample
                self.faint.discard(name)
                if old:
                    self.faint.add(name)
            if not old:
                if varied:
                    self.styles.setdefault("hollow marker: a window, softcap or sinks", line)
                self.styles.setdefault({"-": "solid: non-causal", "--": "dashed: causal",
                                        "-.": f"dash-dot: {self.study}"}[style], line)
            lines.append(line)
        return lines

    def legends(self) -> dict:
        plt = fg.pyplot()
        own = {k: v for k, v in self.kernels.items() if "peer" not in k}
        peers = {k: v for k, v in self.kernels.items() if "peer" in k}
        marks = {s: plt.Line2D([], [], color="0.3", marker=m, lw=0, markersize=4)
                 for s, m in self.settings.items()}
        return {"kernels (colour)": own, "torch peers": peers, "line style": self.styles,
                **({"dtype (marker)": marks} if len(marks) > 1 else {})}


SHADED = "alternate machines' spans shaded grey"  # fg.machine_spans (a newcomer asked)


def _spans(ax, sub: pd.DataFrame, order: dict, labels: dict) -> None:
    fg.machine_spans(ax, fg.spans_of(by_commit(sub[[*IDENTITY, "commit"]], order), labels))


def errors_figure(df: pd.DataFrame):
    """The main accuracy metric over commits, one panel per dtype (non-causal rows), a
    line per machine x setting (kernel, shape, dist, ...). None: nothing to plot."""
    metric = {b: isinstance(b, str) and accuracy_metric(b) == MAIN_METRIC
              for b in names(df["benchmark"])}
    rows = flags(df["benchmark"], metric) & finite_ok(df)
    acc = with_identity(df.loc[rows])
    if acc.empty:
        return None
    for c in ("kernel", "dtype", "causal"):
        if c not in acc:
            acc[c] = None
    left = ""  # what the causal filter leaves out is named (a probe: 987 results unsaid)
    if acc["causal"].eq(False).any():
        out = acc.loc[acc["causal"].ne(False), "benchmark"].astype(object).str.split(".").str[0]
        acc = acc[acc["causal"].eq(False)]
        kept = set(acc["benchmark"].astype(object).str.split(".").str[0])
        gone = sorted(set(out) - kept)
        left = f"; suites without a non-causal case ({', '.join(gone)}): the same" if gone \
            else ""
    acc = acc.astype({c: object for c in (*IDENTITY, "kernel", "dtype", "params")})
    order, labels, mlabels = commit_order(df), commit_labels(df), machine_labels(df)
    dtypes = _dtype_order({d for d in acc["dtype"] if isinstance(d, str)}) or [None]
    fig, axes = fg.grid(len(dtypes), 3)
    series = _Series(set(acc["kernel"]))
    subs = [acc if d is None else acc[acc["dtype"] == d] for d in dtypes]
    fg.one_scale(axes, [[]], log=True)
    for ax, dtype, sub in zip(axes.flat, dtypes, subs, strict=False):
        series.draw(ax, sub, "value", order)
        fg.span_floor(ax, sub["value"])
        _spans(ax, sub, order, mlabels)
        ax.set_title(dtype or "dtype not recorded", fontsize=9)
        fg.commit_axis(ax, labels, sub["commit"].astype(object).map(order))
    unit = acc["unit"].dropna().astype(object).unique() if "unit" in acc else []
    for row in axes:
        row[0].set_ylabel(f"{unit[0] if len(unit) else MAIN_METRIC}", fontsize=8)
    return fg.finish(fig, axes, series.legends(), "Accuracy over history: max |O - O_fp64| "
                     f"(unitless), non-causal cases (causal ones: error_bands.csv{left})",
                     "M1, M2, "
                     "...: the machine that measured those commits (report.md's legend); "
                     f"dashed line: a machine change, {SHADED}")


def rules_figure(df: pd.DataFrame):
    """Both rules over commits: per tensor (O, LSE, dq, dk, dv) the baseline rule's ratio
    beside the band rule's, a line per machine x setting, the limit dotted; the decode
    merge study (no kernel) dash-dot. None: no rule-ratio tracks."""
    wanted = {*BAND_PAIRS, *BAND_PAIRS.values()}
    metric = {b: accuracy_metric(b) if isinstance(b, str) else None for b in names(df["benchmark"])}
    rows = flags(df["benchmark"], {b: m in wanted for b, m in metric.items()})
    acc = with_identity(df.loc[rows & finite_ok(df)])
    if acc.empty:
        return None
    acc = acc.assign(metric=per_name(acc["benchmark"], metric))
    for c in ("kernel", "dtype", "causal"):
        if c not in acc:
            acc[c] = None
    acc = acc.astype({c: object for c in (*IDENTITY, "kernel", "dtype", "params")})
    study = acc["kernel"].map(lambda k: not isinstance(k, str)).to_numpy(bool)
    panels = [(m, False) for pair in BAND_PAIRS.items() for m in pair
              if (acc["metric"].eq(m).to_numpy() & ~study).any()]
    panels += [(m, True) for m in BAND_PAIRS if (acc["metric"].eq(m).to_numpy() & study).any()]
    order, labels, mlabels = commit_order(df), commit_labels(df), machine_labels(df)
    fig, axes = fg.grid(len(panels), 2)
    series = _Series(set(acc["kernel"]), study="decode merge study (not a kernel)")
    subs = [acc[acc["metric"].eq(m).to_numpy() & (study == s)] for m, s in panels]
    titles = [f"{m} (limit {rule_limit(m):g}, dotted)" if not s else
              f"decode merge study, 16-bit partials: {m}" for m, s in panels]
    panels = [m for m, _ in panels]
    fg.one_scale(axes, [[*s["value"], rule_limit(n)] for s, n in zip(subs, panels, strict=True)])
    for ax, name, sub, title in zip(axes.flat, panels, subs, titles, strict=False):
        series.draw(ax, sub, "value", order)
        ax.axhline(rule_limit(name), color="k", linestyle=":", lw=1)
        # flashbench's kernels past the limit ringed red (a peer's or a study's FAIL is
        # information): 2.013 against 2 sat on the dotted line like a pass
        own = sub["kernel"].map(lambda k: isinstance(k, str) and not fg.is_peer(k))
        bad = sub[(sub["value"].to_numpy(float) > rule_limit(name)) & own.to_numpy(bool)]
        ax.scatter(bad["commit"].astype(object).map(order), bad["value"], s=28, lw=0.9,
                   facecolors="none", edgecolors="red", zorder=6)
        fg.span_floor(ax, sub["value"], extra=(rule_limit(name),))
        _spans(ax, sub, order, mlabels)
        ax.set_title(title, fontsize=8)
        fg.commit_axis(ax, labels, sub["commit"].astype(object).map(order))
    return fg.finish(fig, axes, series.legends(), "The two rules over history: baseline "
                     "ratio (kernel / same-dtype standard error) and band-rule ratio",
                     "one line per parameter setting and machine; ringed red: a kernel of "
                     "flashbench's past the rule's limit; M1, M2, ...: the machine (report.md's "
                     f"legend); dashed line: a machine change, {SHADED}")


def loaded_runs(points: pd.DataFrame, order: dict, slower: float = 0.75) -> dict:
    """(machine, cpu) -> positions of commits whose run was slower across the board: the
    median over its timings of TFLOP/s / that series' median is below ``slower`` (a
    loaded machine rather than a code change, which moves some timings, not all)."""
    p = with_identity(points).astype({c: object for c in IDENTITY})
    keys = [*IDENTITY, "benchmark", "params"]
    usual = p.groupby(keys, dropna=False)["tflops"].transform("median")
    p = p.assign(rel=p["tflops"] / usual, x=p["commit"].astype(object).map(order))
    out: dict = {}
    for (m, c, x), g in p.groupby([*IDENTITY, "x"], dropna=False):
        if len(g) >= 4 and g["rel"].median() < slower:
            out.setdefault((m, c if isinstance(c, str) else None), []).append(int(x))
    return out


def tflops_figure(points: pd.DataFrame, df: pd.DataFrame):
    """TFLOP/s over commits: one panel per shape x direction (GPU machines' first), a line
    per machine x setting, log scale throughout; machine changes and loaded runs marked.
    None: nothing to plot."""
    if points.empty:
        return None
    pts = with_identity(points).astype({c: object for c in (*IDENTITY, "params")})
    order, labels, mlabels = commit_order(df), commit_labels(df), machine_labels(df)
    gpu = pts.groupby(["shape", "direction"])["cpu"].agg(
        lambda c: any("GPU:" in str(x) for x in c))
    panels = sorted(gpu.index, key=lambda k: (not gpu[k], k[0], k[1]))
    loaded = loaded_runs(pts, order)
    fig, axes = fg.grid(len(panels), 3)
    series = _Series(set(pts["backend"]), kernel_col="backend")
    fg.one_scale(axes, [[]], log=True)
    for ax, (shape, direction) in zip(axes.flat, panels, strict=False):
        sub = pts[(pts["shape"] == shape) & (pts["direction"] == direction)]
        series.draw(ax, sub, "tflops", order)
        fg.span_floor(ax, sub["tflops"])
        _spans(ax, sub, order, mlabels)
        xs = set(sub["commit"].astype(object).map(order))
        for x in sorted({x for v in loaded.values() for x in v} & xs):
            ax.axvspan(x - 0.4, x + 0.4, color="tab:red", alpha=0.15, lw=0)
        ax.set_title(f"{shape.replace(' Nk=', '/')} {direction}", fontsize=8)
        fg.commit_axis(ax, labels, sub["commit"].astype(object).map(order))
    for row in axes:
        row[0].set_ylabel("TFLOP/s", fontsize=8)
    return fg.finish(fig, axes, series.legends(), "Throughput over history: TFLOP/s = FLOPs "
                     "of the shape (visible pairs) / recorded seconds (asv's median of its "
                     "samples)", "red band: a run "
                     "slower across the board (median TFLOP/s < 75% of usual: load, not "
                     f"code); dashed line: a machine change, {SHADED} (M1, M2, ...: "
                     "report.md)")


def bands_figure(history: pd.DataFrame, quantity: str = "o_abs", kernel: str = "flash_model",
                 machines: dict | None = None):
    """The bands suite's bands over commits: one panel per dtype x distribution, a colour
    per N with its p99 as a line and its max dotted (no shading: three N's ranges overlap
    into one), non-causal rows (causal where there are none), machines as spans.
    ``machines``: :func:`~flashbench.history.answer.machine_labels` of the whole frame."""
    h = history[(history["quantity"] == quantity) & (history["kernel"] == kernel)]
    if h.empty:
        return None
    if h["causal"].eq(False).any():
        h = h[h["causal"].eq(False)]
    h = h.astype({c: object for c in IDENTITY})
    mlabels = machines or {(m, c if isinstance(c, str) else None): f"M{i + 1}" for i, (m, c)
                           in enumerate(dict.fromkeys(zip(h["machine"], h["cpu"],
                                                          strict=True)))}
    dtypes, dists = _dtype_order(set(h["dtype"])), sorted(set(h["dist"]), key=str)
    fig, axes = fg.grid(len(dtypes) * len(dists), len(dists), height=2.2)
    labels = {int(x): f"{str(c)[:7]}\n{pd.Timestamp(d):%m-%d}" for c, x, d in
              h[["commit", "x", "date"]].drop_duplicates("commit").itertuples(index=False)}
    colours = fg.pyplot().get_cmap("viridis")
    ns = sorted(set(h["N"]))
    handles: dict = {}
    fg.one_scale(axes, [[]], log=True)
    for ax, (dtype, dist) in zip(axes.flat, [(t, s) for t in dtypes for s in dists],
                                 strict=False):
        sub = h[(h["dtype"] == dtype) & (h["dist"] == dist)]
        sub, elsewhere = _by_machine(sub)
        for key, g in sub.groupby([*IDENTITY, "N"], dropna=False, sort=True):
            g = g.sort_values("x")
            colour = colours(0.85 * ns.index(key[2]) / max(1, len(ns) - 1))
            others = elsewhere[g["_m"].iloc[0]]
            x = g["x"].to_numpy(float)
            ax.plot(*_broken(x, g["max"].to_numpy(float), others), color=colour, lw=0.8,
                    linestyle=":", marker="_", markersize=4)  # a lone point shows too
            handles[f"N={key[2]}"] = ax.plot(*_broken(x, g["p99"].to_numpy(float), others),
                                             color=colour, marker="o", markersize=3,
                                             lw=1.3)[0]
        fg.span_floor(ax, [*sub["p99"], *sub["max"]])
        fg.machine_spans(ax, fg.spans_of(sub, mlabels))
        ax.set_title(f"{dtype} {dist}", fontsize=8)
        fg.commit_axis(ax, labels, sub["x"])
    unit = h["unit"].dropna().iloc[-1] if h["unit"].notna().any() else quantity
    for row in axes:
        row[0].set_ylabel(str(unit), fontsize=8)
    return fg.finish(fig, axes, {"N (keys)": handles}, f"Error bands over history ({kernel}, "
                     f"{quantity}): line p99, dotted max over seeds", "M1, M2, ...: the "
                     f"machine (report.md's legend); dashed line: a machine change, {SHADED}")


def _saved(fig, path) -> bool:
    if fig is None:
        return False
    fg.save(fig, path)
    return True


def plot_errors(df: pd.DataFrame, path: Path) -> bool:
    """errors.png (:func:`errors_figure`); False: nothing to plot."""
    return _saved(errors_figure(df), path)


def plot_rule_ratios(df: pd.DataFrame, path: Path) -> bool:
    """rules.png (:func:`rules_figure`); False: no rule-ratio tracks."""
    return _saved(rules_figure(df), path)


def plot_tflops(points: pd.DataFrame, df: pd.DataFrame, path: Path) -> bool:
    """tflops.png (:func:`tflops_figure`); False: nothing to plot."""
    return _saved(tflops_figure(points, df), path)


def plot_bands(history: pd.DataFrame, path, quantity: str = "o_abs",
               kernel: str = "flash_model", machines: dict | None = None) -> bool:
    """bands.png (:func:`bands_figure`); False: nothing to plot."""
    return _saved(bands_figure(history, quantity, kernel, machines), path)
