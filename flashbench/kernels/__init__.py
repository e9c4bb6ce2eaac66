"""Attention implementations on torch tensors [B, H, N, d]: the Triton kernels and torch's peers.

- :mod:`~flashbench.kernels.validate`: shared validation of (q, k, v) tensors;
  :mod:`~flashbench.kernels.torch_peers`: torch's naive and SDPA attention.
- :mod:`~flashbench.kernels.triton_forward`: the fused forward (imported lazily);
  :mod:`~flashbench.kernels.triton_backward` (kernels in ``triton_backward_kernels``): its
  backward and autograd Function; :mod:`~flashbench.kernels.phases`: the key-block phases and
  the key mask both share;
  :mod:`~flashbench.kernels.triton_fp8`: the FP8 mode's host side;
  :mod:`~flashbench.kernels.rounding`: the roundings interpreted launches need.
- :mod:`~flashbench.kernels.launch`: compiled on CUDA tensors, interpreted on CPU tensors,
  chosen per kernel and call; :mod:`~flashbench.kernels.interpreter`: the interpreted twin.
- :mod:`~flashbench.kernels.configs`: the Hopper autotune space, fixed configs, the
  ``default_config`` block; :mod:`~flashbench.kernels.plan`: counted compilations;
  :mod:`~flashbench.kernels.offline`: compiling a plan for sm_90 without a GPU.
"""
