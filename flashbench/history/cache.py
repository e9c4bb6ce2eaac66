"""An incremental Parquet cache of parsed results files, for :func:`load_results`.

Each results folder has its own cache folder (:func:`cache_dir`) holding immutable
*parts* (three Parquet tables each: files, entries, rows) and ``index.json``, which
names the parts. A results file is known by its path in the folder, size and mtime;
a file whose mtime lay within :data:`RACY_NS` of the listing is re-read next time
(git's "racily clean" rule: a rewrite in the same clock tick keeps size and mtime).
Only new or changed files are parsed (:class:`flashbench.history.rows.Rows`), into
one new part; small parts are merged when there are more than :data:`MAX_PARTS`.
What is stored is what a parse gathers before the frame is assembled, so the frame
is assembled by the same code either way; parameter names are resolved at every
load from today's benchmarks.json. The cache is derived data: safe to delete,
rebuilt when :data:`SCHEMA` changes, and rebuilt with a :class:`ResultsWarning` when
it cannot be read. One process at a time updates a folder's cache (a lock file).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import uuid
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from flashbench.history.files import ResultsWarning
from flashbench.history.frame import STAT_COLUMNS, concat
from flashbench.history.rows import Rows, parse
from flashbench.locks import locked

SCHEMA = 1  # bump when what a part holds, or what a parse gathers, changes
ENV = "FLASHBENCH_HISTORY_CACHE"  # a folder for every cache, or "off"
OFF = {"", "0", "off", "no", "false", "none"}
RACY_NS = 2_000_000_000
MAX_PARTS = 8
TABLES = ("files", "entries", "rows", "samples")
NUMBERS = ["value", *STAT_COLUMNS.values()]


class CacheCorrupt(Exception):
    """A cache folder that cannot be read as written; the message says why."""


def cache_dir(root: Path, cache=None) -> Path | None:
    """The cache folder of results folder ``root``; None: no cache.

    ``cache``: None (the environment variable ``FLASHBENCH_HISTORY_CACHE``: a folder,
    or "off"; unset: the default), True (the default), False (none), or a folder that
    holds the caches of every results folder. The default is
    ``<root's parent>/.flashbench-cache/<root's name>``: in a checkout that is beside
    ``results/`` and ignored by git, and it goes away with the checkout. Under a chosen
    folder, each results folder's cache is named by its name and resolved path.
    """
    if cache is None:
        env = os.environ.get(ENV)
        if env is not None:
            cache = False if env.strip().lower() in OFF else env
    if cache is False:
        return None
    root = Path(root).resolve()
    if cache is None or cache is True:
        return root.parent / ".flashbench-cache" / root.name
    if not isinstance(cache, (str, os.PathLike)):
        raise TypeError(f"cache must be None, True, False or a folder, got {cache!r}")
    digest = hashlib.sha256(str(root).encode()).hexdigest()[:12]
    return Path(cache) / f"{root.name}-{digest}"


def listing(root: Path, paths: list[Path]) -> tuple[list[tuple[str, int, int]], int]:
    """(path in ``root``, size, mtime_ns) of each results file, and the time (ns) it
    was taken."""
    now = time.time_ns()
    out = []
    for path in paths:
        st = path.stat()
        out.append((path.relative_to(root).as_posix(), st.st_size, st.st_mtime_ns))
    return out, now


def part_tables(rows: Rows, root: Path, stats: dict, now: int) -> dict[str, pa.Table]:
    """The three tables of a part holding what ``rows`` read (one folder, every file
    marked); ``stats``: path in root -> (size, mtime_ns) as listed at ``now``."""
    files: dict[str, list] = {k: [] for k in (
        "path", "size", "mtime_ns", "racy", "kept", "machine", "cpu", "env", "commit",
        "date", "entries", "rows", "skipped_what", "skipped_why", "notes")}
    sizes = np.asarray(rows.sizes, dtype=np.int64)
    before = (0, 0, 0, 0)
    for path, f, e, s, n in rows.marks:
        rel = Path(path).relative_to(root).as_posix()
        size, mtime = stats[rel]
        facts = rows.files[f - 1] if f > before[0] else (None,) * 5
        text = str(path)
        for key, value in zip(("path", "size", "mtime_ns", "racy", "kept"),
                              (rel, size, mtime, mtime >= now - RACY_NS, f > before[0]),
                              strict=True):
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


class Store:
    """One results folder's cache folder: its index and its parts (caller holds the lock)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.index = folder / "index.json"

    def parts(self) -> list[str]:
        """The parts the index names ([] without an index, or after a schema change)."""
        if not self.index.exists():
            return []
        try:
            data = json.loads(self.index.read_text())
            version, parts = data["schema"], data["parts"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CacheCorrupt(f"index.json unreadable: {exc}") from None
        if version != SCHEMA:  # written by another flashbench: start afresh
            self.wipe()
            return []
        if not isinstance(parts, list) or not all(isinstance(p, str) for p in parts):
            raise CacheCorrupt("index.json: 'parts' is not a list of names")
        return parts

    def read(self, part: str, samples: bool = True) -> dict[str, pa.Table]:
        """A part's tables (without ``samples``, not its samples table). Read in this
        thread: arrow's threads made it 6x slower on a busy 2-CPU machine."""
        try:
            tables = {t: pq.read_table(self.folder / f"{part}.{t}.parquet",
                                       memory_map=True, use_threads=False)
                      for t in TABLES[:None if samples else -1]}
        except (OSError, pa.ArrowException) as exc:
            raise CacheCorrupt(f"part {part}: {exc}") from None
        check(part, tables)
        return tables

    def write(self, tables: dict[str, pa.Table]) -> str:
        part = f"part-{uuid.uuid4().hex[:16]}"
        for t in TABLES:
            tmp = self.folder / f".{part}.{t}.tmp"
            pq.write_table(tables[t], tmp, use_dictionary=t in TABLES[:2])
            os.replace(tmp, self.folder / f"{part}.{t}.parquet")
        return part

    def commit(self, parts: list[str], drop: list[str]) -> None:
        """Point the index at ``parts`` (atomic replace), then delete ``drop``'s files."""
        tmp = self.folder / ".index.json.tmp"
        tmp.write_text(json.dumps({"schema": SCHEMA, "parts": parts}))
        os.replace(tmp, self.index)
        for part in drop:
            for t in TABLES:
                (self.folder / f"{part}.{t}.parquet").unlink(missing_ok=True)

    def wipe(self) -> None:
        """Everything but the lock file."""
        for path in self.folder.iterdir():
            if path.name != "lock":
                shutil.rmtree(path) if path.is_dir() else path.unlink()


FILE_COLUMNS = {"path": pa.string(), "size": pa.int64(), "mtime_ns": pa.int64(),
                "racy": pa.bool_(), "kept": pa.bool_(), "entries": pa.int64(),
                "rows": pa.int64(), "samples": pa.int64()}


def check(part: str, tables: dict[str, pa.Table]) -> None:
    """Raise CacheCorrupt unless the part's tables agree with each other."""
    files, entries, rows = (tables[t] for t in TABLES[:3])
    for name, kind in FILE_COLUMNS.items():
        if name not in files.column_names or files.schema.field(name).type != kind:
            raise CacheCorrupt(f"part {part}: files table lacks {name} ({kind})")
    missing = ({"bench", "version", "grid", "size"} - set(entries.column_names)) | (
        {*NUMBERS, "status", "count"} - set(rows.column_names))
    if "samples" in tables and "sample" not in tables["samples"].column_names:
        missing.add("sample")
    if missing:
        raise CacheCorrupt(f"part {part}: columns {sorted(missing)} missing")
    sums = [_sum(files[c]) for c in TABLES[1:]] + [_sum(entries["size"]), _sum(
        pa.compute.max_element_wise(rows["count"], 0))]
    sizes = [entries.num_rows, rows.num_rows, tables["samples"].num_rows
             if "samples" in tables else sums[2], sums[1], sums[2]]
    if sums[:3] + sums[1:3] != sizes:
        raise CacheCorrupt(f"part {part}: its tables disagree (entries, rows, samples "
                           f"counted by the files table {sums[:3]}, held {sizes[:3]})")


def _sum(column) -> int:
    return pa.compute.sum(column).as_py() or 0


FILES_SCHEMA = pa.schema([
    ("path", pa.string()), ("size", pa.int64()), ("mtime_ns", pa.int64()),
    ("racy", pa.bool_()), ("kept", pa.bool_()), ("machine", pa.string()),
    ("cpu", pa.string()), ("env", pa.string()), ("commit", pa.string()),
    ("date", pa.float64()), ("entries", pa.int64()), ("rows", pa.int64()),
    ("samples", pa.int64()),
    ("skipped_what", pa.list_(pa.string())), ("skipped_why", pa.list_(pa.string())),
    ("notes", pa.list_(pa.string()))])


def cached_rows(roots: list[Path], metas: list[dict], folder: int, paths: list[Path],
                where: Path, jobs: int | None, samples: bool = True) -> Rows:
    """The rows of results files ``paths`` of folder ``roots[folder]``, from its cache
    folder ``where`` (created; OSError if it cannot be), parsing only what is new;
    without ``samples``, none are read."""
    root = roots[folder]
    where.mkdir(parents=True, exist_ok=True)
    store = Store(where)
    with locked(where / "lock"):
        listed, now = listing(root, paths)
        try:
            parts = store.parts()
            tables = [store.read(p, samples) for p in parts]
        except CacheCorrupt as exc:
            warnings.warn(f"history cache {where} is corrupt ({exc}); rebuilding it",
                          ResultsWarning, stacklevel=4)
            store.wipe()
            parts, tables = [], []
        known = _known(tables)
        todo = [path for path, (rel, size, mtime) in zip(paths, listed, strict=True)
                if known.get(rel, (0, 0, -1, -1, True))[2:] != (size, mtime, False)]
        added = []
        if todo:
            stats = {rel: (size, mtime) for rel, size, mtime in listed}
            new = part_tables(parse([root], [metas[folder]], [(0, p) for p in todo], jobs),
                              root, stats, now)
            added.append(store.write(new))
            if not samples:
                del new["samples"]
            parts, tables = parts + added, tables + [new]
            known = _known(tables)
        picks = [known[rel][:2] for rel, _, _ in listed]
        parts, tables, dropped = _compact(store, parts, tables, picks)
        if added or dropped:
            store.commit(parts, dropped)
            known = _known(tables)
            picks = [known[rel][:2] for rel, _, _ in listed]
    if not picks:
        return Rows(roots, metas)
    chosen = select(tables, picks)
    del tables  # the chosen tables' buffers go as to_rows copies them out
    return to_rows(roots, metas, folder, chosen)


def _known(tables: list[dict]) -> dict[str, tuple]:
    """path -> (part, record, size, mtime_ns, racy) of its newest record."""
    known = {}
    for k, t in enumerate(tables):
        f = t["files"]
        cols = [f[c].to_pylist() for c in ("path", "size", "mtime_ns", "racy")]
        for j, (rel, size, mtime, racy) in enumerate(zip(*cols, strict=True)):
            known[rel] = (k, j, size, mtime, racy)
    return known


def _compact(store: Store, parts: list[str], tables: list[dict], picks: list[tuple]):
    """Drop parts nothing live is read from; merge into one part those mostly stale,
    and, past MAX_PARTS, all but the largest. Returns (parts, tables, dropped parts)."""
    live_rows = [0] * len(parts)
    live = [[] for _ in parts]
    for k, j in picks:
        live[k].append(j)
    for k, js in enumerate(live):
        r = tables[k]["files"]["rows"].to_numpy()
        live_rows[k] = int(r[js].sum()) if js else 0
    total = [t["rows"].num_rows for t in tables]
    dead = {k for k in range(len(parts)) if not live[k]}
    merge = {k for k in range(len(parts)) if k not in dead and (
        live_rows[k] * 2 < total[k] or (live_rows[k] < total[k] and len(live[k]) * 2 <
                                        tables[k]["files"].num_rows))}
    alive = [k for k in range(len(parts)) if k not in dead]
    if len(alive) > MAX_PARTS:
        largest = max(alive, key=lambda k: live_rows[k])
        merge |= set(alive) - {largest}
    if len(merge) == 1 and len(live[next(iter(merge))]) == tables[next(iter(merge))][
            "files"].num_rows:
        merge = set()
    keep = [k for k in alive if k not in merge]
    out_parts = [parts[k] for k in keep]
    out_tables = [tables[k] for k in keep]
    if merge:
        order = sorted(merge)
        tables = [t if "samples" in t or k not in merge else store.read(parts[k])
                  for k, t in enumerate(tables)]
        merged = select([tables[k] for k in order],
                        [(i, j) for i, k in enumerate(order) for j in sorted(live[k])])
        out_parts.append(store.write(merged))
        if out_tables and "samples" not in out_tables[0]:
            del merged["samples"]
        out_tables.append(merged)
    return out_parts, out_tables, [parts[k] for k in sorted(dead | merge)]


def ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray | slice:
    """The indices start..start+length of each pair, one after another (a slice when
    they follow each other)."""
    total = int(lengths.sum())
    if len(starts) == 0 or total == 0:
        return slice(0, 0)
    if np.array_equal(starts[1:], starts[:-1] + lengths[:-1]):
        return slice(int(starts[0]), int(starts[0]) + total)
    shift = starts - np.concatenate([[0], np.cumsum(lengths)[:-1]])
    return np.repeat(shift, lengths) + np.arange(total)


def select(tables: list[dict], picks: list[tuple[int, int]]) -> dict[str, pa.Table]:
    """The records ``picks`` ((part, record) pairs, in that order) of the parts'
    ``tables`` as one part's tables (no copy when they are one part, whole, in order)."""
    files = pa.concat_tables([t["files"] for t in tables])
    base = np.cumsum([0] + [t["files"].num_rows for t in tables])
    at = np.array([base[k] + j for k, j in picks], dtype=np.int64)
    out = {"files": _take(files, ranges(at, np.ones(len(at), np.int64)))}
    for name in [t for t in TABLES[1:] if t in tables[0]]:  # a file's entries, rows and
        # samples lie together, in file order
        every = files[name].to_numpy()
        starts = (np.cumsum(every) - every)[at]
        out[name] = _take(pa.concat_tables([t[name] for t in tables]),
                          ranges(starts, every[at]))
    return out


def _take(table: pa.Table, idx) -> pa.Table:
    if isinstance(idx, slice):
        return table.slice(idx.start, idx.stop - idx.start)
    return table.take(pa.array(idx))


def to_rows(roots: list[Path], metas: list[dict], folder: int,
            t: dict[str, pa.Table]) -> Rows:
    """A :class:`Rows` as a parse of the files of ``t`` (one part's tables) in folder
    ``roots[folder]`` would have gathered it."""
    root = roots[folder]
    rows = Rows(roots, metas)
    f = {c: t["files"][c].to_pylist() for c in t["files"].column_names}
    for i, rel in enumerate(f["path"]):
        text = str(root / rel)
        rows.skipped += [(text + w, why) for w, why in zip(f["skipped_what"][i],
                                                           f["skipped_why"][i], strict=True)]
        rows.notes += [text + note for note in f["notes"][i]]
        if f["kept"][i]:
            date = f["date"][i]
            rows.files.append((f["machine"][i], f["cpu"][i], f["env"][i], f["commit"][i],
                               int(date) if date.is_integer() else date,
                               str(Path(rel)) if len(roots) == 1 else text, folder))
    kept = np.asarray(f["kept"], dtype=bool)
    rows.entry_file = np.repeat(np.cumsum(kept) - 1, np.asarray(f["entries"], np.int64)
                                ).tolist()
    e = t["entries"]
    bench = pa.compute.dictionary_encode(e["bench"].combine_chunks())
    grid = pa.compute.dictionary_encode(e["grid"].combine_chunks())
    names = bench.dictionary.to_pylist()
    texts = grid.dictionary.to_pylist()
    codes = bench.indices.to_numpy().astype(np.int64)
    key = codes * max(len(texts), 1) + grid.indices.to_numpy()
    uniq, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    gid = np.empty(len(uniq), np.int64)
    for u in np.argsort(first, kind="stable"):  # grids in order of first appearance
        name, params = names[uniq[u] // max(len(texts), 1)], json.loads(
            texts[uniq[u] % max(len(texts), 1)])
        gid[u] = rows.grids.add(rows.grids.names(name, metas[folder].get(name, {}), params),
                                params)
    rows.entry_grid = gid[inverse].tolist()
    rows.entry_bench = np.asarray(names, dtype=object)[codes].tolist()
    rows.entry_version = e["version"].to_pylist()
    rows.sizes = e["size"].to_numpy().tolist()
    r = t.pop("rows")
    numbers = {}
    for name in [*NUMBERS, "status", "count"]:  # each column copied out, then it goes
        numbers[name] = np.array(r[name].to_numpy())
        r = r.drop_columns([name])
    rows.values, rows.status = [numbers["value"]], [numbers["status"]]
    rows.stats = {short: [numbers[short]] for short in STAT_COLUMNS.values()}
    if "samples" in t:
        rows.sample_counts = [numbers["count"]]
        rows.sample_values = [np.array(t.pop("samples")["sample"].to_numpy())]
    return rows
