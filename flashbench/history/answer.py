"""The history report's opening answer and its narrow tables.

:func:`answer` is the first section of report.md: the newest commit per machine, which
accuracy tracks lie outside their band (counted and listed), the steps found (counted, by
commit and suite), failed results. :func:`narrow` renders a summary table a page can
show: each (machine, cpu) as a short label (M1, M2, ... with a legend), long parameter
texts folded into labels (p1, p2, ... with a legend), a table per set of parameters the
rows have (so no cell stands for a parameter a suite does not have) and empty cells,
never "nan", for values not recorded. More: docs/history.md ("report.md").
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from tabulate import tabulate

from flashbench.history.markdown import escaped
from flashbench.history.steps import flagged
from flashbench.history.summaries import identities, parse_params

FAR_PCT = 1.0  # outside its band by more than this (%): counted apart, listed first
HOST_WHY = "host changed"  # why: the machine's host (os, ram) differs between its runs
FOLD = 60  # parameter texts longer than this (characters) are folded into a label

# the parameters the accuracy tables show as columns (the others: "other")
SHOWN = ("machine", "cpu", "kernel", "dtype", "causal", "shape", "dist", "variant")


def compact(label):
    """asv's parameter text in few characters: text values bare, others as name=value
    ("kernel='triton', N=256, causal=True" -> "triton N=256 causal=True"); anything
    that is not asv's spelling of literal values, unchanged."""
    values = parse_params(label)
    if not values:
        return label
    return " ".join(v if isinstance(v, str) else f"{k}={v}" for k, v in values.items())


def machine_labels(df: pd.DataFrame) -> dict:
    """(machine, cpu) -> "M1", "M2", ... in the order of :func:`identities`."""
    ids = identities(df)
    return {(m, c if isinstance(c, str) else None): f"M{i + 1}"
            for i, (m, c) in enumerate(zip(ids["machine"], ids["cpu"], strict=True))}


def machine_legend(labels: dict) -> list[str]:
    return [f"- {label}: `{m}`" + (f" ({c})" if c else "") for (m, c), label in labels.items()]


def _with_machine(table: pd.DataFrame, labels: dict) -> pd.DataFrame:
    if "machine" not in table:
        return table
    cpu = table["cpu"] if "cpu" in table else pd.Series(None, index=table.index)
    key = [(m, c if isinstance(c, str) else None) for m, c in zip(table["machine"], cpu,
                                                                  strict=True)]
    out = table.drop(columns=[c for c in ("machine", "cpu") if c in table])
    out.insert(0, "machine", [labels.get(k, k[0]) for k in key])
    return out


def _holds(v) -> bool:
    return v != "" if isinstance(v, str) else not pd.isna(v)


def _fold(table: pd.DataFrame, columns, legend: dict) -> pd.DataFrame:
    """Texts of ``columns`` longer than :data:`FOLD` replaced by p1, p2, ... (``legend``:
    text -> label, shared by every table of a section)."""
    table = table.copy()
    for c in columns:
        if c not in table:
            continue
        long = [v for v in table[c] if isinstance(v, str) and len(v) > FOLD]
        for v in dict.fromkeys(long):
            legend.setdefault(v, f"p{len(legend) + 1}")
        table[c] = [legend.get(v, v) if isinstance(v, str) else v for v in table[c]]
    return table


def _render(table: pd.DataFrame, floatfmt: str) -> str:
    """GitHub Markdown; a value not recorded (NaN, None, NA) is an empty cell."""
    cells = escaped(table.astype(object).where(table.notna(), None))
    return tabulate(cells, headers="keys", tablefmt="github", showindex=False,
                    floatfmt=floatfmt, missingval="")


def narrow(table: pd.DataFrame, labels: dict, optional=(), fold=(), legend: dict | None = None,
           floatfmt: str = ".3g") -> list[str]:
    """``table`` as Markdown lines: machines as labels, ``fold`` columns folded (into
    ``legend``), one table per set of ``optional`` columns the rows hold (each without the
    others, and without a column no row of it holds), empty cells for values not
    recorded."""
    if table.empty:
        return ["_none recorded_"]
    table = _fold(_with_machine(table, labels), fold, {} if legend is None else legend)
    present = [c for c in optional if c in table]
    if not present:
        return [_render(table, floatfmt)]
    held = table[present].map(_holds)
    pattern = held.apply(lambda r: tuple(c for c in present if r[c]), axis=1)
    lines: list[str] = []
    for has in dict.fromkeys(pattern):
        part = table[(pattern == has).to_numpy()].drop(columns=[c for c in present
                                                                if c not in has])
        part = part.loc[:, part.notna().any().to_numpy()]  # no column empty in every row
        if len(dict.fromkeys(pattern)) > 1:
            lines += [f"Rows with {', '.join(has) or 'none of ' + ', '.join(present)}:", ""]
        lines += [_render(part, floatfmt), ""]
    return lines[:-1]


