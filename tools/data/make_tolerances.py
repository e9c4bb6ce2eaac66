"""Regenerate flashbench's tolerance table, and the measurements behind its choices.

    .venv/bin/python -m tools.data.make_tolerances        # writes flashbench/data/tolerances.json
    .venv/bin/python -m tools.data.make_tolerances --stability 16 [--n 256 1024 4096]
    .venv/bin/python -m tools.data.make_tolerances --check-rows [--n 256 1024]
    .venv/bin/python -m tools.data.make_tolerances --cases  # writes flashbench/data/case_bands.json

Default: measures the flash model's bands (:func:`flashbench.bands.measure_bands`)
for every dtype the models take x N in :data:`TABLE_N` x every input distribution x
causal, :data:`TABLE_SEEDS` seeds per cell (4x as many below N = 256, where cells are
cheap and the LSE of large logits needs them), and writes the table that
:func:`flashbench.tolerance` reads (edges x safety factor 2). Prints the wall time.

``--stability K``: measures 2K seeds per cell and prints, per cell, the max over the
first K seeds and over all 2K (abs error of O): how far the max still moves when the
seeds double. The default seed counts are chosen from this.

``--check-rows``: the band from the default per-seed shape (a few hundred query rows
against N keys, bottom-right causal) next to the band of the square problem (N query
rows), at equal seeds, with both wall times: what the shortcut saves, and that the
non-causal band does not change (a causal square problem also has short rows, which
sum over fewer keys: its band is the envelope of smaller N, see flashbench.tolerance).

``--cases``: the band rule's table (:mod:`flashbench.bands.case`): the band of every case
``flashbench check`` judges by default (forward and gradients) and of the asv accuracy
suites' cases, in every dtype with a flash model (gradients: with a backward model).

Timings are wall-clock seconds (time.perf_counter) on this machine; errors are
unitless (|O - O_fp64| of unit-variance inputs).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]

from flashbench.bands import measure_bands  # noqa: E402
from flashbench.bands.measure import ROWS_PER_SEED, band_dtypes, cell_shape  # noqa: E402
from flashbench.bands.table import SAFETY, build_table, write_table  # noqa: E402
from flashbench.inputs import DISTRIBUTIONS  # noqa: E402

TABLE_N = (4, 16, 64, 256, 1024, 4096)
TABLE_SEEDS = 64
SMALL_N, SMALL_N_SEEDS = 256, 256  # below N = 256 cells are cheap: 4x the seeds
OUT = ROOT / "flashbench" / "data" / "tolerances.json"
CASES_OUT = ROOT / "flashbench" / "data" / "case_bands.json"


def _say(start):
    def say(msg):
        print(f"[{time.perf_counter() - start:7.1f} s] {msg}", file=sys.stderr, flush=True)
    return say


def write(args) -> None:
    start = time.perf_counter()
    bands = []
    for ns, seeds in (([n for n in args.n if n < SMALL_N], SMALL_N_SEEDS * args.seeds // 64),
                      ([n for n in args.n if n >= SMALL_N], args.seeds)):
        if ns:
            bands += measure_bands(dtypes=args.dtype, ns=ns, dists=DISTRIBUTIONS,
                                   causal=(False, True), seeds=seeds, say=_say(start))
    seconds = time.perf_counter() - start
    command = "python -m tools.data.make_tolerances" + "".join(
        f" {a}" for a in sys.argv[1:])
    table = build_table(bands, safety=SAFETY, command=command,
                        meta={"seeds": f"{args.seeds} ({SMALL_N_SEEDS * args.seeds // 64} for "
                                       f"N < {SMALL_N})", "rows_per_seed": ROWS_PER_SEED,
                              "head_dim": 64, "seconds": round(seconds, 1)})
    path = write_table(table, args.out)
    print(f"wrote {path}: {len(table['cells'])} cells ({', '.join(table['dtypes'])} x N "
          f"{table['n']} x {len(table['dists'])} dists x causal x O/LSE), seeds per cell "
          f"{table['seeds']}, measured in {seconds:.0f} s (wall clock)")


def stability(args) -> None:
    k = args.stability
    start = time.perf_counter()
    bands = measure_bands(dtypes=args.dtype, ns=args.n, dists=DISTRIBUTIONS, causal=(False, True),
                          seeds=2 * k, say=_say(start))
    print(f"max |O - O_fp64| over the first {k} seeds vs all {2 * k} (flash model, "
          f"{ROWS_PER_SEED} query rows per seed)")
    print(f"{'dtype':9} {'N':>5} {'dist':13} {'causal':6} {'max k':>10} {'max 2k':>10} "
          f"{'2k / k':>7}")
    ratios, held = [], []
    for b in bands:
        if b.kernel != "flash_model" or b.tensor != "o" or b.versus != "fp64":
            continue
        m = np.asarray(b.seed_max_abs)
        r = m.max() / m[:k].max()
        ratios.append(r)
        held += list(m[k:] / m[:k].max())  # each later seed against the first K's edge
        print(f"{b.dtype:9} {b.n:5d} {b.dist:13} {str(b.causal):6} {m[:k].max():10.3e} "
              f"{m.max():10.3e} {r:7.3f}")
    r = np.asarray(ratios)
    print(f"2k / k over {len(r)} cells: median {np.median(r):.3f}, p90 "
          f"{np.percentile(r, 90):.3f}, max {r.max():.3f}; cells moving > 10%: "
          f"{int((r > 1.10).sum())}, > 25%: {int((r > 1.25).sum())} "
          f"({time.perf_counter() - start:.0f} s)")
    h = np.asarray(held)
    print(f"held-out seeds (K+1..2K, one at a time) against an edge from the first {k}: "
          f"above it {int((h > 1).sum())}/{len(h)}, above {SAFETY:g}x it (the tolerance) "
          f"{int((h > SAFETY).sum())}/{len(h)}, worst x{h.max():.2f}")


def check_rows(args) -> None:
    dtypes = args.dtype or ["fp32", "bf16"]
    print(f"flash model, normal inputs, {args.seeds} seeds; shape HxNqxNk per seed; "
          f"|O - O_fp64| p50 / p99 / max; s: wall seconds of the measurement (all dtypes)")
    print(f"{'cell':28} {'shape':16} {'p50':>9} {'p99':>9} {'max':>9} {'s':>6}")
    for n in args.n:
        for causal in (False, True):
            for label, rows, per_seed in (("rows", None, ROWS_PER_SEED), ("square", n, n)):
                t = time.perf_counter()
                bands = measure_bands(dtypes=dtypes, ns=(n,), dists=("normal",),
                                      causal=(causal,), seeds=args.seeds, rows=rows,
                                      rows_per_seed=per_seed)
                seconds = time.perf_counter() - t
                shape = cell_shape(n, per_seed, rows=rows, causal=causal)
                shape = f"{shape.H}x{shape.Nq}x{shape.Nk}"
                for b in bands:
                    if b.kernel == "flash_model" and b.tensor == "o":
                        print(f"{b.dtype + ' N=' + str(n) + (' causal' if causal else ''):28} "
                              f"{label + ' ' + shape:16} {b.abs_p50:9.2e} {b.abs_p99:9.2e} "
                              f"{b.abs_max:9.2e} {seconds:6.1f}")


def cases(args) -> None:
    from benchmarks import bench_accuracy, bench_grad
    from benchmarks.common import shape_of
    from flashbench.bands.case import measure_case_band, write_case_table
    from flashbench.measure import Case, default_cases
    from flashbench.measure.backward import default_backward_cases as default_grad_cases
    from flashbench.numerics import GRAD_DTYPES

    start = time.perf_counter()
    say = _say(start)
    fwd = list(dict.fromkeys(
        [*default_cases(), *(Case(shape_of(s), d, c) for s in bench_accuracy.SHAPES
                             for d in bench_accuracy.DISTS for c in (False, True))]))
    bwd = list(dict.fromkeys(
        [*default_grad_cases(), *(Case(shape_of(s), d, c) for s in bench_grad.SHAPES
                                  for d in bench_grad.DISTS for c in (False, True))]))
    dtypes = args.dtype
    bands = []
    for grad, todo in ((False, fwd), (True, bwd)):
        for case in todo:
            for dtype in dtypes:
                if grad and (dtype not in GRAD_DTYPES or dtype == "fp64"):
                    continue
                say(f"{'bwd' if grad else 'fwd'} {case.label()} {dtype}")
                bands.append(measure_case_band(case.shape, case.dist, case.causal, dtype,
                                               grad=grad))
    seconds = time.perf_counter() - start
    path = write_case_table(bands, CASES_OUT, "python -m tools.data.make_tolerances --cases",
                            round(seconds, 1))
    print(f"wrote {path}: {len(bands)} bands ({len(fwd)} forward cases, {len(bwd)} gradient "
          f"cases x {', '.join(dtypes)}), measured in {seconds:.0f} s (wall clock)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtype", nargs="+", default=None, help="default: every dtype the models take")
    p.add_argument("--n", nargs="+", type=int, default=list(TABLE_N))
    p.add_argument("--seeds", type=int, default=TABLE_SEEDS)
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--stability", type=int, metavar="K", help="compare K and 2K seeds")
    p.add_argument("--check-rows", action="store_true", help="few rows vs the square problem")
    p.add_argument("--cases", action="store_true", help="the band rule's case table")
    args = p.parse_args()
    args.dtype = args.dtype or list(band_dtypes())
    if args.stability:
        stability(args)
    elif args.check_rows:
        check_rows(args)
    elif args.cases:
        cases(args)
    else:
        write(args)


if __name__ == "__main__":
    main()
