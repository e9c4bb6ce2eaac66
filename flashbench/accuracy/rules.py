"""The baseline rule: a kernel's error against the same-dtype standard attention's.

:func:`baseline_rule` is FlashAttention's own test criterion: a kernel's error against the
float64 reference is at most ``factor`` (:data:`BASELINE_FACTOR`, 2) times the error of the
same-dtype standard attention (:func:`flashbench.numerics.standard_model`) plus a floor,
eps/4 of O's format (bf16 for fp8; FlashAttention's ``fwd_atol`` where |O| < 0.2, up to 8x
less above: docs/check.md; the LSE's: :func:`lse_floor`; fp64's: :func:`exact_floor`).
:func:`judge` applies it to (o, lse); :func:`gradient_rule` / :func:`judge_gradient` to dq,
dk, dv (:data:`GRAD_FACTOR` 3, plus :func:`gradient_floor`). A non-finite kernel error
always fails (ratio inf). Where the standard overflowed (its
error inf: the kernel passes), is exact and the kernel is not, or drew an unusually small
error (the kernel fails against it but is within the factor of the caller's *fallback*,
the same-dtype flash model's error on the same inputs: it passes), the ratio is taken
against that fallback (``yardstick``); without one it is NaN (yardstick "none"). Why:
docs/check.md; docs/backward.md.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from flashbench.accuracy.metrics import error_stats, to_numpy
from flashbench.inputs.precision import Precision, get_precision

__all__ = ["baseline_rule", "BaselineVerdict", "judge", "BASELINE_FACTOR", "GRAD_FACTOR",
           "gradient_rule", "gradient_floor", "lse_floor", "judge_gradient", "sinks_limit",
           "EXACT_TOL", "exact_floor"]

BASELINE_FACTOR = 2.0  # FlashAttention's tests: outputs within 2x the same-dtype standard
EXACT_TOL = 1e-12  # the float64 exactness bound, x max(1, the quantity's largest |value|)

class Verdict:
    """What every rule's verdict record can do (a frozen dataclass below)."""

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class BaselineVerdict(Verdict):
    """Outcome of the baseline rule for one tensor (O or LSE) and one metric.

    ``ratio`` = kernel_error / standard_error (0 when both are 0, inf when only the
    standard is exact or when the kernel's error is not finite): the rule as one number.
    It passes when the kernel's error is finite and ``kernel_error <= factor *
    standard_error + floor``, or when only the standard's error is inf (it
    overflowed): then ``ratio`` = kernel_error / the fallback error and ``yardstick``
    names the fallback; NaN with yardstick "none" when no fallback was given (module
    docstring). ``yardstick``: "standard" (the same-dtype standard model) otherwise.
    """

    metric: str
    kernel_error: float
    standard_error: float
    floor: float
    factor: float
    ratio: float
    passed: bool
    yardstick: str = "standard"
    fallback_error: float | None = None  # the second yardstick's error, where one was given

    def words(self) -> str:
        """The ratio in words, with what it is against and the limit: "4.7x the same-dtype
        standard's error 3.24e-07 (PASS iff at most 3x it + 1.19e-07)" (the ratio is not
        a share of the limit: 2.5 fails the 2x rule by 1.25x)."""
        against = {"standard": "the same-dtype standard's error",
                   "flash_model": "the same-dtype flash model's error"}.get(
            self.yardstick, f"the {self.yardstick}'s error")
        yard = self.standard_error if self.yardstick == "standard" else (
            self.kernel_error / self.ratio if 0 < self.ratio < float("inf") else float("nan"))
        also = (f", or {self.factor:g}x the same-dtype flash model's error "
                f"{self.fallback_error:.3g} + {self.floor:.3g}"
                if self.yardstick == "standard" and self.fallback_error else "")
        times = f"{self.ratio:.3g}x {against}" if self.ratio < float("inf") else \
            f"{against} is"  # an exact yardstick: "infx" read as a typo
        return (f"{times} {yard:.3g} (PASS iff at most {self.factor:g}x it + {self.floor:.3g}"
                f"{also})")


def _error(value, name: str) -> float:
    value = float(value)
    if np.isnan(value) or value < 0:
        raise ValueError(f"{name} must be an error >= 0 (inf allowed), got {value}")
    return value


