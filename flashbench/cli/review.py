"""``flashbench review``: pre-merge review, slower or less accurate than base?"""

from __future__ import annotations

import argparse
import sys

from flashbench.cli.common import finite, machine_name, positive_int, regex
from flashbench.cli.output import output_file, write_atomically


def add_parser(sub) -> None:
    r = sub.add_parser(
        "review", help="pre-merge review: slower or less accurate than base?",
        description="Compare BASE and HEAD on this machine. By default both commits are "
        "measured in the same run, alternately (paired rounds, adaptive sampling within "
        "--budget, false alarms controlled across the review); --reuse judges stored asv "
        "results instead (weaker evidence). Accuracy against base, the band of base's "
        "ancestors and the baseline rule; peak memory against the factor. Exit 0: nothing "
        "regressed, 1: something regressed or failed in head, 2: could not decide (or bad "
        "arguments), 3: the review failed.")
    r.add_argument("base", nargs="?", default="main", help="base revision (default main)")
    r.add_argument("head", nargs="?", default="HEAD", help="head revision (default HEAD)")
    r.add_argument("--reuse", action="store_true",
                   help="judge stored asv results (results/ and earlier review runs), running "
                   "asv only for a commit without any: faster, weaker evidence")
    r.add_argument("--results", help="asv results folder for --reuse and the accuracy band "
                   "(default: results, where it exists)")
    r.add_argument("--quick", action="store_true",
                   help="a shorter sampling budget (same-run); with --reuse, one sample per "
                   "benchmark for commits asv has to run (ratio only: never 'slower')")
    r.add_argument("--existing", action="store_true",
                   help="--reuse: asv runs commits in this Python (no install)")
    r.add_argument("--factor", type=finite(1.0, 10.0, lo_open=True), default=1.10,
                   help="timing factor, > 1 (default 1.10)")
    r.add_argument("--acc-tol", type=finite(0.0, 10.0), default=0.02,
                   help="relative accuracy tolerance, >= 0 (default 0.02)")
    r.add_argument("--budget", type=finite(0.0, 86400.0, lo_open=True), default=None,
                   help="seconds of same-run sampling (default 280; 60 with --quick)")
    r.add_argument("--bench", type=regex, help="only benchmarks whose name matches this regex")
    r.add_argument("--machine", type=machine_name,
                   help="machine name (default: flashbench.infra.machine's name for this machine)")
    r.add_argument("--threads", type=positive_int,
                   help="same-run: thread pools of the measured code (OpenMP, OpenBLAS, MKL; "
                   "default: theirs). 1 keeps a busy machine's load from stretching calls")
    r.add_argument("--jobs", type=positive_int, default=1,
                   help="same-run: timing worker processes sampling at once (default 1); "
                   "needs --threads, and jobs x threads CPUs: each worker is pinned to its "
                   "own (on a 2-CPU machine: --jobs 2 --threads 1)")
    r.add_argument("--process", choices=["request", "one"], default=None,
                   help="same-run: where timings run: a process per request, forked from "
                   "the worker (the allocator as in asv's processes; the default on a CPU "
                   "machine) or the worker's own (more decisive, but blind to a change's "
                   "fresh-allocation cost; the default on a GPU machine)")
    r.add_argument("--outside-limit", metavar="CPUS", type=_cpus, default=None,
                   help="same-run: a timing sampled while processes outside the review kept "
                   "more than CPUS CPUs busy on average is not judged ('not measured', "
                   "machine-loaded); default $FLASHBENCH_OUTSIDE_LIMIT, else 0.25; inf "
                   "judges whatever else runs")
    r.add_argument("--allow-dirty", action="store_true",
                   help="review the committed HEAD although flashbench/ or benchmarks/ have "
                   "uncommitted edits (the header says they were not measured)")
    r.add_argument("--json", action="store_true", help="machine-readable output")
    r.add_argument("--all", action="store_true", help="list unchanged results too")
    r.add_argument("--output", help="also write the report to this file (a new file; an "
                   "existing one only with --force)")
    r.add_argument("--force", action="store_true", help="let --output overwrite its file")
    r.set_defaults(func=run)


def _cpus(text: str) -> float:
    """--outside-limit's type: CPUs, >= 0, inf included."""
    from flashbench.infra.cpuload import cpu_limit

    try:
        return cpu_limit(text, "it")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


_cpus.__name__ = "CPUs"


def run(args) -> int:
    from flashbench.cli.review_markdown import render_markdown, to_json
    from flashbench.review import Options, run_review

    target = output_file(args.output, "--output", args.force)
    opts = Options(base=args.base, head=args.head, reuse=args.reuse, results=args.results,
                   quick=args.quick, existing=args.existing, factor=args.factor,
                   acc_tol=args.acc_tol, budget=args.budget, bench=args.bench,
                   machine=args.machine, allow_dirty=args.allow_dirty,
                   threads=args.threads, jobs=args.jobs, process=args.process,
                   outside_limit=args.outside_limit)
    review = run_review(opts, log=lambda text: print(text, file=sys.stderr, flush=True))
    text = to_json(review) if args.json else render_markdown(review, all_rows=args.all)
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()  # the report first: an unwritable --output lost it (a probe)
    if target is not None:
        try:
            write_atomically(target, text if text.endswith("\n") else text + "\n", args.force)
        except OSError as exc:
            print(f"flashbench review: failed: the report was not saved to {target}: "
                  f"{' '.join(str(exc).split())} (the report above stands)", file=sys.stderr)
            return review.status or 3  # a regression (1) or undecided (2) is the answer
    return review.status