def fold_legend(legend: dict) -> list[str]:
    return [f"- {label}: `{text}`" for text, label in legend.items()]


def _newest(df: pd.DataFrame, labels: dict) -> str:
    first = df.sort_values("date", kind="stable").drop_duplicates(["machine", "cpu", "commit"]
                                                                  if "cpu" in df else
                                                                  ["machine", "commit"])
    parts = []
    cpus = (first["cpu"].astype(object).map(lambda x: x if isinstance(x, str) else "")
            if "cpu" in first else pd.Series("", index=first.index))
    for (m, c), label in labels.items():  # c None: no cpu recorded ("== None" is never True)
        mine = first[(first["machine"].astype(object) == m) & (cpus == (c or ""))]
        if len(mine):
            row = mine.iloc[-1]
            parts.append(f"{label} `{str(row['commit'])[:8]}` ({row['date']:%Y-%m-%d})")
    return ", ".join(parts)


def other_params(label, named=SHOWN) -> str | None:
    """The parameters of ``label`` no column shows (``N=256 stat='p50'``): without them
    rows of one suite read alike."""
    values = parse_params(label) or {}
    return " ".join(f"{k}={v!r}" for k, v in values.items() if k not in named) or None


def answer(df: pd.DataFrame, bands: pd.DataFrame, jumps: pd.DataFrame,
           labels: dict, listed: int = 12, trend: pd.DataFrame | None = None,
           host=None) -> list[str]:
    """The report's first section: what changed, what lies outside its band (counted and
    which), which steps were found, the timings whose latest point ran at under half their
    best (``trend``: :func:`~flashbench.history.summaries.throughput`), which results
    failed. ``host``: a results file's host (files.host_reader), for the rows whose
    machine changed host between its last two runs."""
    lines = ["## The answer", "", f"- Newest commit per machine: {_newest(df, labels)}."]
    judged = bands[bands["inside"].notna()] if not bands.empty else bands
    out = judged[judged["inside"].eq(False)] if not judged.empty else judged
    if len(out):  # past 1% first (worse, then better), then the rest; the farthest first
        out = out.assign(change_pct=100 * (out["latest"] / out["band_hi"].where(
            out["latest"] > out["band_hi"], out["band_lo"]) - 1))
        far = out["change_pct"].abs().fillna(np.inf)
        why = [y or e for y, e in zip(_yardstick(out, bands),
                                      _elsewhere(out, df, labels, host), strict=True)]
        out = out.assign(_far=far, _small=far <= FAR_PCT, _better=out["change_pct"] < 0,
                         why=why).sort_values(
            ["_small", "_better", "_far"], ascending=[True, True, False], kind="stable")
        big = int((far > FAR_PCT).sum())
        worse = int((~out["_better"]).sum())
        moved = int(out["why"].eq("yardstick").sum())
        seen = int(out["why"].astype(object).str.startswith("seen on").fillna(False).sum())
        hosts = int(out["why"].eq(HOST_WHY).sum())
    lines.append(f"- Outside its band: **{len(out)} of {len(judged)}** accuracy tracks "
                 "(latest value outside [band_lo, band_hi], the range of the earlier "
                 "commits' values; tracks with one commit are not judged)"
                 + (f": **{worse}** with more error than ever before (or no number), "
                    f"{len(out) - worse} with less; **{big}** of them by more than "
                    f"{FAR_PCT:g}%"
                    + (f"; {moved} of them a ratio whose kernel's own max error stayed in its "
                       "band (why: yardstick: the model it is divided by moved)" if moved
                       else "")
                    + (f"; {seen} of them a value another machine changed to first, at a "
                       "commit this machine did not run (why: seen on that machine since that "
                       "commit: a change between this machine's runs, not its newest commit's)"
                       if seen else "")
                    + (f"; {hosts} of them on a machine whose host (os, ram) changed between "
                       f"its last two runs (why: {HOST_WHY}: the new host's numbers, perhaps, "
                       "not the code's)" if hosts else "")
                    + ". Listed those past it first, worse before better, the farthest first "
                    "(change_pct: the latest value against the band edge it passed, in %; "
                    "positive is more error):"
                    if len(out) else "."))
    if len(out):
        shown = out.assign(band=[f"[{lo:.4g}, {hi:.4g}]" for lo, hi in
                                 zip(out["band_lo"], out["band_hi"], strict=True)],
                           other=[other_params(p) for p in out.get("params", [""] * len(out))])
        cols = [c for c in (*SHOWN, "other", "metric", "band", "latest", "change_pct",
                            "why", "latest_status", "latest_commit") if c in shown
                and (c != "latest_status" or shown[c].ne("ok").any())
                and (c not in ("other", "why") or shown[c].notna().any())]
        lines += ["", *narrow(shown[cols].head(listed), labels,
                              optional=("shape", "dist", "variant", "other"), floatfmt=".4g")]
        if len(out) > listed:
            lines.append(f"\n... and {len(out) - listed} more: error_bands.csv, rows with "
                         "inside False.")
        lines.append("")
    if jumps.empty:
        lines.append("- Steps found (asv step detection, level changes >= 1%): none.")
    else:
        per_commit = jumps["commit"].astype(object).str[:8].value_counts()
        suites = jumps["benchmark"].astype(object).str.rsplit(".", n=1).str[0]
        top = per_commit.index[0]
        at_top = suites[jumps["commit"].astype(object).str[:8] == top].value_counts()
        moved = flagged(jumps, "host_changed")
        at = jumps["commit"].astype(object).str[:8] == top
        hosts = (f"; {int(moved[at].sum())} of them across a change of host under one "
                 "machine name, marked + in the steps table" if moved[at].any() else "")
        lines.append(f"- Steps found (asv step detection, level changes >= 1%): "
                     f"**{len(jumps)}** at {len(per_commit)} commits; most at `{top}` "
                     f"({per_commit.iloc[0]}: "
                     + ", ".join(f"{s} {n}" for s, n in at_top.items()) + f"{hosts}). "
                     "Per suite: " + ", ".join(f"{s} {n}" for s, n in
                                               suites.value_counts().items()) + ".")
    lines += _past_rules(bands, labels)
    lines += _slow_latest(trend, labels)
    failed = df[df["status"] == "failed"]
    if len(failed):
        which = failed["benchmark"].astype(object).value_counts()
        commits = ", ".join(f"`{str(c)[:8]}`" for c in failed["commit"].astype(object).unique())
        lines.append(f"- Failed results: **{len(failed)}** ("
                     + ", ".join(f"{b} {n}" for b, n in which.head(4).items())
                     + f"{', ...' if len(which) > 4 else ''}) at {commits}.")
    else:
        lines.append("- Failed results: none.")
    return [*lines, "", "Machines:", *machine_legend(labels)]


