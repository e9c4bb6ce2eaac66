"""An incremental Parquet cache of parsed results files, for :func:`load_results`.

Each results folder has a cache folder (:func:`cache_dir`) of immutable *parts*
(:mod:`flashbench.history.parts`) and ``index.json``, which names the parts and the
cache's :data:`SCHEMA`. A results file is known by its path in the folder, size, mtime
and ctime (which no one can set back by hand); where those moved (a fresh checkout) or its
mtime lay within ``RACY_NS`` of its listing (git's "racily clean" rule), a digest of its
contents decides whether it is parsed again. Parts
carry Parquet page checksums, verified as they are read: a corrupt part is reported,
dropped and its files parsed again. Only new or changed files are parsed, into one new
part; parts that hold mostly replaced files, and past :data:`MAX_PARTS` all but the
largest, are merged. A part is written under a private name and the index replaced
atomically, under a lock of the cache folder (flashbench.infra.locks): one process
updates it at a time, a second finds the work done. The cache is derived data: safe to
delete, rebuilt when SCHEMA changes, rebuilt with a warning when it cannot be read.
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

import pyarrow as pa
import pyarrow.parquet as pq

from flashbench.history.files import ResultsWarning
from flashbench.history.parts import (
    TABLES,
    CacheCorrupt,
    check,
    digest,
    part_tables,
    select,
    to_rows,
)
from flashbench.history.rows import Rows, parse
from flashbench.infra.git import GitError, git
from flashbench.infra.locks import locked

SCHEMA = 6  # bump when what a part holds, or what a parse gathers, changes
ENV = "FLASHBENCH_HISTORY_CACHE"  # a folder for every cache, or "off"
OFF = {"", "0", "off", "no", "false", "none"}
MAX_PARTS = 8
DICTIONARY = {"entries": ["bench", "version", "grid"]}  # read as written: few distinct values


def cache_dir(root: Path, cache=None) -> Path | None:
    """The cache folder of results folder ``root``; None: no cache.

    ``cache``: None (the environment variable ``FLASHBENCH_HISTORY_CACHE``: a folder,
    or "off"; unset: the default), True (the default), False (none), or a folder that
    holds the caches of every results folder. The default is
    ``<root's parent>/.flashbench-cache/<root's name>``: in a checkout that is beside
    ``results/`` and ignored by git, and it goes away with the checkout. Under a chosen
    folder, each results folder's cache is named by its name and where it is from (a
    checkout's origin and its path there, else its resolved path: :func:`_where_from`).
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
    key = hashlib.sha256(_where_from(root).encode()).hexdigest()[:12]
    return Path(cache) / f"{root.name}-{key}"


def _where_from(root: Path) -> str:
    """What names ``root``'s cache under a chosen folder: in a git checkout with an
    origin, that URL and the folder's path inside the checkout (every clone of one
    repository shares a cache: a Slurm publish clones into a new path each job, and its
    cache folder gained a full copy each run, a probe, 2026-12-07); else its path."""
    try:
        top = Path(git("rev-parse", "--show-toplevel", cwd=root)).resolve()
        origin = git("config", "--get", "remote.origin.url", cwd=root)
    except GitError:
        return str(root)
    return f"{origin}:{root.relative_to(top).as_posix()}"


def listing(root: Path, paths: list[Path]) -> tuple[list[tuple[str, int, int, int]], int]:
    """(path in ``root``: ``<machine>/<file>``, size, mtime_ns, ctime_ns) of each results
    file ``root/<machine>/<file>``, and the time (ns) it was taken. ctime is the kernel's:
    an edit that restores size and mtime (``touch -d``, ``os.utime``) still moves it."""
    now = time.time_ns()
    out = []
    for path in paths:
        st = path.stat()
        out.append((f"{path.parent.name}/{path.name}", st.st_size, st.st_mtime_ns,
                    st.st_ctime_ns))
    return out, now


