"""The backward pass: gradient accuracy per kernel x dtype x causal, and the CPU time and
peak memory of the float64 backward, one-shot vs streamed.

TrackGradAccuracy: one case per run (``shape`` and ``dist``: B=1, H=2, N=512, d=64, normal
inputs, seed 0); every number comes from flashbench.measure.backward.measure_gradients in
setup_cache: dq, dk, dv's max abs error against the float64 gradients, its gradient-rule
ratio (passes at <= 3, plus a floor) and its band-rule ratio (passes at <= 1). Grid points a
backend does not take are in skip_params; an Unavailable record skips with its reason, a
Failed one makes the tracks FAIL. TimeBackward / PeakmemBackward:
flashbench.reference.attention_grad vs online_attention_grad, B = H = 1, d = 64, float64,
inputs made in setup, never timed; PeakmemBackward.track_peak_memory: bytes of peak
resident memory of a fresh process. The grids are literal; tests/test_bench_grad.py holds
KERNELS and DTYPES equal to flashbench's registries. Commits without the backward skip.
Parameters, units and what each impl holds: docs/asv.md ("Suites").
"""

import numpy as np

from . import calls
from .common import (
    BACKEND_DTYPES,
    BACKWARD_ON_GPU_ONLY,
    NO_BACKWARD,
    Benchmark,
    FreshCalls,
    SkipNotImplemented,
    TrackStandard,
    need,
    peak_memory,
    qkv,
    record_or_raise,
    require_peak_memory,
    shape_of,
    verify,
)

KERNELS = ["flash_model", "torch-naive", "torch-sdpa", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn",
           "sdpa-math", "triton", "triton-fp8", "flex"]
DTYPES = ["fp32", "tf32", "fp16", "bf16"]
SHAPES = ["1x2x512x512x64"]
DISTS = ["normal"]


def _not_applicable() -> list[tuple]:
    """Grid points whose backend does not take the dtype or has no backward anywhere
    (common.BACKEND_DTYPES, NO_BACKWARD: the registry's, literal); flex's backward exists
    only on a GPU: setup skips it elsewhere, with that reason."""
    return [(k, d, c, s, dist) for k in KERNELS if k in BACKEND_DTYPES for d in DTYPES
            if d not in BACKEND_DTYPES[k] or k in NO_BACKWARD
            for c in (False, True) for s in SHAPES for dist in DISTS]


class TrackGradAccuracy:
    params = (KERNELS, DTYPES, [False, True], SHAPES, DISTS)
    param_names = ["kernel", "dtype", "causal", "shape", "dist"]
    skip_params = _not_applicable()
    timeout = 900

    def setup_cache(self):
        try:
            Case = need("measure", "Case")
            measure = need("measure_grad", "measure_gradients")
            backends = need("backends", "BACKENDS")
        except NotImplementedError as exc:  # an older commit: every benchmark skips
            return {"missing": str(exc)}
        results = {}
        for shape in SHAPES:
            for causal in (False, True):
                case = Case(shape_of(shape), "normal", causal)
                kernels = [k for k in KERNELS if k == "flash_model" or k in backends]
                for r in measure(case, DTYPES, kernels):
                    results[(r.kernel, r.dtype, causal, shape)] = r
                for k in BACKWARD_ON_GPU_ONLY:  # not in skip_params: a GPU measures it
                    if k in backends and not getattr(backends[k], "differentiable", False):
                        for d in BACKEND_DTYPES[k]:
                            results[(k, d, causal, shape)] = (f"{k} has no backward on this "
                                                              "machine (only on a CUDA GPU)")
        return results

    def setup(self, results, kernel, dtype, causal, shape, dist):
        """The record, or skip (Unavailable, older commits) or FAIL (a Failed record:
        the backward raised or returned no valid gradients)."""
        rec = results.get((kernel, dtype, causal, shape))
        if rec is None:
            rec = results.get("missing", f"no gradient record for {kernel} {dtype} in this "
                                         "commit")
        self.rec = record_or_raise(rec, f"{kernel} {dtype} backward "
                                        f"({shape}{' causal' if causal else ''})")

    def track_dq_max_abs(self, results, kernel, dtype, causal, shape, dist):
        return self.rec.dq["max_abs"]

    track_dq_max_abs.unit = "max |dq - dq_fp64|"

    def track_dk_max_abs(self, results, kernel, dtype, causal, shape, dist):
        return self.rec.dk["max_abs"]

    track_dk_max_abs.unit = "max |dk - dk_fp64|"

    def track_dv_max_abs(self, results, kernel, dtype, causal, shape, dist):
        return self.rec.dv["max_abs"]

    track_dv_max_abs.unit = "max |dv - dv_fp64|"

    def track_dq_ratio(self, results, kernel, dtype, causal, shape, dist):
        return self.rec.dq_ratio

    track_dq_ratio.unit = "x standard backward error (dq max abs)"

    def track_dk_ratio(self, results, kernel, dtype, causal, shape, dist):
        return self.rec.dk_ratio

    track_dk_ratio.unit = "x standard backward error (dk max abs)"

    def track_dv_ratio(self, results, kernel, dtype, causal, shape, dist):
        return self.rec.dv_ratio

    track_dv_ratio.unit = "x standard backward error (dv max abs)"

    def _band_ratio(self, name):
        value = getattr(self.rec, f"{name}_band_ratio", None)
        if value is None:
            raise SkipNotImplemented(f"this commit records no {name} band ratio")
        return value

    def track_dq_band_ratio(self, results, kernel, dtype, causal, shape, dist):
        return self._band_ratio("dq")

    track_dq_band_ratio.unit = "ratio"

    def track_dk_band_ratio(self, results, kernel, dtype, causal, shape, dist):
        return self._band_ratio("dk")

    track_dk_band_ratio.unit = "ratio"

    def track_dv_band_ratio(self, results, kernel, dtype, causal, shape, dist):
        return self._band_ratio("dv")

    track_dv_band_ratio.unit = "ratio"


