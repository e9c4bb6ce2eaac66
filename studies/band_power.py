"""Power of the two rules: which precision defects each catches, in fp16 and bf16, from which N.

    nice .venv/bin/python -m studies.band_power          # docs/check.md's power table, ~4 min here

Each defective kernel of ``tools/defects.py`` (and the same kernel without a defect, the
control) runs on one case per N, as ``flashbench check`` would judge it: shape
B=1, H=4, Nq=256, Nk=N, d=64 (every query row sums over N keys), standard-normal
inputs, seed 0, not causal. The baseline rule: max |err| against the float64 reference of
the unrounded draws within 2x the same-dtype standard model's + eps/4 (O and LSE; 3x + the
gradient floor for dq, dk, dv). The band rule: the kernel's error against the float64
reference of its rounded inputs within the band's edges x the multipliers
(:mod:`flashbench.accuracy.bandrule`), the band measured on the fly for each shape
(:func:`flashbench.bands.case.case_band`, 8 seeds). A cell shows each rule's ratio (the
worst tensor; <= 1 passes for the band, the baseline's is kernel / standard, limit 2 or 3)
and "caught" where the rule fails the kernel; "from N" is the smallest N from which the
rule catches it at every larger N of the table.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from flashbench import numerics, reference  # noqa: E402
from flashbench.accuracy import error_stats, judge, judge_gradient  # noqa: E402
from flashbench.accuracy.bandrule import band_rule  # noqa: E402
from flashbench.bands.case import case_band  # noqa: E402
from flashbench.bands.measure import caller_inputs  # noqa: E402
from flashbench.inputs import Shape, make_qkv  # noqa: E402
from tools import defects  # noqa: E402

NS = (1024, 4096, 16384)
DTYPES = ("fp16", "bf16")
ROWS = (None, *defects.FORWARD_DEFECTS, *defects.GRAD_DEFECTS)
WHAT = {None: "none (control: the correct kernel)",
        "acc_low": "O accumulator kept in T between key blocks",
        "p_coarse": "P rounded to a coarser dtype (fp16: bf16; bf16: e4m3)",
        "pv_twice": "P rounded to T, and P V rounded to T again",
        "rescale_low": "running max and rescale factor in T",
        "l_low": "l kept in T, LSE rounded to T",
        "scale_low": "scores q k^T stored and scaled in T",
        "ds_early": "backward: dP rounded to T before dP - D",
        "dq_acc_low": "backward: dQ accumulator kept in T between key blocks"}


def _shape(n: int) -> Shape:
    return Shape(1, 4, 256, n, 64)


def forward(defect, dtype, n):
    """((baseline ratio, passed), (band ratio, passed)), each the worst of O and LSE."""
    shape = _shape(n)
    q, k, v = make_qkv(shape, "normal", 0)
    given = tuple(caller_inputs(dtype, x) for x in (q, k, v))
    out = defects.kernel(q, k, v, dtype, defect=defect)
    j = judge(out, numerics.standard_model(q, k, v, dtype), reference.attention(q, k, v),
              dtype)
    ref = reference.attention(*given)
    band = case_band(shape, "normal", False, dtype)
    bands = [band_rule(error_stats(out[i], ref[i]), band["edges"][t], t)
             for i, t in enumerate(("o", "lse"))]
    base = [j[t]["verdict"] for t in ("o", "lse")]
    return ((max(b.ratio for b in base), all(b.passed for b in base)),
            (max(b.ratio for b in bands), all(b.passed for b in bands)))


def backward(defect, dtype, n):
    shape = _shape(n)
    q, k, v = make_qkv(shape, "normal", 0)
    do = np.random.default_rng(1).standard_normal(q.shape)
    given = tuple(caller_inputs(dtype, x) for x in (q, k, v, do))
    grads = defects.kernel_grad(q, k, v, do, dtype, defect=defect)
    ref = reference.attention_grad(q, k, v, do)
    std = numerics.standard_model_grad(q, k, v, do, dtype)
    base = [judge_gradient(grads[i], std[i], ref[i], dtype)["verdict"] for i in range(3)]
    ref_given = reference.attention_grad(*given)
    band = case_band(shape, "normal", False, dtype, grad=True)
    bands = [band_rule(error_stats(grads[i], ref_given[i]), band["edges"][t], t)
             for i, t in enumerate(("dq", "dk", "dv"))]
    return ((max(b.ratio for b in base), all(b.passed for b in base)),
            (max(b.ratio for b in bands), all(b.passed for b in bands)))


def _from(caught: list[bool], ns) -> str:
    for i in range(len(caught)):
        if all(caught[i:]):
            return str(ns[i])
    return "never"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", nargs="+", type=int, default=list(NS))
    p.add_argument("--defect", nargs="+", choices=[str(d) for d in ROWS], default=None,
                   help="only these rows (None: the control)")
    args = p.parse_args()
    ns = tuple(args.n)
    start = time.perf_counter()
    head = " | ".join(f"N={n} 2x / band" for n in ns)
    print(f"| defect | dtype | {head} | 2x catches from | band catches from |")
    print("|---|---|" + "---|" * len(ns) + "---|---|")
    rows = ROWS if args.defect is None else [None if d == "None" else d for d in args.defect]
    for defect in rows:
        for dtype in DTYPES:
            cells, base_c, band_c = [], [], []
            for n in ns:
                fn = backward if defect in defects.GRAD_DEFECTS else forward
                (br, bp), (nr, np_) = fn(defect, dtype, n)
                base_c.append(not bp)
                band_c.append(not np_)
                cells.append(f"{br:.2f}{' caught' if not bp else ''} / "
                             f"{nr:.2f}{' caught' if not np_ else ''}")
                print(f"[{time.perf_counter() - start:6.0f} s] {defect} {dtype} N={n}",
                      file=sys.stderr, flush=True)
            print(f"| {WHAT[defect]} | {dtype} | {' | '.join(cells)} | {_from(base_c, ns)} | "
                  f"{_from(band_c, ns)} |", flush=True)
    print(f"\n2x: the baseline rule's ratio, worst tensor (kernel max |err| / standard's; "
          f"fails above 2, 3 for gradients, + floor); band: the band rule's ratio (fails "
          f"above 1). One seed per cell; {time.perf_counter() - start:.0f} s wall.")


if __name__ == "__main__":
    main()
