"""Does a head dim's width change a correct kernel's error? (issue 37; docs/bands.md).

    python -m studies.headdim_study [--n 1024] [--seeds 8]

1. The flash model's band (max |err| of O against float64, normal inputs, 256 query rows of
   N keys per seed) at d = 64, 80, 96, 128 and 192/128, per dtype: a band measured at one d
   is not another's.
2. The Triton kernel (interpreted here) at each padded width against the same kernel on the
   inputs padded with zero columns to the compiled width: the largest |difference| of O
   (0 means bit for bit: the masked columns add exact zeros).
"""

from __future__ import annotations

import argparse
import sys

import torch

from flashbench.bands.measure import measure_bands  # noqa: E402
from flashbench.kernels import headdim  # noqa: E402
from flashbench.kernels import triton_forward as triton_fwd  # noqa: E402

DIMS = ((64, None), (80, None), (96, None), (128, None), (192, 128))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--seeds", type=int, default=8)
    args = p.parse_args(argv)
    print(f"1. flash model band edge, max |err| of O (unitless), N={args.n}, normal, "
          f"{args.seeds} seeds x 256 rows")
    print("| d | fp32 | bf16 | fp16 |\n|---|---|---|---|")
    for d, dv in DIMS:
        bands = measure_bands(dtypes=["fp32", "bf16", "fp16"], ns=[args.n], dists=["normal"],
                              causal=[False], seeds=args.seeds, d=d, dv=dv)
        edge = {b.dtype: b.abs_max for b in bands if b.kernel == "flash_model"
                and b.tensor == "o"}
        print(f"| {d if dv is None else f'{d}/{dv}'} | {edge['fp32']:.2e} | {edge['bf16']:.2e}"
              f" | {edge['fp16']:.2e} |")
    print("\n2. Triton (interpreted, bf16, 1x4x128x256, causal, 32x32 tiles): padded width vs "
          "explicit zero columns, max |difference| of O")
    cfg = triton_fwd.Config.of(num_warps=4, num_stages=1, BLOCK_M=32, BLOCK_N=32)
    for d, dv in DIMS[1:3] + DIMS[4:]:
        dv = d if dv is None else dv
        g = torch.Generator().manual_seed(0)
        q, k = (torch.randn(1, 4, n, d, generator=g).bfloat16() for n in (128, 256))
        v = torch.randn(1, 4, 256, dv, generator=g).bfloat16()
        w, wv = headdim.kernel_width(d), headdim.kernel_width(dv)

        def pad(t, width):
            return torch.nn.functional.pad(t, (0, width - t.shape[-1]))

        o = triton_fwd.forward(q, k, v, causal=True, config=cfg)[0]
        o_w = triton_fwd.forward(pad(q, w), pad(k, w), pad(v, wv), causal=True,
                                 scale=d ** -0.5, config=cfg)[0][..., :dv]
        print(f"   d={d} dv={dv} (widths {w}/{wv}): {float((o.float() - o_w.float()).abs().max())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
