"""Per-row columns, gathered file by file.

:class:`Rows` reads results files one after another. Per file it keeps the file's
facts (machine, cpu, env, commit, date, name, folder); per (file, benchmark) entry
the benchmark, its version, its parameter grid (an id in :class:`Grids`) and the
grid's size m; per row (m per entry) value, status, statistics and samples,
converted to float64 arrays right after each file so that the parsed JSON can go.

Speed: a file that lists the same benchmarks with the same grids as the file before
(the usual case: one suite, many commits) reuses that file's layout; columns are
pulled out of the parsed rows with ``operator.itemgetter`` and ``itertools.chain``
(C speed) wherever every row is well formed.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import signal
from concurrent.futures import ProcessPoolExecutor
from operator import itemgetter
from pathlib import Path

import numpy as np

from flashbench.history.files import (
    floats,
    gc_paused,
    machine_facts,
    not_number,
    read_results_file,
    sample_column,
)
from flashbench.history.frame import FAILED, MISSING, OK, SKIPPED, STAT_COLUMNS
from flashbench.history.grids import Grids


class Rows:
    """The per-row columns of the results files of ``roots`` (folders), read so far.

    ``metas[i]``: the benchmarks.json entries of folder ``roots[i]``.
    """

    def __init__(self, roots: list[Path], metas: list[dict]):
        self.roots, self.metas = roots, metas
        self.grids = Grids()
        self.files: list[tuple] = []  # frame.FILE_FACTS of each file
        self.entry_file: list[int] = []
        self.entry_bench: list[str] = []
        self.entry_version: list = []
        self.entry_grid: list[int] = []
        self.sizes: list[int] = []
        self.values: list[np.ndarray] = []
        self.status: list[np.ndarray] = []
        self.stats: dict[str, list[np.ndarray]] = {c: [] for c in STAT_COLUMNS.values()}
        self.sample_values: list[np.ndarray] = []  # per file: every sample, flat
        self.sample_counts: list[np.ndarray] = []  # per row: its number of samples, -1: none
        self.skipped: list[tuple[str, str]] = []  # (file or "file: benchmark", why)
        self.notes: list[str] = []  # readable but odd contents, reported as warnings
        # per file read: (path, files, entries, skipped, notes) counts after it (the cache's
        # record boundaries)
        self.marks: list[tuple[Path, int, int, int, int]] = []
        self._folder = -1
        self._last_grid: dict = {}  # benchmark -> (params as written, grid id, m)
        self._layout = None  # the last file's (names, params) -> (benchmarks, grids, sizes)

    def skip(self, what: str, why: str) -> None:
        self.skipped.append((what, why))  # warned by load_results, after every worker

    def read(self, files: list[tuple[int, Path]]) -> Rows:
        """Read ``files`` ((folder index, path) pairs) into these columns."""
        with gc_paused():
            for folder, path in files:
                try:
                    data = read_results_file(path)
                except (OSError, ValueError) as exc:
                    self.skip(str(path), str(exc))
                else:
                    if folder != self._folder:  # names and layouts belong to one folder
                        self._folder, self._last_grid, self._layout = folder, {}, None
                    self.add_file(folder, path, data)
                    del data
                self.marks.append((path, len(self.files), len(self.entry_bench),
                                   len(self.skipped), len(self.notes)))
        return self

    def merge(self, other: Rows) -> None:
        """Append ``other`` (the next files, read by another worker) to these columns."""
        remap = self.grids.merge(other.grids)
        self.marks += [(path, f + len(self.files), e + len(self.entry_bench),
                        s + len(self.skipped), n + len(self.notes))
                       for path, f, e, s, n in other.marks]
        self.entry_file += [f + len(self.files) for f in other.entry_file]
        self.entry_grid += [remap[g] for g in other.entry_grid]
        self.files += other.files
        for name in ("entry_bench", "entry_version", "sizes", "values", "status",
                     "sample_values", "sample_counts", "skipped", "notes"):
            getattr(self, name).extend(getattr(other, name))
        for short, chunks in self.stats.items():
            chunks.extend(other.stats[short])

    def _grid(self, bench: str, params) -> tuple[int, int]:
        """(grid id, size) of a benchmark's parameter grid as a file writes it.

        Raises ValueError when ``params`` is not a list of lists.
        """
        last = self._last_grid.get(bench)
        if last is not None and last[0] == params:
            return last[1], last[2]
        if not isinstance(params, list) or not all(isinstance(p, list) for p in params):
            raise ValueError(f"params {params!r} is not a list of lists")
        names = self.grids.names(bench, self.metas[self._folder].get(bench, {}), params)
        gid = self.grids.add(names, params)
        self._last_grid[bench] = (params, gid, self.grids.sizes[gid])
        return gid, self.grids.sizes[gid]

    def _entries(self, path: Path, results: dict, i_result: int, i_params: int | None):
        """(entry rows, grid sizes) of a file; registers their benchmarks and grids."""
        names, rows = list(results), list(results.values())
        if (self._layout is not None and set(map(type, rows)) == {list}
                and min(map(len, rows), default=0) > i_result
                and (names, cells(rows, i_params)) == self._layout[0]
                and not any(map(_longer, cells(rows, i_result), self._layout[1][2]))):
            benches, grids, sizes = self._layout[1]
            self.entry_bench += benches
            self.entry_grid += grids
            return rows, sizes
        kept, benches, grids, sizes = [], [], [], []
        for bench, row in results.items():
            if not isinstance(row, list) or len(row) <= i_result:
                self.skip(f"{path}: {bench}", "not a list holding a result")
                continue
            params = row[i_params] if i_params is not None and i_params < len(row) else None
            try:
                gid, m = self._grid(bench, [] if params is None else params)
            except ValueError as exc:
                self.skip(f"{path}: {bench}", str(exc))
                continue
            if _longer(row[i_result], m):  # cut, its values read under the wrong points
                self.skip(f"{path}: {bench}", f"{len(row[i_result])} results, longer than "
                          f"its parameter grid of {m} point(s): which value is which point "
                          "is unknown, none read")
                continue
            kept.append(row)
            benches.append(bench)
            grids.append(gid)
            sizes.append(m)
        self.entry_bench += benches
        self.entry_grid += grids
        self._layout = (((names, cells(rows, i_params)), (benches, grids, sizes))
                        if len(kept) == len(rows) else None)
        return kept, sizes

    def add_file(self, folder: int, path: Path, data: dict) -> None:
        where = {name: i for i, name in enumerate(data["result_columns"])}
        if "result" not in where:
            self.skip(str(path), "no 'result' column")
            return
        rows, sizes = self._entries(path, data["results"], where["result"], where.get("params"))
        machine, cpu = machine_facts(path, data)
        name = str(path.relative_to(self.roots[folder])) if len(self.roots) == 1 else str(path)
        self.entry_file += [len(self.files)] * len(rows)
        self.files.append((machine, cpu, data["env_name"], data["commit_hash"], data["date"],
                           name, folder))
        self.sizes += sizes
        self.entry_version += cells(rows, where.get("version"))

        values, short = gather(cells(rows, where["result"]), sizes)
        noted = len(self.notes)
        value = floats(values, str(path), self.notes)
        status = np.where(np.isnan(value), np.int8(SKIPPED), np.int8(OK))
        if len(self.notes) > noted:  # values that are no number: no result, not a skip
            status[[i for i, v in enumerate(values) if v is not None and not_number(v)]] = \
                FAILED
        if not np.isfinite(value[status == OK]).all():
            self._not_finite(path, data, value, status, sizes)
        if values.count(None):
            status[[i for i, v in enumerate(values) if v is None]] = FAILED
        for first, count in short:
            status[first:first + count] = MISSING
        if short:  # asv writes a value (or null) for every grid point: said, not silent
            benches = np.repeat(np.asarray(self.entry_bench[-len(sizes):], object), sizes)
            self.notes.append(f"{path}: {sum(c for _, c in short)} result(s) of "
                              f"{len(short)} benchmark(s) absent, their lists shorter than "
                              f"the parameter grid (e.g. {benches[short[0][0]]}): read as "
                              "missing")
        self.values.append(value)
        self.status.append(status)
        for long, short_name in STAT_COLUMNS.items():
            i = where.get(long)
            self.stats[short_name].append(
                np.full(len(values), np.nan) if i is None
                else floats(gather(cells(rows, i), sizes)[0], f"{path}: {long}", self.notes))
        samples = gather(cells(rows, where.get("samples")), sizes)[0]
        flat, counts = sample_column(samples, f"{path}: samples", self.notes)
        self.sample_values.append(flat)
        self.sample_counts.append(counts)


    def _not_finite(self, path: Path, data: dict, value, status, sizes) -> None:
        """One note per file: its infinite values (left out of steps and trends)."""
        bad = np.flatnonzero((status == OK) & ~np.isfinite(value))
        benches = np.repeat(np.asarray(self.entry_bench[-len(sizes):], object), sizes)[bad]
        shown = ", ".join(dict.fromkeys(benches.tolist()))
        self.notes.append(f"{path}: {len(bad)} value(s) not finite ({shown}) at commit "
                          f"{str(data.get('commit_hash'))[:8]}: left out of steps and trends")


def workers(jobs: int | None, files: int) -> int:
    """Worker processes for ``files`` results files: ``jobs``, else one per usable CPU
    for big corpora (a worker pays off from about 100 files), 1 without fork."""
    if "fork" not in multiprocessing.get_all_start_methods():
        return 1
    if jobs is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
        jobs = min(cpus, files // 100)
    return max(1, min(jobs, files))


def parse(roots: list[Path], metas: list[dict], files: list[tuple[int, Path]],
          jobs: int | None = None) -> Rows:
    """``files`` ((folder index, path) pairs) read into one :class:`Rows`, by this
    process and ``jobs - 1`` forked workers (:func:`workers`), each a contiguous chunk,
    merged in order: the same rows as a read by one process."""
    jobs = workers(jobs, len(files))
    if jobs == 1:
        return Rows(roots, metas).read(files)
    size = -(-len(files) // jobs)
    chunks = [files[k:k + size] for k in range(0, len(files), size)]
    with ProcessPoolExecutor(len(chunks) - 1, mp_context=multiprocessing.get_context("fork"),
                             initializer=_default_signals) as pool:
        others = [pool.submit(_read_part, roots, metas, chunk) for chunk in chunks[1:]]
        rows = Rows(roots, metas).read(chunks[0])  # this process is one of the jobs
        for other in others:
            rows.merge(other.result())
    return rows


def _default_signals() -> None:
    """A forked reader's SIGTERM and SIGINT as Python's defaults: the command's handler
    (flashbench.infra.interrupts) raised in every worker, each a traceback (a review)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _read_part(roots: list[Path], metas: list[dict], files: list) -> Rows:
    """One worker's share of :func:`parse` (returned to the parent by pickle)."""
    return Rows(roots, metas).read(files)


