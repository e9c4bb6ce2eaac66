"""Kernels the GPU session times as a user's (``flashbench speed --backend
tools.gpu.userkernels:NAME``): thin wrappers of kernels that also run built in, so that one
run holds each kernel twice, timed in the harness's process and through a user's worker
(the harness's clock, the empty requests' round trip subtracted, the L2 flushed by the
worker). The two rows of one kernel measure what the user path adds on a GPU
(docs/speed.md, "A user's kernel: the harness's clock"); scripts/gpu_session.sh's phase
"speed" runs them."""


def sdpa_flash(q, k, v, causal=False, scale=None):
    """torch's SDPA with its FlashAttention-2 kernel pinned, as the built-in sdpa-flash."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=causal, scale=scale, enable_gqa=k.shape[1] != q.shape[1])


sdpa_flash.flashbench_dtypes = ("fp16", "bf16")
sdpa_flash.flashbench_gqa = True
sdpa_flash.flashbench_differentiable = True


def triton(q, k, v, causal=False, scale=None):
    """flashbench's Triton forward (and backward), as the built-in triton: (o, lse)."""
    import flashbench

    return flashbench.triton_attention(q, k, v, causal=causal, scale=scale)


triton.flashbench_dtypes = ("fp16", "bf16")
triton.flashbench_gqa = True
triton.flashbench_differentiable = True
