"""The asv suites: they pass asv check, skip (never fail) where a feature is missing,
and at HEAD nothing skips but for a missing GPU."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import bench_accuracy  # noqa: E402
from benchmarks.bench_accuracy import TrackAccuracy  # noqa: E402
from benchmarks.bench_gpu import TimeAttentionGPU  # noqa: E402
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


def test_need_finds_a_moved_function_at_either_location():
    # where it lives now, and where an older commit kept it: the first that has it wins
    assert need(("no_such_module", "measure"), "measure_accuracy").__module__ == \
        "flashbench.measure"
    assert need(("reference", "measure"), "measure_accuracy").__module__ == "flashbench.measure"
    with pytest.raises(NotImplementedError, match="flashbench.a or flashbench.b"):
        need(("a", "b"), "x")


def test_accuracy_grid_is_the_registry():
    """asv needs a literal grid (the same for every commit); it must equal the registries."""
    from flashbench.backends import BACKENDS
    from flashbench.precision import DTYPES

    assert bench_accuracy.DTYPES == [d for d in DTYPES if d != "fp64"]
    assert bench_accuracy.KERNELS == ["flash_model", *[b for b in BACKENDS if b != "reference"]]
    skipped = {(k, d) for k, d, *_ in TrackAccuracy.skip_params}
    assert skipped == {(k, d) for k in BACKENDS if k in bench_accuracy.KERNELS
                       for d in bench_accuracy.DTYPES if d not in BACKENDS[k].dtypes}


def test_accuracy_suite_reads_records_and_older_dicts():
    suite = TrackAccuracy()
    with pytest.raises(NotImplementedError, match="interpreter"):
        suite.setup({("triton", "fp16", True, "s"): "Triton interpreter: too slow"}, "triton",
                    "fp16", True, "s", "normal")
    suite.setup({("flash_model", "bf16", False, "s"): {"o": {"max_abs": 1e-3}}}, "flash_model",
                "bf16", False, "s", "normal")
    assert suite.track_o_max_abs(None, "flash_model", "bf16", False, "s", "normal") == 1e-3


def test_gpu_suite_skips_without_a_gpu():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the suite runs instead")
    with pytest.raises(NotImplementedError, match="GPU"):
        TimeAttentionGPU().setup("triton", "bf16", "4x16x4096x4096x128", False, "fwd")


def _setup_every_benchmark():
    """Set up every benchmark at every grid point as asv would (setup_cache once per
    class, asv's skip_params honoured); returns {benchmark[params]: skip reason}."""
    import itertools

    from asv_runner.benchmarks._base import get_setup_cache_key
    from asv_runner.discovery import disc_benchmarks

    caches, skips = {}, {}
    for bench in disc_benchmarks(str(ROOT / "benchmarks")):
        key = get_setup_cache_key(bench._setup_cache) if bench._setup_cache else None
        if key is not None and key not in caches:
            caches[key] = bench.do_setup_cache()
        for i, combo in enumerate(itertools.product(*bench._params) or [()]):
            if bench._params:
                bench.set_param_idx(i)
            if key is not None:
                bench.set_cache(caches[key])
            if tuple(combo) in bench._skip_tuples:
                continue  # declared not applicable (asv's skip_params)
            try:
                for setup in bench._setups:
                    setup(*bench._build_params())
            except NotImplementedError as exc:
                skips[f"{bench.name}{list(combo)}"] = str(exc)
    return skips


@pytest.mark.slow
def test_at_head_nothing_skips_but_for_a_missing_gpu():
    skips = _setup_every_benchmark()
    wrong = {name: why for name, why in skips.items() if "GPU" not in why}
    assert not wrong, f"{len(wrong)} benchmark(s) skip at HEAD: {wrong}"
