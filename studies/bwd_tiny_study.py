"""Why the fp32 Triton backward can fail the 2x rule at tiny shapes (docs/backward.md).

For SEEDS seeds of one small problem, prints dv's max and RMS error against the float64
reference for the Triton backward (interpreter on CPU), the fp32 flash model and the fp32
standard model, and how often each fails the gradient rule (max error <= 3x the standard's + floor).
Usage: python -m studies.bwd_tiny_study [--shape 1x1x20x50x16] [--seeds 40]
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from flashbench.accuracy.rules import gradient_floor, gradient_rule  # noqa: E402
from flashbench.kernels.attention import triton_attention  # noqa: E402
from flashbench.kernels.triton_backward import backward  # noqa: E402
from flashbench.numerics import flash_model_grad, standard_model_grad  # noqa: E402
from flashbench.reference import attention_grad  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="1x1x20x50x16", help="BxHxNqxNkxd")
    ap.add_argument("--seeds", type=int, default=40)
    args = ap.parse_args()
    b, h, nq, nk, d = (int(x) for x in args.shape.split("x"))
    rows, fails = [], np.zeros(2, int)
    for seed in range(args.seeds):
        rng = np.random.default_rng(seed)
        q, k, v, do = (rng.standard_normal((b, h, n, d)).astype(np.float32)
                       for n in (nq, nk, nk, nq))
        exact = attention_grad(*(x.astype(np.float64) for x in (q, k, v, do)))[2]
        t = [torch.from_numpy(x) for x in (q, k, v, do)]
        o, lse = triton_attention(*t[:3])
        dvs = {"triton": backward(*t[:3], o, lse, t[3])[2].numpy(),
               "flash model": flash_model_grad(q, k, v, do, "fp32")[2],
               "standard model": standard_model_grad(q, k, v, do, "fp32")[2]}
        floor = gradient_floor(exact, "fp32")
        errs = [np.abs(dv.astype(np.float64) - exact).max() for dv in dvs.values()]
        fails += [not gradient_rule(e, errs[2], "fp32", floor=floor).passed for e in errs[:2]]
        rows.append([(np.abs(e).max(), np.sqrt(np.mean(e ** 2)))
                     for e in (dv.astype(np.float64) - exact for dv in dvs.values())])
    r = np.array(rows)  # seeds x implementation x (max, rms)
    print(f"dv error against the float64 reference, fp32, shape {args.shape}, "
          f"{args.seeds} seeds (standard-normal inputs); medians over seeds:")
    for i, name in enumerate(dvs):
        print(f"  {name:15s} max {np.median(r[:, i, 0]):.3g}  RMS {np.median(r[:, i, 1]):.3g}")
    for i, name in enumerate(list(dvs)[:2]):
        ratio = r[:, i, 0] / r[:, 2, 0]
        print(f"  {name} max / standard max: median {np.median(ratio):.2f}, worst "
              f"{ratio.max():.2f}; fails the gradient rule in {fails[i]} of {args.seeds} seeds")
    rms = r[:, 0, 1] / r[:, 1, 1]
    print(f"  triton RMS / flash model RMS: median {np.median(rms):.2f}, worst {rms.max():.2f}")


if __name__ == "__main__":
    main()
