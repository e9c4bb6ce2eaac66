"""Stored asv results as the review reads them: loading, this machine's rows, one
benchmark version, and the accuracy band of a same-run review. The band and ``--reuse``
select their rows here, so they always mean the same rows by "this machine"."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from flashbench.history import load_results
from flashbench.infra.git import ancestors
from flashbench.review.model import Review

COLUMNS = ["machine", "cpu", "env", "commit", "date", "benchmark", "params", "status", "value"]


def has_results(folder: Path) -> bool:
    """Whether ``folder`` holds asv results (a machine folder with a result file)."""
    return folder.is_dir() and any(p.name != "machine.json" for p in folder.glob("*/*.json"))


def load_stored(dirs: list[Path], samples: bool = True, notes=None) -> pd.DataFrame:
    """The results of every folder of ``dirs`` that holds some (history's frame, without
    the samples column unless ``samples``; an empty frame with its main columns where none
    does); each file skipped named once in ``notes`` (a probe's corrupt one went unsaid)."""
    have = [d for d in dirs if has_results(d)]
    if not have:
        return pd.DataFrame(columns=COLUMNS)
    with warnings.catch_warnings():  # history reports corrupt files; the review goes on
        warnings.simplefilter("ignore")
        frame = load_results([str(d) for d in have], samples=samples, each_env=True)
    for said in [f"Stored results `{w}` skipped: {y}." for w, y in frame.attrs.get(
            "skipped_files", [])]:
        (notes if notes is not None and said not in notes else []).append(said)
    return frame


def machine_rows(frame: pd.DataFrame, machine: str, cpu: str | None) -> pd.DataFrame:
    """The rows measured on one machine: those that record processor ``cpu`` (asv's
    ``cpu``, the GPU model included; under any machine name, as names changed with
    flashbench's naming), and those of machine name ``machine`` that record none."""
    name = frame["machine"] == machine  # a Categorical compares by its categories
    if "cpu" not in frame.columns:
        return frame[name]
    known = frame["cpu"].notna()
    return frame[(known & (frame["cpu"] == cpu)) | (~known & name)]


def same_version(frame: pd.DataFrame, version: str | None) -> pd.DataFrame:
    """Rows of benchmark ``version`` (asv's code hash); all rows when it is unknown."""
    if version is None or "version" not in frame.columns:
        return frame
    return frame[frame["version"] == version]


Band = Callable[..., list[float]]


def band_source(results: Path, root: Path, review: Review) -> Band:
    """``band(benchmark, params, version=None)``: ok values stored for base's ancestors
    (base included, head excluded) on this machine, of benchmark ``version`` where it is
    known (never by date); loaded on first use, with a header note."""
    cache: dict = {}

    def load():
        if "frame" not in cache:
            frame = machine_rows(load_stored([results], False, review.notes), review.machine,
                                 review.cpu)
            keep = set(ancestors(review.base, root)) - {review.head} if len(frame) else set()
            frame = frame[(frame["status"] == "ok") & frame["commit"].isin(keep)]
            cache["frame"] = {key: group for key, group in frame.groupby(
                ["benchmark", "params"], observed=True, sort=False)}
            review.notes.append(f"Accuracy band: results stored in {results} for "
                                f"{frame['commit'].nunique()} ancestor commit(s) of base here.")
        return cache["frame"]

    def band(benchmark: str, params: str, version: str | None = None) -> list[float]:
        sel = load().get((benchmark, params))  # one groupby, then a lookup per grid point
        return [] if sel is None else [float(v) for v in same_version(sel, version)["value"]]

    return band
