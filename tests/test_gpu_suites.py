"""The asv GPU suites: a grid that fits a GPU window, and a forkserver parent that
never initialises CUDA (so asv may fork benchmark processes from it on a GPU machine).

asv's forkserver imports every suite once (asv_runner's ``disc_benchmarks``, its
"preimport") and forks one process per grid point. CUDA does not survive a fork once
the parent has initialised it (``cuInit``, which ``torch.cuda.is_available()`` calls
through ``cudaGetDeviceCount`` unless ``PYTORCH_NVML_BASED_CUDA_CHECK=1``). Here, with
no GPU, torch is made to behave as a CUDA build whose NVML sees one GPU, and every call
that would initialise CUDA is recorded.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cuda_recorder import RECORDER  # noqa: E402

from benchmarks import bench_gpu  # noqa: E402

PREIMPORT = RECORDER + r"""
import sys
from asv_runner._aux import update_sys_path
from asv_runner.discovery import disc_benchmarks
update_sys_path(sys.argv[1])
names = [b.name for b in disc_benchmarks(sys.argv[1], ignore_import_errors=False)]
suites_loaded_registry = "flashbench.backends" in sys.modules
if sys.argv[2:] == ["registry"]:  # the control: what a grid point's setup imports
    import flashbench.backends
driver = None
if "triton" in sys.modules:
    from triton.runtime.driver import driver as d
    driver = [d._default is not None, d._active is not None]
print(json.dumps({"calls": calls, "initialized": torch.cuda.is_initialized(),
                  "flashbench": suites_loaded_registry,
                  "triton_driver": driver, "benchmarks": names}))
"""


def preimport(nvml_check: bool, registry: bool = False) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTORCH_NVML_BASED_CUDA_CHECK"}
    if nvml_check:
        env["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    env["PYTHONPATH"] = str(ROOT)
    r = subprocess.run([sys.executable, "-c", PREIMPORT, str(ROOT / "benchmarks"),
                        *(["registry"] if registry else [])],
                       capture_output=True, text=True, env=env, cwd="/", timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_forkserver_parent_never_initialises_cuda():
    """Importing every suite makes no CUDA-initialising call, with or without the NVML
    check (set by tools/gpu/history.py and gpu_session.sh): the suites' skip_params are
    literal, so the backend registry (whose import-time ``torch.cuda.is_available()``
    calls cudaGetDeviceCount without the check) is not imported. The control: the same
    process importing the registry (as a grid point's setup does) without the check is
    seen calling it, and with the check is not."""
    safe = preimport(nvml_check=False)
    assert not safe["flashbench"]  # the suites imported no registry
    assert "bench_gpu.TimeAttentionGPU.time_attention_gpu" in safe["benchmarks"]
    assert "bench_gpu.TimeAttentionFP8GPU.time_attention_fp8" in safe["benchmarks"]
    assert safe["calls"] == [] and safe["initialized"] is False
    assert safe["triton_driver"] in (None, [False, False])
    checked = preimport(nvml_check=True, registry=True)
    assert checked["calls"] == [] and checked["initialized"] is False
    assert "cudaGetDeviceCount" in preimport(nvml_check=False, registry=True)["calls"]


@pytest.mark.gpu
def test_a_forked_child_uses_cuda_after_the_suites_were_imported():
    """On a GPU: the forkserver's situation for real. Import every suite with the NVML
    check, fork, run a CUDA op in the child; the parent stays uninitialised."""
    code = r"""
import os, sys, torch
from asv_runner._aux import update_sys_path
from asv_runner.discovery import disc_benchmarks
update_sys_path(sys.argv[1])
list(disc_benchmarks(sys.argv[1]))
assert not torch.cuda.is_initialized()
pid = os.fork()
if pid == 0:
    ok = torch.ones(4, device="cuda").sum().item() == 4
    os._exit(0 if ok else 1)
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status), "parent", torch.cuda.is_initialized())
"""
    # the root first, then what the caller's path holds (the GPU session's asv wheels)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTORCH_NVML_BASED_CUDA_CHECK": "1", "PYTHONPATH": path}
    r = subprocess.run([sys.executable, "-c", code, str(ROOT / "benchmarks")],
                       capture_output=True, text=True, env=env, cwd="/", timeout=300)
    assert r.returncode == 0 and r.stdout.split()[-4:] == ["child", "0", "parent", "False"], \
        r.stdout + r.stderr


def test_the_gpu_grid_is_small_and_keeps_ten_samples_a_point():
    """21 points (16 bf16 + 4 fp8 + the matmul peak), one process each, >= 10 samples."""
    points = 0
    for cls in (bench_gpu.TimeAttentionGPU, bench_gpu.TimeAttentionFP8GPU,
                bench_gpu.TimeMatmulPeak):
        n = 1
        for values in cls.params:
            n *= len(values)
        points += n
        assert cls.rounds == 1 and cls.number == 1 and cls.repeat[0] >= 10
        assert cls.repeat[2] <= 1.0 and cls.timeout <= 120
    assert points == 21
    assert bench_gpu.TimeAttentionFP8GPU.param_names == bench_gpu.TimeAttentionGPU.param_names


def test_a_grid_point_is_built_and_warmed_once_per_process(monkeypatch):
    """asv_runner re-runs setup before every sample: the call is built (and run once,
    compiling outside the samples) by the first setup only."""
    import torch

    built, ran = [], []
    from benchmarks import common

    monkeypatch.setattr(common, "require_gpu", lambda: None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(common, "_PREPARED", {})

    def build():
        built.append(1)
        return lambda: ran.append(1)

    first = common.prepared(("k",), build)
    for _ in range(11):
        assert common.prepared(("k",), build) is first
    assert built == [1] and ran == [1]  # the warm call; samples call it afterwards
    common.prepared(("other",), build)
    assert len(built) == 2


def test_fp8_suite_skips_without_a_gpu():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the suite runs instead")
    with pytest.raises(NotImplementedError, match="GPU"):
        bench_gpu.TimeAttentionFP8GPU().setup("triton-fp8", "fp8", bench_gpu.SHAPES[0], False,
                                              "fwd")
