"""The verdict rules of accuracy, memory, values without statistics and coverage, and
the rows of values measured once per commit: pure functions of numbers (no git, no asv,
no processes), shared by same-run and stored reviews. The rules: docs/review.md."""

from __future__ import annotations

import math
import re

from flashbench.history.suites import accuracy_metric, role, rule_limit
from flashbench.infra.libwatch import LEFT_IN_WORKER, REFUSED
from flashbench.review.model import Row

BAND_RATIO = "band_ratio"  # a metric named so is the band rule's ratio (issue 25)

OK_STATUS = "ok"
FAILED_STATUS = "failed"  # it raised (or the worker died, or timed out): asv's "failed"
BUSY_STATUS = "busy"  # its samples could not be cross-checked on a busy machine
MEMORY_UNIT = "bytes"


def accuracy_rule(metric: str | None) -> tuple[float, str] | None:
    """(limit, reason code when broken) of a rule-ratio metric (limits:
    :func:`flashbench.history.suites.rule_limit`); None for other metrics."""
    limit = rule_limit(metric) if metric else None
    if limit is None:
        return None
    return limit, "outside-band" if BAND_RATIO in metric else "rule-fails"


def rule_detail(metric: str, acc_tol: float, band: int) -> str:
    """The detail of an accuracy row: tolerance, band size, and the rule's own limit."""
    text = f"tolerance {acc_tol:.0%}, band of {band} earlier result(s)"
    if (rule := accuracy_rule(metric)) is None:
        return text
    if rule[1] == "outside-band":
        return text + f", band rule: at most {rule[0]:g}x the band edge of a correct kernel"
    what = "the exactness tolerance" if "exactness" in metric else "the same-dtype standard error"
    return text + f", rule: at most {rule[0]:g}x {what}"


def judge_accuracy(base: float, head: float, band: list[float], acc_tol: float,
                   rule: tuple[float, str] | None = None) -> tuple[str, str, bool]:
    """(verdict, reason codes, regression) for one accuracy value (higher is worse).
    ``band``: earlier results of base's ancestors; "above band" only qualifies a head
    worse than base. ``rule``: :func:`accuracy_rule`'s; a non-finite ratio breaks it (base
    broke it too, head no worse: "already failing at base"); NaN in both: "not comparable"."""
    if math.isnan(base) and math.isnan(head):
        return "not comparable", "not-comparable", False
    base_ok = math.isfinite(base)
    problems = []
    if not math.isfinite(head):
        if base_ok:
            problems.append("not-finite")
        if rule is not None:
            problems.append(rule[1])
        if not problems:  # both non-finite, no rule: nothing changed that can be judged
            return "same", "both-not-finite", False
    else:
        if base_ok and head > base * (1 + acc_tol) + 1e-300:
            problems.append("worse")
            finite_band = [v for v in band if math.isfinite(v)]
            if finite_band and head > max(finite_band) * (1 + acc_tol):
                problems.append("above-band")
        if rule is not None and head > rule[0]:
            problems.append(rule[1])
    if rule is not None and problems == [rule[1]] and (base > rule[0] or math.isinf(base)):
        return "already failing at base", f"{rule[1]}, failing-at-base", False
    if problems:
        return ", ".join(p.replace("-", " ") for p in problems), ", ".join(problems), True
    if base_ok and head < base * (1 - acc_tol):
        return "better", "better", False
    return "same", "within-tolerance", False


def is_memory(type_: str | None, unit: str | None) -> bool:
    """Peak memory: asv's ``peakmem_`` benchmarks, and tracks that return bytes (the
    suites measure it in a fresh subprocess: a forked benchmark inherits the server's)."""
    return type_ == "peakmemory" or (type_ == "track" and unit == MEMORY_UNIT)


def judge_memory(base: float, head: float, factor: float) -> tuple[str, str]:
    """(verdict, reason) of peak memory, head/base against ``factor``; a value that is not
    a positive, finite number of bytes is "not compared"."""
    try:
        base, head = float(base), float(head)
    except (TypeError, ValueError):
        return "not compared", "not-a-size"
    if not all(math.isfinite(x) and x > 0 for x in (base, head)):
        return "not compared", "not-a-size"
    ratio = head / base
    if ratio > factor:
        return "more memory", "more-memory"
    if ratio < 1 / factor:
        return "less memory", "less-memory"
    return "same", "within-factor"


