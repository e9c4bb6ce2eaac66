"""What the split-KV merge loses when partial states are stored in 16 bits (docs/decode.md).

    python -m studies.decode_merge_study [--splits 16] [--seed 0]

For each input distribution and kernel dtype, the split-KV decode model
(flashbench.numerics.decode.split_decode_model) with O_s and LSE_s stored in fp32,
bf16 or fp16, against the float64 reference: max |error| of O and of LSE, the O error
as a multiple of the fp32-stored one, and the baseline rule against the same-dtype
standard decode model (kernel <= 2 x standard + eps/4). Unitless errors of unit-variance
data; one problem: B=4, H=8/Hkv=2, Nq=4, cache lengths 4096, 2500, 1031, 64, pages of 64,
causal.
"""

from __future__ import annotations

import argparse
import time

from tabulate import tabulate  # noqa: E402

from flashbench.accuracy import judge  # noqa: E402
from flashbench.inputs.kvcache import make_decode  # noqa: E402
from flashbench.numerics.decode import (  # noqa: E402
    PARTIAL_DTYPES,
    split_decode_model,
    standard_decode_model,
)
from flashbench.reference import decode_attention  # noqa: E402

LENS = (4096, 2500, 1031, 64)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--splits", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    start = time.perf_counter()
    rows = []
    for dist, std_logit in (("normal", None), ("outliers", None), ("large-logits", 30.0),
                            ("large-logits", 2000.0)):
        extra = {} if std_logit is None else {"logit_std": std_logit}
        inputs = make_decode(4, 8, 2, 4, 64, LENS, 64, dist=dist, seed=args.seed, **extra)
        ref = decode_attention(*inputs, causal=True)
        label = dist if std_logit is None else f"{dist} (score sd {std_logit:g})"
        for dtype in ("bf16", "fp16"):
            std = standard_decode_model(*inputs, dtype=dtype, causal=True)
            base = None
            for part in PARTIAL_DTYPES:
                for lse_dtype in PARTIAL_DTYPES:
                    out = split_decode_model(*inputs, dtype=dtype, causal=True,
                                             num_splits=args.splits, partials=part,
                                             lse_dtype=lse_dtype)
                    j = judge(out, std, ref, dtype)
                    o_err, l_err = j["o"]["kernel"]["max_abs"], j["lse"]["kernel"]["max_abs"]
                    base = o_err if base is None else base
                    rows.append([label, dtype, part, lse_dtype, f"{o_err:.2e}", f"{l_err:.2e}",
                                 f"{o_err / base:.2f}", f"{j['o']['verdict'].ratio:.2f}",
                                 f"{j['lse']['verdict'].ratio:.2f}",
                                 "PASS" if j["o"]["verdict"].passed and
                                 j["lse"]["verdict"].passed else "FAIL"])
                    label = ""
    print(f"split-KV decode, {args.splits} splits, seed {args.seed}: errors against float64")
    print(tabulate(rows, headers=["inputs", "dtype", "O_s in", "LSE_s in", "O max|err|",
                                  "LSE max|err|", "O / fp32-stored", "O ratio", "LSE ratio",
                                  "rule"]))
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
