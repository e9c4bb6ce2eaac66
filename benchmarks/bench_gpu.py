"""GPU timings that carry their samples: ``time_`` benchmarks whose timed call synchronises.

asv times each call of ``time_attention_gpu`` with its own clock; the call runs one
pass of attention and then ``torch.cuda.synchronize()``, so each sample is the
device time of that pass (plus a launch and a synchronise, microseconds against
milliseconds at these sizes). With ``asv run --record-samples`` every sample is kept,
so asv's statistics and the review's apply to GPU results as to CPU ones.

Parameters: ``backend`` (flashbench's kernel and the pinned SDPA flash peer),
``dtype``, ``shape`` (Shape.spec text: FlashAttention's benchmark size at d=128 and a
grouped-query shape, H=32, Hkv=8), ``causal``, ``direction`` (fwd; bwd calls
``torch.autograd.grad(o, (q, k, v), do)``; fwd+bwd both). A backend that is not
differentiable skips bwd and fwd+bwd with that reason. FLOPs per result follow from
its parameters (flashbench.inputs.Shape.flops); TimeMatmulPeak times the same run's
8192^3 bf16 matmul, the denominator of "% of peak".

Without a CUDA GPU every setup raises NotImplementedError naming the missing GPU.
The grid is literal and small: a GPU window has minutes, and asv starts one process
per grid point.
"""

import os
import shutil

from .common import Benchmark, need, shape_of, timed_backend, torch_dtype

# B * N = 16k tokens, H * d = 2048 (FlashAttention's benchmark); GQA H=32 over Hkv=8
SHAPES = ["4x16x4096x4096x128", "2x32/8x8192x8192x128"]


def _require_gpu():
    # Cheap test first: no NVIDIA driver means no GPU, without importing torch.
    if not (shutil.which("nvidia-smi") or os.path.exists("/proc/driver/nvidia/version")):
        raise NotImplementedError("no NVIDIA GPU on this machine")
    import torch

    if not torch.cuda.is_available():
        raise NotImplementedError("torch sees no CUDA GPU")


class GPUBenchmark(Benchmark):
    """Enough samples for statistics within a window: 10 to 20 per grid point."""

    repeat = (10, 20, 8.0)
    warmup_time = 0.2
    timeout = 300


class TimeAttentionGPU(GPUBenchmark):
    params = (["triton", "sdpa-flash"], ["bf16"], SHAPES, [False, True],
              ["fwd", "bwd", "fwd+bwd"])
    param_names = ["backend", "dtype", "shape", "causal", "direction"]

    def setup(self, backend, dtype, shape, causal, direction):
        _require_gpu()
        import torch

        pass_fn = need("timing", "pass_fn")
        b = timed_backend(backend)
        s = shape_of(shape)
        reason = b.unavailable_for(s, dtype)
        if reason is not None:
            raise NotImplementedError(f"{backend} cannot run {shape} {dtype} here: {reason}")
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn(s.B, h, n, s.d, device="cuda", generator=g,
                               dtype=torch_dtype(dtype))
                   for h, n in ((s.H, s.Nq), (s.kv_heads, s.Nk), (s.kv_heads, s.Nk)))
        q, k, v = b.prepare(q, k, v)
        self.fn = pass_fn(b.timed_fn, q, k, v, causal, direction, backend)  # may skip
        self.fn()  # compile / autotune outside the samples
        self.sync = torch.cuda.synchronize
        self.sync()

    def time_attention_gpu(self, backend, dtype, shape, causal, direction):
        self.fn()
        self.sync()


class TimeMatmulPeak(GPUBenchmark):
    """One n^3 bf16 torch.matmul on random data (2 n^3 FLOP): the run's peak."""

    params = ([8192], ["bf16"])
    param_names = ["n", "dtype"]

    def setup(self, n, dtype):
        _require_gpu()
        import torch

        self.a = torch.randn(n, n, device="cuda", dtype=torch_dtype(dtype))
        self.b = torch.randn(n, n, device="cuda", dtype=torch_dtype(dtype))
        self.sync = torch.cuda.synchronize
        self.a @ self.b
        self.sync()

    def time_matmul(self, n, dtype):
        self.a @ self.b
        self.sync()
