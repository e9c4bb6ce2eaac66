"""GPU timings that carry their samples: ``time_`` benchmarks whose timed call synchronises.

asv times each call of a ``time_`` method with its own clock; the call runs one pass and
then ``torch.cuda.synchronize()``, so each sample is the device time of that pass (plus a
launch and a synchronise: tens of microseconds against 1-30 ms here). With ``asv run
--record-samples`` every sample is kept for the history and the review. TimeAttentionGPU
times flashbench's kernel and the pinned SDPA flash peer (fwd; bwd:
``torch.autograd.grad(o, (q, k, v), do)``), TimeAttentionFP8GPU the FP8 forward on e4m3
inputs quantised once in setup, TimeMatmulPeak the same run's 8192^3 bf16 matmul, the
denominator of "% of peak"; ``shape`` is Shape.spec text, so FLOPs follow from the
parameters (Shape.flops). Nothing here touches CUDA at import (asv's forkserver imports the
suites in a parent that must never initialise CUDA); without a CUDA GPU every setup raises
NotImplementedError naming the missing GPU. The grid, the samples per point and the cost:
docs/gpu.md ("The asv GPU suites").
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


_PREPARED: dict = {}  # grid point -> its timed call, built once per process


def _prepared(key: tuple, build):
    """The timed call of grid point ``key``: built (and run once: compilation and
    autotuning stay out of the samples) by the first setup of this process; the later
    setups asv runs before each sample find it here."""
    if key not in _PREPARED:
        _require_gpu()
        import torch

        fn = build()
        fn()
        torch.cuda.synchronize()
        _PREPARED[key] = fn
    return _PREPARED[key]


def _randn(s, dtype, torch):
    g = torch.Generator(device="cuda").manual_seed(0)
    return tuple(torch.randn(s.B, h, n, s.d, device="cuda", generator=g, dtype=dtype)
                 for h, n in ((s.H, s.Nq), (s.kv_heads, s.Nk), (s.kv_heads, s.Nk)))


class GPUBenchmark(Benchmark):
    """At least 10 samples a grid point, one process a point, about a second of samples.

    asv_runner re-runs setup before every timed call, so ``number`` is 1: a sample is
    one pass (1-30 ms here, far above the clock's resolution)."""

    rounds = 1
    repeat = (10, 12, 1.0)
    number = 1
    warmup_time = 0.05
    timeout = 120

    def teardown(self, *params):
        self.fn = None


class TimeAttentionGPU(GPUBenchmark):
    params = (["triton", "sdpa-flash"], ["bf16"], SHAPES, [False, True], ["fwd", "bwd"])
    param_names = ["backend", "dtype", "shape", "causal", "direction"]

    def setup(self, backend, dtype, shape, causal, direction):
        self.fn = _prepared(("attention", backend, dtype, shape, causal, direction),
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

    def time_attention_gpu(self, backend, dtype, shape, causal, direction):
        self.fn()


class TimeAttentionFP8GPU(GPUBenchmark):
    """The FP8 forward (forward_fp8) on e4m3 inputs quantised once in setup: per-tensor
    descales, V key-major, autotuned; the same shapes as the bf16 rows."""

    params = (["triton-fp8"], ["fp8"], SHAPES, [False, True], ["fwd"])
    param_names = ["backend", "dtype", "shape", "causal", "direction"]

    def setup(self, backend, dtype, shape, causal, direction):
        self.fn = _prepared(("fp8", backend, dtype, shape, causal, direction),
                            lambda: self._build(shape, causal))

    @staticmethod
    def _build(shape, causal):
        import torch

        forward_fp8, quantize, key_major = need("kernels.triton_fp8", "forward_fp8",
                                                "quantize", "key_major")
        s = shape_of(shape)
        (q8, qd), (k8, kd), (v8, vd) = (quantize(t) for t in _randn(s, torch.bfloat16, torch))
        v8 = key_major(v8)
        sync = torch.cuda.synchronize

        def timed():
            forward_fp8(q8, k8, v8, qd, kd, vd, causal=causal)
            sync()
        return timed

    def time_attention_fp8(self, backend, dtype, shape, causal, direction):
        self.fn()


class TimeMatmulPeak(GPUBenchmark):
    """One n^3 bf16 torch.matmul on random data (2 n^3 FLOP): the run's peak."""

    params = ([8192], ["bf16"])
    param_names = ["n", "dtype"]

    def setup(self, n, dtype):
        self.fn = _prepared(("matmul", n, dtype), lambda: self._build(n, dtype))

    @staticmethod
    def _build(n, dtype):
        import torch

        a, b = (torch.randn(n, n, device="cuda", dtype=torch_dtype(dtype)) for _ in range(2))
        sync = torch.cuda.synchronize

        def timed():
            a @ b
            sync()
        return timed

    def time_matmul(self, n, dtype):
        self.fn()
