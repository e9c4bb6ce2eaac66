"""``flashbench check``: exactness of the streaming and accuracy per dtype and backend."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace

from flashbench.cli.common import jsonable, parse_shape, positive_int
from flashbench.inputs.precision import CHECK_DTYPES, DTYPES
from flashbench.inputs.problem import DISTRIBUTIONS


def _block(text: str) -> int:
    """--block: checked before any work starts (the library's own check runs later)."""
    from flashbench.inputs.validation import check_block

    try:
        return check_block(int(text))
    except (TypeError, ValueError) as exc:
        message = str(exc) if text.strip().lstrip("-").isdigit() else (
            f"block must be an int >= 1, got {text!r}")
        raise argparse.ArgumentTypeError(message) from None


def add_parser(sub) -> None:
    c = sub.add_parser("check", help="exactness of the streaming and accuracy per dtype",
                       description="Exactness (fp64 streamed vs one-shot, PASS iff <= 1e-12) "
                       "and per-dtype accuracy with the baseline rule, for the flash model and "
                       "every backend. Exit 1 on any FAIL, 2 on bad input.")
    c.add_argument("--shape", type=parse_shape, action="append",
                   help="BxHxNxd or BxHxNqxNkxd, H may be H/Hkv (grouped-query: 1x32/8x1024x128);"
                   " repeat for several (default: realistic set)")
    c.add_argument("--kv-heads", type=positive_int, metavar="N",
                   help="key/value heads (grouped-query attention) for every shape, given or "
                   "default; N must divide each shape's H")
    c.add_argument("--dtype", nargs="+", default=list(CHECK_DTYPES), choices=list(DTYPES))
    c.add_argument("--dist", nargs="+", default=list(DISTRIBUTIONS[:2]),
                   choices=list(DISTRIBUTIONS), help="input distributions")
    c.add_argument("--causal", choices=["both", "on", "off"], default="both")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--block", type=_block, default=64, help="streaming block (keys), >= 1")
    c.add_argument("--backend", action="append", default=[], metavar="NAME|MODULE:FUNCTION",
                   help="a backend name (a flashbench.backends registry name: an unknown name "
                   "lists them; or an installed flashbench.backends entry point) selects it; "
                   "package.module:function adds "
                   "your own attention function, judged like flashbench's kernel. Repeatable. "
                   "Default: flashbench's kernels, torch-naive, torch-sdpa and every entry point; "
                   "on a GPU machine every backend")
    c.add_argument("--no-backends", action="store_true",
                   help="models only: no torch, Triton or user backends")
    c.add_argument("--json", action="store_true", help="machine-readable report on stdout")
    c.add_argument("--quiet", action="store_true", help="no progress on stderr")
    c.add_argument("--decode", action="store_true", help="decode over a KV cache instead: "
                   "split-KV exactness, paged vs contiguous, accuracy of the split model and "
                   "the decode backends (docs/decode.md)")
    c.add_argument("--decode-case", action="append", metavar="BxH[/Hkv]xNqxd:L1,L2,..[:pP]",
                   help="with --decode: a case, cache lengths per sequence, pages of P keys "
                   "(contiguous without :pP); repeatable (default: a small set)")
    c.set_defaults(func=run)


def _cases(args):
    from flashbench.measure.forward import Case, default_cases

    if args.shape:
        causals = {"both": (False, True), "on": (True,), "off": (False,)}[args.causal]
        cases = [Case(s, dist, c) for s in args.shape for dist in args.dist for c in causals]
    else:
        cases = [c for c in default_cases()
                 if args.causal == "both" or c.causal == (args.causal == "on")]
        if args.dist != list(DISTRIBUTIONS[:2]):
            cases = [Case(c.shape, d, c.causal) for d in args.dist
                     for c in {(c.shape, c.causal): c for c in cases}.values()]
    if args.kv_heads is not None:
        cases = [replace(c, shape=replace(c.shape, Hkv=args.kv_heads)) for c in cases]
    return cases


def run(args) -> int:
    if args.decode or args.decode_case:
        from flashbench.cli import decode

        if args.shape or args.kv_heads:
            raise ValueError("--shape and --kv-heads are forward options; a decode case is "
                             "given with --decode-case")
        return decode.run(args)
    from flashbench.backends import resolve_backends
    from flashbench.measure.check import render_text, run_check
    from flashbench.measure.footprint import too_big

    cases = _cases(args)
    refusal = too_big([c.shape for c in cases])
    if refusal is not None:
        raise ValueError(refusal)
    if args.no_backends and args.backend:
        raise ValueError("--backend and --no-backends contradict each other")
    backends = [] if args.no_backends else resolve_backends(args.backend)
    report = run_check(cases, dtypes=args.dtype, seed=args.seed, block=args.block,
                       backends=backends, progress=not args.quiet,
                       grad_cases=cases if args.shape else None)  # None: default gradient cases
    if args.json:
        json.dump(jsonable(report), sys.stdout, indent=1)
        print()
    else:
        print(render_text(report))
    return 0 if report["passed"] else 1
