"""Statistics of a same-run A/B review: paired ratio intervals and false-alarm control.

Pure functions of numbers (numpy and math only; no scipy, no asv).

One comparison (a benchmark grid point) yields paired rounds: in round i the base
and the head ran one block each, back to back, in alternating order (ABBA...), and
``d_i = log(head_i / base_i)`` is the round's log-ratio. Machine load moves both
halves of a round alike, so it cancels in ``d_i``; what is left scatters around
``log(ratio)``.

- Centre and interval: the 20%-trimmed mean of ``d`` with the Tukey-McLaughlin standard
  error (Yuen's trimmed t: winsorised variance, ``n - 2g - 1`` degrees of freedom,
  ``g = floor(0.2 n)``; with fewer than 8 rounds nothing is trimmed and this is the paired t
  interval: at 5 rounds a trimmed 90% interval covered 87% of normal samples, and a
  prior fitted to winsorised variances of 5 rounds, even on a round's scale (below), had
  three times the degrees of freedom it should). Trimming keeps the rounds that a burst
  of load hit from moving the interval (at 13 rounds, two at each end), while the t
  quantile keeps small samples honest. 20% rather than 10%: with two timing workers the
  other's memory-heavy calls put single rounds off by 0.05-0.7, two of 13 at times,
  which a 10% trim (one round off each end from 10 rounds on) kept. Its price, measured
  on normal rounds: a 99% interval misses 1.3-1.5% of the time at 8-21 rounds (10%:
  1.0-1.3%), and families of 40 comparisons all at the factor had a false alarm in 4-5%
  of them at q = 5% at 8 and 13 rounds (tests/test_review_stats.py checks <= 8%). The
  ratio interval is ``exp`` of the interval of ``d``.
- One-sided p-values against the factor: ``p_slower`` tests H0 "ratio <= factor",
  ``p_faster`` tests H0 "ratio >= 1/factor"; ``p_change = min(1, 2 min(...))`` is the
  two-sided form, so ``p_change <= a`` exactly when the two-sided ``1 - a`` interval
  lies beyond one end of ``[1/factor, factor]``.
- Equivalence ("same"): both one-sided tests of "ratio outside [1/factor, factor]"
  reject at level ``a`` (TOST), i.e. the ``1 - 2a`` interval lies inside.
- The family: :func:`benjamini_hochberg` over the ``p_change`` of every timing
  comparison of a review, at rate ``q``; each of the at most ``len(LOOKS)`` looks of
  the adaptive schedule gets ``q / len(LOOKS)`` (Bonferroni over looks), so repeated
  looks cannot add false alarms. The intervals shown for "slower"/"faster" verdicts
  are the false-coverage-rate adjusted ones (Benjamini & Yekutieli 2005): level
  ``1 - R q_look / m`` for R selected of m.

- Moderated variances (empirical Bayes, Smyth 2004, limma's moderated t): a review
  measures dozens of comparisons on one machine, a few rounds each, and their
  variances are alike. :func:`fit_prior` fits a scaled inverse chi-square prior
  (``s0^2`` with ``d0`` degrees of freedom) to every comparison's variance; each
  comparison's variance is then ``(d0 s0^2 + d s^2) / (d0 + d)`` with ``d0 + d``
  degrees of freedom (for a trimmed comparison ``s^2`` is its winsorised variance over
  ``kappa`` and ``d`` is ``nu``, :func:`winsorised_variance`; its unmoderated t keeps
  Yuen's ``n - 2g - 1``, a little more than ``nu``). With 3 rounds a plain t
  interval has 2 degrees of freedom and a 99.9% quantile of 22: it takes about eight
  rounds to clear a factor of 1.1 at a 1.2x change, the machine's noise allowing
  four. The prior's ``d0`` is estimated
  from how much the variances differ: alike variances lend many degrees of freedom,
  scattered ones few (``d0`` near 0 is the plain t again). A comparison's own
  variance keeps its weight, so one round hit by load still widens its interval.

Zero variance (all rounds equal) gives a zero-width interval without a prior:
decisive when it lies off the factor's boundary, p = 1 on it. Fewer than
:data:`MIN_ROUNDS` rounds decide nothing (p = 1, infinite interval).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np

TRIM = 0.20  # share trimmed from each end of the log-ratios
MIN_TRIM_ROUNDS = 8  # fewer rounds than this are not trimmed (module docstring)
MIN_ROUNDS = 3  # fewer paired rounds than this never decide
LOOKS = (3, 5, 8, 13, 21, 34)  # rounds at which the adaptive schedule judges a comparison
FALSE_ALARM_RATE = 0.05  # q of Benjamini-Hochberg across a review's timing comparisons


# --------------------------------------------------------------------------- Student t


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularised incomplete beta (modified Lentz)."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbt = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x)
           + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(lbt) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lbt) * _betacf(b, a, 1.0 - x) / b


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with ``df`` degrees of freedom (df > 0)."""
    if math.isnan(t):
        return math.nan
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return tail if t > 0 else 1.0 - tail


