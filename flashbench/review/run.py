"""``run_review``: check the options, then gather evidence (same-run A/B, or stored
results with ``reuse``) and judge it.

Bad options, revisions or selections raise ValueError before anything is checked out or
run; git, asv or a worker failing raise RuntimeError (GitError, WorkerError, AsvError);
SIGTERM and SIGINT end the review as :class:`Interrupted` after its worktrees and
processes are gone.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

from flashbench.infra import freeze
from flashbench.infra.cpuload import load_note, outside_cpu, threads_note
from flashbench.infra.git import checked_out, git, resolve
from flashbench.infra.interrupts import signals_raise
from flashbench.infra.machine import gpu_model, identity
from flashbench.review.ab import Lane, Point, Sampler, every
from flashbench.review.asvrun import project
from flashbench.review.gitops import Session, dirty_files
from flashbench.review.model import Review
from flashbench.review.options import Options, select
from flashbench.review.ownsuites import against_base_suites, against_head_suites
from flashbench.review.paired import PRIOR_FROM_ROUNDS, family_prior, look_level, paired_rows
from flashbench.review.prior import OUTLIER_P
from flashbench.review.results import band_source
from flashbench.review.rules import for_information, track_rows, yardstick_moved
from flashbench.review.stats import FALSE_ALARM_RATE, LOOKS
from flashbench.review.stored import review_stored
from flashbench.review.worker_client import Worker, lane_cpus, list_suites, peak_memory


def _dirty_notes(opts: Options, root: Path, head: str, base: str | None = None,
                 reuse: bool = False) -> list[str]:
    """The header's notes on the working tree: uncommitted edits, and whose suites ran
    (none with ``reuse``: stored results are read)."""
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
                         f"flashbench/ or benchmarks/): head is the committed {head[:8]}.")
    if reuse:  # no suite runs: stored results are read
        return notes
    if checked_out(root) != head and any(
            f.startswith("benchmarks/") for f in dirty_files(root, ("benchmarks",))):
        notes.append("benchmarks/ has uncommitted edits: today's suites, edits included, "
                     "ran against both commits (as asv does).")
    tree = checked_out(root)
    changed = [] if tree in (None, head) else git("diff", "--name-only", tree, head, "--",
                                                  "benchmarks", cwd=root).split()
    if changed:  # head's suites differ from the ones run: say so (a renamed suite was
        # measured under its old name on both sides, and nothing said it)
        notes.append(f"Head's benchmarks/ differ from the suites that ran (this working "
                     f"tree's, at {tree[:8]}) in {len(changed)} file(s), "
                     f"{', '.join(changed[:3])}{' ...' if len(changed) > 3 else ''}: the "
                     "suites as head defines them were not run (check head out to run "
                     "them); a grid point they lack is coverage lost.")
    elif base and (own := git("diff", "--name-only", base, head, "--", "benchmarks",
                              cwd=root).split()):  # head checked out: its own suites ran
        notes.append(f"The suites that ran are head's own, changed since base in "
                     f"{', '.join(own[:3])}{' ...' if len(own) > 3 else ''}: both commits "
                     "were timed as head's benchmarks/ define it (read that diff too).")
    return notes


def run_review(opts: Options, cwd=".", log=None) -> Review:
    """Gather evidence for base and head and judge it (module docstring)."""
    log = log or (lambda text: None)
    start = time.monotonic()
    opts.check()
    root, bench_dir = project(cwd)
    base, head = resolve(opts.base, root), resolve(opts.head, root)
    machine, cpu = identity(opts.machine)[:2]  # registering nothing
    if opts.jobs > 1 and not opts.reuse and gpu_model():
        raise ValueError(f"--jobs {opts.jobs} on a GPU machine: the workers would share the "
                         "GPU (a long call's two sides would meet different contention); "
                         "use --jobs 1 here")
    results = Path(opts.results) if opts.results else root / "results"
    notes = _dirty_notes(opts, root, head, base, reuse=opts.reuse)
    if base == head:  # `review main HEAD` on main read "OK" with nothing said (a probe)
        notes.insert(0, f"Base and head are the same commit ({head[:8]}): an A/A review, "
                        "in which nothing but the noise can differ.")
    with signals_raise():
        if opts.reuse:
            review = review_stored(opts, root, bench_dir, base, head, machine, cpu, results,
                                   log)
            if idle := _idle_with_reuse(opts):
                review.notes.append(f"{', '.join(idle)} had no effect with --reuse: stored "
                                    "results are judged (a commit with none is measured by "
                                    "asv run, with asv's own settings).")
        else:
            review = Review(base, head, machine, cpu, "same-run A/B (paired, interleaved)",
                            opts.factor, opts.acc_tol, FALSE_ALARM_RATE, opts.seconds)
            _same_run(opts, root, bench_dir, review, results, log)
    review.notes[:0] = notes
    for_information(yardstick_moved(review.rows))
    review.seconds = time.monotonic() - start
    review.sort()
    return review


def _idle_with_reuse(opts: Options) -> list[str]:
    """The same-run options a --reuse review was given, which it does not use (a probe's
    --budget, --process and --outside-limit were taken without a word)."""
    given = {"--threads": opts.threads, "--jobs": opts.jobs > 1 or None,
             "--budget": opts.budget, "--process": opts.process,
             "--outside-limit": opts.outside_limit}
    return [name for name, value in given.items() if value is not None]


def _tracks_at_once(workers: dict, tracks: list[Point], log) -> dict:
    """Track values of each side, measured in parallel (one thread and one worker per
    side: ``workers`` maps side -> a worker holding it), with a progress line now and then."""
    done, say = {side: [] for side in workers}, every(log)

    def values(side, worker):
        out = done[side]
        for p in tracks:
            out.append(worker.ask(timeout=2 * p.timeout + 600, side=side, op="track",
                                  name=p.name, index=p.index))
            say(lambda: "review: track values measured: " + ", ".join(
                f"{s} {len(n)} of {len(tracks)}" for s, n in done.items()))
        return out

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


def _start_workers(opts: Options, session: Session, stack: ExitStack, trees: dict,
                   bench_dir: Path, review: Review, log) -> list[Worker]:
    """The timing workers (one per ``--jobs``, each holding both commits), started at once
    (each imports the suites twice: 10-20 s), with the header's notes on how they ran."""
    cpus = lane_cpus(opts.threads, opts.jobs)
    workers = [Worker("timing" if i == 0 else f"timing-{i + 1}", trees, bench_dir,
                      session.folder / f"worker{i + 1 if i else ''}.log", opts.threads, lane,
                      opts.process)
               for i, lane in enumerate(cpus)]
    for w in workers:
        stack.callback(w.close)
        w.say = lambda text, w=w: log(f"review: {w.label} worker: {text}")
    with ThreadPoolExecutor(len(workers)) as pool:
        for future in [pool.submit(w.start) for w in workers]:
            future.result()
    for side, why in workers[0].errors.items():
        review.problems.append(f"{side} {getattr(review, side)[:8]}: {why}")
    review.notes.append(
        ("Base and head ran in one worker process" if len(workers) == 1 else
         f"Timings were sampled by {len(workers)} worker processes at once, each pinned to "
         "CPUs of its own; every round of a comparison ran in the process that calibrated "
         "it, base and head one at a time, each") + " (each commit's modules kept apart, "
        "swapped in before each block): a process's own speed moves both sides alike.")
    per_request, why = workers[0].per_request
    review.notes.append(
        "Each timing request (a grid point's setup, untimed calls, samples and teardown; a "
        "pair's sides one each) ran in a process of its own, forked from the worker: its "
        "calls meet the allocator as in asv's process for that point, not after earlier "
        "frees, a pair's samples checked on the worker's clock (--process one: neither)."
        if per_request else f"Every timing ran in the worker's own process ({why}): glibc's "
        "allocator thresholds, raised by earlier requests' frees, can hide the cost "
        "of a change's fresh large allocations (--process request; docs/review.md).")
    pinned = [c for c, w in zip(cpus, workers, strict=True) if c and w.cpus]
    if pinned:  # a refused pin unsets it
        where = "; ".join(", ".join(map(str, sorted(c))) for c in pinned)
        review.notes.append(f"The worker{'s were' if len(pinned) > 1 else ' was'} pinned "
                            f"to CPU {where}: base and head ran on the same core(s), one "
                            "at a time.")
    return workers


