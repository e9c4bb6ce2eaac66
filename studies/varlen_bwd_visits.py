"""Blocks the Triton backward visits on a packed batch, against the same sequences padded to
the longest in a dense batch (docs/variants.md, "Packed batches").

    python -m studies.varlen_bwd_visits [--lengths 512,1000,77] [--window 128,0]

Counted by the kernels themselves (``count=True``), under the interpreter on 64 x 64 tiles,
H = Hkv = 1, d = 16, causal: the dK/dV kernel's query blocks and the dQ kernel's key blocks,
summed over programs. The padded batch is what a kernel without per-sequence offsets runs
(B = len(lengths), N = the longest; its rows past a sequence's end are work on padding).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from flashbench.kernels import triton_backward as triton_bwd
from flashbench.kernels import triton_forward as triton_fwd
from flashbench.kernels.triton_variants import (
    packed_batch,
    triton_varlen_attention,
    triton_varlen_backward,
    variant_forward,
)


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(","))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", type=_ints, default=(512, 1000, 77))
    p.add_argument("--window", type=_ints, default=(128, 0))
    args = p.parse_args()
    for mod in (triton_fwd, triton_bwd):
        mod.INTERPRETER_BLOCK_M = mod.INTERPRETER_BLOCK_N = 64
    lens, n = args.lengths, max(args.lengths)
    cu = np.concatenate([[0], np.cumsum(lens)])
    g = torch.Generator().manual_seed(0)
    print(f"lengths {','.join(map(str, lens))}, causal, 64 x 64 tiles, H = 1, d = 16: "
          "blocks visited by the backward (dK/dV + dQ programs, summed)")
    print(f"{'variant':>16} {'packed':>8} {'padded':>8} {'ratio':>6}")
    for name, kw in (("causal", {}), (f"window={tuple(args.window)}",
                                      {"window": tuple(args.window)})):
        q, k, v, do = (torch.randn(int(cu[-1]), 1, 16, generator=g) for _ in range(4))
        with torch.no_grad():
            o, lse = triton_varlen_attention(q, k, v, cu, cu, causal=True, **kw)
        pk = packed_batch(q, k, cu, cu)
        visits = triton_varlen_backward(q, k, v, o, lse, do, pk, True, count=True, **kw)[3]
        packed = sum(int(t.sum()) for t in visits.values())
        dense = [torch.randn(len(lens), 1, n, 16, generator=g) for _ in range(4)]
        with torch.no_grad():
            o, lse = variant_forward(*dense[:3], True, **kw)[:2]
        visits = triton_bwd.backward(*dense[:3], o, lse, dense[3], True, count=True, **kw)[3]
        padded = sum(int(t.sum()) for t in visits.values())
        print(f"{name:>16} {packed:>8} {padded:>8} {packed / padded:>6.2f}")


if __name__ == "__main__":
    main()
