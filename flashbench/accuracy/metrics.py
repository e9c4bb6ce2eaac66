"""Error metrics: an output against a reference, element by element, in float64.

Absolute error ``a = |out - ref|``. Relative error divides by ``max(|ref|, tau)``
with ``tau = 0.1 * RMS(ref)``: elements much smaller than the reference's typical
magnitude (attention outputs cross zero constantly) are judged against a tenth of that
magnitude instead of blowing up; elsewhere it is the ordinary ``|out - ref| / |ref|``.
Given a precision, every metric is also reported "in eps" (divided by the precision's
machine epsilon, :mod:`flashbench.inputs.precision`).

Non-finite reference entries (LSE = -inf of rows that see no key) must be matched
exactly by ``out``; any mismatch is counted in ``nonfinite_mismatch`` and makes every
error infinite, so a wrong mask can never look accurate.
"""

from __future__ import annotations

import numpy as np

from flashbench.inputs.precision import Precision, get_precision

REL_FLOOR = 0.1  # tau = REL_FLOOR * RMS(ref)
METRICS = ("max_abs", "rmse", "abs_p50", "abs_p99", "rel_p50", "rel_p99", "rel_max")


def to_numpy(x) -> np.ndarray:
    """float64 NumPy copy of a NumPy array, ml_dtypes array or torch tensor (any device)."""
    if hasattr(x, "detach"):  # torch.Tensor, without importing torch here
        x = x.detach().cpu().double().numpy()
    return np.asarray(x).astype(np.float64)


def error_stats(out, ref, dtype: str | Precision | None = None,
                max_only: bool = False) -> dict[str, float]:
    """Error of ``out`` against ``ref`` (same shape), as a dict of floats.

    Keys: ``max_abs``, ``rmse``, ``abs_p50``, ``abs_p99``, ``rel_p50``, ``rel_p99``,
    ``rel_max`` (see the module docstring for the relative error's floor), ``count``
    (finite elements compared), ``nonfinite_mismatch``; with ``dtype`` also each
    metric divided by that precision's eps, as ``<metric>_eps`` (``dtype``: a name or its
    Precision). ``max_only``: ``max_abs`` alone of the metrics (no percentiles: the
    exactness checks read only it), the same value.
    """
    out, ref = to_numpy(out), to_numpy(ref)
    if out.shape != ref.shape:
        raise ValueError(f"out and ref must have the same shape, got {out.shape} and {ref.shape}")
    finite = np.isfinite(ref)
    mismatch = int(np.count_nonzero((np.isfinite(out) != finite) | (~finite & (out != ref))))
    stats: dict[str, float] = {"count": int(np.count_nonzero(finite)),
                               "nonfinite_mismatch": mismatch}
    if mismatch:
        stats.update(dict.fromkeys(METRICS, float("inf")))
    elif not finite.any():
        stats.update(dict.fromkeys(METRICS, 0.0))
    else:
        r = ref[finite]
        a = np.abs(out[finite] - r)
        if max_only:
            return {**stats, "max_abs": float(a.max())}
        rms = float(np.sqrt(np.mean(r * r)))
        tau = REL_FLOOR * rms if rms > 0 else 1.0
        rel = a / np.maximum(np.abs(r), tau)
        a50, a99 = percentiles(a, [50, 99])
        r50, r99 = percentiles(rel, [50, 99])
        stats.update(max_abs=float(a.max()), rmse=float(np.sqrt(np.mean(a * a))),
                     abs_p50=float(a50), abs_p99=float(a99),
                     rel_p50=float(r50), rel_p99=float(r99), rel_max=float(rel.max()))
    if dtype is not None:
        eps = get_precision(dtype).eps
        stats.update({f"{name}_eps": stats[name] / eps for name in METRICS})
    return stats


def percentiles(x: np.ndarray, qs) -> np.ndarray:
    """``np.percentile(x, qs)`` (linear interpolation), exact where ``x`` holds inf: numpy's
    lerp reads NaN (inf - inf) at an exact order statistic before an infinite one and past
    the middle of a gap up to an infinite one, and warns; the higher order statistic is the
    answer there (the exact one, or inf). A kernel returning inf read "-" for its p50 and
    leaked numpy's RuntimeWarning (a probe; "lower" read 1 for [1, inf]'s p50: a review)."""
    with np.errstate(invalid="ignore"):
        got = np.atleast_1d(np.percentile(x, qs)).astype(float)
    bad = np.isnan(got)
    if bad.any() and not np.isnan(x).any():
        got[bad] = np.percentile(x, np.asarray(qs, float)[bad], method="higher")
    return got