def _past_rules(bands: pd.DataFrame, labels: dict, listed: int = 5) -> list[str]:
    """The answer's line on flashbench's kernels whose newest rule ratio is past its limit:
    "inside its band" is about the earlier commits, whose band may hold failing values (a
    newcomer: triton's softcap ratio of 2.013 against 2 read "inside True")."""
    from flashbench.history.suites import rule_limit

    if bands.empty:
        return []
    limit = bands["metric"].astype(object).map(lambda m: rule_limit(str(m)))
    past = bands[limit.notna().to_numpy() & bands["role"].isna().to_numpy()
                 & (bands["latest"].to_numpy(float) > limit.fillna(np.inf).to_numpy(float))]
    if past.empty:
        return ["- Rules at the newest commit: no kernel of flashbench's past a rule's limit."]
    def text(x) -> str:
        return x if isinstance(x, str) else ""

    named = "; ".join(" ".join(x for x in (
        labels.get((r.machine, r.cpu if isinstance(r.cpu, str) else None), r.machine),
        text(r.kernel), text(r.dtype), r.metric) if x)  # a reference row has no kernel
        + f" {r.latest:.4g} (limit {rule_limit(r.metric):g}) at `{r.latest_commit}`"
        for r in past.sort_values("latest", ascending=False).head(listed).itertuples())
    return [f"- Rules at the newest commit: **{len(past)}** ratio(s) of flashbench's kernels "
            f"past their limit (a band may hold failing values: inside it is no pass): "
            f"{named}" + (f"; ... and {len(past) - listed} more (error_bands.csv)"
                          if len(past) > listed else "") + "."]


