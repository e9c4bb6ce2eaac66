"""Accuracy: error metrics (:mod:`.metrics`) and the rules that judge them (:mod:`.rules`)."""

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
)

__all__ = ["METRICS", "REL_FLOOR", "error_stats", "to_numpy", "BASELINE_FACTOR", "GRAD_FACTOR",
           "BaselineVerdict", "baseline_rule", "gradient_floor", "gradient_rule", "judge",
           "judge_gradient"]
