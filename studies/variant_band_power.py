"""Power of the two rules under the attention variants: a correct kernel and two defective
ones, each judged as ``flashbench check`` judges a variant's case (docs/variants.md).

    nice .venv/bin/python -m studies.variant_band_power [--n 1024] [--dtypes fp16,bf16]

The kernels are ``tools/defects.py``'s FlashAttention-2 forward (block 128, exp2; written
apart from the flash model) with the variant: correct, with its O accumulator kept in T
between key blocks (``acc_low``), and with the softcap computed in T (``cap_low``: the
score and each op of the cap rounded to T, as plain attention does). One case per variant:
B=1, H=1, Nq=256, Nk=N, d=64, standard-normal inputs, seed 0. Printed: the baseline (2x)
rule's ratios (kernel max |err| / the same-dtype standard model's) and the band rule's
(against the band of the flash model run with the variant, measured on the fly and cached:
:class:`flashbench.measure.bandjudge.CaseBands`), O and LSE, and each rule's verdict.
"""

from __future__ import annotations

import argparse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from flashbench import numerics, reference  # noqa: E402
from flashbench.accuracy import judge  # noqa: E402
from flashbench.inputs import Shape  # noqa: E402
from flashbench.inputs.precision import get_precision  # noqa: E402
from flashbench.measure import Case  # noqa: E402
from flashbench.measure.bandjudge import CaseBands  # noqa: E402
from tools import defects  # noqa: E402

VARIANTS = {"plain": {}, "window=(512,0) causal": dict(causal=True, window=(512, 0)),
            "softcap=30": dict(softcap=30.0), "softcap=5": dict(softcap=5.0),
            "sinks": dict(sinks=True)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--dtypes", default="fp16,bf16")
    args = parser.parse_args(argv)
    print(f"B=1 H=1 Nq=256 Nk={args.n} d=64, normal, seed 0; 2x: kernel / standard max |err| "
          f"(limit 2 + eps/4); band: the band rule's ratio (limit 1)")
    print(f"{'dtype':5} {'variant':22} {'kernel':8} {'2x O':>6} {'2x LSE':>6} {'2x':4} "
          f"{'band O':>7} {'band LSE':>8} band")
    for dtype in args.dtypes.split(","):
        prec = get_precision(dtype)
        for name, kw in VARIANTS.items():
            case = Case(Shape(1, 1, 256, args.n, 64), "normal", **kw)
            q, k, v = case.qkv(0)  # a softcap's scaled, as its band's
            ckw = case.kwargs(0)
            ref = reference.attention(q, k, v, **ckw)
            std = numerics.standard_model(q, k, v, prec, **ckw)
            bands = CaseBands(case, (q, k, v))
            for defect in (None, "acc_low", "cap_low"):
                if defect == "cap_low" and case.softcap is None:
                    continue
                out = defects.kernel(q, k, v, dtype, defect=defect, **ckw)
                base = {t: j["verdict"] for t, j in judge(out, std, ref, prec).items()}
                band = bands.judge(prec, out, ("o", "lse"))
                ok = ("PASS" if all(v.passed for v in base.values()) else "FAIL",
                      "PASS" if all(v.passed for v in band.values()) else "FAIL")
                print(f"{dtype:5} {name:22} {defect or 'correct':8} {base['o'].ratio:6.2f} "
                      f"{base['lse'].ratio:6.2f} {ok[0]:4} {band['o'].ratio:7.2f} "
                      f"{band['lse'].ratio:8.2f} {ok[1]}", flush=True)


if __name__ == "__main__":
    main()
