"""Compile the head-dim kernels (issue 37) for sm_90 here, without a GPU: registers, spills,
shared memory and wgmma use of every padded width and dv != d config the GPU run uses.

    python -m studies.headdim_compile [--only fwd|bwd|fp8|decode]

Records the launches on meta tensors (flashbench.kernels.launch.planning) and compiles each
(kernel, config) with Triton's bundled ptxas (flashbench.kernels.offline.compile_plan).
"""

from __future__ import annotations

import argparse
import sys

import torch

from flashbench.kernels import triton_backward as triton_bwd  # noqa: E402
from flashbench.kernels import triton_decode, triton_fp8  # noqa: E402
from flashbench.kernels import triton_forward as triton_fwd  # noqa: E402
from flashbench.kernels.launch import planning  # noqa: E402
from flashbench.kernels.offline import compile_plan  # noqa: E402

DIMS = ((80, 80), (96, 96), (192, 128), (128, 128))  # d = 128: the unpadded yardstick


def meta(*shape, dtype=torch.bfloat16):
    return torch.empty(*shape, device="meta", dtype=dtype)


def replay(only: str | None) -> None:
    for d, dv in DIMS:
        q, k, v = meta(4, 16, 4096, d), meta(4, 16, 4096, d), meta(4, 16, 4096, dv)
        if only in (None, "fwd"):
            with triton_fwd.default_config("fixed"):
                triton_fwd.forward(q, k, v, causal=False)
        if only in (None, "bwd") and d != 128:
            o, lse = meta(4, 16, 4096, dv), meta(4, 16, 4096, dtype=torch.float32)
            triton_bwd.backward(q, k, v, o, lse, meta(4, 16, 4096, dv), causal=True)
        if only in (None, "fp8") and d != 128:
            f8 = [meta(*t.shape, dtype=torch.float8_e4m3fn) for t in (q, k, v)]
            one = torch.ones((), device="meta", dtype=torch.float32)
            triton_fp8.forward_fp8(f8[0], f8[1], triton_fp8.key_major(f8[2]), one, one, one,
                                   causal=False, config="fixed")
    if only in (None, "decode"):
        q, k = meta(16, 1, 128, 576), meta(16 * 128, 64, 1, 576)
        lens, table = (torch.empty(16, device="meta", dtype=torch.int32),
                       torch.empty(16, 128, device="meta", dtype=torch.int32))
        for splits in (1, 4):
            triton_decode.triton_decode(q, k, None, lens, table, causal=True, check=False,
                                        dv=512, num_splits=splits)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", choices=("fwd", "bwd", "fp8", "decode"))
    args = p.parse_args(argv)
    with planning() as plan:
        replay(args.only)
    compile_plan(plan)
    print(f"compiles: {len(plan)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
