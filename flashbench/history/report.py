"""``flashbench history``: the tidy frame, its summaries, a Markdown report and plots.

:func:`build_report` writes into its ``out`` folder: ``results.csv`` (the tidy
frame), ``error_bands.csv``, ``throughput.csv``, ``steps.csv``, ``report.md``, the
plots ``errors.png`` and ``tflops.png`` (:mod:`flashbench.history.plots`), and a
marker file, :data:`MARKER`. It writes only into a new or empty folder, or one
holding that marker (a previous report); anything else is refused (ValueError)
unless ``force``, so a user's own ``report.md`` or ``results.csv`` is never
overwritten by surprise.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from tabulate import tabulate

from flashbench.history.answer import (
    answer,
    compact,
    fold_legend,
    machine_labels,
    narrow,
    other_params,
)
from flashbench.history.bands import band_history, widened_markdown
from flashbench.history.files import host_reader, read_benchmarks
from flashbench.history.load import folders, load_results
from flashbench.history.markdown import escaped
from flashbench.history.plots import (
    commit_order,
    loaded_runs,
    plot_bands,
    plot_errors,
    plot_rule_ratios,
    plot_tflops,
)
from flashbench.history.steps import current_code, declared_versions, flagged, steps
from flashbench.history.suites import MAIN_METRIC
from flashbench.history.summaries import (
    error_bands,
    identities,
    peaks,
    throughput,
    throughput_points,
)

MARKER = ".flashbench-history"
FASTER_THAN = 2.0  # x a run's measured matmul peak: `flashbench speed`'s floor margin
NO_MACHINE = 5000.0  # TFLOP/s: past any machine's (an H200's dense fp8 peak: 1,979)


def check_out(out, force: bool = False) -> Path:
    """The report folder ``out``, if the report may write there (nothing is created).

    ValueError for an empty name, an existing file, or (unless ``force``) a folder
    that holds anything but a previous report (marked by :data:`MARKER`).
    """
    if out is None or not str(out).strip():
        raise ValueError(f"--out must name a folder for the report, got {out!r}")
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise ValueError(f"--out {str(path)!r} is a file, not a folder")
    if path.is_dir() and not force and not (path / MARKER).exists():
        held = sorted(p.name for p in path.iterdir())
        if held:
            raise ValueError(
                f"--out {str(path)!r} holds {len(held)} "
                f"{'entry' if len(held) == 1 else 'entries'} that are not a flashbench "
                f"history report (e.g. {held[0]!r}); name a new or empty folder, or pass "
                f"--force to write into it (force=True from Python)")
    parent = path if path.is_dir() else path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"--out {str(path)!r}: cannot write the report there "
                         f"({str(parent)!r} is not a writable folder)")
    return path


def _table(df: pd.DataFrame, floatfmt=".3g") -> str:
    if df.empty:
        return "_none recorded_"
    return tabulate(escaped(df), headers="keys", tablefmt="github", showindex=False,
                    floatfmt=floatfmt)


def _without_empty(df: pd.DataFrame, columns) -> pd.DataFrame:
    """``df`` without those of ``columns`` that hold nothing (NaN, None or "")."""
    def holds(v) -> bool:
        return v != "" if isinstance(v, str) else not pd.isna(v)

    empty = [c for c in columns if c in df and not any(map(holds, df[c].astype(object)))]
    return df.drop(columns=empty)


def _joined(samples) -> str:
    """A row's samples for the CSV: the numbers, ';'-separated (repr: exact round trip)."""
    return ";".join(map(repr, np.asarray(samples, dtype=float).tolist()))


def _machines(df: pd.DataFrame) -> list[str]:
    """The machines line of the report, and a line per machine name that holds the
    results of more than one processor."""
    ids = identities(df)
    named = ", ".join(f"{m}" + (f" (cpu: {c})" if isinstance(c, str) else "")
                      for m, c in zip(ids["machine"], ids["cpu"], strict=True))
    lines = [f"machines: {named or 'none'}"]
    for machine, g in ids[ids["shared"]].groupby("machine"):
        cpus = "; ".join(str(c) if isinstance(c, str) else "cpu not recorded"
                         for c in g["cpu"])
        lines.append(f"- machine name `{machine}` holds results of {len(g)} processors "
                     f"({cpus}): every summary keeps them apart (column cpu)")
    return lines


