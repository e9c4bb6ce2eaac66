"""A review as Markdown (for a pull request) and as JSON (for machines).

Markdown: a header that says how the evidence was gathered, the summary line with the
exit status, the problems, and a table of regressions, then undecided rows (unchanged
rows and grid points measured in neither commit are counted; ``--all`` lists them).
JSON: the same facts, NaN and infinities as null, so it is always valid JSON.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import asdict

from tabulate import tabulate

from flashbench.cli.common import jsonable
from flashbench.review.model import REASONS, Review, Row
from flashbench.review.paired import look_level
from flashbench.review.stats import LOOKS, MIN_TRIM_ROUNDS, TRIM, WORST_FALSE_ALARMS


def _num(x) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:.4g}"


def _ratio(r: Row) -> str:
    if r.ratio is None or math.isnan(r.ratio):  # two NaNs read "nan" (a probe)
        return "-"
    text = f"{r.ratio:.3f}"
    if r.ci_low is not None and r.ci_high is not None:
        text += f" [{r.ci_low:.3f}, {r.ci_high:.3f}]"
    return text


def _cell(x) -> str:
    """A table cell: a '|' inside (units such as ``max |O - O_fp64|``) would split it."""
    return str(x).replace("|", "\\|")


def _statuses(rows: list[Row]) -> str:
    """'base skipped, head skipped: 3; ...' from the rows' details (most frequent first)."""
    counts = Counter(r.detail.split(":", 1)[0] or "no status" for r in rows)
    return "; ".join(f"{pair}: {n}" for pair, n in sorted(counts.items(),
                                                          key=lambda kv: (-kv[1], kv[0])))


def header(review: Review) -> list[str]:
    lines = [f"## flashbench review: `{review.base[:8]}` (base) -> `{review.head[:8]}` "
             "(head)", ""]
    facts = [f"Machine `{review.machine}` ({review.cpu})", f"evidence: {review.mode}",
             f"timing factor {review.factor:.3g}", f"accuracy tolerance {review.acc_tol:.3g}"]
    if review.false_alarm_rate is not None:
        q = review.false_alarm_rate
        facts.append(f"false alarms: Benjamini-Hochberg at {q:.0%} across the timing "
                     f"comparisons, {look_level(q):.2%} at each of the {len(LOOKS)} looks (in "
                     "simulated reviews whose every timing sat exactly at the factor, a false "
                     f"\"slower\" in at most {q:.0%} of them where the variance prior fits the "
                     f"family, up to {WORST_FALSE_ALARMS:.0%} where variances truly scatter)")
    if review.budget is not None:
        facts.append(f"sampling budget {review.budget:.0f} s")
    facts.append(f"review took {review.seconds:.0f} s")
    lines.append("; ".join(facts) + ".")
    for note in review.notes:
        lines += ["", f"> {note}"]
    lines += ["", f"**{review.summary()}**", ""]
    for problem in review.problems:  # undecided by itself; a head's failure regressed above
        lines.append(f"- problem: {problem}")
    return lines


def render_markdown(review: Review, all_rows: bool = False) -> str:
    lines = header(review)
    neither = [r for r in review.rows if r.reason == "not-measured"]
    apart = [r for r in review.rows if {"failing-at-base", "still-failing", "not-comparable",
                                        "peer", "study"} & set(r.reason.split(", "))]
    kept = {id(r) for r in apart}
    shown = [r for r in review.rows if all_rows or r.regression or r.undecided
             or (r.verdict not in ("same", "not slower") and r.reason != "not-measured"
                 and id(r) not in kept)]
    if shown:
        table = [[_cell(c) for c in (
            "**REGRESSION**" if r.regression else "**?**" if r.undecided else "", r.kind,
            r.benchmark.split(".", 1)[-1], r.params, _num(r.base), _num(r.head), _ratio(r),
            f"{r.ci_level:.2%}" if r.ci_level is not None else "-", r.samples or "-", r.unit,
            r.verdict, r.reason, r.detail)] for r in shown]
        lines += ["", tabulate(table, headers=["", "kind", "benchmark", "params", "base",
                                               "head", "head/base [interval]", "level", "n",
                                               "unit", "verdict", "reason", "detail"],
                               tablefmt="github")]
    quiet = len(review.rows) - len(shown) - (0 if all_rows else len(neither) + len(apart))
    if quiet:
        lines += ["", f"{quiet} other result(s) unchanged (same, or not slower)."]
    if counts := not all_rows and Counter(  # the summary counts them; which, here
            f"{r.benchmark.split('.', 1)[-1]} ({r.verdict}" + "".join(
                f", {c}" for c in r.reason.split(", ") if c in ("peer", "study")) + ")"
            for r in apart if r.verdict not in ("same", "not comparable", "not compared")):
        lines += ["", "Reported apart, never against head (--all lists them): " + "; ".join(
            f"{what}: {n}" for what, n in sorted(counts.items())) + "."]
    if neither and not all_rows:
        lines += ["", f"{len(neither)} grid point(s) measured in neither commit and not failed "
                  f"in head ({_statuses(neither)}); --all lists them."]
    codes = sorted({code for r in shown + apart for code in r.reason.split(", ")
                    if code in REASONS})
    if codes:
        lines += ["", "Reasons: " + "; ".join(f"`{c}`: {REASONS[c]}" for c in codes) + "."]
    if any(r.kind == "memory" for r in shown):
        lines += ["", "Peak memory: one value per commit in bytes (a fresh process's peak "
                  "resident set size), judged by head/base against the factor."]
    if any(r.kind == "time" and r.samples for r in shown):
        if review.mode.startswith("same-run"):
            note = ("Timings: base and head are per call, the median over the n paired rounds "
                    "of each block's fastest sample; head/base is the mean of the rounds' "
                    f"log-ratios ({TRIM:.0%} trimmed from each end from {MIN_TRIM_ROUNDS} "
                    "rounds on) with its interval at the level shown; the detail names the "
                    "variance prior it rests on. It may differ from head over base: each round's "
                    "head is set against that round's own base, so the machine's drift between "
                    "rounds cancels in it, not in the two medians.")
        else:
            note = "Timings: asv's stored values (median per call); n is asv's samples."
        lines += ["", note]
    return "\n".join(lines) + "\n"


def to_json(review: Review) -> str:
    doc = {"base": review.base, "head": review.head, "machine": review.machine,
           "cpu": review.cpu, "mode": review.mode, "factor": review.factor,
           "acc_tol": review.acc_tol, "false_alarm_rate": review.false_alarm_rate,
           "budget_s": review.budget, "seconds": review.seconds, "status": review.status,
           "summary": review.summary(), "notes": review.notes, "problems": review.problems,
           "reasons": REASONS, "rows": [asdict(r) for r in review.rows]}
    # inf and nan as the strings check's and bands' JSON write: null told neither apart
    # from a value never measured (a probe)
    return json.dumps(jsonable(doc), indent=1, allow_nan=False)
