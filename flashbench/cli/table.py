"""``flashbench table fa3``: a paper's accuracy table rerun with the precision models."""

from __future__ import annotations

import sys
import time

from flashbench.cli.common import parse_shape

TABLES = ("fa3",)


def add_parser(sub) -> None:
    t = sub.add_parser("table", help="a paper's accuracy table rerun with the precision models",
                       description="fa3: FlashAttention-3's Table 3 (RMSE of O vs float64 on "
                       "N(0,1) + N(0,100)*Bernoulli(0.001) inputs: fp16, fp8 baseline, fp8 "
                       "FlashAttention-3 and its two ablations), printed as Markdown beside "
                       "the paper's numbers.")
    t.add_argument("name", choices=TABLES, help="which table")
    t.add_argument("--shape", type=parse_shape, default=None,
                   help="BxHxNxd or BxHxNqxNkxd (default: 1x2x4096x128)")
    t.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2],
                   help="input seeds; RMSE is pooled over them (default: 0 1 2)")
    t.add_argument("--block-q", type=int, default=None,
                   help="query rows per tile (default: FlashAttention-3's FP8 tile for d)")
    t.add_argument("--block", type=int, default=None,
                   help="keys per tile (default: FlashAttention-3's FP8 tile for d)")
    t.add_argument("--quiet", action="store_true", help="no progress on stderr")
    t.set_defaults(func=run)


def run(args) -> int:
    from flashbench.measure.papers import FA3_SHAPE, fa3_table3, render_markdown

    start = time.perf_counter()

    def say(msg: str) -> None:
        if not args.quiet:
            print(f"[{time.perf_counter() - start:6.1f} s] {msg}", file=sys.stderr, flush=True)

    table = fa3_table3(args.shape or FA3_SHAPE, seeds=args.seeds, block_q=args.block_q,
                       block=args.block, say=say)
    print(render_markdown(table))
    return 0
