"""Frame assembly: the columns gathered from every results file become one DataFrame.

Label and parameter columns become pandas Categoricals built from their few distinct
values and one code per row; numbers are concatenated float64 arrays; samples are one
Arrow list column over one flat buffer. No Python object is made per row, so a
frame of millions of rows assembles in a fraction of a second. Nothing here reads
files.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pyarrow as pa

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


def labels(values: list, of, counts: np.ndarray | None = None, categories=None,
           text: bool = False) -> pd.Categorical:
    """Categorical of ``values[of]`` (None -> NaN; with ``text``, anything not a str),
    each repeated ``counts`` times where given; categories sorted unless given. The
    values are factorized first: pandas' Categorical (and its str inference) meets only
    the distinct ones."""
    found, uniques = pd.factorize(objects(list(values)))
    uniques = [u if isinstance(u, str) or not text else None for u in uniques]
    cat = pd.Categorical(uniques, categories=categories)
    code = np.append(cat.codes, -1).astype(cat.codes.dtype)[found][of]
    return pd.Categorical.from_codes(code if counts is None else np.repeat(code, counts),
                                     dtype=cat.dtype, validate=False)


SAMPLES = pd.ArrowDtype(pa.large_list(pa.float64()))  # the samples column's dtype
PARAM_TYPES = (str, int, float, bool)  # parameter values a Categorical holds
MAX_CHUNKS = 64  # samples in more chunks than this (a parse's files) are joined


def sample_column(chunks: list, counts: np.ndarray) -> pd.Series:
    """The samples column: per row the list of its ``counts`` samples, NA where the count
    is -1 (none recorded). ``chunks``: every sample, flat, in row order (float64 numpy or
    Arrow arrays). A few chunks that each start at a row (a cache's parts) become one
    Arrow list array each, over their own buffers; else they are joined first. No
    object per row either way."""
    arrays = [c if isinstance(c, pa.Array) else pa.array(c, pa.float64()) for c in chunks]
    offsets = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(np.maximum(counts, 0), out=offsets[1:])
    missing = counts < 0
    starts = np.cumsum([0] + [len(a) for a in arrays])[:-1]
    first = np.searchsorted(offsets, starts)  # the row each chunk starts at, if any
    if not 1 < len(arrays) <= MAX_CHUNKS or not np.array_equal(offsets[first], starts):
        flat = arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays) if arrays \
            else pa.array([], pa.float64())
        arrays, first = [flat], np.zeros(1, np.int64)
    bounds = [*first.tolist(), len(counts)]
    lists = [pa.LargeListArray.from_arrays(
        pa.array(offsets[a:b + 1] - offsets[a]), values,
        mask=pa.array(missing[a:b]) if missing[a:b].any() else None)
        for values, a, b in zip(arrays, bounds, bounds[1:], strict=False)]
    column = pa.chunked_array(lists, type=SAMPLES.pyarrow_dtype)
    return pd.Series(pd.arrays.ArrowExtensionArray(column), dtype=SAMPLES, copy=False)


def _order_key(value) -> tuple:
    return type(value).__name__, value


def param_column(table: np.ndarray, at: np.ndarray):
    """A parameter column: ``table[at]`` (``table``: the value at every grid point, objects)
    as a Categorical of the values, in their own types (None and NaN: missing); an object
    array where the values are not all str, int, float and bool or two of different
    types compare equal (1 and True)."""
    missing = np.fromiter((v is None or (isinstance(v, float) and v != v) for v in table),
                          bool, len(table))
    present = table[~missing]
    if not all(type(v) in PARAM_TYPES for v in present):
        return table[at]
    distinct = list({(type(v), v): v for v in present}.values())
    if len(set(distinct)) < len(distinct):  # 1 == True == 1.0: one category to pandas
        return table[at]
    try:
        distinct.sort(key=_order_key)
    except TypeError:  # never for PARAM_TYPES; kept total for safety
        distinct.sort(key=lambda v: (type(v).__name__, repr(v)))
    code = {(type(v), v): k for k, v in enumerate(distinct)}
    of_point = np.array([-1 if m else code[(type(v), v)] for v, m in zip(table, missing,
                                                                         strict=True)],
                        np.int32)
    dtype = pd.CategoricalDtype(pd.Index(objects(distinct), dtype=object))
    small = of_point.astype(np.int8 if len(distinct) < 127 else np.int16 if
                            len(distinct) < 32767 else np.int32)
    return pd.Categorical.from_codes(small[at], dtype=dtype, validate=False)


def _history_order(commits, dates, is_ancestor=None) -> list:
    """Commits by the date (ms) of their first results file, then by hash; commits of one
    date (8 at most) parents first where ``is_ancestor(a, b)`` (git's) says so. Two commits
    made in one second read child before parent by their hashes (a red team, 2026-12-08)."""
    first: dict = {}
    for commit, date in zip(commits, dates, strict=True):
        first[commit] = min(first.get(commit, date), date)
    order = sorted(first, key=lambda c: (first[c], c))
    if is_ancestor is None:
        return order
    out: list = []
    for _, group in itertools.groupby(order, key=first.get):
        tied = list(group)
        if len(tied) > 8:  # git asked of every pair: a few commits of one second at most
            out += tied
            continue
        placed: list = []
        for c in tied:  # each before the first one placed that it is an ancestor of
            placed.insert(next((i for i, d in enumerate(placed) if is_ancestor(c, d)),
                               len(placed)), c)
        out += placed
    return out


def assemble(rows, metas: list[dict], samples: bool = True, is_ancestor=None
             ) -> pd.DataFrame:
    """The tidy frame of ``rows`` (a :class:`flashbench.history.rows.Rows`), whose
    folders' benchmarks.json entries are ``metas`` (the module docstring of
    :mod:`flashbench.history` describes the columns; without ``samples``, the frame
    has no samples column; ``is_ancestor``: :func:`_history_order`'s)."""
    counts = np.asarray(rows.sizes, dtype=np.int64)
    file_of_entry = np.asarray(rows.entry_file, dtype=np.int64)
    facts = dict(zip(FILE_FACTS, zip(*rows.files, strict=True), strict=True)) if rows.files \
        else {name: () for name in FILE_FACTS}
    cols: dict[str, object] = {}  # per entry, then repeated: no index array per row
    for name in FILE_FACTS[:-1]:
        column = list(facts[name])
        if name == "date":
            dates = pd.to_datetime(np.asarray(column, dtype=np.int64), unit="ms", utc=True)
            cols[name] = dates.take(file_of_entry).repeat(counts)
        else:
            order = _history_order(column, facts["date"], is_ancestor) \
                if name == "commit" else None
            cols[name] = labels(column, file_of_entry, counts, order)
    bench = labels(rows.entry_bench, slice(None))
    cols["benchmark"] = pd.Categorical.from_codes(np.repeat(bench.codes, counts),
                                                  dtype=bench.dtype, validate=False)
    at = rows.grids.point_rows(np.asarray(rows.entry_grid, dtype=np.int64), counts)
    cols["params"] = labels(list(itertools.chain.from_iterable(rows.grids.labels)), at)
    # type and unit as the benchmarks.json of each row's own folder declares them
    folder_of_entry = np.asarray(facts["folder"], dtype=np.int64)[file_of_entry] \
        if len(file_of_entry) else np.empty(0, np.int64)
    which = folder_of_entry * len(bench.categories) + bench.codes
    for name in ("type", "unit"):  # else asv's own by the name's prefix (a benchmark that
        # benchmarks.json no longer declares: a probe's peak-memory steps had no unit)
        declared = [metas[f].get(b, {}).get(name) or _by_prefix(b, name)
                    for f in range(len(metas)) for b in bench.categories]
        cols[name] = labels([v if isinstance(v, str) else None for v in declared], which,
                            counts)
    cols["value"] = concat(rows.values, float)
    cols["status"] = pd.Categorical.from_codes(concat(rows.status, np.int8), STATUSES)
    for short, chunks in rows.stats.items():
        cols[short] = concat(chunks, float)
    if samples:
        cols["samples"] = sample_column(rows.sample_values,
                                        concat(rows.sample_counts, np.int64))
    versions = labels(rows.entry_version, slice(None), text=True)
    cols["version"] = pd.Categorical.from_codes(np.repeat(versions.codes, counts),
                                                dtype=versions.dtype, validate=False)
    for name in rows.grids.parameters():  # Categoricals of the values: no str inference
        column = param_column(rows.grids.column(name), at)
        cols[name] = column if isinstance(column, pd.Categorical) \
            else pd.Series(column, dtype=object, copy=False)
    frame = pd.DataFrame(cols, copy=False)  # the arrays are fresh: no copy
    frame.attrs["skipped_files"] = list(rows.skipped)
    return frame


_PREFIXES = {"time_": ("time", "seconds"), "peakmem_": ("peakmemory", "bytes"),
             "mem_": ("memory", "bytes"), "track_": ("track", None)}


def _by_prefix(benchmark, name: str) -> str | None:
    """asv's type (``name`` "type") or unit ("unit") of a benchmark by its function's
    prefix, as asv assigns them (a track's unit is its own: None)."""
    last = str(benchmark).rsplit(".", 1)[-1]
    for prefix, (kind, unit) in _PREFIXES.items():
        if last.startswith(prefix):
            return kind if name == "type" else unit
    return None
