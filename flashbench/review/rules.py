"""The verdict rules: pure functions of measured numbers (no git, no asv, no processes).

- Timings measured in the same run (:class:`Paired`): :func:`decide` judges every
  comparison of a review together (statistics in :mod:`flashbench.review.stats`):
  "slower"/"faster" when Benjamini-Hochberg selects it and its interval lies beyond the
  factor, "same" when its interval lies inside ``[1/factor, factor]``; otherwise it is
  still open (the sampler goes on), and at the end "not slower" (interval below the
  factor), or "ambiguous" (it straddles the factor: exit 2).
- Accuracy tracks (:func:`judge_accuracy`): worse than base beyond the tolerance (and
  then also "above band" where it exceeds every earlier result of base's ancestors), a
  rule ratio above its rule's factor or not finite (2 for the forward's baseline rule,
  3 for gradients), or a non-finite head where base is finite: each a regression,
  faster or not.
- Memory (:func:`judge_memory`): peak memory in bytes, one deterministic value per
  commit: "more memory" (a regression) when head/base exceeds the factor, "less
  memory" below 1/factor, else "same".
- Values without statistics (:func:`judge_ratio_only`): a ratio beyond the factor is
  "ambiguous", never "slower" (one sample each cannot tell a change from noise).
- Coverage (:func:`judge_coverage`): failed in head (raised, or a wrong result) is a
  regression whatever base was, "still failing" (exit 2) when base failed too; measured
  in base but skipped or gone in head is "coverage lost" (exit 2, never silence).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from flashbench.review.model import Row
from flashbench.review.stats import (
    FALSE_ALARM_RATE,
    LOOKS,
    MIN_ROUNDS,
    Prior,
    against_factor,
    benjamini_hochberg,
    fcr_level,
    fit_prior,
    log_ratios,
    trimmed_location,
)

OK_STATUS = "ok"
FAILED_STATUS = "failed"  # it raised (or the worker died, or timed out): asv's "failed"
MEMORY_UNIT = "bytes"


@dataclass
class Paired:
    """Paired rounds of one comparison: base[i] and head[i] ran back to back."""

    benchmark: str
    params: str
    unit: str = "seconds"
    base: list[float] = field(default_factory=list)
    head: list[float] = field(default_factory=list)
    decided: tuple[str, str] | None = None  # (verdict, reason) once a look settled it
    # the family's variance prior at that look: the row shows the interval the verdict
    # rested on (a prior fitted later, to a noisier family, could widen it past it)
    decided_prior: Prior | None = None

    @property
    def rounds(self) -> int:
        return min(len(self.base), len(self.head))

    def log_ratios(self) -> np.ndarray:
        n = self.rounds
        return log_ratios(self.base[:n], self.head[:n])


def look_level(q: float = FALSE_ALARM_RATE, looks: int = len(LOOKS)) -> float:
    """The rate each look spends: ``q`` shared equally by the schedule's looks."""
    return q / looks


def family_prior(pairs: list[Paired]) -> Prior | None:
    """The variance prior of a review's paired comparisons (:func:`fit_prior`): every
    comparison with two rounds or more lends its variance, settled ones too."""
    return fit_prior([trimmed_location(p.log_ratios()) for p in pairs if p.rounds >= 2])


def _evidence(pairs: list[Paired], factor: float, prior: Prior | None) -> list:
    """Each comparison's tests: a settled one with the prior of the look that settled it
    (its rounds stopped there), an open one with ``prior``."""
    return [against_factor(p.log_ratios(), factor,
                           p.decided_prior if p.decided is not None and p.decided_prior
                           is not None else prior) for p in pairs]


def settle(pairs: list[Paired], which: Paired, factor: float, q_look: float
           ) -> tuple[str, str] | None:
    """One look at ``which`` (a member of ``pairs``): its decision, recorded on it with the
    family's prior at this look, or None while it is open."""
    prior = family_prior(pairs)
    decision = decide(pairs, factor, q_look, prior)[pairs.index(which)]
    if decision is not None and which.decided is None:
        which.decided, which.decided_prior = decision, prior
    return decision


_FIT = object()  # decide()'s default: fit the family's prior itself


def decide(pairs: list[Paired], factor: float, q_look: float, prior=_FIT
           ) -> list[tuple[str, str] | None]:
    """One look at every comparison: (verdict, reason) where it is settled, else None.

    Comparisons settled at an earlier look keep their verdict (their rounds stopped);
    the family is the whole list, so Benjamini-Hochberg sees every comparison's current
    p-value, and the variance prior (:func:`family_prior`) is fitted to all of them
    unless the caller has it (``prior``; None: no moderation).
    """
    if prior is _FIT:
        prior = family_prior(pairs)
    evidence = _evidence(pairs, factor, prior)
    selected = benjamini_hochberg([e.p_change for e in evidence], q_look)
    out = []
    for p, e, sel in zip(pairs, evidence, selected, strict=True):
        if p.decided is not None:
            out.append(p.decided)
        elif sel:
            out.append(("slower" if e.location.centre > 0 else "faster", "significant"))
        elif e.p_same <= q_look:
            out.append(("same", "below-factor"))
        else:
            out.append(None)
    return out


