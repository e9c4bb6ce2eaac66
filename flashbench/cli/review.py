"""``flashbench review``: pre-merge review, slower or less accurate than base?"""

from __future__ import annotations


def add_parser(sub) -> None:
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
    r.set_defaults(func=run)


def run(args) -> int:
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
