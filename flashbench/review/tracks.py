"""Values measured once per commit in a same-run review (tracks and peak memory): their
rows, and the band of earlier results that accuracy is held to.

The band is the results stored for base's git ancestors on this machine
(:func:`flashbench.review.results.machine_rows`) with head's benchmark version (asv's
code hash; never by date, never the head). The rules are
:func:`flashbench.review.rules.value_row`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from flashbench.review.gitops import ancestors
from flashbench.review.model import Review, Row
from flashbench.review.results import load_stored, machine_rows, same_version
from flashbench.review.rules import value_row

Band = Callable[..., list[float]]


def band_source(results: Path, root: Path, review: Review) -> Band:
    """``band(benchmark, params, version=None)``: ok values stored for base's ancestors
    (base included, head excluded) on this machine, of benchmark ``version`` where it is
    known (another version of the benchmark's code measured something else); loaded on
    first use."""
    cache: dict = {}

    def load():
        if "frame" not in cache:
            frame = machine_rows(load_stored([results], samples=False), review.machine,
                                 review.cpu)
            keep = set(ancestors(review.base, root)) - {review.head} if len(frame) else set()
            frame = frame[(frame["status"].astype(object) == "ok")
                          & frame["commit"].astype(object).isin(keep)]
            cache["frame"] = {key: group for key, group in frame.groupby(
                [frame["benchmark"].astype(object), frame["params"].astype(object)],
                sort=False)}
            review.notes.append(f"Accuracy band: results stored in {results} for "
                                f"{frame['commit'].nunique()} ancestor commit(s) of base on "
                                "this machine.")
        return cache["frame"]

    def band(benchmark: str, params: str, version: str | None = None) -> list[float]:
        sel = load().get((benchmark, params))  # one groupby, then a lookup per grid point
        return [] if sel is None else [float(v) for v in same_version(sel, version)["value"]]

    return band


def track_rows(points, base: list[dict], head: list[dict], acc_tol: float, factor: float,
               band: Band) -> list[Row]:
    """Rows for grid points measured once per commit (the workers' replies: tracks, and
    peak memory)."""
    rows = []
    for p, b, h in zip(points, base, head, strict=True):
        row = p.coverage_row(b, h)
        if row is None:
            earlier = band(p.name, p.params, p.version) if p.kind == "accuracy" else []
            row = value_row(p.kind, p.name, p.params, p.unit, float(b["value"]),
                            float(h["value"]), earlier, acc_tol, factor)
        rows.append(row)
    return rows