def baseline_rule(kernel_error: float, standard_error: float, dtype: str | Precision,
                  factor: float = BASELINE_FACTOR, floor: float | None = None,
                  metric: str = "max_abs", fallback_error: float | None = None,
                  fallback: str = "flash_model") -> BaselineVerdict:
    """Judge a kernel's error against the same-dtype standard attention's (module docstring).

    ``kernel_error``: a number >= 0 or inf (NaN counts as inf: a kernel that produced
    NaN fails); ``standard_error``: a number >= 0 or inf (NaN is a ValueError).
    ``fallback_error`` (named ``fallback``): the yardstick of the ratio where the
    standard's error is inf and the kernel's finite (the same-dtype flash model's error),
    where the standard is exact and the kernel is not (within factor x fallback + floor: a
    gradient that is exactly 0, which plain attention's backward gets exactly and a flash
    backward gets within rounding, e.g. every row seeing one key), and where the kernel
    fails against the standard but is within factor x fallback + floor (the standard drew
    an unusually small error: tiny shapes).
    """
    prec = get_precision(dtype)
    floor = prec.out.eps / 4 if floor is None else float(floor)
    if prec.name == "fp64":  # at least the exactness bound of values up to 1 (module doc)
        floor = max(floor, EXACT_TOL)
    kernel_error = float("inf") if np.isnan(float(kernel_error)) else _error(
        kernel_error, "kernel_error")
    standard_error = _error(standard_error, "standard_error")
    yardstick = "standard"
    if not np.isfinite(kernel_error):
        ratio, passed = float("inf"), False  # non-finite output: always fails
    elif not np.isfinite(standard_error):  # the standard overflowed; the kernel did not
        passed = True
        usable = fallback_error is not None and 0 < float(fallback_error) < float("inf")
        ratio = kernel_error / float(fallback_error) if usable else float("nan")
        yardstick = fallback if usable else "none"
    elif standard_error > 0:
        ratio = kernel_error / standard_error
        passed = bool(kernel_error <= factor * standard_error + floor)
        if not passed and fallback_error is not None and 0 < float(fallback_error) < float(
                "inf") and kernel_error <= factor * float(fallback_error) + floor:
            # within factor x a correct flash kernel's own error on these very inputs (the
            # standard drew an unusually small max: tiny shapes, docs/check.md)
            ratio, passed, yardstick = kernel_error / float(fallback_error), True, fallback
    elif kernel_error > floor and fallback_error is not None and 0 < float(
            fallback_error) < float("inf"):  # the standard is exact (a structural zero)
        ratio = kernel_error / float(fallback_error)
        passed = bool(kernel_error <= factor * float(fallback_error) + floor)
        yardstick = fallback
    else:
        ratio = 0.0 if kernel_error == 0 else float("inf")
        passed = bool(kernel_error <= floor)
    usable = fallback_error is not None and 0 < float(fallback_error) < float("inf")
    return BaselineVerdict(metric, float(kernel_error), float(standard_error), floor,
                           float(factor), float(ratio), passed, yardstick,
                           float(fallback_error) if usable else None)


GRAD_FACTOR = 3.0  # FlashAttention-2's tests: gradients within 3x, outputs within 2x


def gradient_floor(ref, dtype: str | Precision) -> float:
    """FlashAttention's absolute floor for a gradient: ``2 * max |(g + 0.3) - 0.3 - g|``
    computed in the dtype, g the float64 gradient rounded to it: twice the rounding
    error of values near the gradient's largest ones (about one ulp of max |g| + 0.3)."""
    prec = get_precision(dtype)
    g = prec.stored(to_numpy(ref))
    g = g[np.isfinite(g)]
    if g.size == 0:
        return 0.0
    c = prec.compute(0.3)
    return float(2 * np.abs(prec.stored(prec.stored(g + c) - c) - g).max())


SINKS_SPREAD, SINKS_SUM = 8.0, 2.0  # sinks_limit's multiples of its random and summed parts


