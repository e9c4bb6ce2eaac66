"""GPU device time (seconds, median of triton.testing.do_bench: warm-up, L2 flushed).

Skipped without a CUDA GPU. Throughput is derived from these times in the history
summaries (TFLOP/s = 4*B*H*N*N*d / time, halved when causal); TrackMatmulPeak
records the same run's bf16 matmul time, the denominator of "% of peak".
"""

import os
import shutil

from .common import need, timed_backend


def _require_gpu():
    # Cheap test first: no NVIDIA driver means no GPU, without importing torch.
    if not (shutil.which("nvidia-smi") or os.path.exists("/proc/driver/nvidia/version")):
        raise NotImplementedError("no NVIDIA GPU on this machine")
    import torch

    if not torch.cuda.is_available():
        raise NotImplementedError("torch sees no CUDA GPU")


class TrackDeviceTime:
    params = (["triton", "torch-sdpa"], ["bf16", "fp16"], [1024, 4096, 16384], [64, 128],
              [False, True])
    param_names = ["backend", "dtype", "N", "d", "causal"]
    timeout = 600

    def setup(self, backend, dtype, N, d, causal):
        _require_gpu()
        import torch

        TORCH_DTYPES = need("kernels.checks", "TORCH_DTYPES")
        self.device_seconds = need("timing", "device_seconds")
        self.fn = timed_backend(backend)
        batch = max(1, 16384 // N)  # B * N = 16384 tokens, 16 heads
        g = torch.Generator(device="cuda").manual_seed(0)
        self.q, self.k, self.v = (torch.randn(batch, 16, N, d, device="cuda", generator=g,
                                              dtype=TORCH_DTYPES[dtype]) for _ in range(3))

    def track_device_time(self, backend, dtype, N, d, causal):
        return self.device_seconds(lambda: self.fn(self.q, self.k, self.v, causal=causal))

    track_device_time.unit = "seconds"


class TrackMatmulPeak:
    """Device time of one 8192^3 bf16 torch.matmul (2 * 8192^3 FLOP)."""

    def setup(self):
        _require_gpu()
        import torch

        self.device_seconds = need("timing", "device_seconds")
        self.a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)

    def track_matmul_bf16_8192(self):
        return self.device_seconds(lambda: self.a @ self.a)

    track_matmul_bf16_8192.unit = "seconds"
