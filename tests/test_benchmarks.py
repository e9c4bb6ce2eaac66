"""The asv suites: they pass asv check, skip (never fail) where a feature is missing,
and at HEAD nothing skips but for a missing GPU."""

import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import bench_accuracy  # noqa: E402
from benchmarks.bench_accuracy import TrackAccuracy  # noqa: E402
from benchmarks.bench_gpu import TimeAttentionGPU  # noqa: E402
from benchmarks.common import need, shape_of  # noqa: E402


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
        "flashbench.measure.forward"
    assert need(("reference", "measure"), "measure_accuracy").__module__ == \
        "flashbench.measure.forward"
    # a module that moved into a package is found at its new home first, with no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        assert need("measure_grad", "measure_gradients").__module__ == "flashbench.measure.backward"
        assert need("machine", "register").__module__ == "flashbench.infra.machine"
    with pytest.raises(NotImplementedError, match="flashbench.a or flashbench.b"):
        need(("a", "b"), "x")


def _need_in_stand_in(tmp_path, modules: dict, body: str) -> list[str]:
    """``body``'s printed lines, run in a process whose flashbench is a stand-in package
    under ``tmp_path`` holding ``modules`` ({name: source}); asv installs a commit's
    flashbench, never editable, so the editable install's finder is taken out."""
    pkg = tmp_path / "flashbench"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for name, source in modules.items():
        (pkg / f"{name}.py").write_text(source)
    code = ("import sys; sys.path[:0] = sys.argv[1:3]\n"
            "sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in f.__module__]\n"
            "from benchmarks.common import need\n" + body)
    return subprocess.run([sys.executable, "-c", code, str(tmp_path), str(ROOT)],
                          capture_output=True, text=True, check=True).stdout.splitlines()


def test_need_fails_a_commit_whose_module_does_not_import(tmp_path):
    """A module the commit has but cannot import (a missing dependency of its own, a name
    its import lacks) fails the benchmark: a broken head is "failed", not "lacks" (skip)."""
    lines = _need_in_stand_in(
        tmp_path, {"reference": "import flashbench_no_such_helper\n", "other": "",
                   "inputs": "from flashbench.other import attention\n",
                   "numerics": "x = __import__('numpy').float_\n"},  # NumPy 2 removed it
        "for name in ('reference', 'inputs', 'numerics', 'no_such_module'):\n"
        "    try:\n        need(name, 'x')\n"
        "    except Exception as e:\n        print(type(e).__name__, e)\n")
    missing, unimportable, attribute, absent = lines
    assert missing == "ModuleNotFoundError No module named 'flashbench_no_such_helper'"
    assert unimportable.startswith("ImportError cannot import name 'attention' from "
                                   "'flashbench.other'")
    assert attribute.startswith("AttributeError") and "float_" in attribute
    assert absent.startswith("NotImplementedError this commit lacks flashbench.no_such_module")


def test_need_finds_an_old_commits_module_at_its_old_path(tmp_path):
    """An old commit's installed flashbench (here a stand-in with ``measure_grad.py`` and
    ``machine.py`` at the top, no ``measure`` or ``infra`` package) is still measured:
    ``need`` falls back to the old path by its own table (NEW_HOME), with no import hook."""
    found, skip = _need_in_stand_in(
        tmp_path, {"measure_grad": "def measure_gradients():\n    pass\n",
                   "machine": "def register():\n    pass\n"},
        "print(need('measure_grad', 'measure_gradients').__module__,"
        " need('machine', 'register').__module__)\n"
        "try:\n    need('measure_grad', 'no_such_function')\n"
        "except NotImplementedError as e:\n    print('skip', e)\n")
    assert found == "flashbench.measure_grad flashbench.machine"
    assert skip.startswith("skip this commit lacks flashbench.measure.backward or "
                           "flashbench.measure_grad")


def test_accuracy_grid_is_the_registry():
    """asv needs a literal grid (the same for every commit); it must equal the registries."""
    from flashbench.backends import BACKENDS
    from flashbench.inputs.precision import DTYPES

    assert bench_accuracy.DTYPES == [d for d in DTYPES if d != "fp64"]
    assert bench_accuracy.KERNELS == ["flash_model", *[b for b in BACKENDS if b != "reference"]]
    skipped = {(k, d) for k, d, *_ in TrackAccuracy.skip_params}
    assert skipped == {(k, d) for k in BACKENDS if k in bench_accuracy.KERNELS
                       for d in bench_accuracy.DTYPES if d not in BACKENDS[k].dtypes}


