"""``review --reuse``: judge stored asv results (results/ and earlier review runs).

Weaker evidence than same-run A/B, and labelled so: base and head come from separate
asv runs (other load, other clocks; separate runs scatter up to 1.5x on a 2-CPU
machine), with 3-5 samples each. A commit without results on this machine is
benchmarked first (:mod:`flashbench.review.asvrun`). Rules (:func:`compare_stored`,
pure on the loaded frame):

- one machine identity: rows of this machine name, and one processor (``cpu``) that
  both commits were measured on; two processors under one name are refused; results of
  another processor than this machine's are used only with a note in the header and in
  every row that says so;
- one pair of comparable environments (:mod:`flashbench.review.envs`), or the exact
  explanation of what differs and what to run;
- timings (time_, tracks in seconds): "slower"/"faster" when the ratio passes
  the factor and asv's own test (Mann-Whitney U on recorded samples, else
  non-overlapping 99% intervals: ``asv._stats.is_different``) finds a difference and
  the head lies outside the range of the last 5 runs of base's git ancestors (never by
  date, never the head); a ratio without statistics (one sample, ``--quick``) is
  "ambiguous" at most, never "slower";
- accuracy, peak memory (``peakmem_``, tracks in bytes), other tracks (ratio only)
  and coverage as in same-run reviews; earlier runs (the band, the run-to-run range)
  count only with head's benchmark version; a benchmark whose code changed between the
  two runs (asv's version hash) is not compared (exit 2).
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from flashbench.history import ACCURACY, load_results
from flashbench.history.suites import rule_limit
from flashbench.review.asvrun import REVIEW_RESULTS, requirement_names, run_asv
from flashbench.review.envs import comparable, existing_name
from flashbench.review.gitops import ancestors
from flashbench.review.model import Review, Row
from flashbench.review.rules import (
    coverage_row,
    is_memory,
    judge_accuracy,
    judge_ratio_only,
    memory_row,
)
from flashbench.review.tracks import rule_detail, same_version

RECENT = 5  # ancestors of base whose own runs give the run-to-run range
MODE = ("stored results (--reuse): separate asv runs, weaker evidence than same-run A/B "
        "(separate runs scatter up to 1.5x on a busy 2-CPU machine)")


def _text(x) -> str | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else str(x)


def _samples(row) -> list[float] | None:
    x = row.get("samples")
    return [float(v) for v in x] if isinstance(x, list | np.ndarray) and len(x) else None


def judge_time_stored(base: pd.Series, head: pd.Series, factor: float) -> tuple[str, str]:
    """(verdict, reason) of one stored timing pair (module docstring)."""
    from asv._stats import is_different  # asv compare's test; asv bounded < 0.7

    a, b = float(base["value"]), float(head["value"])
    ratio = b / a if a > 0 else math.inf
    if 1 / factor <= ratio <= factor:
        return "same", "within-factor"
    stats = []
    for row in (base, head):
        lo, hi, rep = row.get("ci_99_a"), row.get("ci_99_b"), row.get("repeat")
        if lo is None or hi is None or pd.isna(lo) or pd.isna(hi) or rep == 1:
            return "ambiguous", "ratio-only"
        stats.append({"ci_99_a": float(lo), "ci_99_b": float(hi), "repeat": rep})
    if is_different(_samples(base), _samples(head), stats[0], stats[1]):
        return ("slower" if ratio > factor else "faster"), "significant-asv"
    return "ambiguous", "not-significant"


def within_history(verdict: str, reason: str, head: float, earlier: list[float]
                   ) -> tuple[str, str, str]:
    """Demote slower/faster to ambiguous when earlier runs of base's ancestors (newest
    first, at most RECENT) already reached the head's value; (verdict, reason, detail)."""
    recent = earlier[:RECENT]
    if len(recent) < 2 or verdict not in ("slower", "faster"):
        return verdict, reason, ""
    lo, hi = min(recent), max(recent)
    span = f"{lo:.4g}..{hi:.4g}, runs of {len(recent)} ancestor commits"
    if (verdict == "slower" and head <= hi) or (verdict == "faster" and head >= lo):
        return "ambiguous", "inside-run-to-run-range", f"inside {span}"
    return verdict, reason, f"outside {span}"


def pick_envs(mine: pd.DataFrame, base: str, head: str, requirements: list[str]
              ) -> tuple[tuple[str, str] | None, str]:
    """(base env, head env) to compare, or None, with the explanation."""
    envs = {c: sorted(set(mine.loc[mine["commit"] == c, "env"].dropna().astype(str)))
            for c in (base, head)}
    same = [e for e in envs[base] if e in envs[head]]
    if same:
        return (same[0], same[0]), ""
    why = []
    for eb in envs[base]:
        for eh in envs[head]:
            ok, text = comparable(eb, eh, requirements)
            if ok:
                return (eb, eh), text
            why.append(text)
    return None, "; ".join(why)


