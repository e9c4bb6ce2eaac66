"""Would the band rule judge decode? The split model's band against the Triton decode kernel.

    nice .venv/bin/python scripts/decode_band_study.py     # ~5 min here (docs/decode.md)
    ... scripts/decode_band_study.py --cast-by-torch      # the kernel's inputs cast by torch

For each default decode case (:func:`flashbench.measure.decode.default_decode_cases`) and
dtype: the band of the split model (:data:`~flashbench.measure.decode.MODEL_SPLITS`
splits, fp32 partials) over seeds 1000.. (as many as make 8192 query rows, 8 to 256), its
error against the float64 decode of the dtype-rounded inputs; then the band rule's ratio
(forward multipliers, :mod:`flashbench.accuracy.bandrule`) of the Triton decode kernel
and of the split model itself on seed 0, O and LSE. ``--cast-by-torch``: the kernel's
inputs cast from float64 by torch (through fp32: rounded twice), as the check did before.
"""

from __future__ import annotations

import sys

import numpy as np
import torch

from flashbench import numerics, reference
from flashbench.accuracy import error_stats
from flashbench.accuracy.bandrule import band_rule
from flashbench.backends.decode import get_decode_backend
from flashbench.inputs.precision import PRECISIONS
from flashbench.measure.decode import MODEL_SPLITS, decode_inputs, default_decode_cases
from flashbench.measure.forward import handed


def _errors(case, prec, seed, kernel=None, by_torch=False):
    """(o, lse) error stats of the split model (or ``kernel``) against the rounded decode."""
    inputs = decode_inputs(case, seed)
    given = [prec.stored(x).astype(np.float64) for x in inputs[:3]]
    ref = reference.decode_attention(*given, *inputs[3:], causal=case.causal)
    if kernel is None:
        out = numerics.split_decode_model(*given, *inputs[3:], dtype=prec, causal=case.causal,
                                          num_splits=MODEL_SPLITS)
    else:
        tensors = handed(prec, *(inputs[:3] if by_torch else given))
        tensors += [torch.from_numpy(inputs[3]).to(torch.int32),
                    None if inputs[4] is None else torch.from_numpy(inputs[4]).to(torch.int32)]
        out = kernel(*tensors, causal=case.causal)
    return [error_stats(out[i], ref[i]) for i in range(2)]


def main():
    by_torch = "--cast-by-torch" in sys.argv[1:]
    triton = get_decode_backend("triton")
    print("case, dtype, band seeds: band-rule ratio of the Triton kernel / the split model "
          "(seed 0), O and LSE (<= 1 passes)")
    for case in default_decode_cases():
        for dtype in ("bf16", "fp16"):
            prec = PRECISIONS[dtype]
            seeds = min(256, max(8, -(-8192 // (case.B * case.H * case.Nq))))
            runs = [_errors(case, prec, 1000 + s) for s in range(seeds)]
            edges = [{k: max(r[i][k] for r in runs) for k in ("max_abs", "rmse", "abs_p99")}
                     for i in range(2)]
            ratios = [[band_rule(st[i], edges[i], t, case.dist).ratio for i, t in
                       enumerate(("o", "lse"))] for st in (_errors(case, prec, 0, triton, by_torch),
                                                           _errors(case, prec, 0))]
            print(f"{case.spec():32} {dtype} {seeds:3} seeds: O {ratios[0][0]:.2f} / "
                  f"{ratios[1][0]:.2f}   LSE {ratios[0][1]:.2f} / {ratios[1][1]:.2f}",
                  flush=True)


if __name__ == "__main__":
    main()
