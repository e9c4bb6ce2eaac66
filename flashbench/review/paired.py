"""Verdicts of timings measured in the same run: a review's paired comparisons judged
together at each look of the schedule ("slower", "faster", "same" or still open) and at
its end ("not slower" or "ambiguous"), each with the family's variance prior of its look,
which its row shows (docs/review.md: "The statistics")."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from flashbench.infra.cpuload import Load
from flashbench.review.model import Row
from flashbench.review.prior import Prior, fit_prior
from flashbench.review.stats import (
    FALSE_ALARM_RATE,
    LOOKS,
    MIN_ROUNDS,
    Location,
    benjamini_hochberg,
    evidence,
    fcr_level,
    log_ratios,
    trimmed_location,
)

PRIOR_FROM_ROUNDS = 2  # a comparison lends its variance to the prior from this many rounds


@dataclass
class Paired:
    """Paired rounds of one comparison: base[i] and head[i] ran back to back."""

    benchmark: str
    params: str
    unit: str = "seconds"
    base: list[float] = field(default_factory=list)
    head: list[float] = field(default_factory=list)
    decided: tuple[str, str] | None = None  # (verdict, reason) once a look settled it
    # the family's prior at that look (None: it rested on none); its row shows the
    # interval and prior the verdict rested on, whatever is fitted later
    decided_prior: Prior | None = None
    load: Load = field(default_factory=Load)  # others' CPU while its blocks ran (ab.Sampler)
    _location: tuple = field(default=(), repr=False, compare=False)

    @property
    def rounds(self) -> int:
        return min(len(self.base), len(self.head))

    def log_ratios(self) -> np.ndarray:
        n = self.rounds
        return log_ratios(self.base[:n], self.head[:n])

    def location(self) -> Location:
        """:func:`trimmed_location` of its rounds (kept until they change)."""
        n = self.rounds
        key = (n, sum(self.base[:n]), sum(self.head[:n]))
        if not self._location or self._location[0] != key:
            self._location = (key, trimmed_location(self.log_ratios()))
        return self._location[1]


def look_level(q: float = FALSE_ALARM_RATE) -> float:
    """The rate each look spends: ``q`` shared equally by the schedule's looks."""
    return q / len(LOOKS)


def family_prior(pairs: list[Paired]) -> Prior | None:
    """The variance prior of a review's paired comparisons (:func:`fit_prior`): every
    comparison with :data:`PRIOR_FROM_ROUNDS` rounds or more lends its variance."""
    return fit_prior([p.location() for p in pairs if p.rounds >= PRIOR_FROM_ROUNDS])


def _prior_of(p: Paired, prior: Prior | None) -> Prior | None:
    """The prior a comparison is judged with: its settling look's, else ``prior``."""
    return p.decided_prior if p.decided is not None else prior


def decide(pairs: list[Paired], factor: float, q_look: float, prior: Prior | None
           ) -> list[tuple[str, str] | None]:
    """One look at every comparison: (verdict, reason) where it is settled, else None;
    earlier verdicts stand, and Benjamini-Hochberg sees every current p-value. ``prior``:
    the family's at this look (:func:`family_prior`; None: no moderation)."""
    tests = [evidence(p.location().moderated(_prior_of(p, prior)), factor) for p in pairs]
    selected = benjamini_hochberg([e.p_change for e in tests], q_look)
    out = []
    for p, e, sel in zip(pairs, tests, selected, strict=True):
        if p.decided is not None:
            out.append(p.decided)
        elif sel:
            out.append(("slower" if e.location.centre > 0 else "faster", "significant"))
        elif e.p_same <= q_look:
            out.append(("same", "below-factor"))
        else:
            out.append(None)
    return out


def settle(pairs: list[Paired], which: list[Paired], factor: float, q_look: float) -> int:
    """One look at ``which`` (members of ``pairs``), recording each decision with this
    look's prior; returns how many settled."""
    prior = family_prior(pairs)
    settled = 0
    for p, d in zip(pairs, decide(pairs, factor, q_look, prior), strict=True):
        if d is not None and p.decided is None and any(p is w for w in which):
            p.decided, p.decided_prior = d, prior
            settled += 1
    return settled


def prior_text(prior: Prior | None) -> str:
    """How a row names the prior its interval rests on."""
    if prior is None:
        return "no variance prior (its own variance alone)"
    return (f"variance prior {math.sqrt(prior.s2):.2%} per round, {prior.d0:.1f} df, "
            f"from {prior.family} comparisons")


def paired_rows(pairs: list[Paired], factor: float, q_look: float,
                outside_limit: float = math.inf) -> list[Row]:
    """Final rows of the paired comparisons (after the last look); a verdict sampled beside
    more than ``outside_limit`` CPUs of others' load is not measured (machine-loaded)."""
    prior = family_prior(pairs)
    decisions = decide(pairs, factor, q_look, prior)
    selected = sum(1 for d in decisions if d and d[1] == "significant")
    level = fcr_level(selected, len(pairs), q_look)
    rows = []
    for p, d in zip(pairs, decisions, strict=True):
        used = _prior_of(p, prior)
        own = p.location()
        loc = own.moderated(used)  # what decide judged
        moderated = loc is not own
        if d is None:  # not settled: below the factor is enough to rule a regression out
            hi = loc.interval(1.0 - 2.0 * q_look)[1]
            if loc.n >= MIN_ROUNDS and hi < math.log(factor):
                d = ("not slower", "not-above-factor")
            else:
                d = ("ambiguous", "too-few-samples" if loc.n < MIN_ROUNDS
                     else "budget-exhausted")
        verdict, reason = d
        show = 1.0 - 2.0 * q_look if verdict in ("same", "not slower") else level
        lo, hi = loc.interval(show)
        n = p.rounds
        detail = prior_text(used) + ("" if moderated or used is None
                                     else ", not applied: its variance is not the family's")
        if (busy := p.load.cpus) is not None and busy > outside_limit:  # ambiguous: said
            detail = (f"processes outside the review kept {busy:.2f} CPUs busy on average while "
                      f"it was sampled (limit {outside_limit:g}, --outside-limit)" + ("; " if
                      verdict == "ambiguous" else f": read {verdict}, not judged; ") + detail)
            verdict, reason = (d if verdict == "ambiguous" else ("not measured", "machine-loaded"))
        rows.append(Row(
            kind="time", benchmark=p.benchmark, params=p.params, unit=p.unit,
            verdict=verdict, reason=reason, detail=detail,
            base=float(np.median(p.base[:n])) if n else None,
            head=float(np.median(p.head[:n])) if n else None,
            ratio=math.exp(loc.centre) if math.isfinite(loc.centre) else None,
            ci_low=math.exp(lo) if math.isfinite(lo) else None,
            ci_high=math.exp(hi) if math.isfinite(hi) else None,
            ci_level=show, samples=n, regression=verdict == "slower",
            undecided=verdict in ("ambiguous", "not measured"),
            prior=used.describe() if moderated else None,
            log_ratios=[round(float(x), 7) for x in p.log_ratios()] if n else []))
    return rows
