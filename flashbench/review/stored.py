"""``review --reuse``: judge stored asv results (results/ and earlier review runs).

Weaker evidence than same-run A/B, and labelled so: base and head come from separate asv
runs; a commit without results is benchmarked first (:mod:`flashbench.review.asvrun`).
:func:`compare_stored` is pure on the loaded frame: this machine's rows, one pair of
comparable environments, timings by the factor, asv's own test and the run-to-run range
of base's ancestors; other values and coverage as in same-run reviews (docs/review.md).
"""

from __future__ import annotations

import functools
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from flashbench.infra.git import ancestors
from flashbench.review.asvrun import REVIEW_RESULTS, requirement_names, run_asv
from flashbench.review.envs import comparable, existing_name
from flashbench.review.model import Review, Row
from flashbench.review.options import compile_bench, select, select_rows
from flashbench.review.results import load_stored, machine_rows, same_version
from flashbench.review.rules import coverage_row, row_kind, value_row
from flashbench.review.worker_client import list_suites

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
    first, at most RECENT) already reached the head's value, or are fewer than 2: without
    them nothing tells a change from separate runs' scatter (a red team, 2026-12-08: an
    unchanged float64 path read 7.8x "slower", exit 1, base and head run by asv under other
    jobs' load, with no ancestor run); (verdict, reason, detail)."""
    recent = earlier[:RECENT]
    if verdict not in ("slower", "faster"):
        return verdict, reason, ""
    if len(recent) < 2:
        return "ambiguous", "no-run-to-run-range", (
            f"{verdict} by asv's test, but {len(recent)} earlier run(s) of base's ancestors "
            "(2 needed) to show separate runs' scatter (up to 1.5x on a 2-CPU machine): "
            "judge it by the same-run review (without --reuse)")
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


def _this_machine(frame: pd.DataFrame, base: str, head: str, machine: str, cpu: str
                  ) -> tuple[pd.DataFrame | None, str, list[str]]:
    """(rows, where they come from when not this processor, problems): this machine's rows
    where both commits have some; else the rows of one other processor that both were
    measured on under this machine name (results copied from elsewhere)."""
    mine = machine_rows(frame, machine, cpu)
    named = frame[frame["machine"].astype(object) == machine]
    problems = [f"no results for {label} {commit[:8]} on {machine}"
                for label, commit in (("base", base), ("head", head))
                if not ((mine["commit"].astype(object) == commit).any()
                        or (named["commit"].astype(object) == commit).any())]
    if problems or all((mine["commit"].astype(object) == c).any() for c in (base, head)):
        return (None if problems else mine), "", problems
    cpus = {c: _cpus(named[named["commit"].astype(object) == c]) for c in (base, head)}
    common = cpus[base] & cpus[head]
    if not common:
        return None, "", [f"base was measured on {sorted(map(str, cpus[base]))} and head on "
                          f"{sorted(map(str, cpus[head]))} under the one machine name "
                          f"{machine}: two processors are not comparable; review on one "
                          "machine with same-run A/B (flashbench review BASE HEAD)"]
    chosen = sorted(common, key=str)[0]
    return (machine_rows(frame, machine, chosen),
            f"measured on {chosen}, not this machine's processor" if chosen
            else "processor not recorded", [])


def compare_stored(frame: pd.DataFrame, base: str, head: str, machine: str, cpu: str,
                   ancestry: list[str], factor: float, acc_tol: float,
                   requirements: list[str]) -> tuple[list[Row], list[str], list[str]]:
    """(rows, problems, notes) for stored results (module docstring). ``ancestry``:
    base and its ancestors, newest first (git)."""
    rows, notes = [], []
    mine, elsewhere, problems = _this_machine(frame, base, head, machine, cpu)
    if mine is None:
        return rows, problems, notes
    if elsewhere:
        notes.append(f"These stored results were {elsewhere} ({cpu}) under the machine "
                     f"name {machine}; their speed says nothing about this machine.")
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
    commits, envs = mine["commit"].astype(object), mine["env"].astype(object)

    def latest(commit, env):
        sel = mine[(commits == commit) & (envs == env)]
        sel = sel.sort_values("date").drop_duplicates(["benchmark", "params"], keep="last")
        return {(str(r["benchmark"]), _text(r["params"]) or ""): r for _, r in sel.iterrows()}

    b, h = latest(base, pair[0]), latest(head, pair[1])
    rank = {c: i for i, c in enumerate(c for c in ancestry if c != head)}
    earlier_env = mine[(envs == pair[0]) & (mine["status"].astype(object) == "ok")
                       & commits.isin(rank)]

    def history(name, params, version) -> list[float]:
        sel = earlier_env[(earlier_env["benchmark"].astype(object) == name)
                          & (earlier_env["params"].astype(object) == params)]
        sel = same_version(sel, version)
        sel = sel.sort_values("date").drop_duplicates("commit", keep="last")
        sel = sel.assign(_rank=sel["commit"].astype(object).map(rank)).sort_values("_rank")
        return [float(v) for v in sel["value"]]

    for k in sorted(set(b) | set(h)):
        row = _row(*k, b.get(k), h.get(k), history, factor, acc_tol)
        if elsewhere:  # the row says where its numbers come from
            row.detail = f"{elsewhere}; {row.detail}" if row.detail else elsewhere
        rows.append(row)
    if any(r.kind == "memory" and ".peakmem_" in r.benchmark for r in rows):
        notes.append("peakmem_ values stored by asv are the benchmark process's peak "
                     "resident size: with launch_method forkserver a forked process starts "
                     "at the server's size, so compare results of one launch method.")
    if not rows:
        problems.append("no benchmark has results for both commits")
    return rows, problems, notes


