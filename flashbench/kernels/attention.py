"""``triton_attention``: flashbench's fused attention behind one function.

Plain attention runs the forward kernel (:mod:`flashbench.kernels.triton_forward`) under an
autograd function whose backward is :mod:`flashbench.kernels.triton_backward`; a window,
softcap, sinks or packed batch goes through :mod:`flashbench.kernels.triton_variants`.
The kernels' modules import nothing of this one.
"""

from __future__ import annotations

import torch

from flashbench.inputs.validation import check_causal
from flashbench.inputs.variant import no_variant
from flashbench.kernels import triton_backward, triton_variants

__all__ = ["triton_attention"]


def triton_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                     scale: float | None = None, allow_tf32: bool = False,
                     window: tuple[int, int] = (-1, -1), softcap: float | None = None,
                     sinks=None):
    """Fused attention forward: ``softmax(q k^T * scale) v`` and its LSE.

    Args:
        q: [B, H, Nq, d]; k: [B, Hkv, Nk, d]; v: [B, Hkv, Nk, dv], Hkv dividing H
            (grouped-query attention: query head h reads kv head h // (H // Hkv);
            Hkv == H is plain attention). One dtype among float16, bfloat16, float32;
            d and dv multiples of 8 up to 256 (padded to a compiled width,
            :mod:`flashbench.kernels.headdim`); any strides. CUDA tensors run the compiled
            kernel; CPU tensors run it under the Triton interpreter (accuracy only).
        causal: bottom-right aligned mask, query i sees key j iff j <= i + Nk - Nq.
        scale: score scale, a finite real number; None means 1/sqrt(d).
        allow_tf32: fp32 inputs only: let the matmuls round their operands to tf32
            (tensor-core speed, 10-bit mantissa). Default False computes fp32 dots in
            IEEE fp32. Under the interpreter dots are always computed in fp32.
        window, softcap, sinks: the variants (:mod:`flashbench.inputs.variant`; sinks a
            float tensor or array [H]; :mod:`flashbench.kernels.triton_variants`).

    Returns:
        (o, lse): o [B, H, Nq, dv] in q's dtype; lse [B, H, Nq] float32 natural-log
        log-sum-exp of the scaled, masked scores (-inf for rows that see no key; with
        sinks it includes the sink). o is differentiable in q, k, v (and a sinks tensor)
        (:mod:`flashbench.kernels.triton_backward`); lse is not.
    """
    check_causal(causal)
    if not no_variant(window, softcap, sinks):
        return triton_variants.variant_attention(q, k, v, causal, scale, window=window,
                                                 softcap=softcap, sinks=sinks,
                                                 allow_tf32=allow_tf32)
    return triton_backward.attention_function(q, k, v, causal=causal, scale=scale,
                                              allow_tf32=allow_tf32)
