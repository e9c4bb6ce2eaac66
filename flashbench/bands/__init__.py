"""Tolerance bands: measured error bands per dtype x N x distribution x causal.

- :mod:`flashbench.bands.measure`: :func:`measure_bands` -> :class:`Band` records.
"""

from flashbench.bands.measure import (
    BAND_N,
    SEEDS,
    Band,
    Cell,
    band_dtypes,
    measure_bands,
)

__all__ = ["BAND_N", "SEEDS", "Band", "Cell", "band_dtypes", "measure_bands"]