class Part:
    """A part of a cache folder: its files table read at once, the others on demand."""

    def __init__(self, folder: Path, name: str, tables: dict | None = None):
        self.folder, self.name = folder, name
        self.tables = tables if tables is not None else {"files": self._read("files")}
        check(name, self.tables)

    def _read(self, table: str, columns: list[str] | None = None) -> pa.Table:
        """Read in this thread (arrow's threads were 6x slower on a busy 2-CPU machine),
        each column in one chunk (a part is written as one row group)."""
        try:
            return pq.ParquetFile(self.folder / f"{self.name}.{table}.parquet",
                                  memory_map=True, read_dictionary=DICTIONARY.get(table),
                                  page_checksum_verification=True
                                  ).read(columns=columns, use_threads=False)
        except (OSError, pa.ArrowException) as exc:
            why = " ".join(str(exc).split())  # one line (Arrow's messages span several)
            raise CacheCorrupt(f"part {self.name}: its {table} table: {why}",
                               self.name) from None

    def load(self, tables=TABLES) -> dict[str, pa.Table]:
        """Its ``tables`` (names), read once and kept."""
        for table in tables:
            if table not in self.tables:
                self.tables[table] = self._read(table)
        check(self.name, self.tables)
        return {t: self.tables[t] for t in tables}

    def column(self, table: str, name: str) -> dict[str, pa.Table]:
        """Its files table and column ``name`` of ``table``, read now and not kept (a
        column at a time: a big table never lies in memory twice)."""
        tables = {"files": self.tables["files"], table: self.tables.get(table)}
        if tables[table] is None:
            tables[table] = self._read(table, [name])
        check(self.name, tables, columns=[name])
        return tables

    def known(self) -> list[tuple]:
        """(path, size, mtime_ns, ctime_ns, racy, digest) of each of its records."""
        f = self.tables["files"]
        return list(zip(*(f[c].to_pylist() for c in ("path", "size", "mtime_ns", "ctime_ns",
                                                        "racy", "digest")), strict=True))


