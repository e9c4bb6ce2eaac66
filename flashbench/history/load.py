""":func:`load_results`: one or several asv results folders as one tidy DataFrame.

Lists the results files, shares them out to forked worker processes for big
corpora (each reads a contiguous chunk into its own :class:`Rows`; merged in order,
the frame is the same as a serial read), reports what was skipped, and assembles
the frame (:func:`flashbench.history.frame.assemble`).
"""

from __future__ import annotations

import multiprocessing
import os
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pandas as pd

from flashbench.history.files import ResultsWarning, gc_paused, read_benchmarks
from flashbench.history.frame import assemble
from flashbench.history.rows import Rows


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


def results_files(roots: list[Path]) -> list[tuple[int, Path]]:
    """(folder index, path) of every ``<machine>/*.json`` results file, sorted per folder."""
    return [(i, f) for i, root in enumerate(roots) for f in sorted(root.glob("*/*.json"))
            if f.name != "machine.json"]


def _workers(jobs: int | None, files: int) -> int:
    """Worker processes for ``files`` results files: ``jobs``, else one per usable CPU
    for big corpora (a worker pays off from about 100 files), 1 without fork."""
    if "fork" not in multiprocessing.get_all_start_methods():
        return 1
    if jobs is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
        jobs = min(cpus, files // 100)
    return max(1, min(jobs, files))


def load_results(path_or_paths, jobs: int | None = None) -> pd.DataFrame:
    """Every results file under one or several results folders as one tidy DataFrame
    (the columns: :mod:`flashbench.history`).

    ``path_or_paths``: a folder or a list of folders, each with its own
    benchmarks.json (parameter names, types, units). With one folder, ``file`` is the
    path relative to it; with several, the path as given. ``frame.attrs
    ["skipped_files"]`` lists ``(file or "file: benchmark", reason)`` for everything
    reported (:class:`ResultsWarning`) and skipped. ``jobs``: processes that parse the
    files, this one and ``jobs - 1`` forked workers (default: one per CPU from 200
    files on; 1 reads everything here); the frame is the same either way. Raises
    ValueError if a path is not a directory.
    """
    roots = folders(path_or_paths)
    metas = [read_benchmarks(root) for root in roots]
    files = results_files(roots)
    jobs = _workers(jobs, len(files))
    if jobs == 1:
        rows = Rows(roots, metas).read(files)
    else:  # contiguous chunks, merged in order: rows keep the sorted file order
        size = -(-len(files) // jobs)
        chunks = [files[k:k + size] for k in range(0, len(files), size)]
        with ProcessPoolExecutor(len(chunks) - 1,
                                 mp_context=multiprocessing.get_context("fork")) as pool:
            others = [pool.submit(_read_part, roots, metas, chunk) for chunk in chunks[1:]]
            rows = Rows(roots, metas).read(chunks[0])  # this process is one of the jobs
            for other in others:
                rows.merge(other.result())
    for what, why in rows.skipped:
        warnings.warn(f"{what}: skipped: {why}", ResultsWarning, stacklevel=2)
    for note in rows.notes:
        warnings.warn(note, ResultsWarning, stacklevel=2)
    with gc_paused():
        return assemble(rows, metas)


def _read_part(roots: list[Path], metas: list[dict], files: list) -> Rows:
    """One worker's share of :func:`load_results` (returned to the parent by pickle)."""
    return Rows(roots, metas).read(files)
