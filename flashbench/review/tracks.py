"""Values measured once per commit in a same-run review (tracks and peak memory): rows,
and the band of earlier results that accuracy is held to.

Accuracy tracks are deterministic: each commit gives one value, judged by
:func:`flashbench.review.rules.judge_accuracy` against base, against the band of the
results stored for base's git ancestors on this processor with the same benchmark
version as head's (asv's code hash; never by date, never the head), and by the rule of
a rule-ratio track. Peak memory (``peakmem_``, and tracks in bytes) is judged by
:func:`flashbench.review.rules.judge_memory`. Other tracks (a device time recorded as
one median) carry no statistics: their ratio can say "ambiguous", never "slower".
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

from flashbench.history import ACCURACY, load_results
from flashbench.history.suites import rule_limit
from flashbench.review.gitops import ancestors
from flashbench.review.model import Review, Row
from flashbench.review.rules import (
    coverage_row,
    is_memory,
    judge_accuracy,
    judge_ratio_only,
    memory_row,
)

Band = Callable[..., list[float]]


def _has_results(folder: Path) -> bool:
    return folder.is_dir() and any(p.name != "machine.json" for p in folder.glob("*/*.json"))


def identity_rows(frame, machine: str, cpu: str):
    """Rows measured on this processor (``cpu`` as asv recorded it); where a result has
    no ``cpu`` recorded, rows of this machine name."""
    if "cpu" in frame.columns:
        known = frame["cpu"].notna()
        same_cpu = known & (frame["cpu"].astype(object) == cpu)
        same_name = ~known & (frame["machine"].astype(object) == machine)
        return frame[same_cpu | same_name]
    return frame[frame["machine"].astype(object) == machine]


def same_version(frame, version: str | None):
    """Rows of benchmark ``version`` (asv's code hash); all rows when it is unknown."""
    if version is None or "version" not in frame.columns:
        return frame
    return frame[frame["version"].astype(object) == version]


def rule_detail(metric: str, acc_tol: float, band: int) -> str:
    """The detail of an accuracy row: tolerance, band size, and the rule's own factor."""
    limit = rule_limit(metric)
    text = f"tolerance {acc_tol:.0%}, band of {band} earlier result(s)"
    return text + (f", rule: at most {limit:g}x the same-dtype standard error"
                   if limit is not None else "")


def band_source(results: Path, root: Path, review: Review) -> Band:
    """``band(benchmark, params, version=None)``: ok values stored for base's ancestors
    (base included, head excluded) on this processor, of benchmark ``version`` where it
    is known (results of another version of the benchmark's code measure something
    else); loaded on first use."""
    cache: dict = {}

    def load():
        if "frame" not in cache:
            frame = None
            if _has_results(results):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    frame = load_results(str(results))
                keep = set(ancestors(review.base, root)) - {review.head}
                frame = identity_rows(frame, review.machine, review.cpu)
                frame = frame[(frame["status"].astype(object) == "ok")
                              & frame["commit"].astype(object).isin(keep)]
            cache["frame"] = frame
            n = 0 if frame is None else frame["commit"].nunique()
            review.notes.append(f"Accuracy band: results stored in {results} for {n} "
                                "ancestor commit(s) of base on this processor.")
        return cache["frame"]

    def band(benchmark: str, params: str, version: str | None = None) -> list[float]:
        frame = load()
        if frame is None or not len(frame):
            return []
        sel = frame[(frame["benchmark"].astype(object) == benchmark)
                    & (frame["params"].astype(object) == params)]
        return [float(v) for v in same_version(sel, version)["value"]]

    return band


def track_rows(points, base: list[dict], head: list[dict], opts, band: Band,
               review: Review) -> list[Row]:
    """Rows for grid points measured once per commit (replies of the workers: tracks,
    and peak memory)."""
    rows = []
    for p, b, h in zip(points, base, head, strict=True):
        metric = ACCURACY.search(p.name)
        memory = is_memory(p.type, p.unit)
        kind = "accuracy" if metric else "memory" if memory else "track"
        if b.get("status") != "ok" or h.get("status") != "ok":
            rows.append(coverage_row(kind, p.name, p.params, p.unit, b.get("status", "failed"),
                                     h.get("status", "failed"), b.get("reason", ""),
                                     h.get("reason", "")))
            continue
        bv, hv = float(b["value"]), float(h["value"])
        ratio = hv / bv if bv else None
        if metric:
            earlier = band(p.name, p.params, getattr(p, "version", None))
            verdict, reason, bad = judge_accuracy(metric["metric"], bv, hv, earlier,
                                                  opts.acc_tol, rule_limit(metric["metric"]))
            rows.append(Row(kind, p.name, p.params, p.unit, verdict, reason,
                            detail=rule_detail(metric["metric"], opts.acc_tol, len(earlier)),
                            base=bv, head=hv, ratio=ratio, samples=1, regression=bad))
        elif memory:
            rows.append(memory_row(kind, p.name, p.params, p.unit, bv, hv, opts.factor))
        else:
            verdict, reason = judge_ratio_only(bv, hv, opts.factor)
            rows.append(Row(kind, p.name, p.params, p.unit, verdict, reason, base=bv, head=hv,
                            ratio=ratio, samples=1, undecided=verdict == "ambiguous"))
    return rows
