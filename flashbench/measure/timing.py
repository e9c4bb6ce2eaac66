"""Device timing and throughput.

- :func:`device_samples`: per-run device times (seconds) of a CUDA callable, the L2 cache
  flushed before every run, CUDA events around each; :func:`device_seconds`: their median.
- :func:`pass_fn`: the callable that times one pass (fwd, bwd or fwd+bwd) of an
  attention function (bwd refuses a function whose output carries no gradient).
- :func:`gpu_state`: clocks, power, temperature and versions, for results that describe
  their machine.
- :func:`tflops`: throughput, derived from :meth:`flashbench.inputs.Shape.flops`, never
  recorded.

Timing refuses to run without a CUDA GPU: the Triton interpreter's speed means nothing,
and CPU timings belong to asv's own ``time_`` benchmarks. More: docs/gpu.md ("How a time
is taken").
"""

from __future__ import annotations

import statistics
import subprocess
from collections.abc import Callable

from flashbench.inputs.problem import PASS_FLOPS, Shape

__all__ = ["device_samples", "device_seconds", "tflops", "matmul_peak_tflops", "gpu_name",
           "pass_fn", "NotDifferentiable", "gpu_state", "L2_FLUSH_BYTES", "copy_bandwidth_gbs"]

L2_FLUSH_BYTES = 256 * 1024 * 1024
_FLUSH = {}


class NotDifferentiable(NotImplementedError):
    """The attention function's output carries no gradient: no backward to time."""


def _require_cuda() -> None:
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("device timing needs a CUDA GPU; none is visible to torch here")


def device_samples(fn: Callable[[], object], repeats: int = 20, warmup: int = 3,
                   flush_l2: bool = True) -> list[float]:
    """Device time of each of ``repeats`` runs of ``fn()``, in seconds.

    ``warmup`` untimed runs first (compilation, autotuning, allocator); before each
    timed run the L2 cache is flushed by zeroing a 256 MB buffer (outside the timed
    events); each run is bracketed by its own pair of CUDA events.
    """
    _require_cuda()
    import torch

    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    for _ in range(warmup):
        fn()
    dev = torch.cuda.current_device()
    if flush_l2 and dev not in _FLUSH:
        _FLUSH[dev] = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(repeats)]
    torch.cuda.synchronize()
    for start, end in events:
        if flush_l2:
            _FLUSH[dev].zero_()
        start.record()
        fn()
        torch.cuda.synchronize()  # the whole device: work sent to another stream is timed too
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) * 1e-3 for start, end in events]


def device_seconds(fn: Callable[[], object], repeats: int = 20, warmup: int = 3) -> float:
    """Median device time of ``fn()`` in seconds (:func:`device_samples`)."""
    return statistics.median(device_samples(fn, repeats=repeats, warmup=warmup))


def tflops(shape: Shape, causal: bool, seconds: float, direction: str = "fwd") -> float:
    """TFLOP/s of one ``direction`` pass of attention on ``shape`` that took ``seconds``."""
    return shape.flops(causal, direction) / seconds * 1e-12


def pass_fn(fn: Callable, q, k, v, causal: bool, direction: str = "fwd",
            name: str = "backend") -> Callable[[], object]:
    """The callable one timing runs for ``direction`` of ``fn(q, k, v, causal=...)``.

    ``fwd``: the call. ``bwd``: the forward runs once here (q, k, v requiring grad),
    the callable computes ``torch.autograd.grad(o, (q, k, v), do)`` with a seeded
    random ``do`` (the graph kept for the next call; ``call.do`` holds it). ``fwd+bwd``:
    both per call.
    Raises :class:`NotDifferentiable` when ``fn``'s output has no gradient.
    """
    if direction not in PASS_FLOPS:
        raise ValueError(f"direction must be one of {list(PASS_FLOPS)}, got {direction!r}")
    if direction == "fwd":
        return lambda: fn(q, k, v, causal=causal)
    import torch

    leaves = tuple(t.detach().requires_grad_(True) for t in (q, k, v))

    def out_of(result):
        o = result[0] if isinstance(result, tuple) else result
        if o.grad_fn is None:
            raise NotDifferentiable(f"{name} is not differentiable (its output carries no "
                                    "gradient): no backward pass to time")
        return o

    o = out_of(fn(*leaves, causal=causal))
    if o.device.type == "meta":
        do = torch.empty_like(o)
    else:  # seeded: every backend timed on these inputs gets the same dO
        g = torch.Generator(device=o.device).manual_seed(0)
        do = torch.randn(o.shape, generator=g, device=o.device).to(o.dtype)
    if direction == "bwd":
        def call():
            return torch.autograd.grad(o, leaves, do, retain_graph=True)
    else:
        def call():
            return torch.autograd.grad(out_of(fn(*leaves, causal=causal)), leaves, do)
    call.do = do  # what a check of the gradients needs
    return call


