"""Tolerance bands: measured error bands per dtype x N x distribution x causal.

- :mod:`flashbench.bands.measure`: :func:`measure_bands` -> :class:`Band` records
  (measuring only).
- the lecture's table, a DataFrame, JSON: rendered by :mod:`flashbench.cli.bands_tables`.
- :mod:`flashbench.bands.table`: the shipped tolerance table and
  :func:`~flashbench.bands.table.tolerance` (also ``flashbench.tolerance``).
- Over history: :mod:`flashbench.history.bands`. Command line: ``flashbench bands``.
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
