"""Statistics of one same-run comparison: the paired log-ratios' trimmed mean (Yuen's
trimmed t, statsmodels' TrimmedMean), its interval and tests against the factor, its
variance as a prior moderates it (:mod:`flashbench.review.prior`), and the family's
false-alarm control (Benjamini-Hochberg, statsmodels). Distributions are scipy's. The
method and its measured error rates: docs/review.md ("The statistics").
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
from scipy import special
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.robust_compare import TrimmedMean

from flashbench.review.prior import Prior

TRIM = 0.20  # share trimmed from each end of the log-ratios
MIN_TRIM_ROUNDS = 8  # fewer rounds than this are not trimmed (docs/review.md)
MIN_ROUNDS = 3  # fewer paired rounds than this never decide
LOOKS = (3, 5, 8, 13, 21, 34)  # rounds at which the adaptive schedule judges a comparison
FALSE_ALARM_RATE = 0.05  # q of Benjamini-Hochberg across a review's timing comparisons
# reviews with a false "slower" when every timing sits exactly at the factor, at most, in
# simulations where the variances truly scatter (tests/test_review_stats.py; docs/review.md)
WORST_FALSE_ALARMS = 0.10
WINSORISED_TABLE = Path(__file__).parents[1] / "data" / "winsorised_variance.json"


@dataclass(frozen=True)
class Location:
    """Centre of the log-ratios, its standard error and degrees of freedom; ``var``
    estimates one round's variance (what a prior moderates) with ``vdf`` degrees of
    freedom, and ``scale`` turns its square root into ``se``."""

    n: int
    centre: float
    se: float
    df: float
    var: float = math.nan
    scale: float = math.nan
    vdf: float = math.nan

    def moderated(self, prior: Prior | None) -> Location:
        """Its variance moderated by ``prior`` (itself without a prior or a variance, or
        where the prior does not explain its variance)."""
        if prior is None or not (self.df > 0 and math.isfinite(self.var)
                                 and math.isfinite(self.scale)):
            return self
        vdf = self.vdf
        if self.var > 0 and not prior.explains(self.var, vdf):
            return self
        var = (prior.d0 * prior.s2 + vdf * self.var) / (prior.d0 + vdf)
        return Location(self.n, self.centre, math.sqrt(var) * self.scale,
                        prior.d0 + vdf, var, self.scale, prior.d0 + vdf)

    def _decides(self) -> bool:
        return self.n >= MIN_ROUNDS and math.isfinite(self.centre)

    def interval(self, level: float) -> tuple[float, float]:
        """Two-sided ``level`` interval of the log-ratio ((-inf, inf) when undefined)."""
        if not self._decides():
            return -math.inf, math.inf
        if self.se == 0.0:
            return self.centre, self.centre
        half = float(special.stdtrit(self.df, 0.5 + level / 2.0)) * self.se
        return self.centre - half, self.centre + half

    def p_above(self, bound: float) -> float:
        """p-value of H0 "log-ratio <= bound" (small: evidence it is above)."""
        return self._tail(self.centre - bound)

    def p_below(self, bound: float) -> float:
        """p-value of H0 "log-ratio >= bound" (small: evidence it is below)."""
        return self._tail(bound - self.centre)

    def _tail(self, distance: float) -> float:
        if not self._decides():
            return 1.0
        if self.se == 0.0:
            return 0.0 if distance > 0 else 1.0
        return float(special.stdtr(self.df, -distance / self.se))


def trimmed_location(d, trim: float = TRIM) -> Location:
    """Yuen's trimmed mean of ``d`` with its Tukey-McLaughlin standard error (nothing
    trimmed below :data:`MIN_TRIM_ROUNDS` rounds: the paired t)."""
    x = np.asarray(d, dtype=float)
    n = len(x)
    if n == 0 or not np.all(np.isfinite(x)):
        return Location(n, math.nan, math.inf, 0.0)
    tm = TrimmedMean(x, trim if n >= MIN_TRIM_ROUNDS else 0.0)
    centre = float(tm.mean_trimmed)
    if n < 2:
        return Location(n, centre, math.inf, 0.0)
    sw = math.sqrt(float(tm.var_winsorized))
    if sw <= 1e-12 * max(1.0, abs(centre)):  # all (winsorised) rounds equal
        sw = 0.0
    h, g = tm.nobs_reduced, tm.lowercut
    kappa, nu = winsorised_variance(n, g)
    # se = sw / ((h / n) sqrt(n)), written as sqrt(var) * scale with var on a round's scale
    scale = math.sqrt(kappa) / ((h / n) * math.sqrt(n))
    return Location(n, centre, sw / math.sqrt(kappa) * scale, float(h - 1),
                    sw * sw / kappa, scale, nu)


@cache
def _table() -> dict[tuple[int, int], tuple[float, float]]:
    doc = json.loads(WINSORISED_TABLE.read_text())
    return {(n, g): (kappa, nu) for n, g, kappa, nu in doc["factors"]}


def winsorised_variance(n: int, g: int) -> tuple[float, float]:
    """``(kappa, nu)`` of the winsorised variance ``s_w^2`` of ``n`` normal values, ``g``
    winsorised at each end: ``kappa = E[s_w^2] / sigma^2``, and ``s_w^2 / kappa`` scatters
    like ``sigma^2 chi2_nu / nu``; read from the table ``tools/data/make_winsorised_variance.py``
    computes once (a Monte Carlo)."""
    if g == 0:
        return 1.0, float(n - 1)
    if not 0 < 2 * g < n - 1:
        raise ValueError(f"cannot winsorise {g} of {n} values at each end")
    try:
        return _table()[n, g]
    except KeyError:
        last = max(m for m, _ in _table())
        raise ValueError(f"no winsorised-variance factors for n={n}, g={g}: the table "
                         f"covers n <= {last} (tools/data/make_winsorised_variance.py)") from None


def log_ratios(base, head) -> np.ndarray:
    """``log(head_i / base_i)`` of paired positive values."""
    b, h = np.asarray(base, dtype=float), np.asarray(head, dtype=float)
    if b.shape != h.shape:
        raise ValueError(f"base and head need one value per round each, got {b.shape} "
                         f"and {h.shape}")
    if np.any(~(b > 0)) or np.any(~(h > 0)):
        raise ValueError("timings must be positive and finite")
    return np.log(h) - np.log(b)


@dataclass(frozen=True)
class Evidence:
    """The tests of one comparison against ``factor`` at one look."""

    location: Location
    p_slower: float  # H0: ratio <= factor
    p_faster: float  # H0: ratio >= 1/factor
    p_same: float  # H0: ratio outside [1/factor, factor] (TOST: larger of both)

    @property
    def p_change(self) -> float:
        return min(1.0, 2.0 * min(self.p_slower, self.p_faster))


def against_factor(d, factor: float, prior: Prior | None = None) -> Evidence:
    """The slower / faster / same tests of log-ratios ``d`` against ``factor``, with the
    variance moderated by ``prior`` where one is given."""
    return evidence(trimmed_location(d).moderated(prior), factor)


def evidence(loc: Location, factor: float) -> Evidence:
    """The slower / faster / same tests of a location against ``factor``."""
    bound = math.log(factor)
    same = max(loc.p_below(bound), loc.p_above(-bound))
    return Evidence(loc, loc.p_above(bound), loc.p_below(-bound), same)


def benjamini_hochberg(pvalues, q: float) -> np.ndarray:
    """Boolean mask of the hypotheses rejected by the Benjamini-Hochberg step-up
    procedure at false discovery rate ``q`` (NaN p-values are never rejected)."""
    p = np.asarray(pvalues, dtype=float)
    if not len(p):
        return np.zeros(0, dtype=bool)
    return multipletests(np.where(np.isnan(p), 1.0, p), alpha=q, method="fdr_bh")[0]


def fcr_level(selected: int, family: int, q: float) -> float:
    """Confidence level of the intervals shown for ``selected`` of ``family`` comparisons
    (Benjamini-Yekutieli false coverage rate at ``q``: ``1 - max(R, 1) q / m``)."""
    return 1.0 - max(selected, 1) * q / max(family, 1)