def _cpus(rows: pd.DataFrame) -> set:
    if "cpu" not in rows.columns:
        return {None}
    return {_text(c) for c in rows["cpu"].astype(object)}


def compare_stored(frame: pd.DataFrame, base: str, head: str, machine: str, cpu: str,
                   ancestry: list[str], factor: float, acc_tol: float,
                   requirements: list[str]) -> tuple[list[Row], list[str], list[str]]:
    """(rows, problems, notes) for stored results (module docstring). ``ancestry``:
    base and its ancestors, newest first (git)."""
    rows, problems, notes = [], [], []
    mine = frame[frame["machine"].astype(object) == machine]
    for label, commit in (("base", base), ("head", head)):
        if not (mine["commit"].astype(object) == commit).any():
            problems.append(f"no results for {label} {commit[:8]} on {machine}")
    if problems:
        return rows, problems, notes
    cpus = {c: _cpus(mine[mine["commit"].astype(object) == c]) for c in (base, head)}
    common = cpus[base] & cpus[head]
    if not common:
        problems.append(f"base was measured on {sorted(map(str, cpus[base]))} and head on "
                        f"{sorted(map(str, cpus[head]))} under the one machine name "
                        f"{machine}: two processors are not comparable; review on one "
                        "machine with same-run A/B (flashbench review BASE HEAD)")
        return rows, problems, notes
    chosen = cpu if cpu in common else sorted(common, key=str)[0]
    elsewhere = ""
    if chosen != cpu:
        elsewhere = (f"measured on {chosen}, not this machine's processor" if chosen
                     else "processor not recorded")
        notes.append(f"These stored results were {elsewhere} ({cpu}): base and head "
                     f"share processor {chosen or 'unknown'} under the machine name "
                     f"{machine}; their speed says nothing about this machine.")
    if "cpu" in mine.columns:
        col = mine["cpu"].astype(object)
        mine = mine[col.isna()] if chosen is None else mine[col == chosen]
    pair, why = pick_envs(mine, base, head, requirements)
    if pair is None:
        problems.append(f"base and head results come from environments that are not "
                        f"comparable: {why}. Run `flashbench review BASE HEAD` (same-run "
                        "A/B: both commits measured here, in this Python), or measure head "
                        "in base's kind of environment (`flashbench review --reuse` with "
                        "--existing only if base's results came from -E existing)")
        return rows, problems, notes
    if why:
        notes.append(f"Compared across environments: {why}.")
    key = ["benchmark", "params"]

    def latest(commit, env):
        sel = mine[(mine["commit"].astype(object) == commit) & (mine["env"].astype(object)
                                                                 == env)]
        sel = sel.sort_values("date").drop_duplicates(key, keep="last")
        return {(str(r["benchmark"]), _text(r["params"]) or ""): r for _, r in sel.iterrows()}

    b, h = latest(base, pair[0]), latest(head, pair[1])
    order = [c for c in ancestry if c != head]
    earlier_env = mine[(mine["env"].astype(object) == pair[0])
                       & (mine["status"].astype(object) == "ok")]
    rank = {c: i for i, c in enumerate(order)}
    earlier_env = earlier_env[earlier_env["commit"].astype(object).isin(rank)]

    def history(name, params, version) -> list[float]:
        sel = earlier_env[(earlier_env["benchmark"].astype(object) == name)
                          & (earlier_env["params"].astype(object) == params)]
        sel = same_version(sel, version)
        sel = sel.sort_values("date").drop_duplicates("commit", keep="last")
        sel = sel.assign(_rank=sel["commit"].astype(object).map(rank)).sort_values("_rank")
        return [float(v) for v in sel["value"]]

    for k in sorted(set(b) | set(h)):
        name, params = k
        bb, hh = b.get(k), h.get(k)
        metric = ACCURACY.search(name)
        ref = hh if hh is not None else bb
        unit = _text(ref.get("unit")) or ""
        memory = is_memory(_text(ref.get("type")), unit)
        kind = ("accuracy" if metric else "memory" if memory
                else "time" if ref.get("type") == "time" or unit == "seconds" else "track")
        bs = "missing" if bb is None else str(bb["status"])
        hs = "missing" if hh is None else str(hh["status"])
        cov = coverage_row(kind, name, params, unit, bs, hs)
        if cov is not None:
            rows.append(_where(cov, elsewhere))
            continue
        versions = _text(bb.get("version")), _text(hh.get("version"))
        if all(versions) and versions[0] != versions[1]:
            rows.append(_where(Row(kind, name, params, unit, "not compared",
                                   "benchmark-changed", undecided=True), elsewhere))
            continue
        bv, hv = float(bb["value"]), float(hh["value"])
        ratio = hv / bv if bv else None
        earlier = history(name, params, versions[1])
        n = int(min(x for x in (bb.get("repeat"), hh.get("repeat"), 1e9)
                    if x is not None and not pd.isna(x))) if kind == "time" else 1
        if metric:
            verdict, reason, bad = judge_accuracy(metric["metric"], bv, hv, earlier, acc_tol,
                                                  rule_limit(metric["metric"]))
            row = Row(kind, name, params, unit, verdict, reason,
                      detail=rule_detail(metric["metric"], acc_tol, len(earlier)), base=bv,
                      head=hv, ratio=ratio, samples=1, regression=bad)
        elif memory:
            row = memory_row(kind, name, params, unit, bv, hv, factor,
                             detail=f"peak memory, one stored value per commit; factor "
                             f"{factor:.3g}")
        elif kind == "track":
            verdict, reason = judge_ratio_only(bv, hv, factor)
            row = Row(kind, name, params, unit, verdict, reason, base=bv, head=hv,
                      ratio=ratio, samples=1, undecided=verdict == "ambiguous")
        else:
            verdict, reason = judge_time_stored(bb, hh, factor)
            verdict, reason, detail = within_history(verdict, reason, hv, earlier)
            row = Row(kind, name, params, unit, verdict, reason, detail=detail, base=bv,
                      head=hv, ratio=ratio, samples=n if n < 1e9 else 0,
                      regression=verdict == "slower", undecided=verdict == "ambiguous")
        rows.append(_where(row, elsewhere))
    if any(r.kind == "memory" and ".peakmem_" in r.benchmark for r in rows):
        notes.append("peakmem_ values stored by asv are the benchmark process's peak "
                     "resident size: with launch_method forkserver a forked process starts "
                     "at the server's size, so compare results of one launch method.")
    if not rows:
        problems.append("no benchmark has results for both commits")
    return rows, problems, notes