def test_the_literal_backend_table_is_the_registry():
    """common.BACKEND_DTYPES (what the suites' skip_params are built from without importing
    torch) is the registry's: every backend's dtypes; no backward anywhere for NO_BACKWARD,
    one only with a GPU for BACKWARD_ON_GPU_ONLY; bench_backends' backends take CPU tensors."""
    import torch

    from benchmarks import bench_backends, common
    from flashbench.backends import BACKENDS

    assert common.BACKEND_DTYPES == {n: b.dtypes for n, b in BACKENDS.items()
                                     if n != "reference"}
    assert common.NO_BACKWARD == tuple(n for n in common.BACKEND_DTYPES
                                       if not BACKENDS[n].differentiable
                                       and n not in common.BACKWARD_ON_GPU_ONLY)
    gpu = torch.cuda.is_available()
    assert all(BACKENDS[n].differentiable == gpu for n in common.BACKWARD_ON_GPU_ONLY)
    assert all("cpu" in BACKENDS[b].devices for b in bench_backends.BACKENDS)


def test_loading_every_suite_imports_no_torch():
    """asv imports every suite in each discovery, forkserver and review listing: none
    loads torch (~1.1 s of CPU each); a suite imports it in setup, where it measures."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import importlib, pathlib\n"
            "for p in sorted(pathlib.Path(sys.argv[1], 'benchmarks').glob('bench_*.py')):\n"
            "    importlib.import_module('benchmarks.' + p.stem)\n"
            "print(sorted(m for m in ('torch', 'triton') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code, str(ROOT)], capture_output=True, text=True,
                       cwd="/")
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr
    # asv's forkserver (argv "run_server") imports torch once, for the grid points it forks
    r = subprocess.run([sys.executable, "-c", "import sys; sys.argv[1:] = ['run_server']; "
                        "sys.path.insert(0, '.'); import benchmarks; "
                        "print('torch' in sys.modules)"], capture_output=True, text=True,
                       cwd=ROOT)
    assert r.returncode == 0 and r.stdout.strip() == "True", r.stdout + r.stderr


def test_accuracy_suite_reads_records_and_older_dicts():
    suite = TrackAccuracy()
    with pytest.raises(NotImplementedError, match="interpreter"):
        suite.setup({("triton", "fp16", True, "s"): "Triton interpreter: too slow"}, "triton",
                    "fp16", True, "s", "normal")
    suite.setup({("flash_model", "bf16", False, "s"): {"o": {"max_abs": 1e-3}}}, "flash_model",
                "bf16", False, "s", "normal")
    assert suite.track_o_max_abs(None, "flash_model", "bf16", False, "s", "normal") == 1e-3


def test_a_failed_kernel_fails_the_accuracy_track_instead_of_skipping():
    """A Failed record (the kernel raised, returned the wrong shape, NaN where the
    reference is finite) must make the track FAIL, naming the kernel and the reason;
    only Unavailable (no GPU, not applicable) skips."""
    from benchmarks.common import KernelFailed
    from flashbench.inputs import Shape
    from flashbench.measure.records import Case, Failed, Unavailable

    case = Case(Shape(1, 1, 16, 16, 16))
    results = {
        ("triton", "fp16", False, "s"): Failed(case, "triton", "fp16", "returned 3 non-finite "
                                               "value(s) (inf or NaN) in o"),
        ("sdpa-cudnn", "fp16", False, "s"): Unavailable(case, "sdpa-cudnn", "fp16",
                                                        "needs a CUDA GPU (no GPU here)"),
    }
    suite = TrackAccuracy()
    with pytest.raises(KernelFailed, match=r"triton fp16 \(s\) failed: returned 3 non-finite") \
            as info:
        suite.setup(results, "triton", "fp16", False, "s", "normal")
    assert not isinstance(info.value, NotImplementedError)  # asv: failed (null), not skipped
    with pytest.raises(NotImplementedError, match="needs a CUDA GPU"):
        suite.setup(results, "sdpa-cudnn", "fp16", False, "s", "normal")


def test_a_failed_kernel_from_measure_accuracy_reaches_the_track(monkeypatch):
    """End to end through setup_cache: a backend that returns NaN gives a Failed record,
    which asv's setup turns into a failure (it was a skip: the reason string was kept)."""
    import torch

    from benchmarks.common import KernelFailed
    from flashbench import backends

    nan = backends.BACKENDS["torch-naive"]
    broken = type(nan)(**{**nan.__dict__, "fn": lambda q, k, v, causal=False, scale=None:
                          torch.full_like(q, float("nan"))})
    monkeypatch.setitem(backends.BACKENDS, "torch-naive", broken)
    monkeypatch.setattr(bench_accuracy, "SHAPES", ["1x1x32x32x16"])
    monkeypatch.setattr(bench_accuracy, "KERNELS", ["torch-naive"])
    monkeypatch.setattr(bench_accuracy, "DTYPES", ["fp32"])
    results = TrackAccuracy().setup_cache()
    with pytest.raises(KernelFailed, match="torch-naive fp32.*non-finite"):
        TrackAccuracy().setup(results, "torch-naive", "fp32", False, "1x1x32x32x16", "normal")


