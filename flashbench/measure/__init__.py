"""Measurement: the accuracy cases of ``flashbench check`` and their records (:mod:`.records`;
:mod:`.forward`, :mod:`.backward`, :mod:`.varlen`, :mod:`.decode`; :mod:`.run` runs them all),
memory footprints (:mod:`.footprint`), device timing (:mod:`.timing`) and the papers' accuracy
tables (:mod:`.papers`). Each returns records; rendering lives in the CLI."""

from flashbench.measure.forward import default_cases, measure_accuracy
from flashbench.measure.records import (
    EXACT_TOL,
    Accuracy,
    Case,
    Exactness,
    Failed,
    Unavailable,
    unavailable_reason,
)

__all__ = ["EXACT_TOL", "Accuracy", "Case", "Exactness", "Failed", "Unavailable", "default_cases",
           "measure_accuracy", "unavailable_reason"]
