"""Measurement: the accuracy cases of ``flashbench check`` (:mod:`.forward`, :mod:`.backward`,
:mod:`.check`), memory footprints (:mod:`.footprint`), device timing (:mod:`.timing`) and the
papers' accuracy tables (:mod:`.papers`). Each returns records; rendering lives beside the CLI."""

from flashbench.measure.forward import (
    EXACT_TOL,
    Accuracy,
    Case,
    Exactness,
    Failed,
    Unavailable,
    default_cases,
    measure_accuracy,
    unavailable_reason,
)

__all__ = ["EXACT_TOL", "Accuracy", "Case", "Exactness", "Failed", "Unavailable", "default_cases",
           "measure_accuracy", "unavailable_reason"]