def _longer(cell, m: int) -> bool:
    """A result list longer than its grid of ``m`` points (a red team, 2026-12-08: a grid
    shrunk to one model while four values remained read flash_model's times as
    standard_model's)."""
    return isinstance(cell, list) and len(cell) > m


def cells(rows: list[list], i: int | None) -> list:
    """Column ``i`` of every entry row (None where a row is shorter or i is None)."""
    if i is None:
        return [None] * len(rows)
    try:
        return list(map(itemgetter(i), rows))  # C speed when every row has column i
    except IndexError:
        return [row[i] if i < len(row) else None for row in rows]


def gather(cells: list, sizes: list[int]) -> tuple[list, list[tuple[int, int]]]:
    """Entry cells (a list per entry, one item per grid point) as one flat list.

    A cell that is not a list counts as a one-item list; a cell shorter than its
    grid is padded with None (returned as (first padded row, count) pairs) and a
    longer one cut (a longer result list never gets here: :meth:`Rows._entries`). When
    every cell is a list of the right length this runs at C speed.
    """
    if set(map(type, cells)) == {list} and list(map(len, cells)) == sizes:
        return list(itertools.chain.from_iterable(cells)), []
    flat: list = []
    short: list[tuple[int, int]] = []
    for cell, m in zip(cells, sizes, strict=True):
        part = (cell if isinstance(cell, list) else [cell])[:m]
        flat += part
        if len(part) < m:
            short.append((len(flat), m - len(part)))
            flat += [None] * (m - len(part))
    return flat, short
