"""asv results as one tidy pandas DataFrame, and the summaries kernel engineers read.

:func:`load_results` reads every ``<machine>/*.json`` results file (asv results
schema version 2) under a results folder, with ``benchmarks.json`` for parameter
names, types and units. One row per benchmark x parameter combination x results
file, columns:

    machine, env, commit, date (UTC), file, benchmark, params, type, unit, value,
    status, ci_99_a, ci_99_b, q25, q75, number, repeat, samples, version, <one
    column per parameter, values parsed from their reprs>

``params`` labels the row's parameter combination as asv writes it
("kernel='triton', dtype='bf16', causal=False"; "" without parameters): one key
to group a benchmark's series by. The label columns (machine, env, commit, file,
benchmark, params, type, unit, status, version) are pandas Categoricals with
sorted categories (a million rows repeat a few hundred strings), except
``commit``, whose categories are in history order (date of its first results
file): sorting by commit, or by anything mapped from it, sorts by history. A label
asv did not record is NaN. ``value``, the 99% confidence interval ``ci_99_a`` /
``ci_99_b`` and the quartiles ``q25`` / ``q75`` are float64 in the benchmark's
unit; ``number`` / ``repeat`` are float64 counts. ``samples`` holds a read-only
float64 array of the raw samples where asv recorded them (``asv run
--record-samples``), else None; the arrays are views into one buffer, so a
million of them stay cheap. Parameter columns hold Python objects (str, int,
float, bool, None), None where a benchmark lacks that parameter.

``status`` keeps asv's outcomes apart: "ok" (a number), "skipped" (asv wrote NaN:
setup raised NotImplementedError), "failed" (asv wrote null), "missing" (the file
lists fewer results than the parameter grid). A file that is not valid JSON, is
truncated, has another schema version or lacks the keys of a results file is
reported by a :class:`ResultsWarning` (path and reason) and skipped; so is a
malformed entry inside a readable file; the rest loads. Unknown keys and unknown
result columns are ignored.

Summaries of that frame (each a DataFrame):

- :func:`error_bands`: accuracy tracks per machine x kernel x dtype x causal x
  metric over history: p50 / p99 / max, latest, inside the band of earlier commits.
- :func:`throughput`: timings with a known problem shape -> TFLOP/s first / best /
  latest, change %, and % of the same run's measured matmul peak where recorded.
- :func:`steps`: commits where a series' level moved beyond its noise (asv's own
  step detection, :func:`asv.step_detect.detect_steps`).

``scripts/history_corpus.py`` measures loading and summarising a 1,000-file corpus.
"""

from __future__ import annotations

import ast
import gc
import itertools
import json
import math
import multiprocessing
import os
import re
import warnings
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from operator import itemgetter
from pathlib import Path

import numpy as np
import pandas as pd

from flashbench.inputs import Shape

__all__ = ["ResultsWarning", "load_results", "error_bands", "throughput", "throughput_points",
           "steps", "param_label", "FIXED_COLUMNS", "STATUSES"]

FIXED_COLUMNS = ["machine", "env", "commit", "date", "file", "benchmark", "params", "type",
                 "unit", "value", "status", "ci_99_a", "ci_99_b", "q25", "q75", "number",
                 "repeat", "samples", "version"]
STATUSES = ["ok", "skipped", "failed", "missing"]  # the categories of ``status``
_OK, _SKIPPED, _FAILED, _MISSING = range(4)
# asv result column -> tidy column, for the per-point statistics read as float64
_STAT_COLUMNS = {"stats_ci_99_a": "ci_99_a", "stats_ci_99_b": "ci_99_b", "stats_q_25": "q25",
                 "stats_q_75": "q75", "stats_number": "number", "stats_repeat": "repeat"}
_FIXED = frozenset(FIXED_COLUMNS)


class ResultsWarning(UserWarning):
    """A results file or entry that could not be read; the message names it and the reason."""


# --------------------------------------------------------------------------- reading files

def _read_benchmarks(root: Path) -> dict:
    path = root / "benchmarks.json"
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as exc:
        warnings.warn(f"{path}: skipped: {exc}", ResultsWarning, stacklevel=3)
        return {}
    return {k: v for k, v in data.items() if isinstance(v, dict)}


def _parse_json(raw: bytes):
    """``raw`` parsed as JSON with NaN and +-Infinity (asv writes them), through yyjson.

    yyjson builds the Python objects 5x faster than the standard library, which
    reads the same values and is the fallback where yyjson is not installed.
    Raises ValueError (json.JSONDecodeError from the fallback) for invalid JSON.
    """
    try:
        import yyjson
    except ImportError:
        return json.loads(raw)
    return yyjson.Document(raw, flags=yyjson.ReaderFlags.ALLOW_INF_AND_NAN).as_obj


