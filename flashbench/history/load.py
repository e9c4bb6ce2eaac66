""":func:`load_results`: one or several asv results folders as one tidy DataFrame.

Lists the results files, reads them through each folder's cache
(:mod:`flashbench.history.cache`: only new or changed files are parsed) or, without
one, parses them all (:func:`flashbench.history.rows.parse`, forked workers for big
corpora), reports what was skipped, and assembles the frame
(:func:`flashbench.history.frame.assemble`).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pandas as pd

from flashbench.history.cache import cache_dir, cached_rows, refresh
from flashbench.history.files import ResultsWarning, gc_paused, read_benchmarks
from flashbench.history.frame import assemble
from flashbench.history.rows import parse


def folders(path_or_paths) -> list[Path]:
    """The results folders named by ``path_or_paths`` (one path, or an iterable of them).

    Raises ValueError for none, or for a path that is not a directory."""
    if isinstance(path_or_paths, (str, os.PathLike)):
        roots = [Path(path_or_paths)]
    else:
        try:
            roots = [Path(p) for p in path_or_paths]
        except TypeError:
            raise TypeError(f"path_or_paths must be a folder or a list of folders, got "
                            f"{path_or_paths!r}") from None
    if not roots:
        raise ValueError("path_or_paths names no results folder")
    for root in roots:
        if not root.is_dir():
            raise ValueError(f"results path {str(root)!r} is not a directory")
    return roots


def results_files(roots: list[Path], twins: list | None = None) -> list[tuple[int, Path]]:
    """(folder index, path) of every ``<machine>/*.json`` results file, sorted per folder;
    a file that an earlier folder holds too, byte for byte at the same
    ``<machine>/<name>.json``, is the same result: read from the first folder only, and
    (its folder, the first's) appended to ``twins`` (a copy given beside its original was
    read twice: every point doubled, the noise estimate at 0, 1,141 steps where there were
    195). Files that differ are read (one machine name can hold several processors')."""
    kept, first = [], {}
    for i, root in enumerate(roots):
        for f in sorted(root.glob("*/*.json"), key=lambda p: p.parts):  # parts: 10x faster
            if f.name == "machine.json":
                continue
            key = f.parts[-2:]
            if key in first and _same_bytes(f, first[key][1]):
                if twins is not None:
                    twins.append((i, first[key][0]))
                continue
            first.setdefault(key, (i, f))
            kept.append((i, f))
    return kept


def _twin_lines(roots: list[Path], twins: list) -> list[tuple[str, str]]:
    """One (folder, why) per folder whose files an earlier one holds (:func:`results_files`)."""
    return [(str(roots[i]), f"{n} of its results files are also in {roots[j]}, byte for "
             "byte: read once, from there")
            for (i, j), n in pd.Series(twins, dtype=object).value_counts(sort=False).items()]


def _same_bytes(a: Path, b: Path) -> bool:
    try:
        return a.stat().st_size == b.stat().st_size and a.read_bytes() == b.read_bytes()
    except OSError:
        return False


