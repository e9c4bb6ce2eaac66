"""The options of ``flashbench review`` (:class:`Options`, checked before anything runs)
and what ``--bench`` selects: grid points of today's suites, rows of stored results."""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from flashbench.infra.cpuload import cpu_limit
from flashbench.infra.machine import check_machine_name
from flashbench.review.ab import Point
from flashbench.review.worker_client import lane_cpus

DEFAULT_BUDGET = 280.0  # seconds of A/B sampling (the timing suites' share of ~5 minutes)
QUICK_BUDGET = 60.0  # --quick: for a --bench selection (calibration alone outlasts it otherwise)
MAX_BUDGET = 24 * 3600.0
MAX_FACTOR = 10.0
MAX_ACC_TOL = 10.0
OUTSIDE_LIMIT, OUTSIDE_ENV = 0.25, "FLASHBENCH_OUTSIDE_LIMIT"  # --outside-limit's default


@dataclass
class Options:
    base: str = "main"
    head: str = "HEAD"
    reuse: bool = False
    results: str | None = None  # None: "results" where it exists
    quick: bool = False
    existing: bool = False
    factor: float = 1.10
    acc_tol: float = 0.02
    budget: float | None = None  # None: DEFAULT_BUDGET, or QUICK_BUDGET with quick
    bench: str | None = None
    machine: str | None = None
    allow_dirty: bool = False
    threads: int | None = None  # same-run: the measured code's thread pools (None: theirs)
    jobs: int = 1  # same-run: timing workers sampling at once, each on CPUs of its own
    process: str | None = None  # same-run: "request", "one" (None: the machine's, pointfork)
    outside_limit: float | None = None  # CPUs (None: $FLASHBENCH_OUTSIDE_LIMIT, else 0.25)

    def check(self) -> None:
        """ValueError/TypeError naming the option and what it accepts."""
        _number("factor", self.factor, lo=1.0, hi=MAX_FACTOR, lo_open=True)
        _number("acc_tol", self.acc_tol, lo=0.0, hi=MAX_ACC_TOL)
        if self.budget is not None:
            _number("budget", self.budget, lo=0.0, hi=MAX_BUDGET, lo_open=True)
        if self.bench is not None:
            compile_bench(self.bench)
        if self.machine is not None:
            check_machine_name(self.machine)
        if self.threads is not None and (isinstance(self.threads, bool) or not isinstance(
                self.threads, int) or not 1 <= self.threads <= 4096):
            raise ValueError(f"threads must be an integer >= 1, got {self.threads!r}")
        if isinstance(self.jobs, bool) or not isinstance(self.jobs, int) or not (
                1 <= self.jobs <= 1024):
            raise ValueError(f"jobs must be an integer >= 1, got {self.jobs!r}")
        if self.process not in (None, "request", "one"):
            raise ValueError(f"process must be 'request' or 'one', got {self.process!r}")
        if self.jobs > 1 and not self.reuse:
            lane_cpus(self.threads, self.jobs)  # each worker needs CPUs of its own
        if self.results is not None and not Path(self.results).is_dir():
            raise ValueError(f"results folder {self.results!r} does not exist")
        self.outside_cpus  # noqa: B018 (checked: the option's or the environment's)

    @property
    def outside_cpus(self) -> float:
        """The --outside-limit in force: the option's, $FLASHBENCH_OUTSIDE_LIMIT's or 0.25."""
        if self.outside_limit is None:
            return cpu_limit(os.environ.get(OUTSIDE_ENV, OUTSIDE_LIMIT), OUTSIDE_ENV)
        return cpu_limit(self.outside_limit, "outside_limit")

    @property
    def seconds(self) -> float:
        if self.budget is not None:
            return float(self.budget)
        return QUICK_BUDGET if self.quick else DEFAULT_BUDGET


def _number(name: str, value, lo: float, hi: float, lo_open: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number, got {value!r}")
    low_ok = value > lo if lo_open else value >= lo
    if not math.isfinite(value) or not low_ok or value > hi:
        raise ValueError(f"{name} must be a finite number {'>' if lo_open else '>='} {lo:g} "
                         f"and <= {hi:g}, got {value!r}")


def compile_bench(pattern: str) -> re.Pattern:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"bench {pattern!r} is not a regular expression: {exc}") from None


def matches(pattern: re.Pattern | None, name: str, params: str) -> bool:
    """Whether ``--bench`` selects a grid point: its benchmark name, or ``name(params)``,
    matches (a class name selects its benchmarks, ``<class>.*1024x1024x64`` some of their
    grid points)."""
    return pattern is None or bool(pattern.search(name) or pattern.search(f"{name}({params})"))


def select(listing: list[dict], bench: str | None) -> list[Point]:
    """The grid points of today's suites (a worker's listing) that ``bench`` selects."""
    pattern = compile_bench(bench) if bench else None
    points = [Point(b["name"], i, label, b["type"], b["unit"], float(b.get("timeout") or 60.0),
                    b.get("version"))
              for b in listing for i, label in enumerate(b["labels"])
              if matches(pattern, b["name"], label)]
    if not points:
        raise ValueError(f"bench {bench!r} matches no benchmark" if bench
                         else "the suites hold no benchmark")
    return points


def select_rows(frame: pd.DataFrame, pattern: re.Pattern | None) -> pd.DataFrame:
    """The rows of stored results that ``pattern`` selects (as :func:`select`)."""
    if pattern is None or not len(frame):
        return frame
    params = frame["params"].astype(object).fillna("").astype(str)
    keep = [matches(pattern, str(n), p) for n, p in zip(frame["benchmark"], params,
                                                        strict=True)]
    return frame[keep]
