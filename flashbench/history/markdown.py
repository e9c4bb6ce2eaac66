"""Markdown table cells: what a GitHub Markdown table needs escaped."""

from __future__ import annotations

import pandas as pd


def escaped(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with ``|`` in its texts and column names written ``\\|``: a Markdown
    table's cell ended there (a red team, 2026-12-08: a value with ``|`` made one cell
    too many)."""
    def cell(v):
        return v.replace("|", "\\|") if isinstance(v, str) else v

    table = table.rename(columns=cell)  # a new frame: set below without touching the caller's
    for k in range(table.shape[1]):
        column = table.iloc[:, k].astype(object)
        if column.map(lambda v: isinstance(v, str) and "|" in v).any():
            table.isetitem(k, column.map(cell))
    return table