def _row(name: str, params: str, bb, hh, history, factor: float, acc_tol: float) -> Row:
    """The row of one stored grid point (either side may be None: missing)."""
    ref = hh if hh is not None else bb
    unit = _text(ref.get("unit")) or ""
    kind = row_kind(name, _text(ref.get("type")), unit)
    if kind == "track" and unit == "seconds":  # a device time: judged as a timing
        kind = "time"
    cov = coverage_row(kind, name, params, unit, "missing" if bb is None else str(bb["status"]),
                       "missing" if hh is None else str(hh["status"]))
    if cov is not None:
        return cov
    versions = _text(bb.get("version")), _text(hh.get("version"))
    if all(versions) and versions[0] != versions[1]:
        return Row(kind, name, params, unit, "not compared", "benchmark-changed",
                   undecided=True)
    bv, hv = float(bb["value"]), float(hh["value"])
    earlier = history(name, params, versions[1])
    if kind != "time":
        return value_row(kind, name, params, unit, bv, hv, earlier, acc_tol, factor,
                         f"peak memory, one stored value per commit; factor {factor:.3g}")
    n = min((int(x) for x in (bb.get("repeat"), hh.get("repeat"))
             if x is not None and not pd.isna(x)), default=0)
    verdict, reason = judge_time_stored(bb, hh, factor)
    verdict, reason, detail = within_history(verdict, reason, hv, earlier)
    return Row(kind, name, params, unit, verdict, reason, detail=detail, base=bv, head=hv,
               ratio=hv / bv if bv else None, samples=n, regression=verdict == "slower",
               undecided=verdict == "ambiguous")


def _asv_bench(root: Path, bench_dir: Path, bench: str | None) -> str | None:
    """asv's ``--bench`` for the review's: the names of today's benchmarks it selects, by
    name or ``name(k=v, ...)`` (ValueError where it selects none). asv reads its own form,
    ``name(v, ...)``: a review's ``--bench "softmax.*N=1024"`` selected nothing there
    and the review exited 3, "the tool failed" (a red team, 2026-12-08)."""
    if not bench:
        return None
    log_file = root / ".asv" / "review-suites.log"
    log_file.parent.mkdir(parents=True, exist_ok=True)
    listing = list_suites(root, bench_dir, log_file)
    chosen = {(p.name, p.index) for p in select(listing, bench)}
    return "|".join(  # asv matches a parameterised benchmark as name(v, ...) alone
        f"^{re.escape(b['name'])}\\({re.escape(label)}\\)$" if label else
        f"^{re.escape(b['name'])}$"
        for b in listing for i, label in enumerate(b["asv_labels"]) if (b["name"], i) in chosen)


def review_stored(opts, root: Path, bench_dir: Path, base: str, head: str, machine: str, cpu: str,
                  results: Path, log) -> Review:
    """Load stored results, run asv for a commit without any, compare (module docstring)."""
    review = Review(base, head, machine, cpu, MODE, opts.factor, opts.acc_tol)
    dirs = [results, root / REVIEW_RESULTS]
    pattern = compile_bench(opts.bench) if opts.bench else None

    def load() -> pd.DataFrame:
        frame = select_rows(load_stored(dirs, notes=review.notes), pattern)
        named = frame["machine"].astype(object) == machine
        return frame[named | frame.index.isin(machine_rows(frame, machine, cpu).index)]

    asv_bench = functools.cache(lambda: _asv_bench(root, bench_dir, opts.bench))
    frame = load()
    if pattern is not None and not len(frame):  # ValueError where the suites have none
        asv_bench()
    requirements = requirement_names(root)
    for commit in dict.fromkeys((base, head)):
        if not (frame["commit"].astype(object) == commit).any():
            run_asv(root, commit, machine, opts.quick, opts.existing, asv_bench(), log)
            frame = load()
    if pick_envs(frame, base, head, requirements)[0] is None:
        # leftover results of another kind of environment: measure in the kind asked for
        kind_now = existing_name() if opts.existing else None
        for commit in (head, base):
            envs = set(frame.loc[frame["commit"].astype(object) == commit, "env"].astype(str))
            wanted = ({kind_now} if kind_now else {e for e in envs
                                                   if not e.startswith("existing-")})
            if not envs & wanted:
                run_asv(root, commit, machine, opts.quick, opts.existing, asv_bench(), log)
                frame = load()
                break
    review.rows, review.problems, review.notes = compare_stored(
        frame, base, head, machine, cpu, ancestors(base, root), opts.factor, opts.acc_tol,
        requirements)
    if (where := _this_machine(frame, base, head, machine, cpu)[1]).startswith("measured on"):
        # the header named this machine's processor over another's numbers (a red team)
        review.cpu = f"{where.split(', not ')[0]}; this machine: {cpu}"
    return review