def test_peak_memory_is_the_fresh_process_own_not_the_parents():
    """Under asv's forkserver the benchmark process holds the server's memory (~240 MB
    here). The child's ru_maxrss would include its parent's memory (Linux folds the
    pre-exec size in at exec); its VmHWM does not: with 300 MiB held here, the child's
    peak for a small streamed call stays at its own size (interpreter, numpy,
    flashbench: < 150 MiB)."""
    from benchmarks.bench_memory import PeakmemAttention

    held = bytearray(300 * 2**20)
    held[::4096] = b"\x01" * len(held[::4096])  # touch every page: resident
    suite = PeakmemAttention()
    suite.setup("1x1x1024x1024x64", "fp64", "streamed")
    peak = suite.track_peak_memory("1x1x1024x1024x64", "fp64", "streamed")
    assert 10 * 2**20 < peak < 150 * 2**20, peak
    assert PeakmemAttention.track_peak_memory.unit == "bytes"
    assert not [n for n in dir(PeakmemAttention) if n.startswith("peakmem_")]
    del held


def test_peak_memory_child_imports_no_torch():
    """The child imports benchmarks.calls (common, flashbench's reference and inputs),
    never torch (+200 MB). That one-shot's [N, N] scores show in its peak: the grid's own
    measurements, test_at_head_nothing_skips_but_for_a_missing_gpu[bench_memory]."""
    code = ("import sys; sys.path.append(sys.argv[1]); import benchmarks.calls as c; "
            "c.attention_call('1x1x64x64x16', 'streamed')(); "
            "c.backward_call('1x1x64x64x16', False, 'streamed')(); print('torch' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code, str(ROOT)], capture_output=True, text=True,
                       cwd="/")
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stdout + r.stderr


def test_peak_memory_child_runs_without_numpys_huge_page_advice_unless_the_user_says(
        monkeypatch):
    from benchmarks.common import peak_memory_env

    monkeypatch.delenv("NUMPY_MADVISE_HUGEPAGE", raising=False)
    assert peak_memory_env()["NUMPY_MADVISE_HUGEPAGE"] == "0"
    monkeypatch.setenv("NUMPY_MADVISE_HUGEPAGE", "1")
    assert peak_memory_env()["NUMPY_MADVISE_HUGEPAGE"] == "1"


def test_peak_memory_child_skips_or_fails_with_the_reason():
    from asv_runner.benchmarks.mark import SkipNotImplemented

    from benchmarks.common import peak_memory

    # called from a track (after setup), where asv_runner takes only its SkipNotImplemented
    # for a skip: a plain NotImplementedError there is recorded as failed (null)
    with pytest.raises(SkipNotImplemented, match="lacks flashbench.no_such_module"):
        peak_memory("benchmarks.common", "need", ["no_such_module"], 60)
    with pytest.raises(RuntimeError, match="(?s)exited 1.*ValueError: shape must be"):
        peak_memory("benchmarks.common", "shape_of", ["not-a-shape"], 60)


