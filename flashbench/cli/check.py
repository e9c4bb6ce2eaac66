"""``flashbench check``: exactness of the streaming and accuracy per dtype."""

from __future__ import annotations

import json
import sys

from flashbench.cli.common import jsonable, parse_shape
from flashbench.inputs import DISTRIBUTIONS
from flashbench.precision import CHECK_DTYPES, DTYPES


def add_parser(sub) -> None:
    c = sub.add_parser("check", help="exactness of the streaming and accuracy per dtype",
                       description="Exactness (fp64 streamed vs one-shot, PASS iff <= 1e-12) "
                       "and per-dtype accuracy with the baseline rule. Exit 1 on any FAIL.")
    c.add_argument("--shape", type=parse_shape, action="append",
                   help="BxHxNxd or BxHxNqxNkxd; repeat for several (default: realistic set)")
    c.add_argument("--dtype", nargs="+", default=list(CHECK_DTYPES), choices=list(DTYPES))
    c.add_argument("--dist", nargs="+", default=list(DISTRIBUTIONS[:2]),
                   choices=list(DISTRIBUTIONS), help="input distributions")
    c.add_argument("--causal", choices=["both", "on", "off"], default="both")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--block", type=int, default=64, help="streaming block (keys), >= 1")
    c.add_argument("--no-backends", action="store_true", help="models only, no torch/triton")
    c.add_argument("--json", action="store_true", help="machine-readable report on stdout")
    c.add_argument("--quiet", action="store_true", help="no progress on stderr")
    c.set_defaults(func=run)


def run(args) -> int:
    from flashbench.backends import available_backends
    from flashbench.check import render_text, run_check
    from flashbench.measure import Case, default_cases

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
        json.dump(jsonable(report), sys.stdout, indent=1)
        print()
    else:
        print(render_text(report))
    return 0 if report["passed"] else 1