def _loaded_note(points: pd.DataFrame, df: pd.DataFrame, labels: dict) -> list[str]:
    """The runs slower across the board (:func:`~flashbench.history.plots.loaded_runs`),
    named beside the throughput table: a latest value from one read -88 % with no note."""
    if points.empty:
        return []
    order = commit_order(df)
    at = {x: c for c, x in order.items()}
    loaded = loaded_runs(points, order)
    if not loaded:
        return []
    runs = "; ".join(f"{labels.get(key, key[0])} at "
                     + ", ".join(f"`{str(at[x])[:8]}`" for x in xs)
                     for key, xs in loaded.items())
    return ["", f"**Runs slower across the board** (median TFLOP/s under 75% of each series' "
            f"usual: a loaded machine, not the code; red bands in tflops.png): {runs}. A "
            "latest value from such a run, and its change_pct, read that load."]


def peak_tables(points: pd.DataFrame, df: pd.DataFrame) -> list[str]:
    """Per machine with a measured matmul peak (the GPU suites record one): a table of
    every timing per commit, "TFLOP/s (% of the same run's peak)", commits as columns in
    history order (short hash)."""
    if points.empty or not points["pct_peak"].notna().any():
        return []
    order, measured = commit_order(df), peaks(df).astype({"machine": object})
    lines = []
    timed = points[points["pct_peak"].notna()].astype({"machine": object, "cpu": object})
    for (machine, cpu), g in timed.groupby(["machine", "cpu"], dropna=False, sort=True):
        g = g.assign(x=g["commit"].astype(object).map(order),
                     cell=[f"{t:.3g} ({p:.0f}%)" for t, p in zip(g["tflops"], g["pct_peak"],
                                                                   strict=True)])
        g["commit_"] = g["commit"].astype(object).str[:7]
        rows = ["backend", "dtype", "shape", "causal", "direction", "variant"]
        wide = g.sort_values("x").pivot_table(index=rows, columns="commit_", values="cell",
                                              aggfunc="last", sort=False)
        wide = wide[list(dict.fromkeys(g.sort_values("x")["commit_"]))].reset_index()
        where = f"`{machine}`" + (f" ({cpu})" if isinstance(cpu, str) else "")
        lines += ["", f"### {where}: TFLOP/s (% of the same run's matmul peak in the row's "
                  f"dtype{_of_another(g, measured)}) per commit", "",
                  _table(_without_empty(wide, ["variant"]))]
    return ["", "## Throughput per commit where a matmul peak was measured", *lines]


def _of_another(g: pd.DataFrame, measured: pd.DataFrame) -> str:
    """Where some rows' % is of another dtype's matmul, their run timing none of theirs:
    which, and of which (fp8 of bf16's; speed's is of torch._scaled_mm's, about 2x: said, a
    probe 2026-12-07), run by run."""
    run = [c for c in measured.columns if c not in ("dtype", "peak_tflops")]
    keys = g[[*run, "dtype"]].astype(object)
    have = keys.merge(measured.astype({c: object for c in run}), on=[*run, "dtype"],
                      how="left")["peak_tflops"].notna().to_numpy()
    other = keys[~have]
    if other.empty:
        return ""
    measured = measured.dropna(subset=["peak_tflops"])
    fastest = measured.loc[measured.groupby(run, dropna=False)["peak_tflops"].idxmax()]
    used = other.drop(columns="dtype").merge(fastest.astype({c: object for c in run}),
                                             on=run, how="left")["dtype"].dropna()
    lost = ", ".join(sorted(set(other["dtype"].dropna())))
    return (f"; {lost}: of the run's fastest measured matmul ({', '.join(sorted(set(used)))}),"
            f" none of {lost} timed in it")