def test_an_lse_the_kernel_does_not_return_is_not_applicable():
    from asv_runner.benchmarks.mark import SkipNotImplemented

    from flashbench.inputs import Shape
    from flashbench.measure.records import LSE_NOT_RETURNED, Accuracy, Case

    stats = {"max_abs": 1e-7, "rmse": 1e-8, "rel_p99": 1e-6}
    rec = Accuracy(Case(Shape(1, 1, 16, 16, 16)), "mine:fn", "fp32", o=stats, lse=None,
                   o_standard=stats, lse_standard=stats, o_ratio=1.0, lse_ratio=None,
                   passed=True, lse_note=LSE_NOT_RETURNED)
    suite, args = TrackAccuracy(), ({}, "mine:fn", "fp32", False, "s", "normal")
    suite.rec = rec
    assert suite.track_o_max_abs(*args) == 1e-7
    for track in (suite.track_lse_max_abs, suite.track_lse_baseline_ratio):
        # raised in the track's body, not setup: asv skips it (NaN) only as its own class
        with pytest.raises(SkipNotImplemented, match="not returned by the kernel"):
            track(*args)
    older = {"o": stats}  # a commit whose records have no band ratio yet: skipped, not failed
    with pytest.raises(SkipNotImplemented, match="records no o_band_ratio"):
        suite.rec = older
        suite.track_o_band_ratio(*args)


@pytest.mark.parametrize("suite_name, fields", [
    ("TrackStandardModel", ("o", "lse")), ("TrackStandardBackward", ("dq", "dk", "dv"))])
def test_the_standard_models_own_error_is_tracked_and_a_worse_one_regresses(suite_name,
                                                                           fields):
    """A red team's head rounded fp32's standard O through fp16: every kernel's baseline
    ratio read "better" (0.8 -> 0.002), "OK", exit 0, while the yardstick of the 2x rule had
    become 350x worse. The standard model's (forward and backward) own error is now tracked,
    the figure the records' ratios divide by, and the review judges it: worse regresses."""
    from benchmarks import bench_accuracy, bench_grad
    from flashbench.history.suites import MAIN_METRIC, accuracy_metric
    from flashbench.measure import Case, measure_accuracy
    from flashbench.measure.backward import measure_gradients
    from flashbench.review.rules import row_kind, value_row

    module, measure = ((bench_accuracy, measure_accuracy) if suite_name == "TrackStandardModel"
                       else (bench_grad, measure_gradients))
    suite = getattr(module, suite_name)()
    results, shape = suite.setup_cache(), module.SHAPES[0]
    records = measure(Case(shape_of(shape), "normal", True), ["fp32", "bf16"], ["flash_model"])
    for dtype, rec in zip(("fp32", "bf16"), records, strict=True):
        suite.setup(results, dtype, True, shape)
        for field in fields:
            track = getattr(suite, f"track_standard_{field}_max_abs")
            # the yardstick of every kernel's ratio at that dtype, as the records hold it
            assert track(results, dtype, True, shape) == getattr(rec, f"{field}_standard")[
                "max_abs"]
            name = f"{module.__name__.split('.')[-1]}.{suite_name}.{track.__name__}"
            # an accuracy track of its own metric: not the kernels' main one, max |O - O_fp64|
            assert accuracy_metric(name) == f"standard_{field}_max_abs" != MAIN_METRIC
            kind = row_kind(name, "track", track.unit)
            row = value_row(kind, name, f"({dtype}, True)", track.unit, 2.5e-7, 8.8e-5, [],
                            0.1, 1.05)
            assert kind == "accuracy" and row.regression and row.verdict == "worse", row
    with pytest.raises(NotImplementedError, match="no fp8_e4m3fnuz standard model"):
        suite.setup(results, "fp8_e4m3fnuz", True, shape)


def test_backend_timings_resolve_their_backend_through_common(monkeypatch):
    """Finding 16: bench_backends (and bench_gpu) use common.timed_backend, written once."""
    from benchmarks import bench_backends, bench_gpu, common

    assert bench_backends.timed_backend is common.timed_backend is bench_gpu.timed_backend
    with pytest.raises(NotImplementedError, match="lacks backend 'no-such'"):
        bench_backends.TimeCPUBackend().setup("no-such", "fp32", "1x1x16x16x16", False)
    assert common.timed_backend("torch-naive").timed_fn is not None


def test_gpu_suite_skips_without_a_gpu():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the suite runs instead")
    with pytest.raises(NotImplementedError, match="GPU"):
        TimeAttentionGPU().setup("triton", "bf16", "4x16x4096x4096x128", False, "fwd")


