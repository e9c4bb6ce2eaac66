"""GPU timings at the head dims real models use (issue 37): d = 80, 96 and 192/128 beside
bench_gpu's d = 128 rows (same B, H, N: 4x16x4096), bf16, forward, for flashbench's kernel
(padded to its compiled width) and the pinned SDPA flash peer (which refuses dv != d: that
point skips with torch's reason). A class of its own, so bench_gpu's series go on
unchanged (and named apart: gpu_history's default "bench_gpu" does not select it, each
new d autotunes its own compilations); samples, the GPU guard and the prepared calls (new
contents each call, every output checked: bench_gpu.fresh_pass) are bench_gpu's. FLOPs follow
from ``shape`` (Shape.flops counts the true d and dv).
"""

import sys

from .bench_gpu import GPUBenchmark, fresh_pass
from .common import prepared as _prepared
from .common import timed_backend

SHAPES = ["4x16x4096x4096x80", "4x16x4096x4096x96", "4x16x4096x4096x192/128"]


class TimeHeadDimGPU(GPUBenchmark):
    params = (["triton", "sdpa-flash"], ["bf16"], SHAPES, [False, True], ["fwd"])
    param_names = ["backend", "dtype", "shape", "causal", "direction"]

    def setup(self, backend, dtype, shape, causal, direction):
        self.fn = _prepared(("headdim", backend, dtype, shape, causal, direction),
                            lambda: self._build(backend, dtype, shape, causal, direction))
        self.sync = sys.modules["torch"].cuda.synchronize

    @staticmethod
    def _build(backend, dtype, shape, causal, direction):
        return fresh_pass(timed_backend(backend), shape, dtype, causal, direction)

    def time_headdim_gpu(self, backend, dtype, shape, causal, direction):
        self.fn()
        self.sync()
