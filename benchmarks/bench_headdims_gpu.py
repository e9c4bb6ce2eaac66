"""GPU timings at the head dims real models use (issue 37): d = 80, 96 and 192/128 beside
bench_gpu's d = 128 rows (same B, H, N: 4x16x4096), bf16, forward, for flashbench's kernel
(padded to its compiled width) and the pinned SDPA flash peer (which refuses dv != d: that
point skips with torch's reason). A class of its own, so bench_gpu's series go on
unchanged (and named apart: gpu_history's default "bench_gpu" does not select it, each
new d autotunes its own compilations); samples, the GPU guard and the prepared calls are
bench_gpu's. FLOPs follow from ``shape`` (Shape.flops counts the true d and dv).
"""

from .bench_gpu import GPUBenchmark, _prepared
from .common import need, shape_of, timed_backend, torch_dtype

SHAPES = ["4x16x4096x4096x80", "4x16x4096x4096x96", "4x16x4096x4096x192/128"]


def _randn(s, dtype, torch):
    g = torch.Generator(device="cuda").manual_seed(0)
    return tuple(torch.randn(s.B, h, n, w, device="cuda", generator=g, dtype=dtype)
                 for h, n, w in ((s.H, s.Nq, s.d), (s.kv_heads, s.Nk, s.d),
                                 (s.kv_heads, s.Nk, s.head_dim_v)))


class TimeHeadDimGPU(GPUBenchmark):
    params = (["triton", "sdpa-flash"], ["bf16"], SHAPES, [False, True], ["fwd"])
    param_names = ["backend", "dtype", "shape", "causal", "direction"]

    def setup(self, backend, dtype, shape, causal, direction):
        self.fn = _prepared(("headdim", backend, dtype, shape, causal, direction),
                            lambda: self._build(backend, dtype, shape, causal, direction))

    @staticmethod
    def _build(backend, dtype, shape, causal, direction):
        import torch

        pass_fn = need("timing", "pass_fn")
        b = timed_backend(backend)
        s = shape_of(shape)
        reason = b.unavailable_for(s, dtype)
        if reason is not None:
            raise NotImplementedError(f"{backend} cannot run {shape} {dtype} here: {reason}")
        q, k, v = b.prepare(*_randn(s, torch_dtype(dtype), torch))
        call = pass_fn(b.timed_fn, q, k, v, causal, direction, backend)  # may skip
        sync = torch.cuda.synchronize

        def timed():
            call()
            sync()
        return timed

    def time_headdim_gpu(self, backend, dtype, shape, causal, direction):
        self.fn()