SLOW_LATEST = 0.5  # a timing whose latest TFLOP/s is under this share of its best: named


def _slow_latest(trend: pd.DataFrame | None, labels: dict, listed: int = 5) -> list[str]:
    """The answer's line on timings whose newest point ran at under half their best: a
    single last point is no step (asv's detection needs more), and a 9x drop was said only
    deep in the throughput table (a fresh-eyes probe, 2026-12-07)."""
    if trend is None or trend.empty:
        return []
    slow = trend[(trend["commits"] > 1) & (trend["latest"] < SLOW_LATEST * trend["best"])]
    if slow.empty:
        return [f"- Throughput: no timing's latest point under {SLOW_LATEST:.0%} of its best "
                "TFLOP/s."]
    slow = slow.assign(_r=slow["latest"] / slow["best"]).sort_values("_r", kind="stable")
    named = "; ".join(
        f"{labels.get((r.machine, r.cpu if isinstance(r.cpu, str) else None), r.machine)} "
        f"{r.backend} {r.dtype} {r.shape}{' causal' if r.causal else ''} {r.direction}"
        f"{f' {r.variant}' if isinstance(r.variant, str) and r.variant else ''}: "
        f"{r.latest:.3g} against a best of {r.best:.3g} TFLOP/s at `{r.latest_commit}`"
        for r in slow.head(listed).itertuples())
    return [f"- Throughput: **{len(slow)}** timing(s) whose latest point ran at under "
            f"{SLOW_LATEST:.0%} of their best TFLOP/s (one point is no step: a slowdown, or "
            f"a loaded run; rerun to tell): {named}"
            + (f"; ... and {len(slow) - listed} more (throughput.csv)" if len(slow) > listed
               else "") + "."]