def _lane(w: Worker, budget: float = float("inf")) -> Lane:
    """A sampler's lane that asks worker ``w``. A side's first request of a point may run 2
    x the suite's timeout + 60 s (1,260 s for timeout = 600), at most twice the review's
    ``budget`` and at least 120 s (its setup and first compile included); later ones 3 x
    the longest request of that side so far, or 20 x the calls asked for at its slowest
    call so far, at least 60 s: a head hanging where base answered in 0.3 s kept a --quick
    review (budget 60 s) silent for 18 minutes."""
    seen: dict = {}  # (name, index, side) -> (its slowest call, its longest request), s

    def timed(point: Point, sides, calls: int, ask) -> dict:
        keys = [(point.name, point.index, side) for side in sides]
        limit = min(2 * point.timeout + 60, max(120.0, 2 * budget))
        if all(k in seen for k in keys):
            call, request = (max(seen[k][i] for k in keys) for i in (0, 1))
            limit = min(limit, max(60.0, 3 * request, 20 * calls * call))
        start = time.monotonic()
        reply = ask(limit)
        wall = time.monotonic() - start
        for key in keys if reply.get("status") == "ok" else ():
            times = reply.get(key[2]) if len(keys) > 1 else reply.get("samples")
            if times:
                call, request = seen.get(key, (0.0, 0.0))
                seen[key] = (max(call, *times), max(request, wall))
        return reply

    def measure(point: Point, side: str, plan) -> dict:
        calls = max(plan.number, 1) * (plan.per_block + 2)  # + a warm-up, a calibration's
        return timed(point, (side,), calls, lambda t: w.ask(
            timeout=t, side=side, op="time", name=point.name, index=point.index,
            number=plan.number, samples=plan.per_block, warmup=plan.warmup))

    def measure_pair(point: Point, order: tuple[str, str], plan) -> dict:
        calls = 2 * max(plan.number, 1) * (plan.per_block + 1)  # + one untimed call a side
        return timed(point, order, calls, lambda t: w.ask_pair(
            order, timeout=t, name=point.name, index=point.index, number=plan.number,
            samples=plan.per_block))

    return Lane(measure, measure_pair)


