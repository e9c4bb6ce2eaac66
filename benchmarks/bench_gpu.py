"""GPU timings that carry their samples: ``time_`` benchmarks whose timed call synchronises.

asv times each call of a ``time_`` method with its own clock; the call runs one pass and
then ``torch.cuda.synchronize()``, so each sample is the time of that pass, tens of
microseconds of launch and sync, and the new contents' one-tensor rewrite before it (k's or
dO's in-place multiply: ~3% of a 4x16x4096x4096x128 bf16 forward; docs/asv.md). With ``asv
run --record-samples`` every sample is kept.
TimeAttentionGPU times flashbench's kernel and the pinned SDPA flash peer (fwd; bwd:
``torch.autograd.grad(o, (q, k, v), do)``), TimeAttentionFP8GPU the FP8 forward on e4m3
inputs; each call on new contents, its output row checked in teardown (:func:`fresh_pass`,
issue 35). TimeMatmulPeak: the same run's 8192^3 bf16 matmul, the denominator of "% of
peak"; ``shape`` is Shape.spec text, so FLOPs follow from the parameters (Shape.flops).
Nothing here touches CUDA at import (asv's forkserver imports the suites in a parent that
must never initialise CUDA); without a CUDA GPU every setup raises NotImplementedError
naming the missing GPU. Grid, samples, cost: docs/gpu.md ("The asv GPU suites").
"""

import sys

import numpy as np

from .bench_grad import dq_row
from .common import (
    Benchmark,
    FreshCalls,
    attention_row,
    need,
    shape_of,
    timed_backend,
    torch_dtype,
)
from .common import prepared as _prepared

# B * N = 16k tokens, H * d = 2048 (FlashAttention's benchmark); GQA H=32 over Hkv=8
SHAPES = ["4x16x4096x4096x128", "2x32/8x8192x8192x128"]


def _randn(s, dtype, torch, seed=0, device="cuda"):
    """(q, k, v) of Shape ``s``: N(0, 1) in ``dtype`` from a generator seeded with ``seed``."""
    g = torch.Generator(device=device).manual_seed(seed)
    return tuple(torch.randn(s.B, h, n, w, device=device, generator=g, dtype=dtype)
                 for h, n, w in ((s.H, s.Nq, s.d), (s.kv_heads, s.Nk, s.d),
                                 (s.kv_heads, s.Nk, getattr(s, "head_dim_v", s.d))))


TOL = 2e-2  # a checked row's max abs error, x max(1, its largest value), in bf16 (stale: ~0.1)


def fresh_pass(b, shape, dtype, causal, direction, device="cuda"):
    """A :class:`common.FreshCalls` of backend ``b``'s bare op (``timed_fn``) on ``shape``:
    ``fwd`` the call on (q, k, v) with a new query row each call, output row checked; ``bwd``
    ``torch.autograd.grad(o, (q, k, v), dO)`` on a forward run when the pool is built, a new
    row of dO each call (dq's row depends on it), dq's row checked against the float64
    backward of that row. Runs on CPU tensors too (``device``), as tests/test_speed_asv.py
    does; a point whose backend cannot run it skips."""
    import torch

    need("timing", "pass_fn")  # commits before the timed directions skip
    s = shape_of(shape)
    reason = b.unavailable_for(s, dtype)
    if reason is not None:
        raise NotImplementedError(f"{b.name} cannot run {shape} {dtype} here: {reason}")
    dt = torch_dtype(dtype)

    def inputs(seed):
        return b.prepare(*_randn(s, dt, torch, seed, device), device=device)

    if direction == "fwd":
        return FreshCalls(shape, b.timed_fn, inputs, tol=TOL, causal=causal, fresh=1)  # k

    def make(seed):
        leaves = tuple(t.detach().requires_grad_(True) for t in inputs(seed))
        o = b.timed_fn(*leaves, causal=causal)
        o = o[0] if isinstance(o, tuple) else o
        if o.grad_fn is None:
            raise NotImplementedError(f"{b.name} is not differentiable: no backward to time")
        g = torch.Generator(device=device).manual_seed(seed + 1)
        do = torch.randn(o.shape, generator=g, device=device).to(o.dtype)
        return (do, *leaves, o)

    def bwd(do, q, k, v, o, causal):
        return torch.autograd.grad(o, (q, k, v), do, retain_graph=True)

    return FreshCalls(shape, bwd, make, tol=TOL, causal=causal, want=_dq_of_do, fresh=0)


