"""Frame assembly: the columns gathered from every results file become one DataFrame.

Label columns become pandas Categoricals built from their few distinct strings and
one code per row; numbers are concatenated float64 arrays; samples become read-only
views into one buffer. Nothing here reads files.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

FIXED_COLUMNS = ["machine", "cpu", "env", "commit", "date", "file", "benchmark", "params",
                 "type", "unit", "value", "status", "ci_99_a", "ci_99_b", "q25", "q75",
                 "number", "repeat", "samples", "version"]
FIXED = frozenset(FIXED_COLUMNS)
STATUSES = ["ok", "skipped", "failed", "missing"]  # the categories of ``status``
OK, SKIPPED, FAILED, MISSING = range(4)
# asv result column -> tidy column, for the per-point statistics read as float64
STAT_COLUMNS = {"stats_ci_99_a": "ci_99_a", "stats_ci_99_b": "ci_99_b", "stats_q_25": "q25",
                "stats_q_75": "q75", "stats_number": "number", "stats_repeat": "repeat"}
FILE_FACTS = ("machine", "cpu", "env", "commit", "date", "file", "folder")  # Rows.files


def objects(values: list) -> np.ndarray:
    """1-D object array of ``values`` (lists and tuples stay elements, never new axes)."""
    return np.fromiter(values, dtype=object, count=len(values))


def concat(chunks: list[np.ndarray], dtype) -> np.ndarray:
    """One array of ``chunks`` (a single chunk that owns its writable data is itself)."""
    if len(chunks) == 1 and chunks[0].flags.owndata and chunks[0].flags.writeable:
        return chunks[0]
    return np.concatenate(chunks) if chunks else np.empty(0, dtype=dtype)


def labels(values: list, codes_of_row: np.ndarray, categories=None) -> pd.Categorical:
    """Categorical of ``values[codes_of_row]`` (None -> NaN); categories sorted unless
    given."""
    cat = pd.Categorical(values, categories=categories)
    return pd.Categorical.from_codes(cat.codes[codes_of_row] if len(values)
                                     else np.empty(0, np.int8), cat.categories)


def sample_arrays(flat: np.ndarray, counts: np.ndarray) -> np.ndarray:
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
    out[rows] = objects(views)
    return out


def _history_order(commits, dates) -> list:
    """Commits by the date (ms) of their first results file, then by hash."""
    first: dict = {}
    for commit, date in zip(commits, dates, strict=True):
        first[commit] = min(first.get(commit, date), date)
    return sorted(first, key=lambda c: (first[c], c))


def assemble(rows, metas: list[dict], samples: bool = True) -> pd.DataFrame:
    """The tidy frame of ``rows`` (a :class:`flashbench.history.rows.Rows`), whose
    folders' benchmarks.json entries are ``metas`` (the module docstring of
    :mod:`flashbench.history` describes the columns; without ``samples``, the frame
    has no samples column)."""
    counts = np.asarray(rows.sizes, dtype=np.int64)
    file_of_entry = np.asarray(rows.entry_file, dtype=np.int64)
    file_of_row = np.repeat(file_of_entry, counts)
    facts = dict(zip(FILE_FACTS, zip(*rows.files, strict=True), strict=True)) if rows.files \
        else {name: () for name in FILE_FACTS}
    cols: dict[str, object] = {}
    for name in FILE_FACTS[:-1]:
        column = list(facts[name])
        if name == "date":
            dates = pd.to_datetime(np.asarray(column, dtype=np.int64), unit="ms", utc=True)
            cols[name] = dates.take(file_of_row)
        else:
            order = _history_order(column, facts["date"]) if name == "commit" else None
            cols[name] = labels(column, file_of_row, order)
    bench = pd.Categorical(rows.entry_bench)
    bench_of_row = np.repeat(bench.codes, counts)
    cols["benchmark"] = pd.Categorical.from_codes(bench_of_row, bench.categories)
    at = rows.grids.point_rows(np.asarray(rows.entry_grid, dtype=np.int64), counts)
    cols["params"] = labels(list(itertools.chain.from_iterable(rows.grids.labels)), at)
    # type and unit as the benchmarks.json of each row's own folder declares them
    folder_of_entry = np.asarray(facts["folder"], dtype=np.int64)[file_of_entry] \
        if len(file_of_entry) else np.empty(0, np.int64)
    which = np.repeat(folder_of_entry * len(bench.categories) + bench.codes, counts)
    for name in ("type", "unit"):
        declared = [metas[f].get(b, {}).get(name) for f in range(len(metas))
                    for b in bench.categories]
        cols[name] = labels([v if isinstance(v, str) else None for v in declared], which)
    cols["value"] = concat(rows.values, float)
    cols["status"] = pd.Categorical.from_codes(concat(rows.status, np.int8), STATUSES)
    for short, chunks in rows.stats.items():
        cols[short] = concat(chunks, float)
    if samples:
        cols["samples"] = pd.Series(sample_arrays(concat(rows.sample_values, float),
                                                  concat(rows.sample_counts, np.int64)),
                                    dtype=object, copy=False)
    versions = [v if isinstance(v, str) else None for v in rows.entry_version]
    cols["version"] = labels(versions, np.repeat(np.arange(len(versions)), counts))
    for name in rows.grids.parameters():  # object columns: no str inference
        cols[name] = pd.Series(rows.grids.column(name, at), dtype=object, copy=False)
    frame = pd.DataFrame(cols, copy=False)  # the arrays are fresh: no copy
    frame.attrs["skipped_files"] = list(rows.skipped)
    return frame
