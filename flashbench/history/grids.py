"""The parameter-grid table: each distinct parameter grid of a load, parsed once.

asv writes a benchmark's parameter grid into every results file as lists of value reprs
(``[["'fp16'", "'bf16'"], ["1024"]]``); its rows are the grid's points in
``itertools.product`` order. A load meets the same few grids thousands of times, so
:class:`Grids` interns them: per grid the parsed value of every parameter at every point
and the point's ``params`` label, asv's own spelling of a parameter combination
(``"dtype='fp16', N=1024"``; ``""`` without parameters), the one key of a combination
everywhere in flashbench.

Parameter names come from the results folder's benchmarks.json. A suite whose parameters
changed since a file was written would name that file's grid wrongly; where the file's
grid does not match the declared one in count and value types,
:func:`flashbench.history.suites.legacy_param_names` gives the old suite's names.
"""

from __future__ import annotations

import itertools

import numpy as np

from flashbench.history.files import as_repr, literal
from flashbench.history.frame import FIXED, objects
from flashbench.history.suites import legacy_param_names


class Grids:
    """The table of every distinct (parameter names, grid) of a load."""

    def __init__(self):
        self.ids: dict = {}  # (parameter names, repr of the grid) -> grid id
        self.columns: list[dict[str, np.ndarray]] = []  # per grid: name -> value per point
        self.labels: list[list[str]] = []  # per grid: the params label of each point
        self.sizes: list[int] = []  # per grid: its number of points
        self.params: list[list] = []  # per grid: the grid as the file wrote it (the cache's key)
        self.literals: dict = {}  # repr -> parsed value

    def names(self, bench: str, declared: dict, params: list) -> list[str]:
        """Column names of ``params`` (a grid as a file writes it) for ``bench``, whose
        benchmarks.json entry is ``declared``. Parameters named like a fixed column get a
        ``param_`` prefix; parameters without a name are param1, param2, ..."""
        names = list(declared.get("param_names") or [])
        grid = declared.get("params")
        if grid != params and not self._same_kinds(params, grid):  # absent grid: no match
            parsed = [[literal(v, self.literals) for v in p] for p in params]
            names = legacy_param_names(bench, parsed) or names
        names = names[:len(params)] + [f"param{i + 1}" for i in range(len(names), len(params))]
        return [f"param_{p}" if p in FIXED else p for p in names]

    def _same_kinds(self, params: list, grid) -> bool:
        """Whether ``params`` has the declared ``grid``'s number of parameters, each
        holding values of types the declared one holds."""
        if not isinstance(grid, list) or len(grid) != len(params):
            return False
        for mine, theirs in zip(params, grid, strict=True):
            if not isinstance(theirs, list):
                return False
            kinds = {type(literal(v, self.literals)) for v in theirs}
            if not {type(literal(v, self.literals)) for v in mine} <= kinds:
                return False
        return True

    def add(self, names: list[str], params: list[list]) -> int:
        """The id of grid ``params`` (lists of value reprs) with parameters ``names``."""
        key = (tuple(names), repr(params))
        gid = self.ids.get(key)
        if gid is not None:
            return gid
        combos = list(itertools.product(*params))
        gid = self.ids[key] = len(self.sizes)
        self.columns.append({name: objects([literal(c[k], self.literals) for c in combos])
                             for k, name in enumerate(names)})
        self.labels.append([", ".join(f"{name}={as_repr(v)}"
                                      for name, v in zip(names, c, strict=True))
                            for c in combos])
        self.sizes.append(len(combos))
        self.params.append(params)
        return gid

    def merge(self, other: Grids) -> dict[int, int]:
        """Add ``other``'s grids (another worker's) to this table; other's id -> id here."""
        remap = {}
        for key, gid in other.ids.items():
            if key not in self.ids:
                self.ids[key] = len(self.sizes)
                self.columns.append(other.columns[gid])
                self.labels.append(other.labels[gid])
                self.sizes.append(other.sizes[gid])
                self.params.append(other.params[gid])
            remap[gid] = self.ids[key]
        return remap

    def point_rows(self, entry_grid: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Per row, its row in the table of all grids' points (entry e's rows are the
        points of its grid ``entry_grid[e]``; ``counts[e]`` of them)."""
        starts = np.concatenate([[0], np.cumsum(self.sizes)])[:-1].astype(np.int64)
        entry_start = np.concatenate([[0], np.cumsum(counts)])[:-1]
        n = int(counts.sum())
        kind = np.int32 if max(n, sum(self.sizes)) < 2**31 else np.int64  # half the memory
        at = np.repeat((starts[entry_grid] - entry_start).astype(kind), counts)
        at += np.arange(n, dtype=kind)
        return at

    def column(self, name: str) -> np.ndarray:
        """Parameter ``name`` at every point of every grid, in :meth:`point_rows`' order
        (None where a grid lacks it), objects."""
        return np.concatenate([g.get(name, np.full(size, None, dtype=object))
                               for g, size in zip(self.columns, self.sizes, strict=True)]
                              ) if self.sizes else np.empty(0, dtype=object)

    def parameters(self) -> list[str]:
        """Every parameter name, in order of first appearance."""
        return list(dict.fromkeys(name for g in self.columns for name in g))
