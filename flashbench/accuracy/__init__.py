"""Accuracy: error metrics (:mod:`.metrics`) and the rules that judge them (:mod:`.rules`:
FlashAttention's baseline rule; :mod:`.bandrule`: the band of a correct flash kernel)."""

from flashbench.accuracy.bandrule import (
    BAND_LIMIT,
    BAND_MULTIPLIER,
    BandVerdict,
    band_rule,
    rules_disagree,
)
from flashbench.accuracy.metrics import METRICS, REL_FLOOR, error_stats, to_numpy
from flashbench.accuracy.rules import (
    BASELINE_FACTOR,
    GRAD_FACTOR,
    BaselineVerdict,
    baseline_rule,
    gradient_floor,
    gradient_rule,
    judge,
    judge_gradient,
    sinks_limit,
)

__all__ = ["BAND_LIMIT", "BAND_MULTIPLIER", "BandVerdict", "band_rule", "rules_disagree",
           "METRICS", "REL_FLOOR", "error_stats", "to_numpy", "BASELINE_FACTOR", "GRAD_FACTOR",
           "BaselineVerdict", "baseline_rule", "gradient_floor", "gradient_rule", "judge",
           "judge_gradient", "sinks_limit"]