def _read_results_file(path: Path) -> dict:
    """The parsed results file; raises ValueError with the reason it cannot be used."""
    try:
        data = _parse_json(path.read_bytes())
    except UnicodeDecodeError as exc:
        raise ValueError(f"not text: {exc}") from None
    except ValueError as exc:
        raise ValueError(f"not valid JSON (truncated or corrupt): {exc}") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    if data.get("version") != 2:
        raise ValueError(f"results schema version {data.get('version')!r}, expected 2")
    missing = [k for k in ("commit_hash", "env_name", "date", "params", "results",
                           "result_columns") if k not in data]
    if missing:
        raise ValueError(f"missing keys {missing}")
    if not isinstance(data["results"], dict) or not isinstance(data["result_columns"], list):
        raise ValueError("'results' must be an object and 'result_columns' a list")
    for key in ("commit_hash", "env_name"):
        if not isinstance(data[key], str):
            raise ValueError(f"{key!r} is {data[key]!r}, expected a string")
    if isinstance(data["date"], bool) or not isinstance(data["date"], (int, float)):
        raise ValueError(f"'date' is {data['date']!r}, expected milliseconds since 1970")
    return data


def _floats(items: list, where: str, notes: list) -> np.ndarray:
    """float64 array of recorded numbers (None -> NaN); anything else NaN, noted."""
    try:
        return np.array(items, dtype=float)
    except (TypeError, ValueError):
        odd = [v for v in items if v is not None and not isinstance(v, (int, float))]
        notes.append(f"{where}: {len(odd)} value(s) are not numbers (e.g. {odd[0]!r}); "
                     "read as NaN")
        return np.array([float(v) if isinstance(v, (int, float)) else math.nan
                         for v in items], dtype=float)


def _sample_column(samples: list, where: str, notes: list) -> tuple[np.ndarray, np.ndarray]:
    """(every sample as one float64 array, per point its number of samples or -1: none)."""
    if set(map(type, samples)) <= {list}:  # every point has a list (C speed)
        counts = np.fromiter(map(len, samples), np.int64, len(samples))
        listed = samples
    else:
        counts = np.array([len(x) if isinstance(x, list) else -1 for x in samples], np.int64)
        listed = [x for x in samples if isinstance(x, list)]
    total = int(counts[counts > 0].sum())
    try:
        return np.fromiter(itertools.chain.from_iterable(listed), float, total), counts
    except (TypeError, ValueError):
        return _floats(list(itertools.chain.from_iterable(listed)), where, notes), counts


def _literal(text, cache: dict):
    """A parameter value from its repr ("'fp16'" -> 'fp16', "1024" -> 1024); else the text."""
    try:
        return cache[text]
    except KeyError:
        pass
    except TypeError:  # unhashable: not a repr asv writes
        return text
    try:
        value = ast.literal_eval(text) if isinstance(text, str) else text
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        value = text
    cache[text] = value
    return value


def _repr(text) -> str:
    """A parameter value as asv writes it (its repr, a string) for the params label."""
    return text if isinstance(text, str) else repr(text)


