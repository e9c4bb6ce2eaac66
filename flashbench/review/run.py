"""``run_review``: check the options, then gather evidence and judge it.

The default (same-run A/B): base and head checked out in worktrees, both loaded in one
worker process with today's suites, timings sampled alternately within a budget
(:mod:`flashbench.review.ab`), tracks and peak memory measured once per commit
(accuracy judged against base and the band of earlier results of base's ancestors, from
``--results``; memory against the factor).
``reuse=True``: stored asv results instead (:mod:`flashbench.review.stored`).

Errors: bad options, revisions, a ``--bench`` that matches nothing, a results folder
that does not exist, uncommitted edits without ``allow_dirty``: ValueError, raised
before anything is checked out or run. git, asv or a worker failing:
RuntimeError (GitError, WorkerError, AsvError). SIGTERM and SIGINT end the review as
:class:`Interrupted` (a KeyboardInterrupt) after its worktrees and processes are gone.
"""

from __future__ import annotations

import math
import os
import re
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from flashbench.infra.machine import check_machine_name, cpu_model, derived_name, gpu_model
from flashbench.review.ab import Lane, Point, Sampler
from flashbench.review.gitops import Session, checked_out, dirty_files, resolve, toplevel
from flashbench.review.model import Review
from flashbench.review.rules import family_prior, look_level, paired_rows
from flashbench.review.stats import FALSE_ALARM_RATE
from flashbench.review.tracks import band_source, track_rows
from flashbench.review.workers import Worker, lane_cpus, list_suites, peak_memory

DEFAULT_BUDGET = 280.0  # seconds of A/B sampling (the timing suites' share of ~5 minutes)
QUICK_BUDGET = 60.0  # --quick: for a --bench selection (calibration alone outlasts it otherwise)
MAX_BUDGET = 24 * 3600.0
MAX_FACTOR = 10.0
MAX_ACC_TOL = 10.0


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGINT arrived; the review cleaned up and stops."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


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
        if self.jobs > 1 and not self.reuse:
            lane_cpus(self.threads, self.jobs)  # each worker needs CPUs of its own
        if self.results is not None and not Path(self.results).is_dir():
            raise ValueError(f"results folder {self.results!r} does not exist")

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


