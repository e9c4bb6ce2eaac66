"""Study: the inputs of a softcap case, N(0, 1) or scaled so the cap bends the scores?
(flashbench.inputs.problem.softcap_gain; docs/variants.md)

Question: a kernel that skips its softcap (returning O alone) should FAIL. On N(0, 1)
inputs the scaled scores have standard deviation 1, where a cap of 30 or 50 barely bends
them: how far is such a kernel's O from the true one, against the flash model's error (what
check's band rule weighs) and against the same-dtype standard's (the baseline rule, speed's),
as q and k are scaled so the scores have standard deviation sigma?
Answer: docs/variants.md ("Softcap inputs"); sigma = max(1, c / 4) is what the cases draw.

Usage: python -m studies.softcap_inputs [--shape 1x2x512x64] [--sigmas 1 2 4 8 12.5]
"""

from __future__ import annotations

import argparse

import numpy as np

from flashbench import numerics, reference
from flashbench.accuracy.rules import BASELINE_FACTOR
from flashbench.bands.measure import caller_inputs
from flashbench.inputs import Shape, make_qkv
from flashbench.inputs.precision import get_precision


def row(shape: Shape, cap: float, sigma: float, dtype: str, causal: bool) -> tuple:
    """(the capless O's max error over the flash model's, over the baseline rule's limit)."""
    q, k, v = make_qkv(shape, "normal", 0)
    q, k = q * np.sqrt(sigma), k * np.sqrt(sigma)
    q, k, v = (caller_inputs(dtype, x) for x in (q, k, v))
    ref = reference.attention(q, k, v, causal=causal, softcap=cap)[0]
    err = {name: float(np.abs(np.asarray(out, np.float64) - ref).max()) for name, out in (
        ("standard", numerics.standard_model(q, k, v, dtype, causal=causal, softcap=cap)[0]),
        ("flash", numerics.flash_model(q, k, v, dtype, causal=causal, softcap=cap)[0]),
        ("capless", numerics.flash_model(q, k, v, dtype, causal=causal)[0]))}
    limit = BASELINE_FACTOR * err["standard"] + get_precision(dtype).out.eps / 4
    return err["capless"] / err["flash"], err["capless"] / limit


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="1x2x512x64")
    p.add_argument("--sigmas", type=float, nargs="+", default=[1.0, 2.0, 4.0, 7.5, 12.5])
    p.add_argument("--caps", type=float, nargs="+", default=[30.0, 50.0])
    args = p.parse_args(argv)
    shape = Shape.parse(args.shape)
    print(f"{shape.spec()}, seed 0: a kernel that skips its softcap (the flash model without "
          "it), max |O - true O| over the flash model's (band rule's yardstick) / over the "
          "baseline rule's limit (2x the standard's + eps/4; > 1 FAILs)")
    print("| cap | sigma of the scores | dtype | causal | x flash model | x baseline limit |")
    print("|---|---|---|---|---|---|")
    for cap in args.caps:
        for sigma in args.sigmas:
            for dtype in ("fp16", "bf16"):
                for causal in (False, True):
                    flash, base = row(shape, cap, sigma, dtype, causal)
                    print(f"| {cap:g} | {sigma:g} | {dtype} | {causal} | {flash:.1f} | "
                          f"{base:.2f} |")


if __name__ == "__main__":
    main()