def _elsewhere(out: pd.DataFrame, df: pd.DataFrame, labels: dict, host=None) -> list:
    """Per row of ``out``: "seen on M2 since `bb4e146e`" where another machine changed to the
    latest value (within 0.1%; it read another at its last run up to this machine's run
    before the latest) first, at a commit this machine did not run, after that run and no
    later than the latest: the change came between this machine's runs (a newcomer's report
    opened with "+71% more error" at M3's newest commit, a change M2 had read, inside its
    band, three commits earlier); else :data:`HOST_WHY` where ``host`` reads two hosts in
    the files of this machine's last two runs (a probe: 59 rows at M3's change of host said
    nothing); else None. Vectorised (merges, no loop over rows): the report's summaries
    stay fast at 3M rows."""
    from flashbench.history.suites import accuracy_metric
    from flashbench.history.summaries import name_labels, names, with_identity

    found: list = [None] * len(out)
    if not len(out) or "params" not in df:
        return found
    every = with_identity(df)
    every = every.loc[every["params"].isin(set(out["params"])).to_numpy()
                      & (every["status"] == "ok").to_numpy(),
                      ["machine", "cpu", "commit", "date", "benchmark", "params", "value",
                       *(["file"] if "file" in df else [])]]
    hits = {b: accuracy_metric(b) for b in names(every["benchmark"]) if isinstance(b, str)}
    # every key as an integer code (categories, as load_results gives them): merging on the
    # texts took 7-10 s at 2.2M rows
    cols = {c: _categories(every[c]) for c in ("machine", "cpu", "commit", "params", "file")
            if c in every}
    cols["metric"] = _categories(pd.Series(name_labels(every["benchmark"], hits)))
    codes = pd.DataFrame({c: v.cat.codes.to_numpy() for c, v in cols.items()})
    codes = codes.assign(date=every["date"].to_numpy("datetime64[ns]"),  # tz-aware: objects
                         value=every["value"].to_numpy(float))

    def code(c, values):
        return pd.Categorical(pd.Series(values, dtype=object).fillna(""),
                              categories=cols[c].cat.categories).codes

    keys = ["machine", "cpu", "metric", "params"]
    want = pd.DataFrame({"row": range(len(out)), **{c: code(c, out[c]) for c in keys},
                         "latest": out["latest"].to_numpy(float)})
    want = want[(want[keys] >= 0).all(axis=1).to_numpy()]  # -1: a key no result holds
    mine = want.merge(codes, on=keys).sort_values("date", kind="stable")  # its own runs
    back = mine.groupby("row").cumcount(ascending=False).to_numpy()  # 0: the newest
    ends = ["row", "date", *(["file"] if "file" in mine else [])]
    span = mine.loc[back == 1, ends].rename(columns={"date": "prev", "file": "prev_file"}).merge(
        mine.loc[back == 0, ends].rename(columns={"date": "newest", "file": "new_file"}),
        on="row")
    if span.empty:
        return found
    moved = []  # rows whose machine's host differs between its last two (ok) runs
    if host is not None and "prev_file" in span:
        files, ok = cols["file"].cat.categories, out["latest_status"].astype(object).to_numpy()
        for r in span.itertuples():  # a newest result that failed is no run of a new host
            was, now = host(str(files[r.prev_file])), host(str(files[r.new_file]))
            if ok[r.row] == "ok" and was is not None and now is not None and was != now:
                moved.append(r.row)
        span = span.drop(columns=["prev_file", "new_file"])
    pairs = want.merge(span, on="row").merge(codes, on=["metric", "params"],
                                             suffixes=("", "_o"))
    pairs = pairs[((pairs["machine_o"] != pairs["machine"])
                   | (pairs["cpu_o"] != pairs["cpu"])).to_numpy()]
    pairs = pairs.assign(close=np.isclose(pairs["value"].to_numpy(float),
                                          pairs["latest"].to_numpy(float), rtol=1e-3, atol=0.0))
    # the other machine read something else at its last run up to this machine's previous
    # one: a machine that read the value all along (another host's numbers) showed no
    # change (a probe: "seen on M3 since" a commit inside the window, M3 at it since 11-30)
    other = ["row", "machine_o", "cpu_o"]
    before = pairs[(pairs["date"] <= pairs["prev"]).to_numpy()].sort_values(
        "date", kind="stable").drop_duplicates(other, keep="last")
    changed = before.loc[~before["close"].to_numpy(), other]
    keep = (pairs["date"] > pairs["prev"]) & (pairs["date"] <= pairs["newest"]) & pairs["close"]
    near = pairs[keep.to_numpy()].merge(changed, on=other).merge(
        mine[["row", "commit"]].drop_duplicates(), on=["row", "commit"], how="left",
        indicator=True)
    confirmed = set(near["row"])  # another machine changed to it too: not the host's alone
    for row in moved:  # (a review: b's same move on an unchanged host read "host changed")
        found[row] = None if row in confirmed else HOST_WHY
    first = near[near["_merge"].eq("left_only").to_numpy()].sort_values(  # never a commit
        "date", kind="stable").drop_duplicates("row")  # this machine ran (an anti-join)
    name = {c: cols[c].cat.categories for c in ("machine", "cpu", "commit")}
    for r in first.itertuples():
        machine, cpu = name["machine"][r.machine_o], name["cpu"][r.cpu_o]
        label = labels.get((machine, cpu or None), machine)
        found[r.row] = f"seen on {label} since `{str(name['commit'][r.commit])[:8]}`"
    return found


def _categories(column: pd.Series) -> pd.Series:
    """``column`` as a Categorical whose missing values are "" (no cpu recorded: None ==
    None is never True in pandas), without an object per row where it is one already."""
    if not isinstance(column.dtype, pd.CategoricalDtype):
        column = column.astype(object).astype("category")
    if column.isna().any():
        if "" not in column.cat.categories:
            column = column.cat.add_categories([""])
        column = column.fillna("")
    return column


def _yardstick(out: pd.DataFrame, bands: pd.DataFrame) -> list:
    """Per row of ``out``: "yardstick" where it is a ratio (``<tensor>_baseline_ratio``,
    ``_band_ratio``) whose kernel's own ``<tensor>_max_abs`` track, same machine and
    parameters, lies inside its band: the ratio moved with what it is divided by (a probe,
    2026-12-07: four kernels' unchanged errors read -42.5% after the standard decode
    model's summation order changed on purpose), else None."""
    def key(m, c, p, t):
        return m, c if isinstance(c, str) else None, p, str(t).split("_", 1)[0]

    own = bands[bands["metric"].astype(str).str.endswith("_max_abs")] if len(bands) else bands
    inside = {key(m, c, p, t) for m, c, p, t, ok in zip(
        own.get("machine", []), own.get("cpu", []), own.get("params", []),
        own.get("metric", []), own.get("inside", []), strict=True) if ok is True}
    return [("yardstick" if str(t).endswith(("_baseline_ratio", "_band_ratio"))
             and key(m, c, p, t) in inside else None)
            for m, c, p, t in zip(out["machine"], out["cpu"], out["params"], out["metric"],
                                  strict=True)]