def paired_rows(pairs: list[Paired], factor: float, q_look: float) -> list[Row]:
    """Final rows of the paired comparisons (after the last look)."""
    prior = family_prior(pairs)
    decisions = decide(pairs, factor, q_look, prior)
    evidence = _evidence(pairs, factor, prior)
    selected = sum(1 for d in decisions if d and d[1] == "significant")
    level = fcr_level(selected, len(pairs), q_look)
    rows = []
    bound = math.log(factor)
    for p, d, e in zip(pairs, decisions, evidence, strict=True):
        loc = e.location
        if d is None:
            # not settled: below the factor is enough to rule a regression out
            hi = loc.interval(1.0 - 2.0 * q_look)[1]
            if loc.n >= MIN_ROUNDS and hi < bound:
                d = ("not slower", "not-above-factor")
            else:
                d = ("ambiguous", "too-few-samples" if loc.n < MIN_ROUNDS
                     else "budget-exhausted")
        verdict, reason = d
        show = 1.0 - 2.0 * q_look if verdict in ("same", "not slower") else level
        lo, hi = loc.interval(show)
        n = p.rounds
        rows.append(Row(
            kind="time", benchmark=p.benchmark, params=p.params, unit=p.unit,
            verdict=verdict, reason=reason,
            base=float(np.median(p.base[:n])) if n else None,
            head=float(np.median(p.head[:n])) if n else None,
            ratio=math.exp(loc.centre) if math.isfinite(loc.centre) else None,
            ci_low=math.exp(lo) if math.isfinite(lo) else None,
            ci_high=math.exp(hi) if math.isfinite(hi) else None,
            ci_level=show, samples=n, regression=verdict == "slower",
            undecided=verdict == "ambiguous",
            log_ratios=[round(float(x), 7) for x in p.log_ratios()] if n else []))
    return rows


def judge_accuracy(metric: str, base: float, head: float, band: list[float],
                   acc_tol: float, rule_limit: float | None = None) -> tuple[str, str, bool]:
    """(verdict, reason codes, regression) for one accuracy value (higher is worse).

    ``band``: this result's values at base's ancestors (earlier runs of the same
    benchmark version), possibly empty; "above band" qualifies a head that is worse
    than base: it never blames the head for what base already does.
    ``rule_limit``: for a rule-ratio metric (kernel error / same-dtype standard error),
    the rule's factor (:func:`flashbench.history.suites.rule_limit`); None otherwise.
    A rule ratio that is not finite fails its rule, whatever base was.
    """
    base_ok = math.isfinite(base)
    problems = []
    if not math.isfinite(head):
        if base_ok:
            problems.append("not-finite")
        if rule_limit is not None:
            problems.append("rule-fails")
        if not problems:  # both non-finite, no rule: nothing changed that can be judged
            return "same", "both-not-finite", False
        return ", ".join(p.replace("-", " ") for p in problems), ", ".join(problems), True
    worse = base_ok and head > base * (1 + acc_tol) + 1e-300
    if worse:
        problems.append("worse")
        finite_band = [v for v in band if math.isfinite(v)]
        if finite_band and head > max(finite_band) * (1 + acc_tol):
            problems.append("above-band")
    if rule_limit is not None and head > rule_limit:
        problems.append("rule-fails")
    if problems:
        return ", ".join(p.replace("-", " ") for p in problems), ", ".join(problems), True
    if base_ok and head < base * (1 - acc_tol):
        return "better", "better", False
    return "same", "within-tolerance", False


def is_memory(type_: str | None, unit: str | None) -> bool:
    """Peak memory: asv's ``peakmem_`` benchmarks, and tracks that return bytes (peak
    memory measured in a fresh subprocess: a forked benchmark inherits the forkserver's
    resident memory, so the suites measure it themselves)."""
    return type_ == "peakmemory" or (type_ == "track" and unit == MEMORY_UNIT)


def judge_memory(base: float, head: float, factor: float) -> tuple[str, str]:
    """(verdict, reason) of peak memory (bytes), one deterministic value per commit
    measured in the same run: "more memory" (a regression) when head/base > ``factor``,
    "less memory" when below 1/factor, else "same"; a value that is not a positive,
    finite number of bytes cannot be compared ("not compared", exit 2)."""
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


def judge_ratio_only(base: float, head: float, factor: float) -> tuple[str, str]:
    """(verdict, reason) of a value pair without statistics: never "slower"."""
    ratio = head / base if base > 0 else math.inf
    if 1 / factor <= ratio <= factor:
        return "same", "ratio-only"
    return "ambiguous", "ratio-only"


def judge_coverage(base_status: str, head_status: str) -> tuple[str, str] | None:
    """(verdict, reason) when the two commits do not both have a value, else None.

    Statuses: "ok", "skipped", "failed", "missing", "not-applicable". A head that failed
    is a regression ("failed") whatever base was, except a base that failed too ("still
    failing": undecided); skipped, gone or not applicable in head where base measured is
    "coverage lost"; neither measured nor failed in head: "not-measured".
    """
    if base_status == OK_STATUS and head_status == OK_STATUS:
        return None
    if head_status == FAILED_STATUS:
        if base_status == FAILED_STATUS:
            return "still failing", "still-failing"
        return "failed", "failed"
    if base_status == OK_STATUS:
        return "coverage lost", "coverage-lost"
    if head_status == OK_STATUS:
        return "coverage gained", "coverage-gained"
    return "not compared", "not-measured"


def coverage_row(kind: str, benchmark: str, params: str, unit: str, base_status: str,
                 head_status: str, base_reason: str = "", head_reason: str = "") -> Row | None:
    """The row for a grid point that does not have a value in both commits (or None)."""
    judged = judge_coverage(base_status, head_status)
    if judged is None:
        return None
    verdict, reason = judged
    detail = f"base {base_status}, head {head_status}"
    why = (head_reason if reason in ("coverage-lost", "failed", "still-failing")
           else base_reason or head_reason)
    if why:
        detail += f": {why}"
    return Row(kind=kind, benchmark=benchmark, params=params, unit=unit, verdict=verdict,
               reason=reason, detail=detail, regression=reason == "failed",
               undecided=reason in ("coverage-lost", "still-failing"))
