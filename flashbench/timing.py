"""Device timing and throughput.

:func:`device_seconds` times a CUDA callable with ``triton.testing.do_bench``: warm-up
first, the L2 cache flushed (a 256 MB buffer zeroed) before every run, CUDA events
around each run, and the *median* of the runs returned, in seconds. It refuses to
time anything else: the Triton interpreter's speed means nothing, and CPU timings
belong to asv's own ``time_`` benchmarks.

Throughput is derived, never recorded: ``tflops(shape, causal, seconds)`` counts
4 * B * H * d * (visible (query, key) pairs) floating-point operations (two matmuls,
a multiply and an add each), about half of the full count when causal.
"""

from __future__ import annotations

from collections.abc import Callable

from flashbench.inputs import Shape

__all__ = ["device_seconds", "tflops", "matmul_peak_tflops", "gpu_name"]


def _require_cuda() -> None:
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("device timing needs a CUDA GPU; none is visible to torch here")


def device_seconds(fn: Callable[[], object], warmup_ms: float = 25, rep_ms: float = 100) -> float:
    """Median device time of ``fn()`` in seconds (do_bench: warm-up, L2 flushed, CUDA events)."""
    _require_cuda()
    from triton.testing import do_bench

    return do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median") * 1e-3


def tflops(shape: Shape, causal: bool, seconds: float) -> float:
    """TFLOP/s of an attention forward of ``shape`` that took ``seconds``."""
    return shape.flops(causal) / seconds * 1e-12


def matmul_peak_tflops(dtype: str = "bf16", n: int = 8192) -> float:
    """Measured dense-matmul throughput (TFLOP/s) of an n x n x n torch.matmul in ``dtype``.

    The denominator of "% of peak": what this GPU sustains today in this run,
    not the datasheet number.
    """
    _require_cuda()
    import torch

    from flashbench.kernels.checks import TORCH_DTYPES

    a = torch.randn(n, n, device="cuda", dtype=TORCH_DTYPES[dtype])
    b = torch.randn(n, n, device="cuda", dtype=TORCH_DTYPES[dtype])
    seconds = device_seconds(lambda: torch.matmul(a, b))
    return 2.0 * n**3 / seconds * 1e-12


def gpu_name() -> str:
    """The CUDA device's name (e.g. 'NVIDIA H200'), or 'no-gpu'."""
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no-gpu"