class Store:
    """A cache folder's index and files (the caller holds the folder's lock)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.index = folder / "index.json"

    def parts(self) -> list[Part]:
        """The parts the index names ([] without an index; after a schema change the
        folder is emptied)."""
        if not self.index.exists():
            return []
        try:
            data = json.loads(self.index.read_text())
            version, names = data["schema"], data["parts"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CacheCorrupt(f"index.json unreadable: {exc}") from None
        if version != SCHEMA:  # written by another flashbench: start afresh
            self.wipe()
            return []
        if not isinstance(names, list) or not all(isinstance(p, str) for p in names):
            raise CacheCorrupt("index.json: 'parts' is not a list of names")
        return [Part(self.folder, name) for name in names]

    def write(self, tables: dict[str, pa.Table]) -> Part:
        """A new part of ``tables``, each table written under a private name first."""
        name = f"part-{uuid.uuid4().hex[:16]}"
        for t in TABLES:
            tmp = self.folder / f".{name}.{t}.tmp"
            pq.write_table(tables[t], tmp, use_dictionary=t in TABLES[:2],
                           row_group_size=max(1, tables[t].num_rows), write_page_checksum=True)
            os.replace(tmp, self.folder / f"{name}.{t}.parquet")
        return Part(self.folder, name, {"files": tables["files"]})  # the rest read as written

    def commit(self, parts: list[Part], drop: list[Part]) -> None:
        """Point the index at ``parts`` (atomic replace), then delete ``drop``'s files."""
        self._point([p.name for p in parts], [p.name for p in drop])

    def _point(self, names: list[str], drop: list[str]) -> None:
        tmp = self.folder / ".index.json.tmp"
        tmp.write_text(json.dumps({"schema": SCHEMA, "parts": names}))
        os.replace(tmp, self.index)
        for name in drop:
            for t in TABLES:
                (self.folder / f"{name}.{t}.parquet").unlink(missing_ok=True)

    def drop(self, name: str) -> None:
        """Leave part ``name`` out of the index and delete it: the results files it held
        are parsed again at the next update (CacheCorrupt if the index is unreadable)."""
        try:
            names = json.loads(self.index.read_text())["parts"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CacheCorrupt(f"index.json unreadable: {exc}") from None
        self._point([n for n in names if n != name], [name])

    def wipe(self) -> None:
        """Everything but the lock file."""
        for path in self.folder.iterdir():
            if path.name != "lock":
                shutil.rmtree(path) if path.is_dir() else path.unlink()


def update(where: Path, root: Path, meta: dict, paths: list[Path], jobs: int | None):
    """Bring the cache folder ``where`` of results folder ``root`` (benchmarks.json
    entries ``meta``) up to date with its results files ``paths`` (caller holds the
    lock). Returns (parts, per path its (part index, record), files parsed)."""
    store = Store(where)
    listed, now = listing(root, paths)
    parts = store.parts()
    known = _known(parts)
    todo = [path for path, (rel, *stat) in zip(paths, listed, strict=True)
            if _changed(path, known.get(rel), stat)]
    if todo:
        stats = {rel: tuple(stat) for rel, *stat in listed}
        rows = parse([root], [meta], [(0, p) for p in todo], jobs)
        parts.append(store.write(part_tables(rows, root, stats, now)))
        del rows
        known = _known(parts)
    picks = [known[rel][:2] for rel, *_ in listed]
    keep, drop = _compact(store, parts, picks)
    if todo or drop:
        store.commit(keep, drop)
        known = _known(keep)
        picks = [known[rel][:2] for rel, *_ in listed]
    return keep, picks, len(todo)


def _changed(path: Path, record: tuple | None, stat: list) -> bool:
    """Whether results file ``path`` (``stat``: size, mtime_ns, ctime_ns) must be parsed
    again: no ``record`` of it, or one of another size, or of other contents where its
    stat moved or lay racily near its listing (a fresh checkout's files all have new
    times: their contents decide)."""
    if record is None:
        return True
    if tuple(record[2:6]) == (*stat, False):
        return False
    return record[2] != stat[0] or digest(path) != record[6]


def _known(parts: list[Part]) -> dict[str, tuple]:
    """path -> (part index, record, size, mtime_ns, ctime_ns, racy, digest) of its newest
    record."""
    return {rel: (k, j, *rest) for k, part in enumerate(parts)
            for j, (rel, *rest) in enumerate(part.known())}


def _compact(store: Store, parts: list[Part], picks: list[tuple]):
    """(parts to keep, parts to drop): parts nothing live is read from are dropped;
    parts mostly replaced, and past MAX_PARTS all but the largest, are merged into a
    new part (kept)."""
    live: list[list[int]] = [[] for _ in parts]
    for k, j in picks:
        live[k].append(j)
    rows = [part.tables["files"]["rows"].to_numpy() for part in parts]
    live_rows = [int(r[js].sum()) for r, js in zip(rows, live, strict=True)]
    alive = [k for k in range(len(parts)) if live[k]]
    merge = {k for k in alive if 2 * live_rows[k] < rows[k].sum()
             or 2 * len(live[k]) < len(rows[k])}
    if len(alive) > MAX_PARTS:
        merge |= set(alive) - {max(alive, key=lambda k: live_rows[k])}
    keep = [parts[k] for k in alive if k not in merge]
    if merge:
        order = sorted(merge)
        tables = select([parts[k].load() for k in order],
                        [(i, j) for i, k in enumerate(order) for j in sorted(live[k])])
        keep.append(store.write(tables))
    return keep, [parts[k] for k in range(len(parts)) if k not in alive or k in merge]


def _locked_update(where: Path, then):
    """``then()`` under the lock of cache folder ``where`` (created; OSError if it
    cannot be); a corrupt part is reported and dropped (its files are parsed again), a
    corrupt index empties the cache, and ``then()`` runs again (a cache still corrupt
    after one part was dropped is emptied)."""
    where.mkdir(parents=True, exist_ok=True)
    with locked(where / "lock"):
        for attempt in range(3):
            try:
                return then()
            except CacheCorrupt as exc:
                store = Store(where)
                part = exc.part if attempt == 0 else None
                warnings.warn(f"history cache {where} is corrupt ({exc}); "
                              + (f"parsing the results files of {part} again" if part
                                 else "rebuilding it"), ResultsWarning, stacklevel=4)
                try:
                    store.drop(part) if part else store.wipe()
                except CacheCorrupt:
                    store.wipe()
        return then()


def cached_rows(roots: list[Path], metas: list[dict], folder: int, paths: list[Path],
                where: Path, jobs: int | None, samples: bool = True) -> Rows:
    """The rows of results files ``paths`` of folder ``roots[folder]``, from its cache
    folder ``where``, parsing only what is new; without ``samples``, none are read."""

    def chosen():
        parts, picks, _ = update(where, roots[folder], metas[folder], paths, jobs)
        if not picks:
            return Rows(roots, metas)
        tables = select([p.load(TABLES[:2]) for p in parts], picks)

        def column(table: str, name: str) -> pa.ChunkedArray:
            return select([p.column(table, name) for p in parts], picks)[table][name]

        return to_rows(roots, metas, folder, tables, column, samples)

    rows = _locked_update(where, chosen)
    pa.default_memory_pool().release_unused()  # what Arrow read and let go, to the system
    return rows


def refresh(where: Path, root: Path, meta: dict, paths: list[Path],
            jobs: int | None = None) -> int:
    """Bring a folder's cache up to date without reading a frame; files parsed."""
    return _locked_update(where, lambda: update(where, root, meta, paths, jobs)[2])