def _same_run(opts: Options, root: Path, bench_dir: Path, review: Review, results: Path,
              log) -> None:
    if opts.threads:
        review.notes.append(threads_note(opts.threads))
    if opts.existing:
        review.notes.append("--existing has no effect here: same-run A/B always runs in this "
                            "Python, with each commit's tree first on sys.path while it runs.")
    with freeze.reaping() as left:  # what the commits' code left, a dead worker's too
        _in_session(opts, root, bench_dir, review, results, log)
    if left:
        review.problems.append(f"{len(left)} process(es) the commits' code left ran on and "
                               f"were killed ({'; '.join(left[:3])}): no verdict here stands")
    if not review.rows and not review.problems:
        review.problems.append("nothing was compared")


def _in_session(opts: Options, root: Path, bench_dir: Path, review: Review, results: Path,
                log) -> None:
    with Session(root) as session, ExitStack() as stack:
        points = select(list_suites(root, bench_dir, session.folder / "suites.log"),
                        opts.bench)
        trees = {side: session.worktree(side, commit)
                 for side, commit in (("base", review.base), ("head", review.head))}
        workers = _start_workers(opts, session, stack, trees, bench_dir, review, log)
        by_type = {t: [p for p in points if p.type == t] for t in ("track", "peakmemory", "time")}
        for p in points:
            if p.type not in by_type:
                review.notes.append(f"{p.name}: type {p.type!r} is not measured by same-run A/B")
        band = band_source(results, root, review)
        if tracks := by_type["track"]:
            log(f"review: {len(tracks)} track value(s) per commit, both commits at once "
                "(deterministic values: no timing to disturb)")
            helper = Worker("head-tracks", {"head": trees["head"]}, bench_dir,
                            session.folder / "tracks.log", opts.threads)
            stack.callback(helper.stop)
            helper.start()
            try:
                measured = _tracks_at_once({"base": workers[0], "head": helper}, tracks, log)
            finally:
                helper.stop()
            review.rows += track_rows(tracks, measured["base"], measured["head"],
                                      opts.acc_tol, opts.factor, band)
        if peakmem := by_type["peakmemory"]:
            log(f"review: {len(peakmem)} peak memory value(s) per commit, each in a new process")
            say, measured = every(log), {"base": [], "head": []}
            for side, p in [(side, p) for side in measured for p in peakmem]:
                measured[side].append(peak_memory(trees[side], bench_dir, p.name, p.index,
                                                  session.folder / f"{side}.log",
                                                  2 * p.timeout + 60, opts.threads))
                say(lambda: f"review: peak memory measured: {len(measured['base'])} + "
                            f"{len(measured['head'])} of {2 * len(peakmem)}")
            review.rows += track_rows(peakmem, measured["base"], measured["head"],
                                      opts.acc_tol, opts.factor, band)
        if timed := by_type["time"]:
            q_look = look_level()
            log(f"review: sampling {len(timed)} timing comparison(s), budget {opts.seconds:.0f} s")
            sampler = Sampler([_lane(w, opts.seconds) for w in workers], opts.seconds,
                              opts.factor, q_look,
                              log=lambda text: log("review: " + text), load=outside_cpu)
            pairs, coverage = sampler.run(timed)
            review.rows += paired_rows(pairs, opts.factor, q_look, opts.outside_cpus) + coverage
            review.notes.append(_prior_note(family_prior(pairs)))
            review.notes.append(load_note([p.load.cpus for p in pairs], opts.outside_cpus,
                                          "the review", "--outside-limit"))
        for w in workers:  # and what head's code left: none may reach base alone
            w.close()
        _base_alone(review.rows, points, trees["base"], bench_dir, session.folder, opts)
        base_own = against_base_suites(review, points, root, bench_dir, trees["base"],
                                       session.folder, opts.bench)
        against_head_suites(review, points, base_own, root, bench_dir, trees["head"],
                            session.folder, opts.bench)
        for side, tree in trees.items():  # a side's code wrote into a commit's own files
            if edited := git("diff", "--name-only", cwd=tree).split():
                review.problems.append(f"{side}'s checkout was edited while the review ran "
                                       f"({', '.join(edited[:3])}): no verdict here stands")
        for w in [w for w in workers if w.unforked][:1]:
            review.notes.append(f"Some requests ran in the {w.label} worker's own process, "
                                f"not one of their own: {w.unforked} (a fork could hang).")


