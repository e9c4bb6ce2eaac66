"""The history report's plots: accuracy (errors.png), the two rules' ratios (rules.png) and
throughput (tflops.png).

Titles, panels and line labels come from the data: the accuracy rows' ``shape``,
``dist`` and ``dtype`` parameters, the throughput points' backend, dtype, shape,
causal, direction and variant. The x axis is history: commits in the date order of
their first results file (oldest = 0).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from flashbench.history.suites import BAND_PAIRS, MAIN_METRIC, accuracy_metric, rule_limit
from flashbench.history.summaries import IDENTITY, names, per_name, with_identity


def commit_order(df: pd.DataFrame) -> dict:
    """commit -> its position in history (0 = oldest, by date of its first result)."""
    first = df.sort_values("date", kind="stable").drop_duplicates("commit")
    return {c: i for i, c in enumerate(first["commit"].astype(object))}


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


def _machine(machine, cpu, frame: pd.DataFrame) -> str:
    """" [machine (cpu)]" where the frame holds more than one measurement machine."""
    if len(frame[IDENTITY].astype(object).drop_duplicates()) < 2:
        return ""
    return f" [{machine}{'' if not isinstance(cpu, str) else f' ({cpu})'}]"


def _texts(values: pd.Series, what: str) -> str:
    """"what a, b" of the distinct strings in ``values`` ("what not recorded" if none)."""
    found = sorted({v for v in values if isinstance(v, str)})
    if not found:
        return f"{what} not recorded"
    missing = " (and not recorded)" if len(found) and values.map(
        lambda v: not isinstance(v, str)).any() else ""
    return f"{what} {', '.join(found)}{missing}"


def _dtype_order(dtypes) -> list[str]:
    from flashbench.inputs.precision import DTYPES  # the registry's order: fp64, fp32, tf32, ...

    known = [d for d in DTYPES if d in dtypes]
    return known + sorted(d for d in dtypes if d not in known)


def plot_errors(df: pd.DataFrame, path: Path) -> bool:
    """The main accuracy metric per dtype over commits, non-causal rows, one line per
    kernel (and shape, dist, machine where there are several). False: nothing to plot."""
    metric = {b: isinstance(b, str) and accuracy_metric(b) == MAIN_METRIC
              for b in names(df["benchmark"])}
    rows = per_name(df["benchmark"], metric).astype(bool) & (df["status"] == "ok").to_numpy()
    acc = with_identity(df.loc[rows])
    if acc.empty:
        return False
    for c in ("kernel", "dtype", "causal", "shape", "dist"):
        if c not in acc:
            acc[c] = None
    if acc["causal"].eq(False).any():
        acc = acc[acc["causal"].eq(False)]
    plt = _pyplot()
    order = commit_order(df)
    dtypes = _dtype_order({d for d in acc["dtype"] if isinstance(d, str)}) or [None]
    fig, axes = plt.subplots(1, len(dtypes), figsize=(4.2 * len(dtypes), 3.6), squeeze=False)
    several = {c: acc[c].astype(object).nunique(dropna=False) > 1 for c in ("shape", "dist")}
    for ax, dtype in zip(axes[0], dtypes, strict=True):
        sub = acc if dtype is None else acc[acc["dtype"] == dtype]
        for (machine, cpu, kernel, shape, dist), g in sub.astype(
                {c: object for c in ("kernel", "shape", "dist")}).groupby(
                [*IDENTITY, "kernel", "shape", "dist"], observed=True, dropna=False):
            g = by_commit(g, order)
            label = (f"{kernel}{f' {shape}' if several['shape'] else ''}"
                     f"{f' {dist}' if several['dist'] else ''}{_machine(machine, cpu, acc)}")
            ax.plot(g["x"], g["value"], marker="o", label=label)
        ax.set_yscale("log")
        ax.set_title(f"{dtype or 'dtype not recorded'}"
                     f"{', non-causal' if acc['causal'].eq(False).all() else ''}")
        ax.set_xlabel("commit (oldest = 0)")
        ax.grid(alpha=0.3)
    unit = acc["unit"].dropna().astype(object).unique() if "unit" in acc else []
    axes[0][0].set_ylabel(f"{unit[0] if len(unit) else MAIN_METRIC} (unitless)")
    axes[0][-1].legend(fontsize=8)
    fig.suptitle(f"Accuracy over history ({_texts(acc['shape'], 'shape')}; "
                 f"{_texts(acc['dist'], 'dist')})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot_rule_ratios(df: pd.DataFrame, path: Path) -> bool:
    """Both rules over commits: per tensor (O, LSE, dq, dk, dv) a row of two panels, the
    baseline rule's ratio (kernel / same-dtype standard) and the band rule's, one line per
    kernel x dtype x causal (and shape, machine), each rule's limit dashed. False: neither
    rule's tracks are in ``df``."""
    metric = {b: accuracy_metric(b) if isinstance(b, str) else None for b in names(df["benchmark"])}
    wanted = {b: m in {*BAND_PAIRS, *BAND_PAIRS.values()} for b, m in metric.items()}
    rows = per_name(df["benchmark"], wanted).astype(bool) & (df["status"] == "ok").to_numpy()
    acc = with_identity(df.loc[rows])
    if acc.empty:
        return False
    acc = acc.assign(metric=per_name(acc["benchmark"], metric))
    for c in ("kernel", "dtype", "causal", "shape"):
        if c not in acc:
            acc[c] = None
    pairs = [(b, n) for b, n in BAND_PAIRS.items() if acc["metric"].isin([b, n]).any()]
    plt = _pyplot()
    order = commit_order(df)
    fig, axes = plt.subplots(len(pairs), 2, figsize=(11, 3.4 * len(pairs)), squeeze=False)
    for row, pair in zip(axes, pairs, strict=True):
        for ax, name in zip(row, pair, strict=True):
            sub = acc[acc["metric"] == name].astype({c: object for c in ("kernel", "shape")})
            for (machine, cpu, kernel, dtype, causal, shape), g in sub.groupby(
                    [*IDENTITY, "kernel", "dtype", "causal", "shape"], observed=True,
                    dropna=False):
                g = by_commit(g, order)
                several = sub["shape"].nunique(dropna=False) > 1
                ax.plot(g["x"], g["value"], marker=".", linestyle="--" if causal else "-",
                        label=f"{kernel} {dtype}{f' {shape}' if several else ''}"
                              f"{_machine(machine, cpu, acc)}")
            ax.axhline(rule_limit(name), color="k", linestyle=":", linewidth=1)
            ax.set_yscale("log")
            ax.set_title(f"{name} (limit {rule_limit(name):g})")
            ax.set_xlabel("commit (oldest = 0)")
            ax.grid(alpha=0.3)
            if len(ax.lines) > 1:
                ax.legend(fontsize=6)
        row[0].set_ylabel("kernel error / same-dtype standard's")
        row[1].set_ylabel("band rule ratio (<= 1 passes)")
    fig.suptitle("The two rules over history (dashed: causal; dotted: the rule's limit)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def plot_tflops(points: pd.DataFrame, df: pd.DataFrame, path: Path) -> bool:
    """TFLOP/s over commits: one panel per backend, one line per dtype x shape x causal
    x direction x variant (and machine). False: nothing to plot."""
    if points.empty:
        return False
    plt = _pyplot()
    order = commit_order(df)
    backends = sorted(points["backend"].unique())
    cols = min(3, len(backends))
    rows = -(-len(backends) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.0 * cols, 4.2 * rows), squeeze=False)
    for ax, backend in zip(axes.flat, backends, strict=False):
        sub = points[points["backend"] == backend]
        for (machine, cpu, dtype, shape, causal, direction, variant), g in sub.groupby(
                [*IDENTITY, "dtype", "shape", "causal", "direction", "variant"],
                observed=True, dropna=False):
            g = by_commit(g, order)
            label = (f"{dtype if isinstance(dtype, str) else ''} {shape.replace(' Nk=', '/')}"
                     f"{' causal' if causal else ''}"
                     f"{f' {direction}' if direction != 'fwd' else ''}"
                     f"{f' {variant}' if variant else ''}{_machine(machine, cpu, points)}")
            ax.plot(g["x"], g["tflops"], marker=".", linestyle="--" if causal else "-",
                    label=label.strip())
        ax.set_title(backend)
        ax.set_xlabel("commit (oldest = 0)")
        ax.set_ylabel("TFLOP/s (FLOPs / recorded time)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(backends):]:
        ax.set_visible(False)
    fig.suptitle("Throughput over history (dashed: causal, visible pairs only)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True