def _dq_of_do(args, r, causal):
    """dq's row ``r`` from (dO, q, k, v, o) in float64 (bench_grad.dq_row)."""
    do, q, k, v = args[:4]
    return dq_row((q, k, v, do), r, causal)


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
        """Every timed call's output checked (common.FreshCalls.verify), outside the clock."""
        fn, self.fn = getattr(self, "fn", None), None  # None: setup skipped
        if isinstance(fn, FreshCalls):
            fn.verify()


class TimeAttentionGPU(GPUBenchmark):
    params = (["triton", "sdpa-flash"], ["bf16"], SHAPES, [False, True], ["fwd", "bwd"])
    param_names = ["backend", "dtype", "shape", "causal", "direction"]

    def setup(self, backend, dtype, shape, causal, direction):
        self.fn = _prepared(("attention", backend, dtype, shape, causal, direction),
                            lambda: self._build(backend, dtype, shape, causal, direction))
        self.sync = sys.modules["torch"].cuda.synchronize

    @staticmethod
    def _build(backend, dtype, shape, causal, direction):
        return fresh_pass(timed_backend(backend), shape, dtype, causal, direction)

    def time_attention_gpu(self, backend, dtype, shape, causal, direction):
        self.fn()
        self.sync()


class TimeAttentionFP8GPU(GPUBenchmark):
    """The FP8 forward (forward_fp8) on e4m3 inputs quantised once in setup: per-tensor
    descales, V key-major, autotuned; the same shapes as the bf16 rows."""

    params = (["triton-fp8"], ["fp8"], SHAPES, [False, True], ["fwd"])
    param_names = ["backend", "dtype", "shape", "causal", "direction"]

    def setup(self, backend, dtype, shape, causal, direction):
        self.fn = _prepared(("fp8", backend, dtype, shape, causal, direction),
                            lambda: self._build(shape, causal))
        self.sync = sys.modules["torch"].cuda.synchronize

    @staticmethod
    def _build(shape, causal, device="cuda"):
        forward_fp8, quantize, key_major = need("kernels.triton_fp8", "forward_fp8",
                                                "quantize", "key_major")
        return fresh_fp8(forward_fp8, quantize, key_major, shape, causal, device)

    def time_attention_fp8(self, backend, dtype, shape, causal, direction):
        self.fn()
        self.sync()


FP8_BANK = 64.0  # a new e4m3 query row of N(0, 64^2): about the scale of the quantised rows


def fresh_fp8(forward_fp8, quantize, key_major, shape, causal, device="cuda"):
    """A :class:`common.FreshCalls` of the FP8 forward on e4m3 (q, k, v) quantised when the
    pool is built (per-tensor descales, V key-major), a new e4m3 query row each call, the
    output row checked against the float64 attention of the dequantised inputs."""
    import torch

    s = shape_of(shape)

    def make(seed):
        (q8, qd), (k8, kd), (v8, vd) = (quantize(t) for t in _randn(s, torch.bfloat16, torch,
                                                                    seed, device))
        return q8, k8, key_major(v8), qd, kd, vd

    def fn(q8, k8, v8, qd, kd, vd, causal):
        return forward_fp8(q8, k8, v8, qd, kd, vd, causal=causal)

    return FreshCalls(shape, fn, make, tol=5e-2, bank_scale=FP8_BANK, want=_dequantised_row,
                      fresh=4, causal=causal)  # k's descale: every score rescaled


def _dequantised_row(args, r, causal):
    """The attention row ``r`` of (q8 qd, k8 kd, v8 vd) in float64: the per-tensor descales
    applied to row r of q (qd kd: the scores' scale) and to the output (vd), never to the
    whole tensors (dequantising all of q, k and v for each checked row took 70% of a GPU
    review's time on an H200)."""
    q8, k8, v8, qd, kd, vd = args
    see = r + k8.shape[-2] - q8.shape[-2] + 1 if causal else k8.shape[-2]
    if see <= 0:  # a query row before every key: a zero row
        return np.zeros((*q8.shape[:-2], v8.shape[-1]))
    row = q8[..., r:r + 1, :] * (qd * kd)
    return attention_row((row, k8[..., :see, :], v8[..., :see, :]), 0) * vd


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
