"""CPU time (seconds per call) of the torch backends on CPU tensors [1, 8, N, 64].

The Triton kernel is timed only where it is compiled for a GPU (bench_gpu): under
the interpreter its speed means nothing and is never recorded.
"""

from .common import need, timed_backend


class TimeCPUBackend:
    params = (["torch-sdpa", "torch-naive"], ["fp32"], [1024, 4096], [False, True])
    param_names = ["backend", "dtype", "N", "causal"]
    rounds = 1
    repeat = (3, 5, 4.0)

    def setup(self, backend, dtype, N, causal):
        import torch

        TORCH_DTYPES = need("kernels.checks", "TORCH_DTYPES")
        self.fn = timed_backend(backend)
        g = torch.Generator().manual_seed(0)
        self.q, self.k, self.v = (torch.randn(1, 8, N, 64, generator=g).to(TORCH_DTYPES[dtype])
                                  for _ in range(3))

    def time_backend(self, backend, dtype, N, causal):
        self.fn(self.q, self.k, self.v, causal=causal)