def t_quantile(p: float, df: float) -> float:
    """The t with P(T <= t) = p (0 < p < 1), by bisection on :func:`t_sf`."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_sf(hi, df) > 1.0 - p:
        hi *= 2.0
        if hi > 1e12:
            return math.inf
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_sf(mid, df) > 1.0 - p:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return 0.5 * (lo + hi)


# --------------------------------------------------------------------------- one comparison


@dataclass(frozen=True)
class Location:
    """Centre of the log-ratios, its standard error and degrees of freedom.

    ``var`` estimates the variance of one round's log-ratio (a winsorised variance
    divided by :func:`winsorised_variance`, so trimmed and untrimmed comparisons
    share a scale) and ``scale`` is the factor that turns its square root into ``se``
    (``se = sqrt(var) * scale``): what a prior moderates (:meth:`moderated`)."""

    n: int
    centre: float
    se: float
    df: float
    var: float = math.nan
    scale: float = math.nan
    vdf: float = math.nan  # degrees of freedom of var (:func:`winsorised_variance`)

    @property
    def var_df(self) -> float:
        """The degrees of freedom ``var`` has (``vdf``; ``df`` where none was given)."""
        return self.vdf if math.isfinite(self.vdf) else self.df

    def moderated(self, prior: Prior | None) -> Location:
        """This location with its variance moderated by ``prior`` (itself without one,
        where it has no variance of its own, or where the prior does not explain its
        variance: :meth:`Prior.explains`)."""
        if prior is None or not (self.df > 0 and math.isfinite(self.var)
                                 and math.isfinite(self.scale)):
            return self
        vdf = self.var_df
        if self.var > 0 and not prior.explains(self.var, vdf):
            return self  # a variance not of the family: its own, unmoderated
        var = (prior.d0 * prior.s2 + vdf * self.var) / (prior.d0 + vdf)
        return Location(self.n, self.centre, math.sqrt(var) * self.scale,
                        prior.d0 + vdf, var, self.scale, prior.d0 + vdf)

    def interval(self, level: float) -> tuple[float, float]:
        """Two-sided ``level`` interval of the log-ratio ((-inf, inf) when undefined)."""
        if self.n < MIN_ROUNDS or not math.isfinite(self.centre):
            return -math.inf, math.inf
        if self.se == 0.0:
            return self.centre, self.centre
        half = t_quantile(0.5 + level / 2.0, self.df) * self.se
        return self.centre - half, self.centre + half

    def p_above(self, bound: float) -> float:
        """p-value of H0 "log-ratio <= bound" (small: evidence it is above)."""
        if self.n < MIN_ROUNDS or not math.isfinite(self.centre):
            return 1.0
        if self.se == 0.0:
            return 0.0 if self.centre > bound else 1.0
        return t_sf((self.centre - bound) / self.se, self.df)

    def p_below(self, bound: float) -> float:
        """p-value of H0 "log-ratio >= bound" (small: evidence it is below)."""
        if self.n < MIN_ROUNDS or not math.isfinite(self.centre):
            return 1.0
        if self.se == 0.0:
            return 0.0 if self.centre < bound else 1.0
        return t_sf((bound - self.centre) / self.se, self.df)


def trimmed_location(d, trim: float = TRIM) -> Location:
    """Tukey-McLaughlin trimmed mean of ``d`` with its standard error (module docstring)."""
    x = np.sort(np.asarray(d, dtype=float))
    n = len(x)
    if n == 0 or not np.all(np.isfinite(x)):
        return Location(n, math.nan, math.inf, 0.0)
    g = int(math.floor(trim * n)) if n >= MIN_TRIM_ROUNDS else 0
    centre = float(x[g:n - g].mean())
    if n < 2:
        return Location(n, centre, math.inf, 0.0)
    w = x.copy()
    w[:g], w[n - g:] = x[g], x[n - g - 1]
    sw = float(np.std(w, ddof=1))
    if sw <= 1e-12 * max(1.0, abs(centre)):  # all (winsorised) rounds equal
        sw = 0.0
    h = n - 2 * g
    # var on the scale of a round's variance (what a family prior pools), se unchanged
    kappa, nu = winsorised_variance(n, g)
    scale = math.sqrt(kappa) / ((h / n) * math.sqrt(n))
    return Location(n, centre, sw / math.sqrt(kappa) * scale, float(h - 1),
                    sw * sw / kappa, scale, nu)


@cache
def winsorised_variance(n: int, g: int) -> tuple[float, float]:
    """``(kappa, nu)`` of the winsorised variance ``s_w^2`` of ``n`` normal values with
    ``g`` winsorised at each end: ``kappa = E[s_w^2] / sigma^2`` and ``nu`` the degrees
    of freedom of the chi-square that ``s_w^2 / kappa`` is treated as (``sigma^2
    chi2_nu / nu``, matched on the variance of ``log s_w^2``). ``(1, n - 1)`` when
    ``g = 0``.

    A winsorised variance runs below the variance (20% of 5 values: 0.35 of it) and
    scatters more than its ``n - 2g - 1`` degrees of freedom say (5 values: like 1.8,
    not 2). Comparisons at different round counts are trimmed differently and a family
    prior pools their variances (:func:`fit_prior`), so each enters on one scale, a
    round's variance, with the degrees of freedom it has. Monte Carlo over 40,000
    normal samples, the seed fixed by ``(n, g)`` (the same every run of one numpy
    version; the chi-square's mean of ``log`` then agrees with the samples' within
    0.005 from 8 values on, 0.026 at 5)."""
    if g == 0:
        return 1.0, float(n - 1)
    if not 0 < 2 * g < n - 1:
        raise ValueError(f"cannot winsorise {g} of {n} values at each end")
    x = np.sort(np.random.default_rng(1000 * n + g).standard_normal((40_000, n)), axis=1)
    x[:, :g] = x[:, [g]]
    x[:, n - g:] = x[:, [n - g - 1]]
    v = np.var(x, axis=1, ddof=1)
    kappa = float(v.mean())
    return kappa, 2.0 * trigamma_inverse(float(np.log(v).var()))


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
    variance moderated by ``prior`` where one is given (:func:`fit_prior`)."""
    loc = trimmed_location(d).moderated(prior)
    bound = math.log(factor)
    same = max(loc.p_below(bound), loc.p_above(-bound))
    return Evidence(loc, loc.p_above(bound), loc.p_below(-bound), same)


