"""``flashbench review BASE HEAD``: did a change make the kernel slower or less accurate?

1. Results. For each commit, results already under ``results/`` (or under the
   review's own ``.asv/review-results/``) for this machine are reused; a commit
   without them is benchmarked with ``asv run <commit>^!`` into
   ``.asv/review-results/`` (``--quick``: one sample each, for a fast look;
   ``--existing``: no install, the commit's tree is checked out in a git worktree
   and put first on the benchmarks' PYTHONPATH, for machines where nothing can be
   installed).
2. Timings (time_, peakmem_, and tracks whose unit is seconds): head / base ratio
   judged with asv compare's own significance test (Mann-Whitney U on recorded
   samples, else non-overlapping 99% confidence intervals): "slower" or "faster"
   when the ratio passes ``factor`` (default 1.10) *and* the difference is
   significant *and* outside the range of the last 5 commits' own runs on this
   machine (separate runs scatter more than one run's statistics show);
   "ambiguous" when the ratio passes the factor but one of those cannot tell;
   "same" otherwise. Results without statistics (peak memory, one sample) are
   judged on the ratio and that range, and the table says so.
3. Accuracy (TrackAccuracy tracks): "worse" when the head's error exceeds the
   base's by more than ``acc_tol`` (relative, default 2%), "above band" when it
   exceeds every earlier commit's value on this machine, "rule fails" when a
   baseline ratio (kernel error / same-dtype standard error) exceeds 2. Any of
   these is a regression, faster or not.

Exit status: 0 nothing regressed; 1 something regressed; 2 it could not decide
(a commit without results, a result that failed) and nothing regressed.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from tabulate import tabulate

from flashbench.history import ACCURACY, load_results, param_label
from flashbench.machine import register

REVIEW_RESULTS = Path(".asv/review-results")
RULE_LIMIT = 2.0


@dataclass
class Row:
    kind: str  # "time" or "accuracy"
    benchmark: str
    params: str
    base: float | None
    head: float | None
    ratio: float | None
    unit: str
    verdict: str
    basis: str
    regression: bool = False


@dataclass
class Review:
    base: str
    head: str
    machine: str
    factor: float
    rows: list[Row] = field(default_factory=list)
    undecided: list[str] = field(default_factory=list)

    @property
    def status(self) -> int:
        if any(r.regression for r in self.rows):
            return 1
        return 2 if self.undecided else 0

    def summary(self) -> str:
        regressions = [r for r in self.rows if r.regression]
        if regressions:
            kinds = sorted({r.kind for r in regressions})
            return (f"REGRESSION: {len(regressions)} result(s) got worse "
                    f"({' and '.join(kinds)}); exit 1")
        if self.undecided:
            return f"UNDECIDED: {len(self.undecided)} problem(s) below; exit 2"
        return f"OK: nothing regressed across {len(self.rows)} compared results; exit 0"


# --------------------------------------------------------------------------- git and asv


def _git(*args: str, cwd=".") -> str:
    r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if r.returncode != 0:
        raise ValueError(f"git {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout.strip()


def resolve(rev: str) -> str:
    """Full commit hash of ``rev``; ValueError naming the revision if git cannot find it."""
    try:
        return _git("rev-parse", "--verify", f"{rev}^{{commit}}")
    except ValueError:
        raise ValueError(f"revision {rev!r} is not a commit in this repository") from None


def _has_results(frame: pd.DataFrame, commit: str, machine: str, bench: str | None) -> bool:
    mine = frame[(frame["commit"] == commit) & (frame["machine"] == machine)]
    if bench and len(mine):
        mine = mine[mine["benchmark"].str.contains(bench)]
    return len(mine) > 0


def run_asv(commit: str, machine: str, quick: bool, existing: bool, bench: str | None) -> str:
    """Benchmark ``commit`` into REVIEW_RESULTS; returns asv's output tail."""
    REVIEW_RESULTS.mkdir(parents=True, exist_ok=True)
    from asv.util import load_json

    config = load_json("asv.conf.json", js_comments=True)  # asv's reader: // comments
    for key in ("repo", "benchmark_dir", "env_dir", "html_dir"):
        config[key] = str(Path(config.get(key, ".")).resolve())
    config["results_dir"] = str(REVIEW_RESULTS.resolve())
    conf_path = Path(".asv/review-asv.conf.json")
    conf_path.write_text(json.dumps(config))
    cmd = [sys.executable, "-m", "asv", "run", "--config", str(conf_path), "--machine", machine,
           "--launch-method", "spawn", "--show-stderr", "--record-samples"]
    if quick:
        cmd.append("--quick")
    if bench:
        cmd += ["--bench", bench]
    env = dict(os.environ)
    worktree = None
    if existing:
        worktree = Path(f".asv/review-worktree-{commit[:12]}")
        if not worktree.exists():
            _git("worktree", "add", "--detach", str(worktree), commit)
        env["ASV_PYTHONPATH"] = str(worktree.resolve())
        cmd += ["-E", f"existing:{sys.executable}", "--set-commit-hash", commit]
    else:
        cmd.append(f"{commit}^!")
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    finally:
        if worktree is not None:
            _git("worktree", "remove", "--force", str(worktree))
    return (r.stdout + r.stderr)[-2000:]


