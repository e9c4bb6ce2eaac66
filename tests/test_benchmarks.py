"""The asv suites: they pass asv check and skip, never fail, where a feature is missing."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_accuracy import TrackAccuracy  # noqa: E402
from benchmarks.bench_gpu import TrackDeviceTime  # noqa: E402
from benchmarks.common import need  # noqa: E402


def test_asv_check_existing_environment():
    r = subprocess.run([sys.executable, "-m", "asv", "check", "-E", f"existing:{sys.executable}"],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "No problems found" in r.stdout


def test_missing_feature_skips_instead_of_failing():
    with pytest.raises(NotImplementedError, match="lacks flashbench.no_such_module"):
        need("no_such_module")
    with pytest.raises(NotImplementedError, match="lacks flashbench.reference"):
        need("reference", "no_such_function")
    assert need("reference", "attention").__name__ == "attention"


def test_accuracy_suite_skips_combinations_a_kernel_does_not_take():
    suite = TrackAccuracy()
    with pytest.raises(NotImplementedError, match="torch-sdpa does not take tf32"):
        suite.setup({}, "torch-sdpa", "tf32", False)
    with pytest.raises(NotImplementedError, match="interpreter"):
        suite.setup({("triton", "fp16", True): "Triton interpreter: too slow"}, "triton", "fp16",
                    True)
    suite.setup({("flash_model", "bf16", False): {"o": {"max_abs": 1e-3}}}, "flash_model",
                "bf16", False)
    assert suite.track_o_max_abs(None, "flash_model", "bf16", False) == 1e-3


def test_gpu_suite_skips_without_a_gpu():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the suite runs instead")
    with pytest.raises(NotImplementedError, match="GPU"):
        TrackDeviceTime().setup("triton", "bf16", 1024, 64, False)
