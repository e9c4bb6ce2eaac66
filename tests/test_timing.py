"""Throughput arithmetic, pass callables, machine state, and the refusal to time without a GPU."""

import math

import pytest
import torch

from flashbench.inputs import Shape
from flashbench.measure.timing import (
    NotDifferentiable,
    device_samples,
    device_seconds,
    gpu_state,
    pass_fn,
    tflops,
)


def test_tflops_counts_visible_pairs_and_passes():
    s = Shape(4, 16, 4096, 4096, 128)
    assert tflops(s, False, 1e-3) == pytest.approx(4 * 4 * 16 * 4096 * 4096 * 128 / 1e-3 / 1e12)
    assert tflops(s, True, 1e-3) == pytest.approx(tflops(s, False, 1e-3) / 2, rel=1e-3)
    assert tflops(s, False, 1e-3, "bwd") == pytest.approx(2.5 * tflops(s, False, 1e-3))
    assert tflops(s, False, 1e-3, "fwd+bwd") == pytest.approx(3.5 * tflops(s, False, 1e-3))
    # grouped-query attention does the same arithmetic per query head
    assert tflops(Shape(4, 16, 4096, 4096, 128, Hkv=4), False, 1e-3) == tflops(s, False, 1e-3)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU refusal")
def test_no_device_timing_without_gpu():
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        device_seconds(lambda: None)
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        device_samples(lambda: None)


def _attention(q, k, v, causal=False):
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v, None


def test_pass_fn_runs_each_direction():
    q, k, v = (torch.randn(1, 2, 8, 16, dtype=torch.float64) for _ in range(3))
    o, _ = pass_fn(_attention, q, k, v, True, "fwd")()
    assert o.shape == q.shape and o.grad_fn is None
    for direction in ("bwd", "fwd+bwd"):
        fn = pass_fn(_attention, q, k, v, True, direction)
        g1, g2 = fn(), fn()  # repeatable: the graph is kept for bwd, rebuilt for fwd+bwd
        assert len(g1) == 3 and all(torch.equal(a, b) for a, b in zip(g1, g2, strict=True))
        assert g1[0].shape == q.shape and torch.isfinite(g1[2]).all()
    with pytest.raises(ValueError, match="direction must be one of"):
        pass_fn(_attention, q, k, v, False, "sideways")


def test_pass_fn_refuses_a_function_without_gradient():
    q, k, v = (torch.randn(1, 1, 4, 16) for _ in range(3))

    def detached(q, k, v, causal=False):
        return _attention(q, k, v, causal)[0].detach()

    with pytest.raises(NotDifferentiable, match="mine is not differentiable"):
        pass_fn(detached, q, k, v, False, "bwd", name="mine")
    assert issubclass(NotDifferentiable, NotImplementedError)  # asv: a skip, not a failure


def test_gpu_state_describes_the_stack():
    state = gpu_state()
    assert state["torch"] == torch.__version__
    for key in ("triton", "cuda", "gpu", "driver", "sm_clock_mhz", "power_w", "temperature_c"):
        assert key in state
    if not torch.cuda.is_available():
        assert state["gpu"] == "no-gpu"


def test_a_tf32_peak_times_fp32_operands_on_tf32_and_sets_the_flag_back(monkeypatch):
    """tf32 rows' % peak was of the bf16 matmul, "no tf32 matmul peak on this device" (a
    probe, 2026-12-07: a Hopper GPU's tf32 peak is about half bf16's, so they read about 2x
    low). The peak is timed on fp32 operands with torch's tf32 flag on, then set back; the
    device is stood in for (this machine has none)."""
    import flashbench.measure.timing as timing

    seen = []
    real = torch.randn
    monkeypatch.setattr(timing, "_require_cuda", lambda: None)
    monkeypatch.setattr(torch, "randn", lambda *a, device=None, dtype=None: real(
        *a, dtype=dtype))

    def seconds(fn):
        seen.append((torch.backends.cuda.matmul.allow_tf32, fn().dtype))
        return 1.0

    monkeypatch.setattr(timing, "device_seconds", seconds)
    before = torch.backends.cuda.matmul.allow_tf32
    assert timing.matmul_peak_tflops("tf32", n=8) == pytest.approx(2 * 8**3 * 1e-12)
    assert timing.matmul_peak_tflops("fp32", n=8) == pytest.approx(2 * 8**3 * 1e-12)
    assert seen == [(True, torch.float32), (False, torch.float32)]
    assert torch.backends.cuda.matmul.allow_tf32 == before


def test_on_a_gpu_tf32_rows_are_of_the_tf32_matmul_and_floored_as_fp32s(monkeypatch):
    """A tf32 row's % peak is of the tf32 matmul; its floor, as fp32's, of the bf16 matmul
    (its dots may run in 16 bits: a review, 2026-12-07, found tf32's floor half fp32's).
    The device's peaks are stood in for."""
    import flashbench.measure.timing as timing
    from flashbench.measure.roofline import measure_roofline

    rates = {"bf16": 800.0, "fp32": 60.0, "tf32": 400.0}
    monkeypatch.setattr(timing, "matmul_peak_tflops", lambda d: rates[d])
    monkeypatch.setattr(timing, "copy_bandwidth_gbs", lambda: 4000.0)
    roof = measure_roofline("cuda", ["tf32", "fp32", "bf16"])
    assert roof.tflops == rates
    assert roof.floor == {"tf32": 800.0, "fp32": 800.0}
    assert roof.peak_how["tf32"].startswith("tf32 matmul; the floor of the bf16 matmul, 800")
