"""The family's variance prior: empirical Bayes moderated variances (Smyth 2004, limma).

A review's comparisons, a few rounds each on one machine, have alike variances:
:func:`fit_prior` fits them a scaled inverse chi-square prior (``s0^2``, ``d0`` degrees of
freedom) by Smyth's moments, made robust to variances not of the family. The special
functions are scipy's; only the method and trigamma's inverse (no maintained library
has it) are written here. Why, and what it measured: docs/review.md ("The statistics").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import special

MAX_PRIOR_DF = 100.0  # d0 is capped: variances that agree perfectly lend no more than this
MIN_FAMILY = 4  # fewer comparisons with a variance than this fit no prior
OUTLIER_P = 1e-7  # a variance the prior explains with less chance than this is its own
INITIAL_SHARE = 0.8  # the robust fit starts from the lower 80% of the family's variances


@dataclass(frozen=True)
class Prior:
    """``s2`` with ``d0`` degrees of freedom, fitted from ``family`` comparisons, of which
    ``outliers`` have variances it does not explain (left out, and not moderated)."""

    s2: float
    d0: float
    family: int
    outliers: int = 0

    def explains(self, var: float, df: float) -> bool:
        """Whether ``var / s2`` on ``df`` degrees of freedom lies below the upper
        :data:`OUTLIER_P` quantile of F(df, d0)."""
        return float(special.fdtrc(df, self.d0, var / self.s2)) >= OUTLIER_P

    def describe(self) -> dict:
        """The prior as a row shows it (``s0``: the spread of a round's log-ratio)."""
        return {"s0": math.sqrt(self.s2), "d0": self.d0, "family": self.family,
                "outliers": self.outliers}


def trigamma_inverse(y: float) -> float:
    """The x > 0 with trigamma(x) = y (y > 0): Smyth's Newton iteration (limma's
    ``trigammaInverse``), which converges monotonically from ``0.5 + 1/y``."""
    if not y > 0:
        raise ValueError(f"trigamma_inverse needs y > 0, got {y}")
    if y > 1e7:
        return 1.0 / math.sqrt(y)
    if y < 1e-6:
        return 1.0 / y
    x = 0.5 + 1.0 / y
    for _ in range(50):
        tri = float(special.polygamma(1, x))
        step = tri * (1.0 - tri / y) / float(special.polygamma(2, x))
        x += step
        if -step / x < 1e-8:
            break
    return x


def _centred_log_var(var, df):
    """Smyth's ``e = log s^2 - digamma(d/2) + log(d/2)``."""
    return np.log(var) - special.digamma(df / 2.0) + np.log(df / 2.0)


def _moments(pairs) -> tuple[float, float]:
    """(s0^2, d0): ``e``'s mean estimates ``log s0^2 - digamma(d0/2) + log(d0/2)``, its
    variance less the mean of ``trigamma(d/2)`` estimates ``trigamma(d0/2)``."""
    var, df = np.array(pairs, dtype=float).T
    e = _centred_log_var(var, df)
    spread = float(np.var(e, ddof=1) - np.mean(special.polygamma(1, df / 2.0)))
    d0 = min(2.0 * trigamma_inverse(spread), MAX_PRIOR_DF) if spread > 0 else MAX_PRIOR_DF
    # no more df than its variances hold together (a family of one true variance pools their
    # sum): a spread below its expectation, likely from 4 of them, read d0 = 100 (a red team)
    d0 = min(d0, float(df.sum()))
    return float(np.exp(e.mean() + special.digamma(d0 / 2.0) - math.log(d0 / 2.0))), d0


def fit_prior(locations) -> Prior | None:
    """The prior of a family's variances (None with fewer than :data:`MIN_FAMILY` with a
    positive, finite variance and ``df >= 1``). Robust: fitted to the lower
    :data:`INITIAL_SHARE` of ``e``, then again to every variance the prior explains, until
    the kept set stays the same."""
    pairs = [(loc.var, loc.vdf) for loc in locations
             if loc.df >= 1 and math.isfinite(loc.var) and loc.var > 0]
    if len(pairs) < MIN_FAMILY:
        return None
    order = sorted(pairs, key=lambda vd: float(_centred_log_var(*vd)))
    kept = order[:max(MIN_FAMILY, math.ceil(INITIAL_SHARE * len(order)))]
    s2, d0 = _moments(kept)
    for _ in range(20):
        explained = [vd for vd in pairs if Prior(s2, d0, 0).explains(*vd)]
        if len(explained) < MIN_FAMILY or sorted(explained) == sorted(kept):
            break
        kept = explained
        s2, d0 = _moments(kept)
    prior = Prior(s2, d0, len(pairs))
    return Prior(s2, d0, len(pairs), sum(not prior.explains(*vd) for vd in pairs))