def memory_row(kind: str, benchmark: str, params: str, unit: str, base: float, head: float,
               factor: float, detail: str = "") -> Row:
    """The row of one memory comparison (:func:`judge_memory`)."""
    verdict, reason = judge_memory(base, head, factor)
    ratio = head / base if reason != "not-a-size" else None
    return Row(kind, benchmark, params, unit, verdict, reason,
               detail=detail or f"peak memory, once per commit; factor {factor:.3g}",
               base=base, head=head, ratio=ratio, samples=1,
               regression=reason == "more-memory", undecided=reason == "not-a-size")


def value_row(kind: str, benchmark: str, params: str, unit: str, base: float, head: float,
              band: list[float], acc_tol: float, factor: float, memory_detail: str = "") -> Row:
    """The row of a value measured once per commit, both commits ok; ``band``: earlier
    results of base's ancestors (accuracy only)."""
    if kind == "memory":
        return memory_row(kind, benchmark, params, unit, base, head, factor, memory_detail)
    ratio = head / base if base else None
    if kind == "accuracy":
        metric = accuracy_metric(benchmark)
        verdict, reason, bad = judge_accuracy(base, head, band, acc_tol, accuracy_rule(metric))
        return Row(kind, benchmark, params, unit, verdict, reason,
                   detail=rule_detail(metric, acc_tol, len(band)), base=base, head=head,
                   ratio=ratio, samples=1, regression=bad)
    verdict, reason = judge_ratio_only(base, head, factor)
    return Row(kind, benchmark, params, unit, verdict, reason, base=base, head=head,
               ratio=ratio, samples=1, undecided=verdict == "ambiguous")


def row_kind(benchmark: str, type_: str | None, unit: str | None) -> str:
    """A result's kind: "accuracy" (an accuracy track), "memory" (:func:`is_memory`),
    "time" (asv's ``time_``) or "track"."""
    if accuracy_metric(benchmark):
        return "accuracy"
    if is_memory(type_, unit):
        return "memory"
    return "time" if type_ == "time" else "track"


def judge_ratio_only(base: float, head: float, factor: float) -> tuple[str, str]:
    """(verdict, reason) of a value pair without statistics: never "slower"."""
    ratio = head / base if base > 0 else math.inf
    if 1 / factor <= ratio <= factor:
        return "same", "ratio-only"
    return "ambiguous", "ratio-only"


def judge_coverage(base_status: str, head_status: str) -> tuple[str, str] | None:
    """(verdict, reason) when the two commits' statuses ("ok", "skipped", "failed",
    "missing", "not-applicable") are not both "ok", else None."""
    if base_status == OK_STATUS and head_status == OK_STATUS:
        return None
    if head_status == FAILED_STATUS:
        if base_status == FAILED_STATUS:
            return "already failing at base", "still-failing"
        return "failed", "failed"
    if base_status == OK_STATUS:
        return "coverage lost", "coverage-lost"
    if head_status == OK_STATUS:
        return "coverage gained", "coverage-gained"
    return "not compared", "not-measured"


def track_rows(points, base: list[dict], head: list[dict], acc_tol: float, factor: float,
               band) -> list[Row]:
    """Rows of grid points measured once per commit in a same-run review (tracks, peak
    memory) from the workers' replies; ``band(name, params, version)``: earlier results."""
    rows = []
    for p, b, h in zip(points, base, head, strict=True):
        row = p.coverage_row(b, h)
        if row is None:
            earlier = band(p.name, p.params, p.version) if p.kind == "accuracy" else []
            row = value_row(p.kind, p.name, p.params, p.unit, float(b["value"]),
                            float(h["value"]), earlier, acc_tol, factor)
        rows.append(row)
    return rows


def coverage_row(kind: str, benchmark: str, params: str, unit: str, base_status: str,
                 head_status: str, base_reason: str = "", head_reason: str = "") -> Row | None:
    """The row for a grid point that does not have a value in both commits (or None)."""
    if BUSY_STATUS in (base_status, head_status):  # forklane.MachineBusy: never "failed"
        return Row(kind=kind, benchmark=benchmark, params=params, unit=unit,
                   verdict="not measured", reason="machine-busy", undecided=True,
                   detail=head_reason if head_status == BUSY_STATUS else base_reason)
    judged = judge_coverage(base_status, head_status)
    if judged is None:
        return None
    verdict, reason = judged
    if reason in ("coverage-gained", "still-failing") and base_status == FAILED_STATUS and any(
            why in base_reason for why in (REFUSED, *LEFT_IN_WORKER)):
        verdict, reason = "not compared", "base-refused"  # the worker could not time base
    detail = f"base {base_status}, head {head_status}"
    why = (head_reason if reason in ("coverage-lost", "failed", "still-failing")
           else base_reason or head_reason)
    if why:
        detail += f": {why}"
    return Row(kind=kind, benchmark=benchmark, params=params, unit=unit, verdict=verdict,
               reason=reason, detail=detail, regression=reason == "failed",
               undecided=reason in ("coverage-lost", "base-refused"))