# --------------------------------------------------------------------------- judging


def _stats(row) -> dict | None:
    if row is None or pd.isna(row.get("ci_99_a")) or pd.isna(row.get("ci_99_b")):
        return None
    return {"ci_99_a": row["ci_99_a"], "ci_99_b": row["ci_99_b"],
            "repeat": row.get("repeat")}


def _samples(row) -> list[float] | None:
    """The row's raw timing samples as asv's statistics want them (a list), if recorded."""
    x = row.get("samples")
    return [float(v) for v in x] if isinstance(x, (list, np.ndarray)) and len(x) else None


def _label(value) -> str:
    """A label column's value as text ("" where it is missing: None or NaN)."""
    return "" if value is None or pd.isna(value) else str(value)


def judge_time(base: pd.Series, head: pd.Series, factor: float) -> tuple[str, str]:
    """(verdict, basis) for one timing: faster / slower / same / ambiguous."""
    from asv._stats import is_different  # asv compare's significance test

    a, b = float(base["value"]), float(head["value"])
    ratio = b / a if a else math.inf
    sa, sb = _stats(base), _stats(head)
    stats_usable = (sa is not None and sb is not None and sa.get("repeat") != 1
                    and sb.get("repeat") != 1)
    if not (ratio > factor or ratio < 1 / factor):
        return "same", "ratio within factor"
    direction = "slower" if ratio > factor else "faster"
    if not stats_usable:
        return direction, "ratio only (no statistics recorded)"
    if is_different(_samples(base), _samples(head), sa, sb):
        return direction, "significant (asv: Mann-Whitney U or 99% CI)"
    return "ambiguous", "ratio passes factor, difference not significant"


RECENT = 5  # commits up to the base whose own runs show the run-to-run range


def within_history(verdict: str, basis: str, head: float, history: pd.Series) -> tuple[str, str]:
    """Demote slower / faster to ambiguous when recent runs already showed the head's value.

    ``history``: this benchmark's values, one per commit up to the base, in commit
    order, each measured in its own asv run. Separate runs scatter more than one
    run's confidence interval says (machine load, clocks), so a head inside the
    range of the last RECENT commits' runs is no evidence of a change. (A return to
    a level older than that window is still flagged.)
    """
    recent = history.iloc[-RECENT:]
    if len(recent) < 2 or verdict not in ("slower", "faster"):
        return verdict, basis
    lo, hi = float(recent.min()), float(recent.max())
    if (verdict == "slower" and head <= hi) or (verdict == "faster" and head >= lo):
        return "ambiguous", (f"{basis}, but inside the {lo:.4g}..{hi:.4g} range of the last "
                             f"{len(recent)} commits' runs")
    return verdict, f"{basis}; outside the last {len(recent)} commits' range"


def judge_accuracy(metric: str, base: float, head: float, history: pd.Series,
                   acc_tol: float) -> tuple[str, bool]:
    """(verdict, regression) for one accuracy track value."""
    problems = []
    if head > base * (1 + acc_tol) + 1e-300:
        problems.append("worse")
    if len(history) and head > history.max() * (1 + acc_tol):
        problems.append("above band")
    if metric.endswith("baseline_ratio") and head > RULE_LIMIT:
        problems.append("rule fails")
    if problems:
        return ", ".join(problems), True
    if head < base * (1 - acc_tol):
        return "better", False
    return "same", False


