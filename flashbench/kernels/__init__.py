"""Attention forward implementations on torch tensors [B, H, N, d].

- :mod:`flashbench.kernels.checks`: shared validation of (q, k, v) tensors.
- :mod:`flashbench.kernels.torch_peers`: torch's naive and SDPA attention.
- :mod:`flashbench.kernels.triton_fwd`: the Triton fused forward kernel (imported
  lazily: importing it decides between the GPU and the Triton interpreter).
"""
