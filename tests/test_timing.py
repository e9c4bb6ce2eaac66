"""Throughput arithmetic and the refusal to time without a GPU."""

import subprocess
import sys

import pytest
import torch

from flashbench.inputs import Shape
from flashbench.timing import device_seconds, tflops


def test_tflops_counts_visible_pairs():
    s = Shape(4, 16, 4096, 4096, 128)
    assert tflops(s, False, 1e-3) == pytest.approx(4 * 4 * 16 * 4096 * 4096 * 128 / 1e-3 / 1e12)
    assert tflops(s, True, 1e-3) == pytest.approx(tflops(s, False, 1e-3) / 2, rel=1e-3)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU refusal")
def test_no_device_timing_without_gpu():
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        device_seconds(lambda: None)
    r = subprocess.run([sys.executable, "scripts/gpu_bench.py"], capture_output=True, text=True)
    assert r.returncode == 2 and "no CUDA GPU" in r.stderr