def _where(row: Row, elsewhere: str) -> Row:
    """Say in the row where its numbers come from, when not from this processor."""
    if elsewhere:
        row.detail = f"{elsewhere}; {row.detail}" if row.detail else elsewhere
    return row


def _matching(frame: pd.DataFrame, pattern) -> pd.DataFrame:
    """Rows whose benchmark name, or ``name(params)``, matches ``pattern`` (as same-run
    reviews select grid points)."""
    if pattern is None or not len(frame):
        return frame
    names = frame["benchmark"].astype(str)
    full = names + "(" + frame["params"].astype(object).fillna("").astype(str) + ")"
    return frame[names.str.contains(pattern) | full.str.contains(pattern)]


def _load(dirs: list[Path]) -> pd.DataFrame:
    have = [d for d in dirs if d.is_dir() and any(p.name != "machine.json"
                                                  for p in d.glob("*/*.json"))]
    if not have:
        return pd.DataFrame(columns=["machine", "cpu", "env", "commit", "date", "benchmark",
                                     "params", "status", "value"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_results([str(d) for d in have])


def review_stored(opts, root: Path, bench_dir: Path, base: str, head: str, machine: str, cpu: str,
                  results: Path, log) -> Review:
    """Load stored results, run asv for a commit without any, compare (module docstring)."""
    review = Review(base, head, machine, cpu, MODE, opts.factor, opts.acc_tol)
    dirs = [results, root / REVIEW_RESULTS]
    frame = _load(dirs)
    pattern = None
    if opts.bench:
        from flashbench.review.run import compile_bench

        pattern = compile_bench(opts.bench)
        if not len(_matching(frame, pattern)):
            from flashbench.review.run import select
            from flashbench.review.workers import list_suites

            log_file = root / ".asv" / "review-suites.log"
            log_file.parent.mkdir(parents=True, exist_ok=True)
            select(list_suites(root, bench_dir, log_file), opts.bench)  # ValueError if none
    requirements = requirement_names(root)
    kind_now = existing_name() if opts.existing else None

    def has(commit) -> bool:
        sel = frame[(frame["machine"].astype(object) == machine)
                    & (frame["commit"].astype(object) == commit)]
        return len(_matching(sel, pattern)) > 0

    for commit in dict.fromkeys((base, head)):
        if not has(commit):
            run_asv(root, commit, machine, opts.quick, opts.existing, opts.bench, log)
            frame = _load(dirs)
    frame = _matching(frame, pattern)
    mine = frame[frame["machine"].astype(object) == machine]
    if pick_envs(mine, base, head, requirements)[0] is None:
        # leftover results of another kind of environment: measure in the kind asked for
        for commit in (head, base):
            envs = set(mine.loc[mine["commit"].astype(object) == commit, "env"].astype(str))
            wanted = ({kind_now} if kind_now else {e for e in envs
                                                   if not e.startswith("existing-")})
            if not envs & wanted:
                run_asv(root, commit, machine, opts.quick, opts.existing, opts.bench, log)
                frame = _load(dirs)
                frame = _matching(frame, pattern)
                mine = frame[frame["machine"].astype(object) == machine]
                break
    rows, problems, notes = compare_stored(frame, base, head, machine, cpu,
                                           ancestors(base, root), opts.factor, opts.acc_tol,
                                           requirements)
    review.rows, review.problems, review.notes = rows, problems, notes
    return review