# --------------------------------------------------------------------------- the prior

MAX_PRIOR_DF = 100.0  # d0 is capped: variances that agree perfectly lend no more than this
MIN_FAMILY = 4  # fewer comparisons with a variance than this fit no prior


def digamma(x: float) -> float:
    """The digamma function psi(x) for x > 0 (recurrence up to 10, then the asymptotic
    series; absolute error below 1e-12)."""
    if not x > 0:
        raise ValueError(f"digamma needs x > 0, got {x}")
    acc = 0.0
    while x < 10.0:
        acc -= 1.0 / x
        x += 1.0
    f = 1.0 / (x * x)
    return acc + math.log(x) - 0.5 / x - f * (1 / 12 - f * (1 / 120 - f * (1 / 252 - f * (
        1 / 240 - f / 132))))


def trigamma(x: float) -> float:
    """The trigamma function psi'(x) for x > 0 (same method as :func:`digamma`)."""
    if not x > 0:
        raise ValueError(f"trigamma needs x > 0, got {x}")
    acc = 0.0
    while x < 10.0:
        acc += 1.0 / (x * x)
        x += 1.0
    f = 1.0 / (x * x)
    return acc + 1.0 / x + f / 2.0 + f / x * (1 / 6 - f * (1 / 30 - f * (1 / 42 - f / 30)))


def trigamma_inverse(y: float) -> float:
    """The x > 0 with trigamma(x) = y (y > 0), by bisection on log x (trigamma falls)."""
    if not y > 0:
        raise ValueError(f"trigamma_inverse needs y > 0, got {y}")
    lo, hi = -30.0, 30.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if trigamma(math.exp(mid)) > y:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12:
            break
    return math.exp(0.5 * (lo + hi))


def f_sf(f: float, d1: float, d2: float) -> float:
    """P(F > f) for Fisher's F with ``d1`` and ``d2`` degrees of freedom."""
    if f <= 0.0:
        return 1.0
    if math.isinf(f):
        return 0.0
    return _betainc(d2 / 2.0, d1 / 2.0, d2 / (d2 + d1 * f))


OUTLIER_P = 1e-7  # a variance the prior explains with less chance than this is its own
INITIAL_SHARE = 0.8  # the robust fit starts from the lower 80% of the family's variances


