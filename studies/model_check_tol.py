"""How far from the float64 attention is a correct precision model's output row, and a stale one?

TimeModels (benchmarks/bench_reference.py) checks the rows its timed calls returned against
the float64 attention of the inputs they were given, within a tolerance per dtype; a row
that is stale (another input's output) must fail, a correct model's row never. Its calls
scale k by a factor in [0.5, 2) (``FreshCalls(fresh=1)``): larger factors make the softmax
peakier and the 16-bit models' errors larger. For each (seed, factor) this draws q, k, v at
TimeModels' shape, runs both models in bf16 and fp32, and prints, per model, each row's
max abs error x max(1, the row's largest value) (median, p99, p99.99, max, rows over a
tolerance), and what a stale row reads (its neighbour row's output, the same measure).

    python -m studies.model_check_tol                       # 1x8x4096x4096x128, 6 draws
    python -m studies.model_check_tol --shape 1x2x512x512x64 --tol 0.06
"""

import argparse

import numpy as np

from flashbench.inputs import Shape, make_qkv
from flashbench.numerics import flash_model, standard_model
from flashbench.reference import attention

DRAWS = ((11, 0.5), (13, 1.0), (14, 1.9), (12, 2.0), (21, 2.0), (22, 1.95))


def _per_row(got, want) -> np.ndarray:
    err = np.abs(np.asarray(got, dtype=np.float64) - want).max(axis=-1)
    return (err / np.maximum(1.0, np.abs(want).max(axis=-1))).ravel()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", default="1x8x4096x4096x128", help="TimeModels' shape")
    p.add_argument("--tol", type=float, default=0.06, help="the bf16 tolerance to count against")
    args = p.parse_args(argv)
    shape = Shape.parse(args.shape)
    errors: dict[str, list] = {}
    stale = []
    for seed, factor in DRAWS:
        q, k, v = make_qkv(shape, "normal", seed)
        k = k * factor
        want = attention(q, k, v)[0]
        for model in (standard_model, flash_model):
            for dtype in ("bf16", "fp32"):
                errors.setdefault(f"{model.__name__} {dtype}", []).append(
                    _per_row(model(q, k, v, dtype)[0], want))
        stale.append(_per_row(want[..., :-1, :], want[..., 1:, :]))
        print(f"seed {seed}, k x {factor}: max per model " + ", ".join(
            f"{n} {e[-1].max():.3g}" for n, e in errors.items()), flush=True)
    print(f"\nper-row max abs error x max(1, largest), {args.shape}, {len(DRAWS)} draws:")
    for name, parts in errors.items():
        e = np.concatenate(parts)
        print(f"  {name}: {e.size} rows, median {np.median(e):.3g}, p99 {np.quantile(e, 0.99):.3g},"
              f" p99.99 {np.quantile(e, 0.9999):.3g}, max {e.max():.3g}; over 0.01: "
              f"{(e > 0.01).sum()}, over {args.tol:g}: {(e > args.tol).sum()}")
    s = np.concatenate(stale)
    print(f"  stale (a neighbour row's output): min {s.min():.3g}, p1 {np.quantile(s, 0.01):.3g}, "
          f"median {np.median(s):.3g}; under {args.tol:g}: {(s < args.tol).mean():.1%} of rows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