def for_information(rows: list[Row]) -> list[Row]:
    """``rows``, peers' and studies' (history.suites.role) never a regression nor undecided."""
    for r in rows:
        if r.reason != "not-measured" and (who := role(r.benchmark, r.params)):
            r.regression = r.undecided = False
            r.reason = f"{r.reason}, {who}"
    return rows


_RATIO = re.compile(r"track_(o|lse|dq|dk|dv)_(band_ratio|baseline_ratio|ratio)$")
_KERNEL = re.compile(r"(?:^|, )kernel='[^']*'")


def _same(row: Row | None) -> bool:
    return row is not None and row.base is not None and row.base == row.head


def yardstick_moved(rows: list[Row]) -> list[Row]:
    """``rows``, each rule or band ratio that moved with its yardstick alone said so. A
    baseline ratio (max |error| over the standard's max) moved with its yardstick where the
    kernel's own ``track_<tensor>_max_abs`` is the same in base and head. A band ratio reads
    RMSE and p99, which may move where the max does not: its yardstick moved only where every
    other kernel of the grid point, its max the same too, saw its band ratio move the same
    way (a moved band moves every kernel's), one at least. A yardstick that got looser (the
    ratio fell: the standard's error or the band grew) is a regression of the standard model
    or of the band's flash model ("yardstick looser"); one that got tighter reads
    "yardstick moved", counted only past its limit. A fresh-eyes probe (2026-12-07) had
    untouched Triton rows read "better" under a scaled flash model; red teams (2026-12-08)
    had an LSE made worse everywhere but at its max, two kernels made worse alike, and the
    variants' standard model rounded through fp16 all read "yardstick moved", OK, exit 0."""
    own = {(r.benchmark, r.params): r for r in rows if r.benchmark.endswith("_max_abs")}
    band: dict[tuple, dict[str, bool | None]] = {}  # kernel: moved up (None: stayed)
    for r in rows:
        m = _RATIO.search(r.benchmark)
        if m and m[2] == "band_ratio" and _finite(r.base) and _finite(r.head) and _same(
                own.get((r.benchmark[:m.start()] + f"track_{m[1]}_max_abs", r.params))):
            band.setdefault((r.benchmark, _KERNEL.sub("", r.params)), {})[r.params] = (
                None if r.base == r.head else r.head > r.base)
    for r in rows:
        m = _RATIO.search(r.benchmark)
        if not m or r.base is None or not (r.verdict == "better" or r.regression):
            continue
        twin = own.get((r.benchmark[:m.start()] + f"track_{m[1]}_max_abs", r.params))
        if not _same(twin) or not (_finite(r.base) and _finite(r.head)):
            continue  # a NaN or inf ratio is its rule's to judge, with no yardstick words
        same = f"the kernel's own max |{m[1]} error| is the same in base and head ({twin.base:.4g})"
        if m[2] == "band_ratio":
            others = [up for params, up in band.get(
                (r.benchmark, _KERNEL.sub("", r.params)), {}).items() if params != r.params]
            if not others or any(up is not (r.head > r.base) for up in others):
                _say(r, f"{same}, but not every other kernel's band ratio here moved with it: "
                        "the band did not move, the statistics it reads (RMSE, p99) did")
                continue
        if r.head < r.base:  # the yardstick got looser: it lets more error pass
            _say(r, f"{same}: its yardstick got looser (the same-dtype standard's error, or "
                    "the band's flash model, grew): a regression of that model")
            r.verdict, r.reason, r.regression = "yardstick looser", "yardstick-looser", True
            continue
        _say(r, f"{same}: the yardstick moved, not the kernel")
        if set(r.reason.split(", ")) <= {"worse", "above-band"}:
            # the same output: only a rule or band it now breaks (its limit) stays counted
            r.verdict, r.reason, r.regression = "yardstick moved", "yardstick-moved", False
    return rows


def _finite(x) -> bool:
    return x is not None and math.isfinite(x)


def _say(row: Row, words: str) -> None:
    row.detail = f"{row.detail}; {words}" if row.detail else words
