"""``flashbench table fa3``: a paper's accuracy table rerun with the precision models."""

from __future__ import annotations

from flashbench.cli.common import block, distinct, parse_shape, progress_printer, seed

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
    t.add_argument("--seeds", type=seed, nargs="+", default=[0, 1, 2],
                   help="input seeds; RMSE is pooled over them (default: 0 1 2)")
    t.add_argument("--block-q", type=block, default=None,
                   help="query rows per tile (default: FlashAttention-3's FP8 tile for d)")
    t.add_argument("--block", type=block, default=None,
                   help="keys per tile (default: FlashAttention-3's FP8 tile for d)")
    t.add_argument("--quiet", action="store_true", help="no progress on stderr")
    t.set_defaults(func=run)


def run(args) -> int:
    from flashbench.measure.footprint import too_big
    from flashbench.measure.papers import FA3_SHAPE, fa3_table3, render_markdown

    shape = args.shape or FA3_SHAPE
    if shape.kv_heads != shape.H:
        raise ValueError(f"--shape {shape.spec()}: table fa3 reruns plain attention (as the "
                         f"paper's table), so H and Hkv must be equal; got H={shape.H}, "
                         f"Hkv={shape.kv_heads}")
    refusal = too_big([shape])
    if refusal is not None:
        raise ValueError(refusal)
    seeds = distinct(args.seeds, "--seeds", "table")
    say = progress_printer(not args.quiet)

    table = fa3_table3(shape, seeds=seeds, block_q=args.block_q,
                       block=args.block, say=say)
    print(render_markdown(table))
    return 0