def sinks_limit(ref, model, do, sinks, dsinks, dtype: str | Precision) -> np.ndarray:
    """Per head, the largest error a correct kernel's dsinks (``-sum_rows P_sink D``, D =
    rowsum(dO O), summed in fp32 over a head's rows) may carry against ``dsinks``, the float64
    one of the dtype-rounded inputs: 8x its random spread, from O's error (the dtype's
    rounding, at most u = eps / 2 of each element, or ``model``'s, the flash model's O against
    ``ref``'s: the scores' rounding under large logits) and P_sink's (the LSE's: the model's
    error or fp32's), ``sqrt(sum_rows P^2 (sum_j dO^2 O_err^2 + D^2 LSE_err^2))``; plus 2x an
    fp32 sum's over the rows, ``sqrt(rows) u_fp32 sum_rows P |D|``; plus the fp32 result's
    own rounding (2 u_fp32 |dsinks|, and fp32's smallest normal). ``ref``, ``model``: (o,
    lse) float64 [..., H, N, dv] / [..., H, N] (model None: no model term); ``do`` like o.
    Per head: one limit for all heads let a head of a small sink be zeroed (a red team).
    The standard backward's dsinks is no yardstick (a max over H values, summed in float64:
    3x it plus FlashAttention's atol FAILed a correct fp32 dsinks and PASSed a zero one in
    16-bit). Measured: docs/variants.md."""
    o, lse, do = (np.asarray(to_numpy(x), dtype=np.float64) for x in (*ref, do))
    heads, u, u32 = len(sinks), get_precision(dtype).eps / 2, 2.0 ** -24
    p = np.exp(np.asarray(sinks, dtype=np.float64)[:, None] - lse)  # [..., H, N]
    p = np.where(np.isfinite(p), p, 0.0)
    # each element's error variance: rounding's (uniform, u |x| at most: u^2 x^2 / 3), or the
    # flash model's own error where larger (it holds that rounding: not both, counted twice)
    o_err2 = (u * o) ** 2 / 3
    lse_err2 = (u32 * np.where(np.isfinite(lse), lse, 0.0)) ** 2 / 3
    if model is not None:
        mo, ml = (np.asarray(to_numpy(x), dtype=np.float64) for x in model)
        o_err2 = np.maximum(o_err2, np.nan_to_num(mo - o) ** 2)
        lse_err2 = np.maximum(lse_err2, np.nan_to_num(np.where(np.isfinite(lse), ml - lse,
                                                                0.0)) ** 2)
    d = (do * o).sum(-1)

    def per_head(x):
        return x.sum(-1).reshape(-1, heads).sum(0)

    spread = np.sqrt(per_head(p ** 2 * ((do ** 2 * o_err2).sum(-1) + d ** 2 * lse_err2)))
    summed = np.sqrt(p.size // heads) * u32 * per_head(p * np.abs(d))
    own = 2 * u32 * np.abs(np.asarray(dsinks, dtype=np.float64)) + np.finfo(np.float32).tiny
    return SINKS_SPREAD * spread + SINKS_SUM * summed + own


def exact_floor(ref) -> float:
    """The fp64 floor: EXACT_TOL x max(1, the largest finite |value| of ``ref``), the bound
    the streamed float64 result keeps to the one-shot's. At fp64 the 2x rule compared two
    draws of a few ulp: the flash model itself (correct by construction) FAILed it on the
    default outliers cases (O 3.9e-14 against the standard's 1.8e-14, values near 100) and
    at large logits (scores near 5,000, blocked matrix products rounding them otherwise)."""
    values = np.abs(np.asarray(to_numpy(ref), dtype=np.float64))
    values = values[np.isfinite(values)]
    return EXACT_TOL * max(1.0, float(values.max(initial=0.0)))


def lse_floor(ref) -> float:
    """One fp32 ulp of the largest finite |LSE| of ``ref``: every kernel stores its LSE in
    fp32, so none is closer than half of it, and the standard's error is often below it
    where a row has few keys (tiny shapes: docs/check.md)."""
    lse = np.abs(np.asarray(to_numpy(ref), dtype=np.float64))
    lse = lse[np.isfinite(lse)]
    return 0.0 if lse.size == 0 else float(np.spacing(np.float32(lse.max())))


def gradient_rule(kernel_error: float, standard_error: float, dtype: str | Precision,
                  floor: float | None = None, metric: str = "max_abs",
                  fallback_error: float | None = None) -> BaselineVerdict:
    """The baseline rule for one gradient (dq, dk or dv): the kernel's error against the
    float64 gradient within :data:`GRAD_FACTOR` (3) times the same-dtype standard
    backward's (:func:`flashbench.numerics.standard_model_grad`) plus ``floor``
    (:func:`gradient_floor` of the reference gradient, as :func:`judge_gradient` passes;
    None: the baseline rule's eps/4). ``fallback_error``: the same-dtype flash model
    backward's, the yardstick where the standard backward overflowed."""
    return baseline_rule(kernel_error, standard_error, dtype, factor=GRAD_FACTOR, floor=floor,
                         metric=metric, fallback_error=fallback_error)


def _fallback_error(fallback, i, reference, metric: str, s_stats: dict, k_stats: dict,
                    bound: float | None) -> float | None:
    """The fallback's error where the standard's is not finite or is 0, or where the
    kernel's error passes ``bound`` (factor x the standard's + floor; None: the flash
    model judging itself, never its own yardstick) (``fallback``: an array, an (o, lse)
    pair indexed by ``i``, or a callable giving either; None: none given)."""
    if fallback is None or (0 < s_stats[metric] < float("inf")
                            and (bound is None or not k_stats[metric] > bound)):
        return None
    out = fallback() if callable(fallback) else fallback
    return error_stats(out if i is None else out[i], reference)[metric]


def judge_gradient(grad, standard, reference, dtype: str | Precision, metric: str = "max_abs",
                   fallback=None, model: bool = False) -> dict:
    """Error stats of one gradient and of the standard backward's against the float64
    ``reference``, and the :func:`gradient_rule` verdict with :func:`gradient_floor`:
    ``{"kernel": {...}, "standard": {...}, "verdict": BaselineVerdict}``. ``fallback``:
    the same-dtype flash model's gradient (or a callable giving it), used where the
    standard backward overflowed or the gradient fails against the standard alone
    (module docstring); ``model``: ``grad`` is that flash model's own (no rescue)."""
    prec = get_precision(dtype)  # a name becomes its Precision once, here
    k_stats = error_stats(grad, reference, prec)
    s_stats = error_stats(standard, reference, prec)
    floor = gradient_floor(reference, prec)
    if prec.name == "fp64":
        floor = max(floor, exact_floor(reference))
    bound = None if model else GRAD_FACTOR * s_stats[metric] + floor
    verdict = gradient_rule(k_stats[metric], s_stats[metric], prec, floor=floor, metric=metric,
                            fallback_error=_fallback_error(fallback, None, reference, metric,
                                                           s_stats, k_stats, bound))
    return {"kernel": k_stats, "standard": s_stats, "verdict": verdict}


def judge(kernel, standard, reference, dtype: str | Precision, metric: str = "max_abs",
          fallback=None, model: bool = False):
    """Error stats and baseline verdicts for a kernel's (o, lse) against the fp64 reference.

    ``kernel``, ``standard`` and ``reference`` are (o, lse) pairs of the same shapes.
    Returns ``{"o": {...}, "lse": {...}}`` where each holds ``kernel`` and
    ``standard`` error stats and the ``verdict`` (:class:`BaselineVerdict`).
    ``fallback``: the same-dtype flash model's (o, lse), or a callable giving it, used
    (and called) where the standard overflowed or the kernel fails against the standard
    alone (module docstring); ``model``: ``kernel`` is that flash model's own (no rescue).
    The LSE's floor is at least :func:`lse_floor`: one fp32 ulp of its largest value; at
    fp64 each floor is at least :func:`exact_floor`.
    """
    result, prec = {}, get_precision(dtype)  # a name becomes its Precision once, here
    for i, name in enumerate(("o", "lse")):
        k_stats = error_stats(kernel[i], reference[i], prec)
        s_stats = error_stats(standard[i], reference[i], prec)
        floor = prec.out.eps / 4
        if name == "lse":  # an LSE is stored in fp32: no kernel rounds it closer than that
            floor = max(floor, lse_floor(reference[i]))
        if prec.name == "fp64":
            floor = max(floor, exact_floor(reference[i]))
        bound = None if model else BASELINE_FACTOR * s_stats[metric] + floor
        verdict = baseline_rule(k_stats[metric], s_stats[metric], prec, metric=metric,
                                floor=floor,
                                fallback_error=_fallback_error(fallback, i, reference[i],
                                                               metric, s_stats, k_stats, bound))
        result[name] = {"kernel": k_stats, "standard": s_stats, "verdict": verdict}
    return result