def load_results(path_or_paths, jobs: int | None = None, cache=None,
                 samples: bool = True, each_env: bool = False) -> pd.DataFrame:
    """Every results file under one or several results folders as one tidy DataFrame
    (the columns: :mod:`flashbench.history`).

    ``path_or_paths``: a folder or a list of folders, each with its own
    benchmarks.json (parameter names, types, units). With one folder, ``file`` is the
    path relative to it; with several, the path as given. ``frame.attrs
    ["skipped_files"]`` lists ``(file or "file: benchmark", reason)`` for everything
    reported (:class:`ResultsWarning`) and skipped. ``jobs``: processes that parse the
    files, this one and ``jobs - 1`` forked workers (default: one per CPU from 200
    files on; 1 reads everything here); the frame is the same either way. ``cache``:
    where each folder's parsed files are kept, so that only new or changed files are
    parsed (:func:`flashbench.history.cache.cache_dir`: None reads the environment
    variable FLASHBENCH_HISTORY_CACHE, a folder or "off"; False: no cache); the frame
    is the same either way, and a folder whose cache cannot be written is read
    without one (a :class:`ResultsWarning` says so). ``samples=False`` leaves the
    samples column out (the summaries do not read it; with 5 samples a point it is
    about a third of the frame's memory). One results file per machine and commit is read
    (:func:`one_run_each`); ``each_env``: one per environment of each (the review's stored
    mode compares like environments). Raises ValueError if a path is not a directory.
    """
    roots = folders(path_or_paths)
    unread: list = []  # an unreadable benchmarks.json: said in the report (below)
    metas = [read_benchmarks(root, unread) for root in roots]
    twins: list = []
    files = results_files(roots, twins)
    wheres = [cache_dir(root, cache) for root in roots]
    if not any(wheres):
        rows = parse(roots, metas, files, jobs)
    else:
        rows = None
        for i, where in enumerate(wheres):
            mine = [path for folder, path in files if folder == i]
            part = None
            if where is not None:
                try:
                    part = cached_rows(roots, metas, i, mine, where, jobs, samples)
                except OSError as exc:
                    warnings.warn(f"history cache {where} not used: {exc}", ResultsWarning,
                                  stacklevel=2)
            if part is None:
                part = parse(roots, metas, [(i, path) for path in mine], jobs)
            if rows is None:
                rows = part
            else:
                rows.merge(part)
    for what, why in rows.skipped:
        warnings.warn(f"{what}: skipped: {why}", ResultsWarning, stacklevel=2)
    for note in rows.notes:
        warnings.warn(note, ResultsWarning, stacklevel=2)
    twins = _twin_lines(roots, twins)
    # a folder of results without its benchmarks.json: units, types and parameter names
    # unknown, so most summaries lose their rows; said, not silent (a fresh-eyes probe's
    # report kept 24 of 164 throughput rows, exit 0, nothing said)
    twins += [(str(root / "benchmarks.json"), "missing: the units, types and parameter "
               "names of this folder's benchmarks are unknown, and the summaries that need "
               "them leave its results out (asv writes it beside every run: copy it with "
               "the results)") for i, root in enumerate(roots)
              if not metas[i] and not (root / "benchmarks.json").exists()
              and any(folder == i for folder, _ in files)] + unread
    for what, why in twins:
        warnings.warn(f"{what}: {why}", ResultsWarning, stacklevel=2)
    left_out, said = one_run_each(rows, roots, each_env)
    for note in said:
        warnings.warn(note, ResultsWarning, stacklevel=2)
    with gc_paused():
        frame = assemble(rows, metas, samples, _ancestry(roots[0]) if roots else None)
    if left_out:
        frame = _without_files(frame, rows, left_out)
    frame.attrs["skipped_files"] += twins
    frame.attrs["notes"] = list(rows.notes) + said  # report.md says them too (not stderr alone)
    _unsized(frame)
    return frame


def _ancestry(where: Path):
    """``is_ancestor(a, b)``: git's, in the repository holding ``where`` (False where git
    cannot tell: a commit it does not hold); None outside a repository."""
    from functools import cache

    from flashbench.infra.git import GitError, git

    try:
        git("rev-parse", "--git-dir", cwd=where)
    except GitError:
        return None

    @cache
    def is_ancestor(a, b) -> bool:
        try:
            git("merge-base", "--is-ancestor", str(a), str(b), cwd=where)
        except GitError:
            return False
        return True

    return is_ancestor


def one_run_each(rows, roots: list[Path], each_env: bool = False
                 ) -> tuple[set[int], list[str]]:
    """(files left out, a note per one): one results file per machine (name and cpu) and
    commit, whatever its environment or name. A red team, 2026-12-08: a copy under
    another name was read twice (steps 343 -> 777), and two environments of one commit
    read as two runs, the value a band or step took hanging on the names' order. Kept:
    the newest run (its latest ``started_at``), then the later ``date``, then the larger
    SHA-256 of the file's bytes; never the name. ``each_env``: one per environment too."""
    groups: dict[tuple, list[int]] = {}
    for k, (machine, cpu, env, commit, *_) in enumerate(rows.files):
        groups.setdefault((machine, cpu, commit, env if each_env else None), []).append(k)
    left_out, said = set(), []
    for (machine, _, commit, _), ks in groups.items():
        if len(ks) < 2:
            continue
        facts = {k: _run_facts(rows, roots, k) for k in ks}
        # of identical ones the shortest name, for the file column (a copy's is longer)
        ks.sort(key=lambda k: (len(rows.files[k][5]), rows.files[k][5]))
        kept = max(ks, key=lambda k: facts[k][:3])  # the first of equals
        for k in sorted(set(ks) - {kept}, key=lambda k: rows.files[k][5]):
            left_out.add(k)
            env, kept_env = rows.files[k][2], rows.files[kept][2]
            why = ("identical content" if facts[k][2] == facts[kept][2] else
                   f"environment {env} beside {kept_env}" if env != kept_env else
                   "the same environment, another content")
            said.append(f"{rows.files[k][5]} left out: {rows.files[kept][5]} is the same "
                        f"machine ({machine}) and commit ({str(commit)[:8]}), {why}; one file "
                        "per machine and commit is read, its newest run (latest started_at)")
    return left_out, said