def build_report(results_dir, out, force: bool = False) -> str:
    """Load ``results_dir`` (a results folder or a list of them), write CSVs, plots and
    report.md into ``out`` (see the module docstring); return the report.

    ValueError: ``out`` refused (:func:`check_out`), a results folder missing, or no
    result with a measured value in them ("no results in FOLDER"; "no measured result in
    FOLDER: N results, all failed" where they are there, none measured).
    """
    out = check_out(out, force)
    roots = folders(results_dir)
    where = ", ".join(str(r) for r in roots)
    df = load_results(roots if len(roots) > 1 else roots[0])
    if not (df["status"] == "ok").any():
        machine = [r for r in roots if (Path(r) / "machine.json").is_file()
                   and not (Path(r) / "benchmarks.json").is_file()]
        if len(df):  # there, none measured (a red team, 2026-12-08: "no results" was false)
            counts = df["status"].value_counts()
            raise ValueError(f"no measured result in {where}: {len(df)} results, " + (
                "all failed" if counts.get("failed", 0) == len(df) else "none measured (" +
                ", ".join(f"{n} {s}" for s, n in counts.items() if n) + ")"))
        raise ValueError(f"no results in {where}" + (
            f": {machine[0]} is one machine's folder (machine.json): give the results folder "
            "above it, which holds benchmarks.json" if machine else ""))
    files = [Path(str(f)) for f in df["file"].astype(object).unique()]
    # a folder that gave nothing is said, not only named in the title (one folder: it
    # gave the results above; its files' paths are relative to it, not under it)
    said = {what for what, _ in df.attrs["skipped_files"]}  # its files read from another
    for root in roots if len(roots) > 1 else ():
        if str(root) not in said and not any(f.is_relative_to(root) for f in files):
            df.attrs["skipped_files"].append((str(root), "no asv results in it (a results "
                                              "folder holds MACHINE/COMMIT-ENV.json files)"))
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / MARKER).write_text("A report written by `flashbench history`; the next one "
                                  "may overwrite the files it wrote here.\n")
        stage = Path(tempfile.mkdtemp(dir=out, prefix=".staging-"))
    except OSError as exc:
        raise ValueError(f"--out {str(out)!r}: cannot write the report there: {exc}") from None
    try:
        with warnings.catch_warnings():  # an unreadable benchmarks.json: said by the load
            warnings.simplefilter("ignore")
            declared = declared_versions(df, [read_benchmarks(Path(r)) for r in roots], roots)
        text = _write_report(df, where, out, stage, host_reader(roots), declared)
        for f in sorted(stage.iterdir(), key=lambda f: f.name == "report.md"):
            os.replace(f, out / f.name)  # each file whole; report.md, which names them, last
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return text


def _steps(jumps: pd.DataFrame, labels: dict, folded: dict) -> list[str]:
    """The steps table: short commit and date, the one environment said once."""
    if jumps.empty:
        return ["_none recorded_"]
    envs = jumps["env"].dropna().astype(object).unique() if "env" in jumps else []
    table = jumps.assign(params=jumps["params"].map(compact),
                         commit=jumps["commit"].astype(object).str[:8],
                         date=jumps["date"].astype(str).str[:10])
    head = []
    if len(envs) == 1:
        table = table.drop(columns=["env"])
        head = [f"Environment of every step: `{envs[0]}`.", ""]
    changed, moved = flagged(table, "code_changed"), flagged(table, "host_changed")
    table = table.drop(columns=["code_changed", "host_changed"], errors="ignore")
    if changed.any():  # where the benchmark itself changed (asv's version), said per row
        table["commit"] = table["commit"] + np.where(changed, "*", "")
        head += [f"{int(changed.sum())} step(s) fall where the benchmark's own code changed "
                 "(asv's version differs across it; asv starts a new series there), their "
                 "commit marked *: the step may be the benchmark's, not the kernel's.", ""]
    if moved.any():  # where the results before and after came from two hosts
        table["commit"] = table["commit"] + np.where(moved, "+", "")
        head += [f"{int(moved.sum())} step(s) fall where the results before and after came "
                 "from two hosts under one machine name (their os or ram differ: another "
                 "BLAS may sum in another order), their commit marked +: the step may be "
                 "the host's, not the code's.", ""]
    return [*head, *narrow(table.drop(columns=["unit"], errors="ignore"), labels,
                           fold=("params", "env"), legend=folded)]