@dataclass(frozen=True)
class Prior:
    """A scaled inverse chi-square prior of the comparisons' variances: ``s2`` with
    ``d0`` degrees of freedom, fitted from ``family`` comparisons, of which ``outliers``
    have variances it does not explain (:meth:`explains`: left out of the fit, and not
    moderated)."""

    s2: float
    d0: float
    family: int
    outliers: int = 0

    def explains(self, var: float, df: float) -> bool:
        """Whether a comparison's variance ``var`` on ``df`` degrees of freedom is one
        the prior makes likely enough: under it ``var / s2`` is F(df, d0), and one above
        that distribution's upper :data:`OUTLIER_P` quantile is not moderated."""
        return f_sf(var / self.s2, df, self.d0) >= OUTLIER_P


def _centred_log_var(var: float, df: float) -> float:
    """Smyth's ``e = log s^2 - digamma(d/2) + log(d/2)`` of one comparison."""
    return math.log(var) - digamma(df / 2.0) + math.log(df / 2.0)


def _moments(pairs) -> tuple[float, float]:
    e = np.array([_centred_log_var(v, d) for v, d in pairs])
    spread = float(np.var(e, ddof=1)) - float(np.mean([trigamma(d / 2.0) for _, d in pairs]))
    mean = float(e.mean())
    d0 = min(2.0 * trigamma_inverse(spread), MAX_PRIOR_DF) if spread > 0 else MAX_PRIOR_DF
    return math.exp(mean + digamma(d0 / 2.0) - math.log(d0 / 2.0)), d0


def fit_prior(locations) -> Prior | None:
    """The prior of a family's variances by Smyth's (2004) moments of log variances,
    made robust to comparisons whose variance is not of the family.

    Each location with a positive, finite variance and ``df >= 1`` takes part; with
    ``e = log s^2 - digamma(d/2) + log(d/2)``, the mean of ``e`` estimates
    ``log s0^2 - digamma(d0/2) + log(d0/2)`` and the variance of ``e`` less the mean of
    ``trigamma(d/2)`` estimates ``trigamma(d0/2)``. Variances more alike than sampling
    alone makes them give the cap :data:`MAX_PRIOR_DF`. None with fewer than
    :data:`MIN_FAMILY` such locations.

    Robust: a few erratic comparisons (measured here: multi-second torch calls at
    N = 4096 whose rounds jumped by 0.2-0.4 in log-ratio, among 60 that agreed within
    1-3%) spread the log variances so far that ``d0`` fell to 1.7, and the prior lent
    almost nothing: a 1.2x slowdown whose three rounds read 0.18, 0.18, 0.19 kept an
    interval of 1.02-1.42 and stayed open. So the fit starts from the lower
    :data:`INITIAL_SHARE` of ``e``, then repeats: keep every comparison the prior
    explains (:meth:`Prior.explains`), fit again on those, until the kept set stays the
    same. The cut is far out (:data:`OUTLIER_P`): at 0.001 a family whose variances
    truly scatter (a scaled inverse chi-square with d0 = 3-5, simulated, every ratio at
    the factor) lost its upper tail to the cut, and false alarms rose from 7-8% of
    families with the plain fit to 9-10%; at 1e-7 they are the plain fit's. The
    comparisons left out keep their own variance (:meth:`Location.moderated`).
    """
    pairs = [(loc.var, loc.var_df) for loc in locations
             if loc.df >= 1 and math.isfinite(loc.var) and loc.var > 0]
    if len(pairs) < MIN_FAMILY:
        return None
    order = sorted(pairs, key=lambda vd: _centred_log_var(*vd))
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


# --------------------------------------------------------------------------- the family


def benjamini_hochberg(pvalues, q: float) -> np.ndarray:
    """Boolean mask of the hypotheses rejected by the Benjamini-Hochberg step-up
    procedure at false discovery rate ``q`` (NaN p-values are never rejected)."""
    p = np.asarray(pvalues, dtype=float)
    m = len(p)
    reject = np.zeros(m, dtype=bool)
    if m == 0:
        return reject
    p = np.where(np.isnan(p), 1.0, p)
    order = np.argsort(p, kind="stable")
    passed = np.nonzero(p[order] <= q * np.arange(1, m + 1) / m)[0]
    if len(passed):
        reject[order[: passed[-1] + 1]] = True
    return reject


def fcr_level(selected: int, family: int, q: float) -> float:
    """Confidence level of the intervals shown for ``selected`` of ``family`` comparisons
    (Benjamini-Yekutieli false coverage rate at ``q``: ``1 - max(R, 1) q / m``)."""
    return 1.0 - max(selected, 1) * q / max(family, 1)