def _run_facts(rows, roots: list[Path], k: int) -> tuple:
    """(latest started_at, date, SHA-256) of file ``k`` of ``rows``, read again."""
    import hashlib

    from flashbench.history.files import read_bytes, read_results_file

    _, _, _, _, date, name, folder = rows.files[k]
    path = roots[folder] / name if len(roots) == 1 else Path(name)
    try:
        data, raw = read_results_file(path), read_bytes(path)
    except (OSError, ValueError):  # gone since it was parsed: kept last
        return -1.0, date, ""
    i = data["result_columns"].index("started_at") \
        if "started_at" in data["result_columns"] else None
    started = [row[i] for row in data["results"].values() if i is not None
               and isinstance(row, list) and len(row) > i and type(row[i]) in (int, float)]
    return float(max(started, default=-1.0)), date, hashlib.sha256(raw).hexdigest()


def _without_files(frame: pd.DataFrame, rows, left_out: set[int]) -> pd.DataFrame:
    """``frame`` without the rows of files ``left_out`` (indices into ``rows.files``)."""
    import numpy as np

    of_row = np.repeat(np.asarray(rows.entry_file, np.int64),
                       np.asarray(rows.sizes, np.int64))
    attrs = frame.attrs
    frame = frame[~np.isin(of_row, list(left_out))].reset_index(drop=True)
    for c in ("file", "env"):
        frame[c] = frame[c].cat.remove_unused_categories()
    frame.attrs = attrs
    return frame


def _unsized(frame: pd.DataFrame) -> None:
    """A warning naming the times and memory sizes no measurement gives (0 or less, ...:
    an edited or broken file; left out of steps and trends, ``summaries.finite_ok``)."""
    import numpy as np

    from flashbench.history.summaries import finite_ok

    if frame.empty:
        return
    # ok and finite (an infinite one is named as not finite already), yet not usable
    bad = (frame["status"] == "ok").to_numpy() & np.isfinite(frame["value"].to_numpy(float)) \
        & ~finite_ok(frame)
    if bad.any():
        rows = frame.loc[bad]
        shown = ", ".join(f"{b} at {str(c)[:8]} ({v:g})" for b, c, v in zip(
            rows["benchmark"].astype(object)[:5], rows["commit"].astype(object)[:5],
            rows["value"][:5], strict=True))
        note = (f"{int(bad.sum())} value(s) that no measurement gives (a time of 10 ps "
                "or less, or over 1e6 s; a size of 0 or less, or over 1e18 bytes; a track "
                f"below 0): {shown}{' ...' if bad.sum() > 5 else ''}: left out of steps, "
                "trends and bands")
        frame.attrs.setdefault("notes", []).append(note)
        warnings.warn(note, ResultsWarning, stacklevel=3)


def refresh_cache(path_or_paths, cache=None, jobs: int | None = None) -> int:
    """Bring the cache of each results folder up to date (parse what is new or
    changed) without assembling a frame; returns how many files were parsed.
    ``cache`` as for :func:`load_results`; ValueError when it names no cache."""
    roots = folders(path_or_paths)
    files = results_files(roots)
    parsed = 0
    for i, root in enumerate(roots):
        where = cache_dir(root, cache)
        if where is None:
            raise ValueError("refresh_cache: the cache is off (cache=False or "
                             "FLASHBENCH_HISTORY_CACHE=off)")
        parsed += refresh(where, root, read_benchmarks(root),
                          [path for folder, path in files if folder == i], jobs)
    return parsed