def _possible(points: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """``points`` less those past :data:`FASTER_THAN` x their run's measured matmul peak
    (speed's floor fails them), or past :data:`NO_MACHINE` TFLOP/s where it measured none,
    and a note on each: 1e-9 s read 6.9e7 TFLOP/s, +1.4e11%, unsaid (a red team)."""
    pct, tflops = points["pct_peak"].to_numpy(float), points["tflops"].to_numpy(float)
    # fp8's % is of a 16-bit matmul where no fp8 one was timed (fp8's is ~2x): 2x more room
    margin = np.where(points["dtype"].astype(str).str.startswith("fp8"), 2, 1) * FASTER_THAN
    fast = np.where(np.isnan(pct), tflops > NO_MACHINE, pct > 100 * margin)
    notes = [f"{r.machine} {str(r.commit)[:8]}: {r.benchmark}({r.params}) left out of the "
             f"throughput: {r.value:.3g} s a call is {r.tflops:.3g} TFLOP/s, " + (
                 f"over {NO_MACHINE:,.0f} TFLOP/s (no machine's; the run measured no "
                 "matmul peak)" if np.isnan(r.pct_peak) else
                 f"{r.pct_peak / 100:.3g}x the same run's measured matmul peak (no kernel "
                 f"is faster than {FASTER_THAN:g}x it, an fp8 one 2x that)")
             for r in points[fast].itertuples()]
    return points[~fast], notes


def _write_report(df, where: str, out: Path, stage: Path, host=None, declared=None) -> str:
    """The report's files into ``stage`` (moved into ``out`` by the caller); its text.
    ``host``: a results file's host (:func:`~flashbench.history.files.host_reader`);
    ``declared``: per row, its benchmarks.json's version (steps.declared_versions)."""
    # the bands and trends read each benchmark's current code alone, as asv's graphs do
    # (steps.current_code); results.csv, the steps (code_changed) and the plots every row
    current = current_code(df, declared)
    now = df if current.all() else df[current]
    # the plots draw every result, an earlier code's faint and a series of its own
    marked = df if current.all() else df.assign(current=current)
    every, too_fast = _possible(throughput_points(marked))
    df.attrs["notes"] = [*df.attrs.get("notes", []), *too_fast]
    points = every if current.all() else every[every["current"].to_numpy(bool)]
    bands, trend, jumps = error_bands(now), throughput(now, points), steps(df, host=host)
    df.assign(samples=df["samples"].map(_joined, na_action="ignore")).to_csv(
        stage / "results.csv", index=False)
    bands.to_csv(stage / "error_bands.csv", index=False)
    trend.to_csv(stage / "throughput.csv", index=False)
    jumps.to_csv(stage / "steps.csv", index=False)
    band_rows = band_history(now)
    labels = machine_labels(df)
    plots = [name for name, made in (
        ("errors.png", plot_errors(marked, stage / "errors.png")),
        ("bands.png", plot_bands(band_rows, stage / "bands.png", machines=labels)),
        ("rules.png", plot_rule_ratios(marked, stage / "rules.png")),
        ("tflops.png", plot_tflops(every, df, stage / "tflops.png"))) if made]

    counts = {k: v for k, v in df["status"].value_counts().items() if v}
    machines = _machines(df)
    lines = [f"# flashbench history of `{where}`", "",
             f"{df['file'].nunique()} results files, {df['commit'].nunique()} commits, "
             f"{len(labels)} machine{'s' * (len(labels) != 1)}; {len(df)} results: "
             + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())), *machines[1:]]
    for what, why in df.attrs["skipped_files"]:  # a file, or "file: benchmark"
        lines.append(f"- {'' if why.startswith('missing:') else 'skipped '}`{what}`: {why}")
    notes = df.attrs.get("notes", [])  # values left out (inf, 0 or less, no number): a probe
    lines += [f"- {note}" for note in notes[:10]]  # read them on stderr alone
    if len(notes) > 10:
        lines.append(f"- ... and {len(notes) - 10} more such notes (flashbench's warnings on "
                     "stderr list every one)")
    if not current.all():
        older = df.loc[~current, "benchmark"].astype(object).nunique()
        lines.append(f"- {int((~current).sum())} results of {older} benchmark(s) were recorded "
                     "under other code than the benchmark's current (asv's version differs "
                     "from the one benchmarks.json declares, or without one from the newest "
                     "result's): the bands and trends leave them out, as asv's graphs do, and "
                     "the plots draw them faint, each code a line of its own; results.csv and "
                     "the steps (commit marked *) keep them")
    lines += ["", *answer(df, bands, jumps, labels, trend=trend, host=host)]
    main = bands[bands["metric"] == MAIN_METRIC] if not bands.empty else bands
    units = main["unit"].dropna().unique() if not main.empty else []
    unit = f"{units[0]}, unitless" if len(units) == 1 else MAIN_METRIC
    folded: dict = {}
    acc_cols = ["machine", "cpu", "kernel", "dtype", "causal", "shape", "dist", "variant",
                "other", "commits", "band_lo", "band_hi", "latest", "inside", "o_ratio",
                "lse_ratio", "o_band", "lse_band"]
    if not main.empty and "params" in main:  # a study's parameters (partials, lse_dtype, a
        # decode case) no column shows: without them its rows read as duplicates
        main = main.assign(other=[other_params(p) for p in main["params"]])
        # a study's rows named so (the decode merge study's, with no kernel, read as a
        # failing kernel under "baseline rule passes at <= 2": o_ratio 13.4)
        main = main.assign(kernel=np.where(main["role"] == "study", "(study)",
                                           main["kernel"].astype(object)))
    if "latest_commit" in trend:  # which commit "latest" is (a red team: the answer's
        # newest commit had no timing, and nothing said whose the latest were)
        trend = trend.assign(latest_commit=trend["latest_commit"].astype(object).str[:8])
    trend_cols = list(trend.columns)
    lines += ["", f"## Accuracy bands ({unit}, over the commits recorded under each "
              "benchmark's current code)",
              "", "inside: the latest value lies within [band_lo, band_hi] of the earlier "
              "commits. o_ratio / lse_ratio: kernel error / same-dtype standard_model error "
              "(baseline rule passes at <= 2); o_band / lse_band: the band rule's ratio "
              "(passes at <= 1; both over commits: rules.png); a (study) row is a study's "
              "measurement, not a kernel's verdict. Machines M1, ...: the "
              "answer's legend; p1, ...: the parameter legend below. All metrics, with "
              "p50 / p99 / max and the latest commit: error_bands.csv.", "",
              *narrow(_without_empty(main[[c for c in acc_cols if c in main]],
                                     ["o_ratio", "lse_ratio", "o_band", "lse_band"])
                      if not main.empty else main, labels,
                      optional=("shape", "dist", "variant", "other"),
                      fold=("variant", "other"),
                      legend=folded),
              *(["", "## Error bands per dtype x N x distribution (p50 / p99 / max over "
                 "seeds; bands.png)", "", widened_markdown(band_rows)]
                if not band_rows.empty else []),
              "", "## Throughput (TFLOP/s = FLOPs of the recorded shape / recorded seconds: asv's "
              "median of its samples)",
              "", "FLOPs = 2·B·H·Nq·Nk·(d + dv) for a forward pass (4·B·H·Nq·Nk·d where dv = d), "
              "counting only visible (query, "
              "key) pairs when causal; bwd 2.5x, fwd+bwd 3.5x. first / best / latest in "
              "TFLOP/s (of the benchmark's current code; latest_commit: whose), commits: "
              "how many recorded it, "
              "change_pct latest against first in %."
              + (" latest_pct_peak: % of the same run's measured matmul TFLOP/s in the "
                 "row's dtype, else of its fastest (an fp8 row's: a 16-bit one's where the "
                 "run timed no fp8 matmul)." if
                 "latest_pct_peak" in trend and trend["latest_pct_peak"].notna().any()
                 else "") + " variant: the timing's "
              "other parameters, and a window's pairs. Per point: throughput_points in "
              "flashbench.history.", *_loaded_note(points, df, labels), "",
              *narrow(_without_empty(trend[trend_cols].assign(variant=trend["variant"].map(compact))
                                     if "variant" in trend else trend[trend_cols],
                                     ["latest_pct_peak"])
                      if not trend.empty else trend, labels, optional=("variant",),
                      fold=("variant",), legend=folded),
              *peak_tables(points, df),
              "", "## Steps (level changes beyond noise, asv step detection, >= 1%)", "",
              "before / after / noise in each benchmark's unit (seconds for time_, bytes "
              "for peak memory, unitless errors and ratios for track_; the unit and the "
              "parameter names: steps.csv), change_pct in %.", "",
              *_steps(jumps, labels, folded),
              *(["", "Parameter legend:", *fold_legend(folded)] if folded else []),
              *[line for p in plots for line in ("", f"![{p}]({p})")],
              "", "Files: results.csv, error_bands.csv, throughput.csv, steps.csv"
              + "".join(f", {p}" for p in plots) + f" in `{out}`."]
    text = "\n".join(lines) + "\n"
    (stage / "report.md").write_text(text)
    return text