def matmul_peak_tflops(dtype: str = "bf16", n: int = 8192) -> float:
    """Measured dense-matmul throughput (TFLOP/s) of an n x n x n torch.matmul in ``dtype``
    on random data (median device time, L2 flushed).

    The denominator of "% of peak": what this GPU sustains today in this run,
    not the datasheet number.
    """
    _require_cuda()
    import torch

    from flashbench.backends.tensors import TORCH_DTYPES

    a = torch.randn(n, n, device="cuda", dtype=TORCH_DTYPES[dtype])
    b = torch.randn(n, n, device="cuda", dtype=TORCH_DTYPES[dtype])
    # tf32: fp32 operands on the tensor cores (about half bf16's peak on a Hopper GPU; the
    # bf16 matmul stood for it, and tf32 rows read about 2x low: a probe, 2026-12-07)
    was = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    try:
        seconds = device_seconds(lambda: torch.matmul(a, b))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = was
    return 2.0 * n**3 / seconds * 1e-12


def copy_bandwidth_gbs(nbytes: int = 2 * 1024**3) -> float:
    """Measured device-to-device copy bandwidth (GB/s, 1e9 bytes) of ``dst.copy_(src)`` on
    ``nbytes``-byte buffers (median device time, L2 flushed), counting the bytes read and
    written (2 x nbytes): the denominator of a memory-bound kernel's "% of copy bandwidth",
    as the matmul peak is for FLOPs."""
    _require_cuda()
    import torch

    src = torch.empty(nbytes // 2, dtype=torch.bfloat16, device="cuda").normal_()
    dst = torch.empty_like(src)
    return 2.0 * nbytes / device_seconds(lambda: dst.copy_(src)) * 1e-9


def gpu_name() -> str:
    """The CUDA device's name (e.g. 'NVIDIA H200'), or 'no-gpu'."""
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no-gpu"


_SMI_FIELDS = ("name", "driver_version", "clocks.sm", "clocks.max.sm", "clocks.mem",
               "power.draw", "power.limit", "temperature.gpu", "utilization.gpu")


def gpu_state() -> dict:
    """The GPU's state now and the software stack: nvidia-smi's clocks (MHz), power (W),
    temperature (C), driver; torch, Triton and CUDA versions. Fields nvidia-smi cannot
    give are None (``smi_error`` says why)."""
    import torch

    state: dict = {"torch": torch.__version__, "cuda": torch.version.cuda,
                   "gpu": gpu_name()}
    try:
        import triton

        state["triton"] = triton.__version__
    except ImportError:
        state["triton"] = None
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        state.update(sm_count=props.multi_processor_count,
                     memory_gib=round(props.total_memory / 2**30, 1),
                     capability=f"{props.major}.{props.minor}")
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(_SMI_FIELDS)}",
                              "--format=csv,noheader,nounits"], capture_output=True,
                             text=True, timeout=30)
        values = [x.strip() for x in out.stdout.splitlines()[0].split(",")]
        if out.returncode != 0 or len(values) != len(_SMI_FIELDS):
            raise OSError(out.stderr.strip() or out.stdout.strip())
    except (OSError, IndexError, subprocess.TimeoutExpired) as exc:
        state.update(dict.fromkeys(("driver", "sm_clock_mhz", "sm_clock_max_mhz",
                                    "mem_clock_mhz", "power_w", "power_limit_w",
                                    "temperature_c", "utilization_pct"), None))
        state["smi_error"] = str(exc) or type(exc).__name__
        return state

    def num(x):
        try:
            return float(x)
        except ValueError:
            return None

    (_, driver, sm, sm_max, mem, power, limit, temp, util) = values
    state.update(driver=driver, sm_clock_mhz=num(sm), sm_clock_max_mhz=num(sm_max),
                 mem_clock_mhz=num(mem), power_w=num(power), power_limit_w=num(limit),
                 temperature_c=num(temp), utilization_pct=num(util))
    return state
