"""Command line: ``flashbench check | history | review``."""

from __future__ import annotations

import argparse
import json
import math
import re
import sys

from flashbench.inputs import DISTRIBUTIONS, Shape


def parse_shape(text: str) -> Shape:
    """``BxHxNxd`` or ``BxHxNqxNkxd`` (e.g. 1x8x4096x64) -> Shape."""
    parts = re.split(r"[x,:]", text.strip())
    try:
        nums = [int(p) for p in parts]
    except ValueError:
        nums = []
    if len(nums) == 4:
        b, h, n, d = nums
        return Shape(b, h, n, n, d)
    if len(nums) == 5:
        return Shape(*nums)
    raise argparse.ArgumentTypeError(
        f"shape must be BxHxNxd or BxHxNqxNkxd with integers, got {text!r}")


def _jsonable(x):
    """Floats that JSON cannot hold (inf, nan) become the strings 'inf', '-inf', 'nan'."""
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v) for v in x]
    return x


def cmd_check(args) -> int:
    from flashbench.backends import available_backends
    from flashbench.check import Case, default_cases, render_text, run_check

    if args.shape:
        causals = {"both": (False, True), "on": (True,), "off": (False,)}[args.causal]
        cases = [Case(s, dist, c) for s in args.shape for dist in args.dist for c in causals]
    else:
        cases = [c for c in default_cases()
                 if args.causal == "both" or c.causal == (args.causal == "on")]
        if args.dist != list(DISTRIBUTIONS[:2]):
            cases = [Case(c.shape, d, c.causal) for d in args.dist
                     for c in {(c.shape, c.causal): c for c in cases}.values()]
    backends = [] if args.no_backends else [b.name for b in available_backends()
                                            if b.name != "reference"]
    report = run_check(cases, dtypes=args.dtype, seed=args.seed, block=args.block,
                       backends=backends, progress=not args.quiet)
    if args.json:
        json.dump(_jsonable(report), sys.stdout, indent=1)
        print()
    else:
        print(render_text(report))
    return 0 if report["passed"] else 1


def cmd_history(args) -> int:
    from flashbench.history_report import build_report

    print(build_report(args.results_dir, args.out))
    return 0


def cmd_review(args) -> int:
    from flashbench.review import render_markdown, run_review, to_json

    review = run_review(args.base, args.head, results=args.results, quick=args.quick,
                        existing=args.existing, factor=args.factor, acc_tol=args.acc_tol,
                        bench=args.bench, machine=args.machine, log=print)
    text = to_json(review) if args.json else render_markdown(review, all_rows=args.all)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
    print(text)
    return review.status


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="flashbench", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("check", help="exactness of the streaming and accuracy per dtype",
                       description="Exactness (fp64 streamed vs one-shot, PASS iff <= 1e-12) "
                       "and per-dtype accuracy with the baseline rule. Exit 1 on any FAIL.")
    c.add_argument("--shape", type=parse_shape, action="append",
                   help="BxHxNxd or BxHxNqxNkxd; repeat for several (default: realistic set)")
    c.add_argument("--dtype", nargs="+", default=["fp32", "tf32", "fp16", "bf16"],
                   choices=["fp64", "fp32", "tf32", "fp16", "bf16"])
    c.add_argument("--dist", nargs="+", default=list(DISTRIBUTIONS[:2]),
                   choices=list(DISTRIBUTIONS), help="input distributions")
    c.add_argument("--causal", choices=["both", "on", "off"], default="both")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--block", type=int, default=64, help="streaming block (keys), >= 1")
    c.add_argument("--no-backends", action="store_true", help="models only, no torch/triton")
    c.add_argument("--json", action="store_true", help="machine-readable report on stdout")
    c.add_argument("--quiet", action="store_true", help="no progress on stderr")
    c.set_defaults(func=cmd_check)

    h = sub.add_parser("history", help="asv results as tables, CSVs and plots",
                       description="Load every asv results file into one tidy table; report "
                       "accuracy bands, TFLOP/s trends and steps (Markdown), write CSVs and "
                       "PNG plots.")
    h.add_argument("results_dir", nargs="?", default="results", help="asv results folder")
    h.add_argument("--out", default="history-report", help="folder for CSVs, plots, report.md")
    h.set_defaults(func=cmd_history)

    r = sub.add_parser("review", help="pre-merge review: slower or less accurate than base?",
                       description="Compare BASE and HEAD on this machine: timings with asv's "
                       "significance test, accuracy against base, history band and the "
                       "baseline rule. Exit 0: nothing regressed, 1: something did, "
                       "2: could not decide.")
    r.add_argument("base", nargs="?", default="main", help="base revision (default main)")
    r.add_argument("head", nargs="?", default="HEAD", help="head revision (default HEAD)")
    r.add_argument("--results", default="results", help="committed asv results folder")
    r.add_argument("--quick", action="store_true",
                   help="missing commits: one sample per benchmark (fast look)")
    r.add_argument("--existing", action="store_true",
                   help="missing commits: run in this Python (no install); the commit's tree "
                   "goes first on PYTHONPATH")
    r.add_argument("--factor", type=float, default=1.10, help="timing factor (default 1.10)")
    r.add_argument("--acc-tol", type=float, default=0.02,
                   help="relative accuracy tolerance (default 0.02)")
    r.add_argument("--bench", help="only benchmarks matching this regex")
    r.add_argument("--machine", help="asv machine name (default: scripts/asv_machine.py's)")
    r.add_argument("--json", action="store_true", help="machine-readable output")
    r.add_argument("--all", action="store_true", help="list unchanged results too")
    r.add_argument("--output", help="also write the report to this file")
    r.set_defaults(func=cmd_review)
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, TypeError) as exc:  # bad input: one clear line, exit 2
        parser.exit(2, f"flashbench {args.command}: error: {exc}\n")


if __name__ == "__main__":
    sys.exit(main())
