"""A cache part: what a parse of some results files gathered, as Parquet-ready tables.

A part is four pyarrow tables: ``files`` (one record per results file: its path in
the folder, size, mtime, facts, counts of its entries, rows and samples, and the
warnings it gave, without its path), ``entries`` (benchmark, version, the parameter
grid as the file wrote it, size), ``rows`` (value, statistics, status, number of
samples) and ``samples`` (every sample, flat). A file's entries, rows and samples
lie together, in file order. :func:`part_tables` turns a
:class:`flashbench.history.rows.Rows` into a part; :func:`to_rows` turns the tables
back into the Rows a parse would have gathered, so the frame is assembled by the
same code; parameter names are resolved from today's benchmarks.json.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa

from flashbench.history.frame import STAT_COLUMNS, concat
from flashbench.history.rows import Rows

TABLES = ("files", "entries", "rows", "samples")
NUMBERS = ["value", *STAT_COLUMNS.values()]
RACY_NS = 2_000_000_000  # a file this close to its listing may change unseen


class CacheCorrupt(Exception):
    """A cache folder that cannot be read as written; the message says why, ``part`` which
    part (None: the index, or the folder as a whole)."""

    def __init__(self, message: str, part: str | None = None):
        super().__init__(message)
        self.part = part


FILES_SCHEMA = pa.schema([
    ("path", pa.string()), ("size", pa.int64()), ("mtime_ns", pa.int64()),
    ("ctime_ns", pa.int64()), ("racy", pa.bool_()), ("digest", pa.string()),
    ("kept", pa.bool_()), ("machine", pa.string()),
    ("cpu", pa.string()), ("env", pa.string()), ("commit", pa.string()),
    ("date", pa.float64()), ("entries", pa.int64()), ("rows", pa.int64()),
    ("samples", pa.int64()),
    ("skipped_what", pa.list_(pa.string())), ("skipped_why", pa.list_(pa.string())),
    ("notes", pa.list_(pa.string()))])


def digest(path: Path) -> str:
    """A results file's contents as a key: a fresh checkout gives every file a new mtime
    and ctime, and the cache parsed everything again (a probe, 2026-12-07)."""
    return hashlib.blake2b(path.read_bytes(), digest_size=16).hexdigest()


def part_tables(rows: Rows, root: Path, stats: dict, now: int) -> dict[str, pa.Table]:
    """The three tables of a part holding what ``rows`` read (one folder, every file
    marked); ``stats``: path in root -> (size, mtime_ns, ctime_ns) as listed at ``now``."""
    files: dict[str, list] = {k: [] for k in (
        "path", "size", "mtime_ns", "ctime_ns", "racy", "digest", "kept", "machine", "cpu",
        "env", "commit", "date", "entries", "rows", "skipped_what", "skipped_why", "notes")}
    sizes = np.asarray(rows.sizes, dtype=np.int64)
    before = (0, 0, 0, 0)
    for path, f, e, s, n in rows.marks:
        rel = f"{path.parent.name}/{path.name}"  # as cache.listing names it
        size, mtime, ctime = stats[rel]
        facts = rows.files[f - 1] if f > before[0] else (None,) * 5
        text = str(path)
        for key, value in zip(("path", "size", "mtime_ns", "ctime_ns", "racy", "digest",
                               "kept"),
                              (rel, size, mtime, ctime, mtime >= now - RACY_NS,
                               digest(path), f > before[0]), strict=True):
            files[key].append(value)
        for key, value in zip(("machine", "cpu", "env", "commit", "date"), facts[:5],
                              strict=True):
            files[key].append(value)
        files["entries"].append(e - before[1])
        files["rows"].append(int(sizes[before[1]:e].sum()))
        files["skipped_what"].append([_suffix(w, text) for w, _ in rows.skipped[before[2]:s]])
        files["skipped_why"].append([why for _, why in rows.skipped[before[2]:s]])
        files["notes"].append([_suffix(note, text) for note in rows.notes[before[3]:n]])
        before = (f, e, s, n)
    files["date"] = [None if d is None else float(d) for d in files["date"]]
    grids = pa.array([json.dumps(p) for p in rows.grids.params], pa.string())
    entries = pa.table({
        "bench": pa.array(rows.entry_bench, pa.string()),
        "version": pa.array([v if isinstance(v, str) else None for v in rows.entry_version],
                            pa.string()),
        "grid": pa.DictionaryArray.from_arrays(
            pa.array(rows.entry_grid, pa.int32()), grids).dictionary_decode(),
        "size": pa.array(sizes, pa.int32())})
    table = {name: concat(chunks, float) for name, chunks in
             [("value", rows.values), *((s, c) for s, c in rows.stats.items())]}
    table["status"] = concat(rows.status, np.int8)
    table["count"] = concat(rows.sample_counts, np.int64)  # -1: no samples recorded
    per_file = [0] * len(rows.marks)  # samples of each file (one array per kept file)
    for i, k in enumerate(np.flatnonzero(files["kept"])):
        per_file[k] = len(rows.sample_values[i])
    files["samples"] = per_file
    return {"files": pa.table(files, schema=FILES_SCHEMA), "entries": entries,
            "rows": pa.table(table),
            "samples": pa.table({"sample": concat(rows.sample_values, float)})}


def _suffix(text: str, prefix: str) -> str:
    """``text`` without ``prefix`` (a warning names its file first; the file's path is
    put back at load time, as the caller spelled the folder)."""
    if not text.startswith(prefix):
        raise AssertionError(f"{text!r} does not start with {prefix!r}")
    return text[len(prefix):]


FILE_COLUMNS = {"path": pa.string(), "size": pa.int64(), "mtime_ns": pa.int64(),
                "ctime_ns": pa.int64(), "racy": pa.bool_(), "digest": pa.string(),
                "kept": pa.bool_(),
                "entries": pa.int64(), "rows": pa.int64(), "samples": pa.int64()}


def check(part: str, tables: dict[str, pa.Table], columns: list[str] | None = None) -> None:
    """Raise CacheCorrupt unless the part's tables (its files table and any others
    read) hold their columns (only ``columns`` where given) and as many records as the
    files table counts."""
    files = tables["files"]
    for name, kind in FILE_COLUMNS.items():
        if name not in files.column_names or files.schema.field(name).type != kind:
            raise CacheCorrupt(f"part {part}: its files table lacks {name} ({kind})", part)
    need = {"entries": {"bench", "version", "grid", "size"},
            "rows": {*NUMBERS, "status", "count"}, "samples": {"sample"}}
    for t, names in need.items():
        if t not in tables:
            continue
        missing = (names if columns is None else set(columns)) - set(tables[t].column_names)
        if missing:
            raise CacheCorrupt(f"part {part}: its {t} table lacks {sorted(missing)}", part)
        held = {tables[t].num_rows}  # and what the other tables say of it
        if t == "rows" and "entries" in tables:
            held.add(_sum(tables["entries"]["size"]))
        if t == "samples" and "rows" in tables:
            held.add(_sum(pa.compute.max_element_wise(tables["rows"]["count"], 0)))
        if held != {_sum(files[t])}:
            raise CacheCorrupt(f"part {part}: its files table counts {_sum(files[t])} {t}, "
                               f"the tables hold {sorted(held)}", part)


def _sum(column) -> int:
    return pa.compute.sum(column).as_py() or 0


def runs(starts: np.ndarray, lengths: np.ndarray) -> list[tuple[int, int]]:
    """The stretches start..start+length, one after another, as few (start, length)
    runs as possible (stretches that follow each other are one run)."""
    keep = lengths > 0
    starts, lengths = starts[keep], lengths[keep]
    if not len(starts):
        return []
    cut = np.flatnonzero(starts[1:] != starts[:-1] + lengths[:-1]) + 1
    first = np.concatenate([[0], cut])
    ends = np.concatenate([cut, [len(starts)]])
    return [(int(starts[i]), int(starts[j - 1] + lengths[j - 1] - starts[i]))
            for i, j in zip(first, ends, strict=True)]


def select(tables: list[dict], picks: list[tuple[int, int]]) -> dict[str, pa.Table]:
    """The records ``picks`` ((part, record) pairs, in that order) of the parts'
    ``tables`` as one part's tables: slices of them, so nothing is copied (a file's
    entries, rows and samples lie together, in file order)."""
    files = pa.concat_tables([t["files"] for t in tables])
    base = np.cumsum([0] + [t["files"].num_rows for t in tables])
    at = np.array([base[k] + j for k, j in picks], dtype=np.int64)
    out = {"files": _slices(files, runs(at, np.ones(len(at), np.int64)))}
    for name in [t for t in TABLES[1:] if t in tables[0]]:
        every = files[name].to_numpy()
        starts = (np.cumsum(every) - every)[at]
        out[name] = _slices(pa.concat_tables([t[name] for t in tables]),
                            runs(starts, every[at]))
    return out


def _slices(table: pa.Table, stretches: list[tuple[int, int]]) -> pa.Table:
    if len(stretches) == 1:
        return table.slice(*stretches[0])
    return pa.concat_tables([table.slice(0, 0)] + [table.slice(s, n) for s, n in stretches])


def to_rows(roots: list[Path], metas: list[dict], folder: int, t: dict[str, pa.Table],
            column, samples: bool = True) -> Rows:
    """A :class:`Rows` as a parse of the files of ``t`` (one part's files and entries
    tables) in folder ``roots[folder]`` would have gathered it; ``column(table, name)``
    reads the part's column of its rows or samples table (the samples only with
    ``samples``)."""
    root = str(roots[folder])  # joined as text: a Path per file costs 0.1 s per 10,000
    rows = Rows(roots, metas)
    f = {c: t["files"][c].to_pylist() for c in t["files"].column_names}
    for i, rel in enumerate(f["path"]):
        text = os.path.join(root, rel)  # rel: "<machine>/<file>", as str(root / rel)
        rows.skipped += [(text + w, why) for w, why in zip(f["skipped_what"][i],
                                                           f["skipped_why"][i], strict=True)]
        rows.notes += [text + note for note in f["notes"][i]]
        if f["kept"][i]:
            date = f["date"][i]
            rows.files.append((f["machine"][i], f["cpu"][i], f["env"][i], f["commit"][i],
                               int(date) if date.is_integer() else date,
                               rel if len(roots) == 1 else text, folder))
    kept = np.asarray(f["kept"], dtype=bool)
    rows.entry_file = np.repeat(np.cumsum(kept) - 1, np.asarray(f["entries"], np.int64)
                                ).tolist()
    e = t["entries"]
    b, names = dictionary_codes(e["bench"])
    g, texts = dictionary_codes(e["grid"])
    key = b * max(len(texts), 1) + g
    uniq, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    gid = np.empty(len(uniq), np.int64)
    for u in np.argsort(first, kind="stable"):  # grids in order of first appearance
        name, params = names[uniq[u] // max(len(texts), 1)], json.loads(
            texts[uniq[u] % max(len(texts), 1)])
        gid[u] = rows.grids.add(rows.grids.names(name, metas[folder].get(name, {}), params),
                                params)
    rows.entry_grid = gid[inverse].tolist()
    rows.entry_bench = np.asarray(names, dtype=object)[b].tolist()
    v, versions = dictionary_codes(e["version"])
    rows.entry_version = np.asarray([*versions, None], dtype=object)[v].tolist()
    rows.sizes = e["size"].to_numpy().tolist()
    numbers = {}
    for name in [*NUMBERS, "status", *(["count"] if samples else [])]:
        numbers[name] = owned(column("rows", name))
        pa.default_memory_pool().release_unused()  # the column read goes back at once
    rows.values, rows.status = [numbers["value"]], [numbers["status"]]
    rows.stats = {short: [numbers[short]] for short in STAT_COLUMNS.values()}
    if samples:  # kept in Arrow's buffer: the frame's samples column is Arrow's
        rows.sample_counts = [numbers["count"]]
        rows.sample_values = column("samples", "sample").chunks  # one unless several parts
    return rows


def owned(column: pa.ChunkedArray) -> np.ndarray:
    """A numpy array of its own (writable, as a frame's columns must be) of ``column``."""
    if column.num_chunks == 1:
        return np.array(column.chunk(0).to_numpy())
    return np.concatenate([c.to_numpy() for c in column.chunks]) if column.num_chunks \
        else np.empty(0, column.type.to_pandas_dtype())


def dictionary_codes(column) -> tuple[np.ndarray, list]:
    """(per record an int64 code, -1 for null; the distinct values) of a string column,
    read dictionary-encoded or not, in one or several chunks."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    chunks = [c if pa.types.is_dictionary(c.type) else pa.compute.dictionary_encode(c)
              for c in chunks] or [pa.array([], pa.dictionary(pa.int32(), pa.string()))]
    found, codes = {}, []
    for chunk in chunks:  # each chunk's dictionary mapped onto one list of values
        words = chunk.dictionary.to_pylist()
        remap = np.array([found.setdefault(w, len(found)) for w in words] + [-1], np.int64)
        codes.append(remap[chunk.indices.fill_null(-1).to_numpy(zero_copy_only=False)
                           .astype(np.int64)])
    return np.concatenate(codes), list(found)