class TrackStandardBackward(TrackStandard):
    """The standard backward's own error (common.TrackStandard), TrackGradAccuracy's inputs
    (seed 0, its dO) and dtypes: the yardstick of its gradient ratios."""

    params = (DTYPES, [False, True], SHAPES)
    grad = True

    def setup_cache(self):
        return self.errors_of_standard()

    def track_standard_dq_max_abs(self, results, dtype, causal, shape):
        return self.error("dq")

    track_standard_dq_max_abs.unit = "max |dq_standard_model - dq_fp64|"

    def track_standard_dk_max_abs(self, results, dtype, causal, shape):
        return self.error("dk")

    track_standard_dk_max_abs.unit = "max |dk_standard_model - dk_fp64|"

    def track_standard_dv_max_abs(self, results, dtype, causal, shape):
        return self.error("dv")

    track_standard_dv_max_abs.unit = "max |dv_standard_model - dv_fp64|"


class TimeBackward(Benchmark):
    """CPU time of the float64 backward: one-shot vs streamed (block 64)."""

    params = (["1x1x1024x1024x64", "1x1x4096x4096x64"], ["fp64"], [False, True],
              ["one-shot", "streamed"], ["bwd"])
    param_names = ["shape", "dtype", "causal", "impl", "direction"]
    number = 1

    def setup(self, shape, dtype, causal, impl, direction):
        grad = need("reference", "attention_grad" if impl == "one-shot" else
                    "online_attention_grad")
        s = shape_of(shape)

        def make(seed):
            q, k, v = qkv(shape, seed=seed)
            do = np.random.default_rng(seed + 1).standard_normal((s.B, s.H, s.Nq, s.head_dim_v))
            if impl == "one-shot":
                return q, k, v, do
            o, lse = need("reference", "online_attention")(q, k, v, causal=causal)
            return q, do, k, v, o, lse

        if impl == "one-shot":
            def fn(q, k, v, do, causal):
                return grad(q, k, v, do, causal=causal)
        else:
            def fn(q, do, k, v, o, lse, causal):
                return grad(q, k, v, o, lse, do, causal=causal)
        self.call = FreshCalls(shape, fn, make, tol=1e-9, want=dq_row,
                               stage=None if impl == "one-shot" else forward_row,
                               fresh=3 if impl == "one-shot" else 1, causal=causal)  # dO

    def time_backward(self, shape, dtype, causal, impl, direction):
        self.call()

    def teardown(self, shape, dtype, causal, impl, direction):
        verify(self)


def _row_problem(args, r, causal):
    """q's row ``r`` and the keys it sees, from (q, k, v, ...) or (q, do, k, v, ...)."""
    q = args[0]
    k, v = args[1:3] if len(args) == 4 else args[2:4]
    see = r + k.shape[-2] - q.shape[-2] + 1 if causal else k.shape[-2]
    if q.shape[-3] != k.shape[-3]:  # grouped k, v heads: repeat them to q's heads
        k, v = (np.repeat(x, q.shape[-3] // k.shape[-3], axis=-3) for x in (k, v))
    return q[..., r:r + 1, :], k[..., :see, :], v[..., :see, :]


def forward_row(args, r, causal):
    """The streamed backward's o and lse brought up to date for q's new row ``r`` (the
    forward of that row alone: O(N d) against the backward's O(N^2 d))."""
    o, lse = need("reference", "attention")(*_row_problem(args, r, causal))
    args[4][..., r, :], args[5][..., r] = o[..., 0, :], lse[..., 0]


def dq_row(args, r, causal):
    """Row ``r`` of dq from the float64 one-shot backward of that query row alone (dq's row
    depends on its own q and dO rows and on k, v only)."""
    q, k, v = _row_problem(args, r, causal)
    do = args[3] if len(args) == 4 else args[1]
    return need("reference", "attention_grad")(q, k, v, do[..., r:r + 1, :])[0][..., 0, :]


class PeakmemBackward(Benchmark):
    """Peak memory of the float64 backward: one-shot holds [N, N] S, P and dS (O(N^2));
    streamed holds a few [N, 64] tiles (O(N * block)).

    Bytes: the peak resident memory (VmHWM) of a fresh child process
    (common.peak_memory, the same environment) that imports numpy and flashbench's
    reference and inputs, makes the inputs (q, k, v, dO and, for streamed, the
    forward's o and lse) and runs the backward once: it includes that baseline
    (interpreter + numpy + the flashbench modules, about 35 MB here) and the inputs,
    as asv's spawn-mode ``peakmem_`` did; never the forkserver's memory (a
    ``peakmem_`` benchmark forked from asv's forkserver starts with ~240 MB of it)."""

    params = (["1x1x1024x1024x64", "1x1x4096x4096x64", "1x1x8192x8192x64"], ["fp64"], [False],
              ["one-shot", "streamed"], ["bwd"])
    param_names = ["shape", "dtype", "causal", "impl", "direction"]
    timeout = 600

    def setup(self, shape, dtype, causal, impl, direction):
        require_peak_memory()
        need("reference", "attention_grad" if impl == "one-shot" else "online_attention_grad")
        need("inputs", "make_qkv")

    def track_peak_memory(self, shape, dtype, causal, impl, direction):
        return peak_memory(calls.__name__, "backward_call", [shape, causal, impl],
                           self.timeout - 60)

    track_peak_memory.unit = "bytes"
