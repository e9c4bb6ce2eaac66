"""GPU device time (seconds, median of triton.testing.do_bench: warm-up, L2 flushed).

Skipped without a CUDA GPU. Throughput is derived from these times in the history
summaries (TFLOP/s = FLOPs of the recorded shape / time); TrackMatmulPeak records
the same run's bf16 matmul time, the denominator of "% of peak".
"""

import os
import shutil

from .common import need, shape_of, timed_backend, torch_dtype

# B * N = 16384 tokens, 16 heads, as Triton's fused-attention tutorial does
SHAPES = [f"{16384 // n}x16x{n}x{n}x{d}" for d in (64, 128) for n in (1024, 4096, 16384)]


def _require_gpu():
    # Cheap test first: no NVIDIA driver means no GPU, without importing torch.
    if not (shutil.which("nvidia-smi") or os.path.exists("/proc/driver/nvidia/version")):
        raise NotImplementedError("no NVIDIA GPU on this machine")
    import torch

    if not torch.cuda.is_available():
        raise NotImplementedError("torch sees no CUDA GPU")


class TrackDeviceTime:
    params = (["triton", "torch-sdpa"], ["bf16", "fp16"], SHAPES, [False, True])
    param_names = ["backend", "dtype", "shape", "causal"]
    timeout = 600

    def setup(self, backend, dtype, shape, causal):
        _require_gpu()
        import torch

        s = shape_of(shape)
        self.device_seconds = need("timing", "device_seconds")
        self.fn = timed_backend(backend)
        g = torch.Generator(device="cuda").manual_seed(0)
        self.q, self.k, self.v = (torch.randn(s.B, s.H, n, s.d, device="cuda", generator=g,
                                              dtype=torch_dtype(dtype))
                                  for n in (s.Nq, s.Nk, s.Nk))

    def track_device_time(self, backend, dtype, shape, causal):
        return self.device_seconds(lambda: self.fn(self.q, self.k, self.v, causal=causal))

    track_device_time.unit = "seconds"


class TrackMatmulPeak:
    """Device time of one n^3 bf16 torch.matmul (2 * n^3 FLOP)."""

    params = ([8192], ["bf16"])
    param_names = ["n", "dtype"]

    def setup(self, n, dtype):
        _require_gpu()
        import torch

        self.device_seconds = need("timing", "device_seconds")
        self.a = torch.randn(n, n, device="cuda", dtype=torch_dtype(dtype))

    def track_matmul(self, n, dtype):
        return self.device_seconds(lambda: self.a @ self.a)

    track_matmul.unit = "seconds"
