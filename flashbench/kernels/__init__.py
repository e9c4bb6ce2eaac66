"""Attention forward implementations on torch tensors [B, H, N, d].

- :mod:`flashbench.kernels.checks`: shared validation of (q, k, v) tensors.
- :mod:`flashbench.kernels.torch_peers`: torch's naive and SDPA attention.
- :mod:`flashbench.kernels.triton_fwd`: the Triton fused forward kernel (imported
  lazily; CUDA tensors run it compiled, CPU tensors under Triton's interpreter);
  :mod:`flashbench.kernels.triton_fp8`: its FP8 mode's host side (FlashAttention-3's
  quantisation, descales, key-major V); :mod:`flashbench.kernels.rounding`: the
  nearest-even roundings interpreted launches need (bf16, e4m3).
- :mod:`flashbench.kernels.launch`: launching a Triton kernel compiled or interpreted,
  chosen per kernel and call (never the process's ``TRITON_INTERPRET``); compile
  plans and parallel precompilation. :mod:`flashbench.kernels.interpreter`: running the
  interpreted twin and putting triton.language back afterwards.
- :mod:`flashbench.kernels.configs`: the forward's pruned Hopper autotune space and
  fixed configs; :mod:`flashbench.kernels.plan`: counted compilations;
  :mod:`flashbench.kernels.offline`: compiling a plan for sm_90 without a GPU.
"""