def _setup_every_benchmark(module: str | None = None):
    """Set up every benchmark (of suite file ``module``, e.g. "bench_gpu", where given) at
    every grid point as asv would (setup_cache once per class, asv's skip_params
    honoured), and call every track, as asv would; returns ({benchmark[params]: skip
    reason, or "FAILED: ..." for a track that raised}, how many benchmarks, {track[params]:
    the value it returned})."""
    import itertools

    from asv_runner.benchmarks._base import get_setup_cache_key
    from asv_runner.discovery import disc_benchmarks

    caches, skips, seen, values = {}, {}, 0, {}
    for bench in disc_benchmarks(str(ROOT / "benchmarks")):
        if module is not None and bench.name.split(".")[0] != module:
            continue
        seen += 1
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
                continue
            if bench.name.rsplit(".", 1)[-1].startswith("track_"):  # cheap: read a record
                try:  # asv records an exception here as a failure (only setup may skip)
                    values[f"{bench.name}{list(combo)}"] = bench.func(*bench._build_params())
                except Exception as exc:
                    skips[f"{bench.name}{list(combo)}"] = f"FAILED: {exc!r}"
    return skips, seen, values


def _peaks_hold_square_matrices(matrices: float):
    """A check that each one-shot call's peak (N >= 4096) exceeds its streamed twin's by
    ``matrices`` [N, N] float64 matrices (8 N^2 bytes), which the streamed call never holds."""
    def check(values, suite):
        found = {key: v for key, v in values.items() if ".track_peak_memory" in key}
        assert found, f"no peak memory track returned in {suite}"
        big = [key for key in found if "'one-shot'" in key
               and int(key.split("'1x1x")[1].split("x")[0]) >= 4096]
        assert big, f"no one-shot peak at N >= 4096 in {suite}"
        for key in big:
            n = int(key.split("'1x1x")[1].split("x")[0])
            one, streamed = found[key], found[key.replace("'one-shot'", "'streamed'")]
            assert one - streamed > matrices * 8 * n * n, (key, one, streamed)
    return check


# What a suite's returned values must show beside "nothing skips", read from the same run:
# the forward's scores (128 MiB at N = 4096: 0.8 of it, the 100 MiB this file asked of a
# separate 4096 run before); the backward's S, P and dS, partly in place (more than one of
# them: 1.5, where tests/test_bench_grad.py asked > 1 of a separate run at N = 2048).
VALUE_CHECKS = {"bench_memory": _peaks_hold_square_matrices(0.8),
                "bench_grad": _peaks_hold_square_matrices(1.5)}

SUITES = sorted(p.stem for p in (ROOT / "benchmarks").glob("bench_*.py"))


@pytest.mark.slow
@pytest.mark.parametrize("suite", SUITES)  # one suite file a test: parallel workers share them
def test_at_head_nothing_skips_but_for_a_missing_gpu(suite):
    skips, seen, values = _setup_every_benchmark(suite)
    assert seen, f"no benchmark found in benchmarks/{suite}.py"
    wrong = {name: why for name, why in skips.items() if "GPU" not in why}
    assert not wrong, f"{len(wrong)} benchmark(s) skip or fail at HEAD: {wrong}"
    if suite in VALUE_CHECKS:
        VALUE_CHECKS[suite](values, suite)


def test_every_cached_suite_has_a_setup_cache_of_its_own():
    """asv keys a setup_cache by its function's file and line: two suites inheriting one
    share one cache, whichever ran first (the standard backward's tracks read the forward's
    cache: every value n/a, an asv run of 2026-12-06 before any result was committed)."""
    import importlib
    import inspect

    shared = []
    for suite in SUITES:
        module = importlib.import_module(f"benchmarks.{suite}")
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and hasattr(cls, "setup_cache") \
                    and "setup_cache" not in vars(cls):
                shared.append(f"{suite}.{name}")
    assert not shared, f"suites whose setup_cache is inherited: {shared}"


def test_the_standard_suites_version_covers_their_shared_computation(monkeypatch):
    """asv's version hashes a track's, setup's and setup_cache's own source; the standard
    models' computation lives in common.TrackStandard.errors_of_standard, so an edit there
    started no new series and was no changed benchmark to the review (a fresh-eyes review).
    Their version now hashes every method they run."""
    from benchmarks.common import TrackStandard

    def suite():
        def track_x(self, results, dtype, causal, shape):
            return self.error("o")

        return type("Suite", (TrackStandard,), {"params": ([], [], []), "track_x": track_x})

    before = suite().version

    def errors_of_standard(self):  # another computation
        return {}

    monkeypatch.setattr(TrackStandard, "errors_of_standard", errors_of_standard)
    assert suite().version != before