@contextmanager
def _gc_paused():
    """Millions of small containers, none cyclic: collection would only slow loading."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


# --------------------------------------------------------------------------- the tidy frame

class _Columns:
    """The tidy frame's columns, gathered file by file and assembled once.

    Per (file, benchmark) entry it keeps the file, name, version, parameter grid and
    grid size m; per row (m per entry) value, status and statistics, converted to
    float64 after each file so the parsed JSON can go. Each distinct parameter grid
    is parsed once; rows index into the table of all grids.
    """

    def __init__(self, root: Path, meta: dict):
        self.root, self.meta = root, meta
        self.files: list[tuple] = []  # machine, env, commit, date (ms), relative path
        self.entry_file: list[int] = []
        self.entry_bench: list[str] = []
        self.entry_version: list = []
        self.entry_grid: list[int] = []
        self.sizes: list[int] = []
        self.grid_ids: dict = {}  # (parameter names, repr of the grid) -> grid id
        self.grids: list[dict[str, np.ndarray]] = []  # per grid: parameter name -> values
        self.grid_labels: list[list[str]] = []  # per grid: the params label of each point
        self.grid_sizes: list[int] = []
        self.last_grid: dict = {}  # benchmark -> (params as written, grid id, m)
        self.layout = None  # the last file's (names, params) -> (benchmarks, grids, sizes)
        self.literals: dict = {}
        self.values: list[np.ndarray] = []
        self.status: list[np.ndarray] = []
        self.stats: dict[str, list[np.ndarray]] = {c: [] for c in _STAT_COLUMNS.values()}
        self.sample_values: list[np.ndarray] = []  # per file: every sample, flat
        self.sample_counts: list[np.ndarray] = []  # per row: its number of samples, -1: none
        self.skipped: list[tuple[str, str]] = []  # (file or "file: benchmark", why)
        self.notes: list[str] = []  # readable but odd contents, reported as warnings

    def skip(self, what: str, why: str) -> None:
        self.skipped.append((what, why))  # warned by load_results, after every worker

    def read(self, files: list[Path]) -> _Columns:
        """Read ``files`` (results files under the root) into these columns."""
        with _gc_paused():
            for file in files:
                try:
                    data = _read_results_file(file)
                except (OSError, ValueError) as exc:
                    self.skip(str(file), str(exc))
                    continue
                self.add_file(file, data)
                del data
        return self

    def merge(self, other: _Columns) -> None:
        """Append ``other`` (the next files, read by another worker) to these columns."""
        remap = {}
        for key, gid in other.grid_ids.items():
            if key not in self.grid_ids:
                self.grid_ids[key] = len(self.grids)
                self.grids.append(other.grids[gid])
                self.grid_labels.append(other.grid_labels[gid])
                self.grid_sizes.append(other.grid_sizes[gid])
            remap[gid] = self.grid_ids[key]
        self.entry_file += [f + len(self.files) for f in other.entry_file]
        self.entry_grid += [remap[g] for g in other.entry_grid]
        self.files += other.files
        for name in ("entry_bench", "entry_version", "sizes", "values", "status",
                     "sample_values", "sample_counts", "skipped", "notes"):
            getattr(self, name).extend(getattr(other, name))
        for short, chunks in self.stats.items():
            chunks.extend(other.stats[short])

    def grid(self, bench: str, params) -> tuple[int, int]:
        """(grid id, size) of a benchmark's parameter grid as a file writes it.

        Raises ValueError when ``params`` is not a list of lists.
        """
        last = self.last_grid.get(bench)
        if last is not None and last[0] == params:
            return last[1], last[2]
        if not isinstance(params, list) or not all(isinstance(p, list) for p in params):
            raise ValueError(f"params {params!r} is not a list of lists")
        names = list(self.meta.get(bench, {}).get("param_names") or [])[:len(params)]
        names += [f"param{i + 1}" for i in range(len(names), len(params))]
        names = [f"param_{p}" if p in _FIXED else p for p in names]
        key = (tuple(names), repr(params))
        gid = self.grid_ids.get(key)
        if gid is None:
            combos = list(itertools.product(*params))
            gid = self.grid_ids[key] = len(self.grids)
            self.grids.append({name: _objects([_literal(c[k], self.literals) for c in combos])
                               for k, name in enumerate(names)})
            self.grid_labels.append([", ".join(f"{name}={_repr(v)}"
                                               for name, v in zip(names, c, strict=True))
                                     for c in combos])
            self.grid_sizes.append(len(combos))
        self.last_grid[bench] = (params, gid, self.grid_sizes[gid])
        return gid, self.grid_sizes[gid]

    def _entries(self, path: Path, results: dict, i_result: int, i_params: int | None):
        """(entry rows, grid sizes) of a file; registers their benchmarks and grids.

        A file listing the same benchmarks with the same parameter grids as the
        file before (the usual case: one suite, many commits) reuses its layout.
        """
        names, rows = list(results), list(results.values())
        if (self.layout is not None and set(map(type, rows)) == {list}
                and min(map(len, rows), default=0) > i_result
                and (names, _cells(rows, i_params)) == self.layout[0]):
            benches, grids, sizes = self.layout[1]
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
                gid, m = self.grid(bench, [] if params is None else params)
            except ValueError as exc:
                self.skip(f"{path}: {bench}", str(exc))
                continue
            kept.append(row)
            benches.append(bench)
            grids.append(gid)
            sizes.append(m)
        self.entry_bench += benches
        self.entry_grid += grids
        self.layout = (((names, _cells(rows, i_params)), (benches, grids, sizes))
                       if len(kept) == len(rows) else None)
        return kept, sizes

    def add_file(self, path: Path, data: dict) -> None:
        where = {name: i for i, name in enumerate(data["result_columns"])}
        if "result" not in where:
            self.skip(str(path), "no 'result' column")
            return
        rows, sizes = self._entries(path, data["results"], where["result"], where.get("params"))
        machine = data["params"].get("machine") if isinstance(data["params"], dict) else None
        self.entry_file += [len(self.files)] * len(rows)
        self.files.append((machine if isinstance(machine, str) else path.parent.name,
                           data["env_name"], data["commit_hash"], data["date"],
                           str(path.relative_to(self.root))))
        self.sizes += sizes
        self.entry_version += _cells(rows, where.get("version"))

        values, short = _gather(_cells(rows, where["result"]), sizes)
        value = _floats(values, str(path), self.notes)
        status = np.where(np.isnan(value), np.int8(_SKIPPED), np.int8(_OK))
        if values.count(None):
            status[[i for i, v in enumerate(values) if v is None]] = _FAILED
        for first, count in short:
            status[first:first + count] = _MISSING
        self.values.append(value)
        self.status.append(status)
        for long, short_name in _STAT_COLUMNS.items():
            i = where.get(long)
            self.stats[short_name].append(
                np.full(len(values), np.nan) if i is None
                else _floats(_gather(_cells(rows, i), sizes)[0], f"{path}: {long}", self.notes))
        samples = _gather(_cells(rows, where.get("samples")), sizes)[0]
        flat, counts = _sample_column(samples, f"{path}: samples", self.notes)
        self.sample_values.append(flat)
        self.sample_counts.append(counts)

    def frame(self) -> pd.DataFrame:
        counts = np.asarray(self.sizes, dtype=np.int64)
        n = int(counts.sum())
        file_of_row = np.repeat(np.asarray(self.entry_file, dtype=np.int64), counts)
        per_file = list(zip(*self.files, strict=True)) if self.files else [()] * 5
        first: dict[str, float] = {}  # commit -> date (ms) of its first results file
        for commit, date in zip(per_file[2], per_file[3], strict=True):
            first[commit] = min(first.get(commit, date), date)
        history = sorted(first, key=lambda c: (first[c], c))
        cols: dict[str, object] = {}
        for name, column in zip(("machine", "env", "commit", "date", "file"), per_file,
                                strict=True):
            if name == "date":
                dates = pd.to_datetime(np.asarray(column, dtype=np.int64), unit="ms", utc=True)
                cols[name] = dates.take(file_of_row)
            else:
                cols[name] = _labels(list(column), file_of_row,
                                     history if name == "commit" else None)
        bench = pd.Categorical(self.entry_bench)
        bench_of_row = np.repeat(bench.codes, counts)
        cols["benchmark"] = pd.Categorical.from_codes(bench_of_row, bench.categories)
        # rows -> rows of the table of all grids: entry e's rows are its grid's rows
        starts = np.concatenate([[0], np.cumsum(self.grid_sizes)])[:-1].astype(np.int64)
        entry_start = np.concatenate([[0], np.cumsum(counts)])[:-1]
        grid_of_entry = np.asarray(self.entry_grid, dtype=np.int64)
        at = np.arange(n) + np.repeat(starts[grid_of_entry] - entry_start, counts)
        cols["params"] = _labels(list(itertools.chain.from_iterable(self.grid_labels)), at)
        for name in ("type", "unit"):
            per_bench = [self.meta.get(b, {}).get(name) for b in bench.categories]
            cols[name] = _labels([v if isinstance(v, str) else None for v in per_bench],
                                 bench_of_row)
        cols["value"] = _concat(self.values, float)
        cols["status"] = pd.Categorical.from_codes(_concat(self.status, np.int8), STATUSES)
        for short, chunks in self.stats.items():
            cols[short] = _concat(chunks, float)
        cols["samples"] = pd.Series(_sample_arrays(_concat(self.sample_values, float),
                                                   _concat(self.sample_counts, np.int64)),
                                    dtype=object, copy=False)
        versions = [v if isinstance(v, str) else None for v in self.entry_version]
        cols["version"] = _labels(versions, np.repeat(np.arange(len(versions)), counts))
        params = list(dict.fromkeys(name for g in self.grids for name in g))
        for name in params:
            table = np.concatenate([g.get(name, np.full(size, None, dtype=object))
                                    for g, size in zip(self.grids, self.grid_sizes,
                                                       strict=True)])
            cols[name] = pd.Series(table[at], dtype=object, copy=False)  # no str inference
        frame = pd.DataFrame(cols, copy=False)  # the arrays are fresh: no copy
        frame.attrs["skipped_files"] = self.skipped
        frame.attrs["param_columns"] = params
        return frame


def _cells(rows: list[list], i: int | None) -> list:
    """Column ``i`` of every entry row (None where a row is shorter or i is None)."""
    if i is None:
        return [None] * len(rows)
    try:
        return list(map(itemgetter(i), rows))  # C speed when every row has column i
    except IndexError:
        return [row[i] if i < len(row) else None for row in rows]


def _gather(cells: list, sizes: list[int]) -> tuple[list, list[tuple[int, int]]]:
    """Entry cells (a list per entry, one item per grid point) as one flat list.

    A cell that is not a list counts as a one-item list; a cell shorter than its
    grid is padded with None (returned as (first padded row, count) pairs) and a
    longer one cut. When every cell is a list of the right length this runs at C
    speed.
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