def compare(frame: pd.DataFrame, base: str, head: str, machine: str, factor: float = 1.10,
            acc_tol: float = 0.02) -> Review:
    """Judge every benchmark recorded for both commits on ``machine`` (module docstring)."""
    review = Review(base, head, machine, factor)
    params = [c for c in frame.attrs.get("param_columns", []) if c in frame.columns]
    mine = frame[frame["machine"] == machine]
    for label, commit in (("base", base), ("head", head)):
        if not (mine["commit"] == commit).any():
            review.undecided.append(f"no results for {label} {commit[:8]} on {machine}")
    if review.undecided:
        return review
    envs = set(mine.loc[mine["commit"] == base, "env"]) & set(mine.loc[mine["commit"] == head,
                                                                         "env"])
    if not envs:
        review.undecided.append("base and head were measured in different environments")
        return review
    env = sorted(envs)[0]
    mine = mine[mine["env"] == env]
    key = ["benchmark", *params]

    def latest(commit):
        sel = mine[mine["commit"] == commit].sort_values("date")
        return sel.drop_duplicates(key, keep="last").set_index(key, drop=False)

    b, h = latest(base), latest(head)
    base_date = b["date"].max()
    for idx in h.index.intersection(b.index):
        hb, bb = h.loc[idx], b.loc[idx]
        if isinstance(hb, pd.DataFrame):  # duplicate keys: take the last
            hb, bb = hb.iloc[-1], bb.iloc[-1]
        name, plabel = hb["benchmark"], param_label(hb.to_dict(), params)
        if hb["status"] == "skipped" or bb["status"] == "skipped":
            continue
        if hb["status"] != "ok" or bb["status"] != "ok":
            review.undecided.append(f"{name} [{plabel}]: base {bb['status']}, head "
                                    f"{hb['status']}")
            continue
        versions = _label(bb.get("version")), _label(hb.get("version"))
        if all(versions) and versions[0] != versions[1]:
            review.undecided.append(f"{name} [{plabel}]: the benchmark's code changed between "
                                    "the two runs (asv version hash differs)")
            continue
        bv, hv = float(bb["value"]), float(hb["value"])
        ratio = hv / bv if bv else math.inf
        metric = ACCURACY.search(name)
        hist = mine[(mine["benchmark"] == name) & (mine["date"] <= base_date)
                    & (mine["status"] == "ok")]
        for p in params:
            hist = hist[hist[p].isna()] if pd.isna(hb[p]) else hist[hist[p] == hb[p]]
        hist = hist.sort_values("date").drop_duplicates("commit", keep="last")["value"]
        if metric:
            verdict, bad = judge_accuracy(metric["metric"], bv, hv, hist, acc_tol)
            review.rows.append(Row("accuracy", name, plabel, bv, hv, ratio, _label(hb["unit"]),
                                   verdict, f"tolerance {acc_tol:.0%}, band of "
                                   f"{len(hist)} commit(s)", bad))
        elif hb["type"] in ("time", "peakmem") or hb["unit"] == "seconds":
            verdict, basis = judge_time(bb, hb, factor)
            verdict, basis = within_history(verdict, basis, hv, hist)
            review.rows.append(Row("time", name, plabel, bv, hv, ratio, _label(hb["unit"]),
                                   verdict, basis, verdict == "slower"))
    if not review.rows and not review.undecided:
        review.undecided.append("no benchmark has results for both commits")
    order = {True: 0, False: 1}
    review.rows.sort(key=lambda r: (order[r.regression], r.kind, r.benchmark, r.params))
    return review


# --------------------------------------------------------------------------- output


def _fmt(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.4g}"


def render_markdown(review: Review, all_rows: bool = False) -> str:
    lines = [f"## flashbench review: `{review.base[:8]}` (base) -> `{review.head[:8]}` (head)",
             "", f"Machine `{review.machine}`; timing factor {review.factor:.2f}. "
             f"**{review.summary()}**", ""]
    for problem in review.undecided:
        lines.append(f"- could not decide: {problem}")
    shown = [r for r in review.rows if all_rows or r.regression or r.verdict not in ("same",)]
    if shown:
        lines += ["", tabulate([[("**REGRESSION**" if r.regression else ""), r.kind,
                                 r.benchmark.split(".", 1)[-1], r.params, _fmt(r.base),
                                 _fmt(r.head), _fmt(r.ratio), r.unit, r.verdict, r.basis]
                                for r in shown],
                               headers=["", "kind", "benchmark", "params", "base", "head",
                                        "head/base", "unit", "verdict", "basis"],
                               tablefmt="github")]
    same = sum(r.verdict == "same" for r in review.rows)
    if not all_rows and same:
        lines += ["", f"{same} other result(s) unchanged (within factor or tolerance)."]
    return "\n".join(lines) + "\n"


def to_json(review: Review) -> str:
    return json.dumps({"base": review.base, "head": review.head, "machine": review.machine,
                       "factor": review.factor, "status": review.status,
                       "summary": review.summary(), "undecided": review.undecided,
                       "rows": [asdict(r) for r in review.rows]}, indent=1, default=str)


def run_review(base_rev: str, head_rev: str, results: str = "results", quick: bool = False,
               existing: bool = False, factor: float = 1.10, acc_tol: float = 0.02,
               bench: str | None = None, machine: str | None = None, log=print) -> Review:
    """Gather results for both commits (running asv where missing) and compare them."""
    if factor <= 1:
        raise ValueError(f"factor must be > 1, got {factor}")
    base, head = resolve(base_rev), resolve(head_rev)
    machine = register(machine)  # asv needs the machine registered before it runs
    dirs = [Path(results), REVIEW_RESULTS]

    def load():
        frames = [load_results(d) for d in dirs if d.is_dir() and any(d.glob("*/*.json"))]
        if not frames:
            return pd.DataFrame(columns=["machine", "commit"])
        frame = pd.concat(frames, ignore_index=True)
        frame.attrs["param_columns"] = list(dict.fromkeys(
            c for f in frames for c in f.attrs.get("param_columns", [])))
        return frame

    frame = load()
    for commit in dict.fromkeys((base, head)):
        if not _has_results(frame, commit, machine, bench):
            log(f"review: no results for {commit[:8]} on {machine}: running asv "
                f"({'quick' if quick else 'full'}, {'existing env' if existing else 'virtualenv'})",
                file=sys.stderr)
            tail = run_asv(commit, machine, quick, existing, bench)
            log(tail, file=sys.stderr)
            frame = load()
    if bench and len(frame):
        params = frame.attrs.get("param_columns", [])
        frame = frame[frame["benchmark"].str.contains(bench)]
        frame.attrs["param_columns"] = params
    return compare(frame, base, head, machine, factor, acc_tol)
