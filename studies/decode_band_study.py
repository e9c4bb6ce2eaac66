"""The decode band rule on the default cases: the Triton decode kernel and the split model.

    nice .venv/bin/python -m studies.decode_band_study     # ~1 min here (docs/decode.md)
    ... -m studies.decode_band_study --cast-by-torch      # the kernel's inputs cast by torch
    ... -m studies.decode_band_study --splits             # LSE: kernel / model per split count

For each default decode case (:func:`flashbench.measure.decode.default_decode_cases`) and
dtype: the band (:func:`flashbench.bands.decode.decode_band`: the split model, 4 splits,
fp32 partials, over 8-256 seeds; not read from the disk cache), then the band rule's ratio
(:mod:`flashbench.accuracy.bandrule`) of the Triton decode kernel and of the split model
itself on seed 0, O and LSE, against the float64 decode of the dtype-rounded inputs.
``--cast-by-torch``: the kernel's q, k, v cast from float64 by torch (through fp32: rounded
twice), as ``check --decode`` handed them before (docs/decode.md). ``--splits``: instead,
the kernel's LSE error over the split model's (RMS and max) at 1, 4 and the chosen splits.
"""

from __future__ import annotations

import sys

import torch

from flashbench import numerics
from flashbench.accuracy import error_stats
from flashbench.accuracy.bandrule import band_rule
from flashbench.backends.decode import get_decode_backend
from flashbench.bands.decode import decode_band
from flashbench.inputs.precision import PRECISIONS
from flashbench.kernels.triton_decode import decode_forward
from flashbench.measure.bandjudge import DecodeBands
from flashbench.measure.decode import (
    MODEL_SPLITS,
    decode_inputs,
    default_decode_cases,
    handed_decode,
)
from flashbench.measure.records import handed


def per_split(by_torch: bool):
    """The kernel's LSE RMS and max error over the model's at the same split count."""
    print("case, dtype, splits: kernel / split model LSE error against the rounded decode, "
          "RMS and max")
    for case in default_decode_cases():
        inputs = decode_inputs(case, 0)
        judged = DecodeBands(case, inputs)
        for dtype in ("bf16", "fp16"):
            prec = PRECISIONS[dtype]
            rounded = [prec.stored(x) for x in inputs[:3]]
            for splits in (1, 4, None):
                tensors = handed_decode(prec, inputs)
                if by_torch:
                    tensors[:3] = handed(prec, *inputs[:3])
                o, lse, launch = decode_forward(*tensors, causal=case.causal,
                                                num_splits=splits)
                model = numerics.split_decode_model(*rounded, *inputs[3:], dtype=prec,
                                                    causal=case.causal,
                                                    num_splits=launch.num_splits)
                ref = judged.reference(prec)[1]
                k, m = error_stats(lse.numpy(), ref), error_stats(model[1], ref)
                print(f"{case.spec():32} {dtype} {launch.num_splits:3} splits: RMS "
                      f"{k['rmse'] / m['rmse']:.2f}  max {k['max_abs'] / m['max_abs']:.2f}",
                      flush=True)


def main():
    by_torch = "--cast-by-torch" in sys.argv[1:]
    if "--splits" in sys.argv[1:]:
        return per_split(by_torch)
    triton = get_decode_backend("triton")
    print("case, dtype, band seeds: band-rule ratio of the Triton kernel / the split model "
          "(seed 0), O and LSE (<= 1 passes)")
    for case in default_decode_cases():
        inputs = decode_inputs(case, 0)
        judged = DecodeBands(case, inputs)
        for dtype in ("bf16", "fp16"):
            prec = PRECISIONS[dtype]
            band = decode_band(case, prec, cache=False)
            ref = judged.reference(prec)
            rounded = [prec.stored(x) for x in inputs[:3]]
            tensors = handed(prec, *(inputs[:3] if by_torch else rounded))
            tensors += [torch.from_numpy(inputs[3]).to(torch.int32), None if inputs[4] is None
                        else torch.from_numpy(inputs[4]).to(torch.int32)]
            outs = (triton(*tensors, causal=case.causal),
                    numerics.split_decode_model(*rounded, *inputs[3:], dtype=prec,
                                                causal=case.causal, num_splits=MODEL_SPLITS))
            ratios = [[band_rule(error_stats(out[i], ref[i]), band["edges"][t], t,
                                 case.dist).ratio for i, t in enumerate(("o", "lse"))]
                      for out in outs]
            print(f"{case.spec():32} {dtype} {band['seeds']:3} seeds: O {ratios[0][0]:.2f} / "
                  f"{ratios[1][0]:.2f}   LSE {ratios[0][1]:.2f} / {ratios[1][1]:.2f}",
                  flush=True)


if __name__ == "__main__":
    main()
