"""The decode asv suites: their grid is the registry, they run at HEAD, a failure FAILS."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import bench_decode as bd  # noqa: E402
from benchmarks.common import KernelFailed  # noqa: E402
from flashbench.backends.decode import DECODE_BACKENDS  # noqa: E402
from flashbench.history.suites import accuracy_metric, rule_limit  # noqa: E402
from flashbench.measure.decode import MODEL  # noqa: E402
from flashbench.measure.forward import Failed  # noqa: E402


def test_decode_grid_is_the_registry():
    assert bd.KERNELS == [MODEL, *DECODE_BACKENDS]
    for spec in (*bd.CASES, bd.MERGE_CASE, *bd.TIME_CASES):
        assert bd._case(spec).spec() == spec


def test_history_reads_the_decode_tracks_as_accuracy_with_their_rule():
    name = "bench_decode.TrackDecodeAccuracy.track_o_baseline_ratio"
    assert accuracy_metric(name) == "o_baseline_ratio" and rule_limit("o_baseline_ratio") == 2
    assert accuracy_metric("bench_decode.TrackDecodeMerge.track_lse_baseline_ratio")


def test_merge_track_prices_a_bf16_lse():
    suite = bd.TrackDecodeMerge()
    results = suite.setup_cache()
    suite.setup(results, "fp16", "fp32", "fp32")
    assert suite.track_o_baseline_ratio(results, "fp16", "fp32", "fp32") <= 2
    suite.setup(results, "fp16", "fp32", "bf16")
    assert suite.track_lse_baseline_ratio(results, "fp16", "fp32", "bf16") > 2


def test_a_failed_decode_kernel_fails_its_track():
    case = bd._case(bd.CASES[0])
    results = {("triton", "fp16", bd.CASES[0]): Failed(case, "triton", "fp16", "raised X")}
    with pytest.raises(KernelFailed, match="triton fp16 .* raised X"):
        bd.TrackDecodeAccuracy().setup(results, "triton", "fp16", bd.CASES[0])


def test_timings_set_up_and_run():
    t = bd.TimeDecodeCPU()
    for backend in t.params[0]:
        t.setup(backend, bd.TIME_CASES[1])
        t.time_decode(backend, bd.TIME_CASES[1])
    m = bd.TimeMergeStates()
    m.setup()
    m.time_merge_states()