def _objects(values: list) -> np.ndarray:
    """1-D object array of ``values`` (lists and tuples stay elements, never new axes)."""
    return np.fromiter(values, dtype=object, count=len(values))


def _sample_arrays(flat: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Object array: per row a read-only view of its ``counts`` samples in ``flat``;
    None where the count is -1 (no samples recorded).

    Consecutive rows with the same number of samples k lie back to back in ``flat``:
    each such run is one (rows, k) reshape whose rows numpy hands out as views.
    """
    flat.flags.writeable = False
    out = np.full(len(counts), None, dtype=object)
    rows = np.flatnonzero(counts >= 0)
    k = counts[rows]
    offsets = np.concatenate([[0], np.cumsum(k)])
    bounds = [0, *(np.flatnonzero(np.diff(k)) + 1).tolist(), len(k)] if len(k) else []
    views: list = []
    for a, b in itertools.pairwise(bounds):
        views += list(flat[offsets[a]:offsets[b]].reshape(b - a, int(k[a])))
    out[rows] = _objects(views)
    return out


def _concat(chunks: list[np.ndarray], dtype) -> np.ndarray:
    return np.concatenate(chunks) if chunks else np.empty(0, dtype=dtype)


def _labels(values: list, codes_of_row: np.ndarray, categories=None) -> pd.Categorical:
    """Categorical of ``values[codes_of_row]`` (None -> NaN); categories sorted unless
    given."""
    cat = pd.Categorical(values, categories=categories)
    return pd.Categorical.from_codes(cat.codes[codes_of_row] if len(values)
                                     else np.empty(0, np.int8), cat.categories)


def _workers(jobs: int | None, files: int) -> int:
    """Worker processes for ``files`` results files: ``jobs``, else one per usable CPU
    for big corpora (a worker pays off from about 100 files), 1 without fork."""
    if "fork" not in multiprocessing.get_all_start_methods():
        return 1
    if jobs is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
        jobs = min(cpus, files // 100)
    return max(1, min(jobs, files))


def load_results(path, jobs: int | None = None) -> pd.DataFrame:
    """Every results file under ``path`` as one tidy DataFrame (see the module docstring).

    ``frame.attrs["skipped_files"]`` lists ``(file or "file: benchmark", reason)``
    for everything reported and skipped; ``frame.attrs["param_columns"]`` names the
    parameter columns. ``jobs``: processes that parse the files, this one and
    ``jobs - 1`` forked workers (default: one per CPU from 200 files on; 1 reads
    everything here); the frame is the same either way. Raises ValueError if
    ``path`` is not a directory.
    """
    root = Path(path)
    if not root.is_dir():
        raise ValueError(f"results path {str(root)!r} is not a directory")
    meta = _read_benchmarks(root)
    files = [f for f in sorted(root.glob("*/*.json")) if f.name != "machine.json"]
    jobs = _workers(jobs, len(files))
    if jobs == 1:
        columns = _Columns(root, meta).read(files)
    else:  # contiguous chunks, merged in order: rows keep the sorted file order
        size = -(-len(files) // jobs)
        chunks = [files[k:k + size] for k in range(0, len(files), size)]
        with ProcessPoolExecutor(len(chunks) - 1,
                                 mp_context=multiprocessing.get_context("fork")) as pool:
            others = [pool.submit(_read_part, root, meta, chunk) for chunk in chunks[1:]]
            columns = _Columns(root, meta).read(chunks[0])  # this process is one of the jobs
            for other in others:
                columns.merge(other.result())
    for what, why in columns.skipped:
        warnings.warn(f"{what}: skipped: {why}", ResultsWarning, stacklevel=2)
    for note in columns.notes:
        warnings.warn(note, ResultsWarning, stacklevel=2)
    with _gc_paused():
        return columns.frame()


def _read_part(root: Path, meta: dict, files: list[Path]) -> _Columns:
    """One worker's share of :func:`load_results` (returned to the parent by pickle)."""
    return _Columns(root, meta).read(files)


# --------------------------------------------------------------------------- summaries

ACCURACY = re.compile(r"TrackAccuracy\.track_(?P<metric>\w+)$")
MATMUL_PEAK = re.compile(r"TrackMatmulPeak\.track_matmul_bf16_(?P<n>\d+)$")
# Benchmarks whose timings have a known attention shape: name pattern -> function of the
# rows' parameter columns giving (B, H, N, d) (every shape here has Nq == Nk == N).
SHAPES: list[tuple[re.Pattern, Callable[[pd.DataFrame], tuple]]] = [
    (re.compile(r"TrackDeviceTime\.track_device_time$"),
     lambda p: (np.maximum(1, 16384 // p["N"]), 16, p["N"], p["d"])),
    (re.compile(r"TimeCPUBackend\.time_backend$"), lambda p: (1, 8, p["N"], 64)),
    (re.compile(r"TimeAttention\.time_attention$"), lambda p: (1, 1, p["N"], p["d"])),
]


def _names(column: pd.Series) -> list:
    """The distinct benchmark names of a column (a Categorical's categories, no scan)."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        return list(column.cat.categories)
    return list(pd.unique(column))


def _per_name(column: pd.Series, values: dict) -> np.ndarray:
    """``values[name]`` for every row's benchmark name (None where absent), as objects."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        table = _objects([values.get(c) for c in column.cat.categories] + [None])
        return table[column.cat.codes.to_numpy()]  # code -1 (NaN) -> the trailing None
    return _objects([values.get(c) for c in column])


def _ok_rows(df: pd.DataFrame, pattern: re.Pattern, columns: list[str]) -> tuple:
    """(rows with status "ok" of benchmarks matching ``pattern``, date-sorted, only
    ``columns`` that exist; {benchmark name: match})."""
    hits = {b: m for b in _names(df["benchmark"]) if isinstance(b, str)
            and (m := pattern.search(b))}
    mask = df["benchmark"].isin(list(hits)).to_numpy() & (df["status"] == "ok").to_numpy()
    keep = [c for c in dict.fromkeys(["date", *columns]) if c in df.columns]
    return df.loc[mask, keep].sort_values("date", kind="stable"), hits


def _first_text(frame: pd.DataFrame, names: tuple[str, ...], default: np.ndarray) -> np.ndarray:
    """Per row, the first of the columns ``names`` holding a string, else ``default``."""
    out = default.copy()
    for name in reversed([c for c in names if c in frame]):
        codes, uniques = pd.factorize(frame[name].to_numpy(dtype=object))  # None -> -1
        text = np.array([isinstance(u, str) for u in uniques] + [False])[codes]
        out[text] = _objects(list(uniques))[codes[text]]
    return out


_READ = ["machine", "env", "commit", "benchmark", "unit", "value", "kernel", "dtype",
         "causal", "backend", "impl", "N", "d"]  # the columns the summaries read


def _combos(frame: pd.DataFrame, params: list[str]) -> pd.Series:
    """Each row's parameter combination as one label: the ``params`` column of
    :func:`load_results`, or built from the parameter columns of other frames."""
    if "params" in frame.columns:
        return frame["params"]
    present = [c for c in params if c in frame.columns]
    return pd.Series([", ".join(f"{p}={v!r}" for p, v in r.items() if v is not None
                                and not (isinstance(v, float) and math.isnan(v)))
                      for r in frame[present].to_dict("records")], index=frame.index,
                     dtype=object)


def _param_columns(df: pd.DataFrame) -> list[str]:
    """The parameter columns :func:`_combos` needs (none when ``params`` is there)."""
    if "params" in df.columns:
        return []
    return [c for c in df.attrs.get("param_columns", []) if c in df.columns]


def error_bands(df: pd.DataFrame) -> pd.DataFrame:
    """Accuracy tracks over history, one row per machine x metric x parameter combination.

    Columns: machine, kernel, dtype, causal, metric, params (the whole combination),
    commits (how many recorded it), p50, p99, max (over all commits), band_lo /
    band_hi (min / max over the commits before the latest), latest, latest_commit,
    inside (latest within [band_lo, band_hi]; NA with one commit), o_ratio /
    lse_ratio (latest baseline-rule ratio of the same combination: kernel error /
    same-dtype standard_model error, passes at <= 2), unit.
    """
    labels = ["machine", "kernel", "dtype", "causal", "metric", "params"]
    columns = labels + ["commits", "p50", "p99", "max", "band_lo", "band_hi", "latest",
                        "latest_commit", "inside", "o_ratio", "lse_ratio", "unit"]
    sources = _param_columns(df)
    acc, hits = _ok_rows(df, ACCURACY, [*_READ, "params", *sources])
    if acc.empty:
        return pd.DataFrame(columns=columns)
    acc = acc.assign(metric=_per_name(acc["benchmark"],
                                      {b: m["metric"] for b, m in hits.items()}),
                     params=_combos(acc, sources))
    keys = ["machine", "metric", "params"]
    acc["last"] = acc.groupby(keys, observed=True).cumcount(ascending=False) == 0
    g = acc.groupby(keys, observed=True)
    bands = g["value"].agg(commits="size", p50="median", max="max", latest="last")
    bands["p99"] = g["value"].quantile(0.99)
    earlier = acc[~acc["last"]].groupby(keys, observed=True)["value"]
    bands["band_lo"], bands["band_hi"] = earlier.min(), earlier.max()
    for c in ("kernel", "dtype", "causal"):
        bands[c] = g[c].first(skipna=False).astype(object) if c in acc else None
    bands["latest_commit"] = g["commit"].last().astype(object).str[:8]
    bands["unit"] = g["unit"].last().astype(object)
    tol = 1e-9 * bands["band_hi"].abs().clip(lower=1e-300)
    inside = ((bands["band_lo"] - tol <= bands["latest"])
              & (bands["latest"] <= bands["band_hi"] + tol)).astype(object)
    inside[bands["band_hi"].isna()] = pd.NA
    bands["inside"] = inside
    bands = bands.reset_index()
    for c in ("machine", "metric", "params"):
        bands[c] = bands[c].astype(object)
    for metric, column in (("o_baseline_ratio", "o_ratio"), ("lse_baseline_ratio", "lse_ratio")):
        ratio = bands.loc[bands["metric"] == metric, ["machine", "params", "latest"]]
        bands = bands.merge(ratio.rename(columns={"latest": column}),
                            on=["machine", "params"], how="left")
    return bands.sort_values(labels, kind="stable", ignore_index=True)[columns]


def _peaks(df: pd.DataFrame) -> pd.DataFrame:
    """Measured bf16 matmul TFLOP/s per (machine, env, commit), from TrackMatmulPeak."""
    peak, hits = _ok_rows(df, MATMUL_PEAK, _READ)
    n = _per_name(peak["benchmark"], {b: float(m["n"]) for b, m in hits.items()})
    peak["peak_tflops"] = 2 * n.astype(float) ** 3 / peak["value"].to_numpy(float) * 1e-12
    return peak[["machine", "env", "commit", "peak_tflops"]]


def _shapes(b, h, n, d, causal) -> tuple[np.ndarray, np.ndarray]:
    """Per row, (Shape.label(), Shape.flops(causal)) of B x H x N x N x d, from one
    :class:`flashbench.inputs.Shape` per distinct shape."""
    keys = pd.DataFrame({"b": b, "h": h, "n": n, "d": d, "causal": causal})
    which = keys.groupby(list(keys)).ngroup().to_numpy()
    shapes = [(Shape(int(bb), int(hh), int(nn), int(nn), int(dd)), bool(c))
              for bb, hh, nn, dd, c in keys.groupby(which).first().itertuples(index=False)]
    labels = _objects([shape.label() for shape, _ in shapes])
    flops = np.array([shape.flops(c) for shape, c in shapes], dtype=float)
    return labels[which], flops[which]


def throughput_points(df: pd.DataFrame) -> pd.DataFrame:
    """Every timing with a known shape as TFLOP/s (and % of the run's matmul peak, if any)."""
    columns = ["machine", "env", "commit", "date", "benchmark", "backend", "dtype", "shape",
               "causal", "value", "tflops", "pct_peak"]
    parts = []
    for pattern, shape_of in SHAPES:
        sel, _ = _ok_rows(df, pattern, _READ)
        cols = {c: pd.to_numeric(sel[c], errors="coerce").to_numpy(float) for c in ("N", "d")
                if c in sel}
        if sel.empty or len(cols) < 2:
            continue
        b, h, n, d = (np.broadcast_to(np.asarray(x, dtype=float), len(sel))
                      for x in shape_of(cols))
        known = np.all([np.isfinite(x) & (x >= 1) for x in (b, h, n, d)], axis=0)
        sel, b, h, n, d = sel[known], b[known], h[known], n[known], d[known]
        causal = (sel["causal"].eq(True).to_numpy() if "causal" in sel
                  else np.zeros(len(sel), bool))
        shape, flops = _shapes(b, h, n, d, causal)
        method = _per_name(sel["benchmark"], {name: name.split(".")[-1]
                                              for name in _names(sel["benchmark"])})
        parts.append(sel.assign(
            backend=_first_text(sel, ("backend", "impl"), method),
            dtype=_first_text(sel, ("dtype",), np.full(len(sel), "fp64", dtype=object)),
            causal=causal, shape=shape,
            tflops=flops / sel["value"].to_numpy(float) * 1e-12))
    if not parts:
        return pd.DataFrame(columns=columns)
    points = pd.concat(parts, ignore_index=True)
    points = points.merge(_peaks(df), on=["machine", "env", "commit"], how="left")
    points["pct_peak"] = 100 * points["tflops"] / points["peak_tflops"]
    return points[columns]


def throughput(df: pd.DataFrame, points: pd.DataFrame | None = None) -> pd.DataFrame:
    """TFLOP/s trends per machine x backend x dtype x shape x causal.

    FLOPs = :meth:`flashbench.inputs.Shape.flops`: 4 * B * H * d * visible (query,
    key) pairs (about half when causal); TFLOP/s = FLOPs / recorded seconds.
    ``points``: :func:`throughput_points` of ``df`` when the caller has it already.
    Columns: commits, first, best, latest (TFLOP/s), change_pct (latest vs first),
    latest_pct_peak (% of the same run's measured bf16 matmul TFLOP/s, GPU runs
    only), latest_commit.
    """
    pts = (throughput_points(df) if points is None else points).sort_values("date",
                                                                            kind="stable")
    keys = ["machine", "backend", "dtype", "shape", "causal"]
    if pts.empty:
        return pd.DataFrame(columns=keys + ["commits", "first", "best", "latest",
                                            "change_pct", "latest_pct_peak", "latest_commit"])
    g = pts.groupby(keys, sort=True, observed=True)
    out = g.agg(commits=("tflops", "size"), first=("tflops", "first"), best=("tflops", "max"),
                latest=("tflops", "last"), latest_pct_peak=("pct_peak", "last"),
                latest_commit=("commit", "last")).reset_index()
    out["change_pct"] = 100 * (out["latest"] / out["first"] - 1)
    out["latest_commit"] = out["latest_commit"].astype(object).str[:8]
    return out[keys + ["commits", "first", "best", "latest", "change_pct", "latest_pct_peak",
                       "latest_commit"]]


def param_label(row: dict, params: list[str]) -> str:
    """"name=value, ..." of the parameters this row has (absent ones are None or NaN)."""
    return ", ".join(f"{p}={row[p]}" for p in params if row.get(p) is not None
                     and not (isinstance(row[p], float) and math.isnan(row[p])))


_WINDOW = 5  # points per median window of the step screen


def _maybe_steps(x: np.ndarray, min_change: float) -> bool:
    """Cheap screen: could ``x`` hold a level change beyond its noise?

    Compares medians of up to 5 points before and after every position against 4x
    the series' robust noise (1.4826 * median |consecutive difference| / sqrt(2))
    and ``min_change``. Series that pass go to asv's step detection.
    """
    n = len(x)
    w = min(_WINDOW, n // 2)
    med = np.median(np.lib.stride_tricks.sliding_window_view(x, w), axis=1)
    before, after = med[: n - 2 * w + 1], med[w:]
    noise = 1.4826 * np.median(np.abs(np.diff(x))) / math.sqrt(2)
    jump = np.abs(after - before)
    return bool(np.any((jump > 4 * noise) & (jump > min_change * np.abs(before))))


def _screen(values: np.ndarray, lengths: np.ndarray, min_change: float) -> np.ndarray:
    """:func:`_maybe_steps` of every series at once; ``values`` holds the series one
    after another (``lengths`` points each). Returns one bool per series."""
    n, w = len(values), _WINDOW
    out = np.zeros(len(lengths), bool)
    starts = np.concatenate([[0], np.cumsum(lengths)])[:-1]
    for k in np.flatnonzero((lengths >= 3) & (lengths < 2 * w)):  # short: own window size
        out[k] = _maybe_steps(values[starts[k]:starts[k] + lengths[k]], min_change)
    full = lengths >= 2 * w
    if not full.any():
        return out
    series = np.repeat(np.arange(len(lengths)), lengths)
    inner = series[1:] == series[:-1]  # consecutive points of one series
    diffs = pd.Series(np.abs(np.diff(values))[inner]).groupby(series[1:][inner]).median()
    noise = np.full(len(lengths), np.nan)
    noise[diffs.index.to_numpy()] = 1.4826 * diffs.to_numpy() / math.sqrt(2)
    med = np.median(np.lib.stride_tricks.sliding_window_view(values, w), axis=1)
    at = np.arange(w, n - w + 1)  # a level change between points at-1 and at
    at = at[(series[at - w] == series[at + w - 1]) & full[series[at]]]
    before, after, which = med[at - w], med[at], series[at]
    jump = np.abs(after - before)
    out[which[(jump > 4 * noise[which]) & (jump > min_change * np.abs(before))]] = True
    return out


def steps(df: pd.DataFrame, min_change: float = 0.01) -> pd.DataFrame:
    """Commits where a series' level moved beyond its noise.

    A series is one machine x env x benchmark x parameter combination, ordered by
    commit date. asv's :func:`~asv.step_detect.detect_steps` fits it with a
    piecewise-constant function (each piece: mean level and its mean absolute
    deviation, the noise); a step is reported where consecutive pieces differ by
    more than both pieces' noise and by more than ``min_change`` (relative). A cheap
    median screen (:func:`_screen`) first drops series that cannot hold such a
    step, so long histories stay fast. Columns: machine, env, benchmark, params,
    commit (first commit at the new level), date, before, after, change_pct,
    noise, unit.
    """
    key = ["machine", "env", "benchmark", "params"]
    sources = _param_columns(df)
    ok = df.loc[(df["status"] == "ok").to_numpy(),
                [c for c in [*key, *sources, "commit", "date", "value", "unit"]
                 if c in df.columns]]
    ok = ok.assign(params=_combos(ok, sources))
    series = ok.groupby(key, sort=False, observed=True).ngroup()
    dates = ok["date"].astype("int64").to_numpy()  # datetime64 -> integers, same order
    order = np.lexsort((dates, series.to_numpy()))  # by series, then by date
    values = ok["value"].to_numpy(float)[order]
    bounds = np.flatnonzero(np.diff(series.to_numpy()[order])) + 1
    rows = []
    lengths = np.diff(np.concatenate([[0], bounds, [len(values)]])) if len(values) else []
    candidates = _screen(values, np.asarray(lengths, dtype=np.int64), min_change)
    for positions, x, maybe in zip(np.split(order, bounds), np.split(values, bounds),
                                   candidates, strict=True):
        if not maybe:
            continue
        from asv.step_detect import detect_steps  # 0.2-0.4 s import: only when needed

        pieces = detect_steps(list(x))
        for (_, _, v0, _, e0), (l1, _, v1, _, e1) in itertools.pairwise(pieces):
            noise = max(e0, e1)
            if abs(v1 - v0) > noise and abs(v1 - v0) > min_change * abs(v0):
                first = ok.iloc[positions[l1]]
                rows.append({"machine": first["machine"], "env": first["env"],
                             "benchmark": first["benchmark"], "params": first["params"],
                             "commit": str(first["commit"])[:8], "date": first["date"],
                             "before": v0, "after": v1,
                             "change_pct": 100 * (v1 / v0 - 1) if v0 else math.inf,
                             "noise": noise, "unit": first["unit"]})
    return pd.DataFrame(rows, columns=["machine", "env", "benchmark", "params", "commit", "date",
                                       "before", "after", "change_pct", "noise", "unit"])
