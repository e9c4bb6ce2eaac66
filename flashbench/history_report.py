"""``flashbench history``: the tidy frame, its summaries, a Markdown report and plots.

Writes into ``out``: ``results.csv`` (the tidy frame), ``error_bands.csv``,
``throughput.csv``, ``steps.csv``, ``report.md`` and the plots ``errors.png``
(max |O - O_fp64| per dtype over commits, one line per kernel) and ``tflops.png``
(TFLOP/s over commits per backend x shape).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from tabulate import tabulate

from flashbench.history import error_bands, load_results, steps, throughput, throughput_points


def _table(df: pd.DataFrame, floatfmt=".3g") -> str:
    if df.empty:
        return "_none recorded_"
    return tabulate(df, headers="keys", tablefmt="github", showindex=False, floatfmt=floatfmt)


def _joined(samples) -> str:
    """A row's samples for the CSV: the numbers, ';'-separated (repr: exact round trip)."""
    return ";".join(map(repr, samples.tolist()))


def _commit_order(df: pd.DataFrame) -> dict:
    """commit -> its position in history (0 = oldest, by date of its first result)."""
    first = df.sort_values("date", kind="stable").drop_duplicates("commit")
    return {c: i for i, c in enumerate(first["commit"].astype(object))}


def by_commit(g: pd.DataFrame, order: dict) -> pd.DataFrame:
    """``g`` in history order with its commit's position as column ``x`` (the plots'
    axis; the commit column may be a Categorical, whose own order is by hash)."""
    x = g["commit"].astype(object).map(order).astype("int64")
    return g.assign(x=x.to_numpy()).sort_values("x", kind="stable")


def _series_label(label: str, machine, machines: int) -> str:
    return f"{label} [{machine}]" if machines > 1 else label


def plot_errors(df: pd.DataFrame, path: Path) -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    acc = df[(df["status"] == "ok") & df["benchmark"].str.endswith("TrackAccuracy.track_o_max_abs")]
    if acc.empty:
        return False
    order = _commit_order(df)
    dtypes = [d for d in ("fp32", "tf32", "fp16", "bf16") if d in set(acc["dtype"])]
    fig, axes = plt.subplots(1, len(dtypes), figsize=(4.2 * len(dtypes), 3.6), squeeze=False)
    for ax, dtype in zip(axes[0], dtypes, strict=True):
        sub = acc[(acc["dtype"] == dtype) & acc["causal"].eq(False)]
        for (machine, kernel), g in sub.groupby(["machine", "kernel"], observed=True):
            g = by_commit(g, order)
            ax.plot(g["x"], g["value"], marker="o",
                    label=_series_label(kernel, machine, acc["machine"].nunique()))
        ax.set_yscale("log")
        ax.set_title(f"{dtype}, non-causal")
        ax.set_xlabel("commit (oldest = 0)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("max |O - O_fp64| (unitless)")
    axes[0][-1].legend(fontsize=8)
    fig.suptitle("Accuracy over history (B=1, H=2, N=1024, d=64, N(0,1) inputs)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot_tflops(points: pd.DataFrame, df: pd.DataFrame, path: Path) -> bool:
    """TFLOP/s over commits: one panel per backend, one line per dtype x shape x causal."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if points.empty:
        return False
    order = _commit_order(df)
    backends = sorted(points["backend"].unique())
    cols = min(3, len(backends))
    rows = -(-len(backends) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.0 * cols, 4.2 * rows), squeeze=False)
    for ax, backend in zip(axes.flat, backends, strict=False):
        sub = points[points["backend"] == backend]
        for (machine, dtype, shape, causal), g in sub.groupby(
                ["machine", "dtype", "shape", "causal"], observed=True):
            g = by_commit(g, order)
            label = f"{dtype} {shape.replace(' Nk=', '/')}{' causal' if causal else ''}"
            ax.plot(g["x"], g["tflops"], marker=".", linestyle="--" if causal else "-",
                    label=_series_label(label, machine, points["machine"].nunique()))
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


def build_report(results_dir, out) -> str:
    """Load ``results_dir``, write CSVs, plots and report.md into ``out``; return the report."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    df = load_results(results_dir)
    points = throughput_points(df)
    bands, trend, jumps = error_bands(df), throughput(df, points), steps(df)
    df.assign(samples=df["samples"].map(_joined, na_action="ignore")).to_csv(
        out / "results.csv", index=False)
    bands.to_csv(out / "error_bands.csv", index=False)
    trend.to_csv(out / "throughput.csv", index=False)
    jumps.to_csv(out / "steps.csv", index=False)
    plots = [name for name, made in (
        ("errors.png", plot_errors(df, out / "errors.png")),
        ("tflops.png", plot_tflops(points, df, out / "tflops.png"))) if made]

    counts = {k: v for k, v in df["status"].value_counts().items() if v}
    lines = [f"# flashbench history of `{results_dir}`", "",
             f"{df['file'].nunique()} results files, {df['commit'].nunique()} commits, "
             f"machines: {', '.join(sorted(df['machine'].unique())) or 'none'}; "
             f"{len(df)} results: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))]
    for what, why in df.attrs["skipped_files"]:  # a file, or "file: benchmark"
        lines.append(f"- skipped `{what}`: {why}")
    main = bands[bands["metric"] == "o_max_abs"] if not bands.empty else bands
    lines += ["", "## Accuracy bands (max |O - O_fp64|, unitless, over all recorded commits)",
              "", "inside: the latest value lies within [band_lo, band_hi] of the earlier "
              "commits. o_ratio / lse_ratio: kernel error / same-dtype standard_model error "
              "(baseline rule passes at <= 2). All metrics: error_bands.csv.", "",
              _table(main.drop(columns=["metric", "params", "unit"], errors="ignore")),
              "", "## Throughput (TFLOP/s = 4·B·H·N²·d / recorded seconds; causal counts only "
              "visible pairs)", "",
              "latest_pct_peak: % of the same run's measured bf16 matmul TFLOP/s (GPU runs "
              "only). CPU rows time the float64 reference and torch on the CPU.", "",
              _table(trend),
              "", "## Steps (level changes beyond noise, asv step detection, >= 1%)", "",
              "before / after in each benchmark's unit.", "",
              _table(jumps.assign(date=jumps["date"].astype(str).str[:10]) if not jumps.empty
                     else jumps),
              "", "Files: results.csv, error_bands.csv, throughput.csv, steps.csv"
              + "".join(f", {p}" for p in plots) + f" in `{out}`."]
    text = "\n".join(lines) + "\n"
    (out / "report.md").write_text(text)
    return text
