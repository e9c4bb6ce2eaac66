"""CPU time (seconds per call) of the torch backends on CPU tensors.

The Triton kernel is timed only where it is compiled for a GPU (bench_gpu): under
the interpreter its speed means nothing and is never recorded.
"""

from .common import Benchmark, shape_of, timed_backend, torch_dtype


class TimeCPUBackend(Benchmark):
    params = (["torch-sdpa", "torch-naive"], ["fp32"], ["1x8x1024x1024x64", "1x8x4096x4096x64"],
              [False, True])
    param_names = ["backend", "dtype", "shape", "causal"]

    def setup(self, backend, dtype, shape, causal):
        import torch

        s = shape_of(shape)
        self.fn = timed_backend(backend)
        g = torch.Generator().manual_seed(0)
        self.q, self.k, self.v = (torch.randn(s.B, s.H, n, s.d, generator=g).to(
            torch_dtype(dtype)) for n in (s.Nq, s.Nk, s.Nk))

    def time_backend(self, backend, dtype, shape, causal):
        self.fn(self.q, self.k, self.v, causal=causal)
