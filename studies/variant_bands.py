"""Error bands of the variants: the flash model's and the standard model's max-abs error on O
against the float64 reference, per dtype x variant, over seeds, and the band rule's edges of
each variant's case (docs/variants.md).

    python -m studies.variant_bands [--seeds 4] [--n 1024] [--dist normal]

Each seed draws ``make_qkv(Shape(1, 4, 256, N, 64), dist, seed)`` (256 query rows per head
summing over N keys, as the band cells do), rounds q, k, v to the dtype, and compares
with the float64 reference of the rounded inputs. Printed: p50 and max over seeds of the
per-seed max |O - O_ref|, the baseline ratio (flash / standard) p50 and max, and the case
band the band rule judges that case by (:func:`flashbench.bands.case.measure_case_band`:
the flash model run with the variant, its own seeds): the RMSE edges of O and LSE.
"""

from __future__ import annotations

import argparse

import numpy as np

from flashbench import numerics, reference
from flashbench.bands.case import measure_case_band, variant_kwargs
from flashbench.bands.measure import caller_inputs
from flashbench.inputs import Shape, make_qkv

VARIANTS = {  # causal, and the band's variant keywords (sinks: inputs.sink_logits per head)
    "full": {}, "causal": dict(causal=True),
    "window=(128,0) causal": dict(window=(128, 0), causal=True),
    "softcap=50": dict(softcap=50.0), "softcap=20": dict(softcap=20.0),
    "softcap=5": dict(softcap=5.0), "softcap=1": dict(softcap=1.0),
    "sinks": dict(sinks=True),
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--dist", default="normal")
    parser.add_argument("--dtypes", default="bf16,fp16")
    args = parser.parse_args(argv)
    shape = Shape(1, 4, 256, args.n, 64)
    print(f"N={args.n} keys, 256 rows x 4 heads, d=64, dist={args.dist}, {args.seeds} seeds, "
          f"block 64; max |O - O_ref| per seed (p50 / max over seeds); case band: RMSE "
          f"edges of O and LSE over the band's own seeds")
    print(f"{'dtype':5} {'variant':24} {'flash p50':>10} {'flash max':>10} "
          f"{'std p50':>10} {'std max':>10} {'ratio p50':>9} {'ratio max':>9} "
          f"{'O edge':>9} {'LSE edge':>9}")
    for dtype in args.dtypes.split(","):
        for name, band_kw in VARIANTS.items():
            causal = band_kw.get("causal", False)
            variant = {k: v for k, v in band_kw.items() if k != "causal"}
            flash, std = [], []
            for seed in range(args.seeds):
                qkv = make_qkv(shape, args.dist, seed, softcap=variant.get("softcap"))
                q, k, v = (caller_inputs(dtype, x) for x in qkv)
                kw = {"causal": causal, **variant_kwargs(shape.H, seed, **variant,
                                                         keys=shape.Nk)}
                ref = reference.attention(q, k, v, **kw)[0]
                f = numerics.flash_model(q, k, v, dtype, block=64, **kw)[0]
                s = numerics.standard_model(q, k, v, dtype, **kw)[0]
                flash.append(np.abs(np.asarray(f, np.float64) - ref).max())
                std.append(np.abs(np.asarray(s, np.float64) - ref).max())
            ratio = np.array(flash) / np.array(std)
            edges = measure_case_band(shape, args.dist, causal, dtype, **variant)["edges"]
            print(f"{dtype:5} {name:24} {np.median(flash):10.2e} {max(flash):10.2e} "
                  f"{np.median(std):10.2e} {max(std):10.2e} {np.median(ratio):9.2f} "
                  f"{ratio.max():9.2f} {edges['o']['rmse']:9.2e} {edges['lse']['rmse']:9.2e}",
                  flush=True)


if __name__ == "__main__":
    main()
