"""The asv gradient suites (benchmarks/bench_grad.py): literal grids equal to the
registries, records read back, skips only where a backend has no backward or dtype."""

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import bench_grad  # noqa: E402
from benchmarks.bench_grad import PeakmemBackward, TimeBackward, TrackGradAccuracy  # noqa: E402
from benchmarks.calls import backward_call  # noqa: E402


def test_grid_is_the_registry():
    from flashbench.backends import BACKENDS
    from flashbench.numerics import GRAD_DTYPES

    assert bench_grad.DTYPES == [d for d in GRAD_DTYPES if d != "fp64"]
    assert bench_grad.KERNELS == ["flash_model", *[b for b in BACKENDS if b != "reference"]]
    declared = {(k, d) for k, d, *_ in TrackGradAccuracy.skip_params}
    # what no machine runs is declared; flex's backward (a GPU's only) is decided in setup
    gpu_only = set(bench_grad.BACKWARD_ON_GPU_ONLY)
    assert declared == {(k, d) for k in bench_grad.KERNELS if k in BACKENDS
                        for d in bench_grad.DTYPES
                        if d not in BACKENDS[k].dtypes
                        or (not BACKENDS[k].differentiable and k not in gpu_only)}
    assert ("triton", "fp16") not in declared and ("torch-naive", "tf32") in declared


def test_a_backward_only_a_gpu_has_skips_from_setup_saying_so(monkeypatch):
    """flex's points are not declared (its backward exists on a GPU): where the registry
    says it has none, setup_cache records that reason and setup skips with it (never
    "no record"), in a grid point's process that imports no torch."""
    from flashbench.backends import BACKENDS

    if BACKENDS["flex"].differentiable:
        pytest.skip("flex has a backward on this machine: its points are measured")
    monkeypatch.setattr(bench_grad, "KERNELS", ["flex"])
    results = TrackGradAccuracy().setup_cache()
    assert {k for k in results if k != "missing"} == {
        ("flex", d, c, s) for d in ("fp32", "fp16", "bf16") for c in (False, True)
        for s in bench_grad.SHAPES}
    with pytest.raises(NotImplementedError, match="flex has no backward on this machine "
                                                  r"\(only on a CUDA GPU\)"):
        TrackGradAccuracy().setup(results, "flex", "fp32", False, bench_grad.SHAPES[0],
                                  "normal")


def test_suite_reads_records_and_skips_with_the_reason():
    from flashbench.inputs import Shape
    from flashbench.measure.backward import measure_gradients
    from flashbench.measure.records import Case

    (rec,) = measure_gradients(Case(Shape(1, 1, 24, 24, 16), causal=True), ["bf16"],
                               ["flash_model"])
    suite = TrackGradAccuracy()
    results = {("flash_model", "bf16", True, "s"): rec,
               ("triton", "bf16", True, "s"): "Triton interpreter: too slow (needs a GPU)"}
    suite.setup(results, "flash_model", "bf16", True, "s", "normal")
    args = (results, "flash_model", "bf16", True, "s", "normal")
    assert suite.track_dq_max_abs(*args) == rec.dq["max_abs"] > 0
    assert suite.track_dv_ratio(*args) == rec.dv_ratio
    with pytest.raises(NotImplementedError, match="needs a GPU"):
        suite.setup(results, "triton", "bf16", True, "s", "normal")
    with pytest.raises(NotImplementedError, match="lacks"):
        suite.setup({"missing": "this commit lacks flashbench.measure.backward"}, "triton", "bf16",
                    True, "s", "normal")


@pytest.mark.parametrize("causal", [False, True])
def test_timed_calls_compute_the_same_gradients(causal):
    one = backward_call("1x1x70x70x16", causal, "one-shot")()
    streamed = backward_call("1x1x70x70x16", causal, "streamed")()
    for a, b in zip(one, streamed, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)


def test_time_and_memory_suites_record_the_problem():
    for suite in (TimeBackward, PeakmemBackward):
        assert suite.param_names == ["shape", "dtype", "causal", "impl", "direction"]
        assert suite.params[1] == ["fp64"] and suite.params[4] == ["bwd"]
        assert suite.params[3] == ["one-shot", "streamed"]
    assert "1x1x4096x4096x64" in TimeBackward.params[0]
    assert "1x1x8192x8192x64" in PeakmemBackward.params[0]
    assert PeakmemBackward.track_peak_memory.unit == "bytes"
    assert not [n for n in dir(PeakmemBackward) if n.startswith("peakmem_")]
    # that the one-shot backward's [N, N] matrices show in its peak and the streamed one's
    # do not: tests/test_benchmarks.py, VALUE_CHECKS, on the grid's own measurements


def test_a_failed_backward_fails_the_track_instead_of_skipping():
    """A Failed record (the backward raised, or NaN gradients) is a failure naming the
    kernel and the reason (asv records null), never NotImplementedError (a skip)."""
    from benchmarks.common import KernelFailed
    from flashbench.inputs import Shape
    from flashbench.measure.records import Case, Failed

    case = Case(Shape(1, 1, 24, 24, 16))
    results = {("triton", "fp16", False, "s"): Failed(case, "triton", "fp16",
                                                      "backward raised RuntimeError: boom")}
    with pytest.raises(KernelFailed, match="triton fp16 backward.*failed: backward raised "
                                           "RuntimeError: boom") as info:
        TrackGradAccuracy().setup(results, "triton", "fp16", False, "s", "normal")
    assert not isinstance(info.value, NotImplementedError)