def _base_alone(rows, points, tree: Path, bench_dir: Path, folder: Path, opts) -> None:
    """A timing or track head gave and base failed beside it is asked of base alone, once
    head's processes are gone (a red team's lived on, killing base there too: 2026-12-07),
    ok there, head's code may have broken base ("coverage gained", exit 0): undecided."""
    where = {(p.name, p.params): p for p in points if p.type in ("time", "track")}
    gained = [(r, where[r.benchmark, r.params]) for r in rows if r.reason == "coverage-gained"
              and r.detail.startswith("base failed") and (r.benchmark, r.params) in where]
    alone = Worker("base-alone", {"base": tree}, bench_dir, folder / "base-alone.log",
                   opts.threads, process=opts.process)  # started by its first request
    try:
        for r, p in gained:
            if alone.ask(side="base", op=p.type, name=p.name, index=p.index, number=0,
                         samples=1, timeout=2 * p.timeout + 60).get("status") == "ok":
                r.verdict, r.reason, r.undecided = "not compared", "base-failed-beside-head", True
                r.detail += "; base alone, in a worker that never imported head: ok"
    finally:
        alone.stop()


def _prior_note(prior) -> str:
    """The header's account of the variance prior (each row names the one it rested on)."""
    how = (f"Intervals use moderated variances: an empirical Bayes prior of the timing "
           f"comparisons' variances (those with {PRIOR_FROM_ROUNDS} rounds or more), fitted "
           f"robustly, is pooled with each comparison's own. It is fitted at every look; the "
           f"first look ({LOOKS[0]} rounds) is taken for all comparisons together, once each "
           "has its rounds, and a row names the prior its verdict rested on.")
    if prior is None:
        return how + " At the end there was no prior: too few comparisons had a variance."
    left_out = (f"; {prior.outliers} comparison(s) whose variance it does not explain "
                f"(p < {OUTLIER_P:g}) were left out of the fit and keep their own"
                if prior.outliers else "")
    return how + (f" At the end: a spread of {prior.s2 ** 0.5:.2%} per round's log-ratio, "
                  f"worth {prior.d0:.1f} rounds' degrees of freedom, from {prior.family} "
                  f"comparisons{left_out}.")

