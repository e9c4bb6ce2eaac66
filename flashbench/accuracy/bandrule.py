"""The band rule: a kernel's error statistics against the band of a correct flash kernel.

The baseline rule (:mod:`flashbench.accuracy.rules`) bounds a kernel's max error by 2x
plain same-dtype attention's plus a floor: plain attention rounds S and P to the dtype,
so a flash kernel with a real precision defect can sit 2-4x above a correct one and still
pass. The band rule compares the kernel with what a correct flash kernel shows on the same
case: :mod:`flashbench.bands.case` gives each statistic's *edge* (its largest value over
the flash model's seeds of that case), and ::

    ratio = max over s of  kernel_s / (BAND_MULTIPLIER[group][s] * edge_s);  PASS iff <= 1

with the kernel's error against the float64 reference of its inputs as it received them
(dtype-rounded); statistics and multipliers measured (docs/bandrule.md). An edge below
1/16 of the max-abs edge is raised to it. Bad input is a ValueError, never a PASS.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from flashbench.accuracy.rules import Verdict

__all__ = ["BAND_LIMIT", "BAND_MULTIPLIER", "BAND_GROUP", "EDGE_FLOOR", "BandVerdict", "band_rule",
           "multipliers", "rules_disagree", "times_edge"]

# inputs -> group -> statistic -> multiplier: 1.2x the worst of 1,037 correct-kernel runs
# (studies/band_calibration.py, seed 2026; docs/bandrule.md), rounded up. "outliers" (0.1% of
# entries N(0, 100)) vary more from seed to seed; "large-logits" (scores near 1e4, rounded by
# ~1e-3 in fp32) depend on the kernel's score arithmetic (exp or exp2, where the scale is
# applied), so correct kernels spread far wider around the flash model than seeds do.
BAND_MULTIPLIER: dict[str, dict[str, dict[str, float]]] = {
    "normal": {"o": {"rmse": 1.4, "abs_p99": 1.4},
               "lse": {"rmse": 2.0, "abs_p99": 2.0},
               "grad": {"rmse": 1.4, "abs_p99": 1.4}},
    "outliers": {"o": {"rmse": 2.0, "abs_p99": 2.0},
                 "lse": {"rmse": 4.5, "abs_p99": 4.5},
                 "grad": {"rmse": 2.6, "abs_p99": 2.6}},
    "large-logits": {"o": {"rmse": 16.0, "abs_p99": 16.0},
                     "lse": {"rmse": 2.0, "abs_p99": 2.0},
                     "grad": {"rmse": 32.0, "abs_p99": 32.0}},
}
BAND_LIMIT = 1.0  # the band rule passes at ratio <= 1 (the multipliers are inside the ratio)
BAND_GROUP = {"o": "o", "lse": "lse", "dq": "grad", "dk": "grad", "dv": "grad"}
EDGE_FLOOR = 1 / 16  # an RMSE / percentile edge is at least this x the max-abs edge


@dataclass(frozen=True)
class BandVerdict(Verdict):
    """The band rule for one tensor: ``ratio`` (the largest of ``ratios``, set by ``stat``),
    ``passed`` (ratio <= 1), the kernel's statistics, the edges used (floored), the
    multipliers and where the band came from (``source``: "table" or "measured")."""

    tensor: str
    ratio: float
    passed: bool
    stat: str
    ratios: dict
    kernel: dict
    edges: dict
    multipliers: dict
    source: str = "measured"


def _number(value, what: str, allow_inf: bool) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a number, got {value!r}") from None
    if math.isnan(x) or x < 0 or (math.isinf(x) and not allow_inf):
        raise ValueError(f"{what} must be a {'' if allow_inf else 'finite '}number >= 0, "
                         f"got {x} (a NaN statistic is never judged: it would read as a PASS)")
    return x


def multipliers(tensor: str, dist: str = "normal") -> dict[str, float]:
    """{statistic: multiplier} of the band rule for ``tensor`` on inputs ``dist``."""
    if tensor not in BAND_GROUP:
        raise ValueError(f"tensor must be one of {list(BAND_GROUP)}, got {tensor!r}")
    if dist not in BAND_MULTIPLIER:
        raise ValueError(f"dist must be one of {list(BAND_MULTIPLIER)} (the band rule's "
                         f"calibrated inputs), got {dist!r}")
    return dict(BAND_MULTIPLIER[dist][BAND_GROUP[tensor]])


def band_rule(kernel_stats: Mapping, edges: Mapping, tensor: str, dist: str = "normal",
              source: str = "measured") -> BandVerdict:
    """Judge one tensor's error statistics (:func:`flashbench.accuracy.error_stats` of the
    kernel against the reference of its rounded inputs) against a band's ``edges``
    (``{stat: edge}``, with ``max_abs``) with the multipliers of inputs ``dist`` (module
    docstring). An infinite kernel statistic (a non-finite output) fails with ratio inf."""
    multipliers_ = multipliers(tensor, dist)
    missing = [s for s in (*multipliers_, "max_abs") if s not in edges]
    if missing:
        raise ValueError(f"band edges of {tensor} lack {missing}")
    top = _number(edges["max_abs"], f"band edge max_abs of {tensor}", allow_inf=False)
    ratios, used, seen = {}, {}, {}
    for stat, mult in multipliers_.items():
        if stat not in kernel_stats:
            raise ValueError(f"kernel statistics of {tensor} lack {stat!r}")
        k = _number(kernel_stats[stat], f"kernel {stat} of {tensor}", allow_inf=True)
        e = max(_number(edges[stat], f"band edge {stat} of {tensor}", allow_inf=False),
                EDGE_FLOOR * top)
        seen[stat], used[stat] = k, e
        ratios[stat] = k / (mult * e) if e > 0 else (0.0 if k == 0 else math.inf)
    stat = max(ratios, key=ratios.get)
    return BandVerdict(tensor, ratios[stat], ratios[stat] <= 1, stat, ratios, seen, used,
                       multipliers_, source)


DEFECT_TABLE = "docs/check.md#what-each-rule-can-see"
# the band rule's FAILs by tensor, and the defects of that table (and issue 36's correct
# but less accurate form) that show there: the likely causes a FAIL names
LIKELY_CAUSES = {
    "o": "the O accumulator kept in the dtype between key blocks, P rounded to a coarser "
         "dtype, scores stored in the dtype, or P = exp(S - LSE) with an fp32 LSE (each row "
         "scaled by the LSE's rounding: its error 1.3x the softmax form's, 1.5x a flash "
         "kernel's at fp32 N=4096)",
    "lse": "the running max, rescale factor or l kept in the dtype, the LSE rounded to the "
           "dtype, or an LSE in base 2",
    "dq": "the dQ accumulator kept in the dtype between key blocks",
    "dk": "dK accumulated in the dtype, or P recomputed from a rounded LSE",
    "dv": "dV accumulated in the dtype, or P recomputed from a rounded LSE",
}


# a band ratio above this is no rounding point: the result itself is wrong. The precision
# defects of docs/check.md's table reach 36,690x (l kept in fp16), so at 16 bits a wrong
# scale (1e3-1e4x) is not told from them by its ratio alone; at fp32 it reads 7.7e6x
GROSS = 1e5
# above this a 16-bit FAIL names a wrong result beside the precision defects: they reach
# past it (O accumulated in bf16: hundreds), and so do logic errors (a red team's 16 of 192
# q.k columns dropped: 617x, a 1/sqrt(dv) scale at 192/128: 538x, "likely the accumulator")
AMBIGUOUS = 100.0
# the most a precision defect of docs/check.md's table reaches in the same-dtype standard's
# max error (l kept in bf16, its LSE: 61.28x); past it a wrong result is named first (a
# probe's q.k over 64 of 192 columns in bf16: 98x the standard's, 201x the band's edge, read
# "likely the O accumulator" under the 100x that named it before)
DEFECTS_REACH = 80.0  # the 61.28x measured, with a margin (another shape or seed)
# at fp32 and wider no "kept in the dtype" defect exists (the flash model keeps everything
# in fp32 there); the causes are narrower roundings inside an fp32 kernel: tf32 matmul inputs,
# an accumulator or P in fp16 / bf16 (1,410x the edge for O rounded to fp16 every 16 keys),
# or the exp(S - LSE) form; a wrong result can read as small (a sink left out: 22,702x)
WIDE = ("fp32", "tf32", "fp64")  # tf32: inputs rounded, everything else fp32
NEAR_EDGE = 1.6  # an fp32 FAIL this near the band's edge: the exp(S - LSE) form first
WIDE_CAUSE = ("a narrower rounding inside the kernel: matmul inputs rounded to tf32 (Triton's "
              "and cuBLAS's default for fp32 on a GPU; input_precision=\"ieee\" keeps fp32), "
              "an accumulator, P or the scores kept in fp16 or bf16, or P = exp(S - LSE) with an "
              "fp32 LSE (about 1.1-1.5x the band's edge); above about 100x it may as well be a "
              "wrong result (a sink left out of the LSE read 22,702x)")


STANDARD_LIKE = (0.85, 1.2)  # a 16-bit max error this near the standard model's: its form


def times_edge(ratio: float) -> str:
    """``ratio`` x the band's edge, in words; an infinite one says where it comes from (a
    probe read "infx its band's edge")."""
    if ratio == float("inf"):
        return ("an infinite error (a value finite where the true one is -inf, a row that "
                "sees no key, or the reverse)")
    return f"{ratio:.3g}x the band's edge"


def likely_cause(tensor: str, ratio: float | None = None, dtype: str | None = None,
                 standard_ratio: float | None = None) -> str:
    """What a band FAIL on ``tensor`` most likely means, with the defect table's link; at a
    band ratio (``ratio``) above :data:`GROSS`, no precision defect reaches that far: a wrong
    result. An fp32 or fp64 ``dtype`` has causes of its own (:data:`WIDE_CAUSE`). In 16
    bits, a max error within :data:`STANDARD_LIKE` of the same-dtype standard model's
    (``standard_ratio``) names the materialised form first (a red team, 2026-12-06:
    FlashAttention's own reference backward was told to look for accumulators it has not);
    over :data:`DEFECTS_REACH` x it, a wrong result (the defect table's reach; zero bf16
    gradients read "likely the dQ accumulator", a probe, 2026-12-07)."""
    if ratio is not None and ratio > GROSS:
        return (f"{times_edge(ratio)} is beyond any rounding point: a wrong result "
                "(the scale, the mask or its alignment, the softmax, a sink, the inputs' "
                f"layout, an LSE in another base), not a precision loss ({DEFECT_TABLE})")
    if dtype in WIDE:
        if ratio is not None and ratio > AMBIGUOUS:  # an LSE off by 0.01 read 23,345x
            return (f"at {ratio:.3g}x the band's edge a wrong result (the scale, the mask, a "
                    "sink, a row or key left out, an LSE off by a constant: a sink left out of "
                    "the LSE read 22,702x), or a rounding far narrower than fp32 inside the "
                    "kernel: matmul inputs in tf32 (Triton's and cuBLAS's default for fp32 on "
                    "a GPU), an accumulator, P or the scores kept in fp16 or bf16 (O rounded to "
                    f"fp16 every 16 keys read 1,410x) ({DEFECT_TABLE})")
        if tensor == "o" and ratio is not None and ratio <= NEAR_EDGE:  # a newcomer's kernel
            # read four causes with this one last (1.06-1.12 of its limit)
            return (f"likely P = exp(S - LSE) with an fp32 LSE (O = P @ V: a correct form "
                    "whose rows carry the LSE's rounding, 1.1-1.5x the band's edge; the band "
                    "rule holds a kernel to a flash kernel's online softmax), else "
                    f"{WIDE_CAUSE} ({DEFECT_TABLE})")
        return f"likely {WIDE_CAUSE} ({DEFECT_TABLE})"
    causes = LIKELY_CAUSES.get(tensor, "a rounding point moved to the dtype")
    if ratio is not None and ratio > AMBIGUOUS:  # a red team's dropped columns read 617x
        causes += (f"; at {ratio:.3g}x the edge it may as well be a wrong result (the scale, "
                   "the mask, columns or keys left out: such errors read from tens to 1e4x "
                   "the edge, a 1/sqrt(dv) scale 20-540x)")
    if standard_ratio is not None and standard_ratio > DEFECTS_REACH:  # zero gradients: 196x
        return (f"{standard_ratio:.3g}x the same-dtype standard's max error, past the "
                f"{DEFECTS_REACH:g}x the precision defects reach: likely a wrong result (the "
                "scale, the mask, the softmax, a head's sum, columns, a row or key left out); "
                f"else {causes} ({DEFECT_TABLE})")
    if standard_ratio is not None and STANDARD_LIKE[0] <= standard_ratio <= STANDARD_LIKE[1]:
        return (f"likely the materialised form: S and P (dS) stored in the dtype, as the "
                f"same-dtype standard model, whose max error it matches ({standard_ratio:.2f}x); "
                f"a flash kernel keeps them in fp32; else {causes} ({DEFECT_TABLE})")
    return f"likely {causes} ({DEFECT_TABLE})"


def rules_disagree(tensor: str, baseline_passed: bool, baseline_ratio: float,
                   baseline_limit: float, band: BandVerdict,
                   dtype: str | None = None) -> str | None:
    """One line saying which rule failed and why where the two disagree on ``tensor``, else
    None. ``baseline_ratio``: kernel max error / the same-dtype standard's; ``baseline_limit``
    its factor (2 forward, 3 gradients)."""
    if baseline_passed == band.passed:
        return None
    name = tensor.upper() if tensor in ("o", "lse") else tensor
    mult = band.multipliers[band.stat]
    band_text = (f"{name} {band.stat} {band.kernel[band.stat]:.2e} is "
                 f"{band.ratio * mult:.2f}x the band's edge {band.edges[band.stat]:.2e} "
                 f"(limit {mult:g}x)")
    base_text = (f"{name} max error {baseline_ratio:.2f}x the standard's "
                 f"(limit {baseline_limit:g}x + floor)")
    if not band.passed:
        return (f"band rule FAIL, baseline rule PASS: {band_text}, though within "
                f"the baseline ({base_text}): more error than a correct flash kernel shows; "
                f"{likely_cause(tensor, band.ratio, dtype, baseline_ratio)}")
    return (f"baseline rule FAIL, band rule PASS: {base_text}, though within the band "
            f"({band_text})")