@contextmanager
def _signals_raise():
    """SIGTERM/SIGINT raise :class:`Interrupted` (main thread only), so every ``with``
    and ``finally`` below runs: workers stopped, worktrees removed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Interrupted(signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def identity(machine: str | None) -> tuple[str, str]:
    """(machine name, processor [; GPU]) of this machine, registering nothing."""
    gpu, cpu = gpu_model(), cpu_model()
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    name = machine or derived_name(cpu, gpu, os.cpu_count() or 1, ram)
    return name, f"{cpu}; GPU: {gpu}" if gpu else cpu


def _project(cwd) -> tuple[Path, Path]:
    """(repository root, benchmark folder); ValueError outside a flashbench-style project."""
    root = toplevel(cwd)
    conf = root / "asv.conf.json"
    if not conf.is_file():
        raise ValueError(f"no asv.conf.json at the repository root {root}")
    from asv.util import load_json  # asv's reader: it allows // comments

    try:
        config = load_json(str(conf), js_comments=True)
    except Exception as exc:  # asv raises its own UserError for unreadable JSON
        raise ValueError(f"{conf} is not readable: {exc}") from None
    return root, root / config.get("benchmark_dir", "benchmarks")


def _dirty_notes(opts: Options, root: Path, head: str) -> list[str]:
    notes = []
    if checked_out(root) == head:
        files = dirty_files(root)
        if files and not opts.allow_dirty:
            shown = ", ".join(files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5
                                             else "")
            raise ValueError(f"uncommitted changes would not be measured (review measures "
                             f"commits): {shown}; commit them, or pass --allow-dirty")
        if files:
            notes.append(f"Uncommitted edits were NOT measured ({len(files)} file(s) under "
                         "flashbench/ or benchmarks/): head is the committed "
                         f"{head[:8]}.")
    elif any(f.startswith("benchmarks/") for f in dirty_files(root, ("benchmarks",))):
        notes.append("benchmarks/ has uncommitted edits: today's suites, edits included, "
                     "ran against both commits (as asv does).")
    return notes


def select(listing: list[dict], bench: str | None) -> list[Point]:
    """The grid points whose benchmark name, or ``name(params)``, matches the regex
    ``bench`` (all without): a class name selects its benchmarks, ``<class>.*1024x1024x64``
    some of their grid points."""
    pattern = compile_bench(bench) if bench else None
    points = []
    for b in listing:
        for i, label in enumerate(b["labels"]):
            if pattern is None or pattern.search(b["name"]) or pattern.search(
                    f"{b['name']}({label})"):
                points.append(Point(b["name"], i, label, b["type"], b["unit"],
                                    float(b.get("timeout") or 60.0), b.get("version")))
    if not points:
        raise ValueError(f"bench {bench!r} matches no benchmark" if bench
                         else "the suites hold no benchmark")
    return points


def run_review(opts: Options, cwd=".", log=None) -> Review:
    """Gather evidence for base and head and judge it (module docstring)."""
    log = log or (lambda text: None)
    start = time.monotonic()
    opts.check()
    root, bench_dir = _project(cwd)
    base, head = resolve(opts.base, root), resolve(opts.head, root)
    machine, cpu = identity(opts.machine)
    if opts.jobs > 1 and not opts.reuse and gpu_model():
        raise ValueError(f"--jobs {opts.jobs} on a GPU machine: the workers would share the "
                         "GPU (a long call's two sides would meet different contention); "
                         "use --jobs 1 here")
    results = Path(opts.results) if opts.results else root / "results"
    notes = _dirty_notes(opts, root, head)
    with _signals_raise():
        if opts.reuse:
            from flashbench.review.stored import review_stored

            review = review_stored(opts, root, bench_dir, base, head, machine, cpu, results,
                                   log)
            if opts.threads:
                review.notes.append("--threads has no effect with --reuse (asv runs with the "
                                    "libraries' own thread pools).")
            if opts.jobs > 1:
                review.notes.append("--jobs has no effect with --reuse (asv runs one "
                                    "benchmark at a time).")
        else:
            review = Review(base, head, machine, cpu, "same-run A/B (paired, interleaved)",
                            opts.factor, opts.acc_tol, FALSE_ALARM_RATE, opts.seconds)
            _same_run(opts, root, bench_dir, review, results, log)
    review.notes[:0] = notes
    review.seconds = time.monotonic() - start
    review.sort()
    return review


def _tracks_at_once(workers: dict, tracks: list[Point]) -> dict:
    """Track values of each side, measured in parallel (one thread and one worker per
    side: ``workers`` maps side -> a worker holding it)."""

    def values(side, worker):
        return [worker.ask(timeout=2 * p.timeout + 600, side=side, op="track", name=p.name,
                           index=p.index) for p in tracks]

    pool = ThreadPoolExecutor(len(workers))
    try:
        futures = {side: pool.submit(values, side, w) for side, w in workers.items()}
        return {side: f.result() for side, f in futures.items()}
    except BaseException:  # interrupted: end the processes, so the threads' reads end
        for w in workers.values():
            w.stop()
        raise
    finally:
        pool.shutdown(wait=True)


def _start_all(workers: list[Worker]) -> None:
    """Start the workers at once (each imports the suites twice: 10-20 s)."""
    if len(workers) == 1:
        workers[0].start()
        return
    with ThreadPoolExecutor(len(workers)) as pool:
        for future in [pool.submit(w.start) for w in workers]:
            future.result()


def _same_run(opts: Options, root: Path, bench_dir: Path, review: Review, results: Path,
              log) -> None:
    if opts.threads:
        review.notes.append(f"Measured with {opts.threads} thread(s) per worker (OpenMP, "
                            "OpenBLAS and MKL thread pools): fewer threads than cores keep a "
                            "busy machine's load from stretching one side's calls.")
    if opts.existing:
        review.notes.append("--existing has no effect here: same-run A/B always runs in this "
                            "Python, with each commit's tree first on sys.path while it runs.")
    with Session(root) as session, ExitStack() as stack:
        points = select(list_suites(root, bench_dir, session.folder / "suites.log"),
                        opts.bench)
        trees = {side: session.worktree(side, commit)
                 for side, commit in (("base", review.base), ("head", review.head))}
        cpus = lane_cpus(opts.threads, opts.jobs)
        workers = [Worker("timing" if i == 0 else f"timing-{i + 1}", trees, bench_dir,
                          session.folder / f"worker{i + 1 if i else ''}.log", opts.threads,
                          lane)
                   for i, lane in enumerate(cpus)]
        worker = workers[0]  # also measures base's tracks
        for w in workers:
            stack.callback(w.close)
        _start_all(workers)
        for side, why in worker.errors.items():
            review.problems.append(f"{side} {getattr(review, side)[:8]}: {why}")
        if len(workers) == 1:
            review.notes.append("Base and head ran in one worker process (each commit's "
                                "modules kept apart, swapped in before each block): a "
                                "process's own speed moves both sides alike.")
        else:
            review.notes.append(f"Timings were sampled by {len(workers)} worker processes at "
                                "once, each holding both commits (modules kept apart, swapped "
                                "in before each block) and pinned to CPUs of its own; every "
                                "round of a comparison ran in the process that calibrated "
                                "it, base and head one at a time: a process's own speed "
                                "moves both sides alike.")
        pinned = [c for c, w in zip(cpus, workers, strict=True) if c and w.cpus]
        if pinned:  # a refused pin unsets it
            where = "; ".join(", ".join(map(str, sorted(c))) for c in pinned)
            review.notes.append(f"The worker{'s were' if len(pinned) > 1 else ' was'} pinned "
                                f"to CPU {where}: base and head ran on the same core(s), one "
                                "at a time.")
        tracks = [p for p in points if p.type == "track"]
        peakmem = [p for p in points if p.type == "peakmemory"]
        timed = [p for p in points if p.type == "time"]
        other = [p for p in points if p.type not in ("track", "time", "peakmemory")]
        for p in other:
            review.notes.append(f"{p.name}: type {p.type!r} is not measured by same-run A/B")
        band = band_source(results, root, review)
        if tracks:
            log(f"review: {len(tracks)} track value(s) per commit, both commits at once "
                "(deterministic values: no timing to disturb)")
            helper = Worker("head-tracks", {"head": trees["head"]}, bench_dir,
                            session.folder / "tracks.log", opts.threads)
            stack.callback(helper.stop)
            helper.start()
            try:
                measured = _tracks_at_once({"base": worker, "head": helper}, tracks)
            finally:
                helper.stop()
            review.rows += track_rows(tracks, measured["base"], measured["head"], opts, band,
                                      review)
        if peakmem:
            log(f"review: {len(peakmem)} peak memory value(s) per commit, each in a fresh "
                "process")
            measured = {side: [peak_memory(trees[side], bench_dir, p.name, p.index,
                                           session.folder / f"{side}.log", 2 * p.timeout + 60,
                                           opts.threads) for p in peakmem]
                        for side in ("base", "head")}
            review.rows += track_rows(peakmem, measured["base"], measured["head"], opts, band,
                                      review)

        def lane(w: Worker) -> Lane:
            def measure(point: Point, side: str, plan) -> dict:
                return w.ask(timeout=2 * point.timeout + 60, side=side, op="time",
                             name=point.name, index=point.index, number=plan.number,
                             samples=plan.per_block, warmup=plan.warmup)

            def measure_pair(point: Point, order: tuple[str, str], plan) -> dict:
                return w.ask_pair(order, timeout=2 * point.timeout + 60, name=point.name,
                                  index=point.index, number=plan.number,
                                  samples=plan.per_block)

            return Lane(measure, measure_pair)

        if timed:
            q_look = look_level()
            log(f"review: sampling {len(timed)} timing comparison(s), budget "
                f"{opts.seconds:.0f} s")
            sampler = Sampler(None, opts.seconds, opts.factor, q_look,
                              log=lambda text: log("review: " + text),
                              lanes=[lane(w) for w in workers])
            pairs, coverage = sampler.run(timed)
            review.rows += paired_rows(pairs, opts.factor, q_look) + coverage
            prior = family_prior(pairs)
            if prior is not None:
                left_out = (f"; {prior.outliers} comparison(s) whose variance it does not "
                            "explain (p < 1e-7) were left out of the fit and keep their own"
                            if prior.outliers else "")
                review.notes.append(
                    f"Intervals use moderated variances (empirical Bayes over the "
                    f"{prior.family} timing comparisons with 2 rounds or more, fitted "
                    f"robustly): a prior spread of {math.sqrt(prior.s2):.2%} per round's "
                    f"log-ratio, worth {prior.d0:.1f} rounds' degrees of freedom, is pooled "
                    f"with each comparison's own{left_out} (a comparison settled at an "
                    "earlier look keeps that look's prior).")
    if not review.rows and not review.problems:
        review.problems.append("nothing was compared")


__all__ = ["Options", "Interrupted", "run_review", "select", "DEFAULT_BUDGET", "QUICK_BUDGET"]
