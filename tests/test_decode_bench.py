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
from flashbench.measure.records import Failed  # noqa: E402


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
    """Every backend's timed call runs and its outputs check (teardown). On a small case of
    the same structure as TIME_CASES (grouped heads, several new tokens, ragged paged
    cache): whether a call runs and is right does not depend on the cache's size; the
    set-up of every real grid point is test_benchmarks' (test_at_head_...[bench_decode])."""
    case = "2x4/2x2x32:300,77:p16"
    assert bd._case(case).spec() == case
    t = bd.TimeDecodeCPU()
    for backend in t.params[0]:
        t.setup(backend, case)
        t.time_decode(backend, case)
        t.teardown(backend, case)
    m = bd.TimeMergeStates()
    m.setup()
    m.time_merge_states()
    m.teardown()


def _gpu_decode():
    from tools.gpu import decode

    return decode


def test_gpu_decode_pieces_on_cpu():
    """What the GPU run does besides timing: inputs, the timed output's check, targets."""
    import torch

    from flashbench.kernels.triton_decode import triton_decode
    from flashbench.measure.decode import DecodeCase, decode_bytes

    g = _gpu_decode()
    case = DecodeCase(2, 4, 2, 1, 16, (200, 200), 64)
    inputs = g.cache_inputs(case, "cpu")
    o = triton_decode(*inputs, causal=True)[0]
    assert g.check_sequence0(o, inputs, case)["passed"]
    assert not g.check_sequence0(o + 0.05, inputs, case)["passed"]
    assert decode_bytes(case, 2) == 2 * (400 * 2 * 2 * 16 + 2 * 2 * 1 * 4 * 16)
    rows = [{"case": "a", "backend": "triton", "gbs": 3900, "pct_copy": 82.0, "cache_len": 32768},
            {"case": "a", "backend": "torch-sdpa", "gbs": 1000},
            {"case": "b", "backend": "triton", "gbs": 3000, "pct_copy": 63.0, "cache_len": 32768},
            {"case": "c", "backend": "triton", "skipped": "timed output failed its check"}]
    met = {r["case"]: r["met"] for r in g.targets(rows)}
    assert met == {"a": True, "b": False, "c": False}
    assert all(c.lens[0] * c.B <= 64 * 32768 for c in g.timed_cases(False))
    with torch.no_grad():
        assert g.cache_inputs(case, "meta")[4].shape == (2, 4)


def test_gpu_decode_times_fresh_caches_and_checks_every_call_on_cpu():
    """gpu_decode.guarded_decode with CPU tensors: an honest decode passes with every call
    checked and sequences beyond 0 compared; one cached on q's address fails as stale or
    wrong. Before this change one cache was timed and only sequence 0 of the first call
    checked."""
    import dataclasses

    from flashbench.backends.decode import get_decode_backend
    from flashbench.measure.decode import DecodeCase
    from tools.gpu import checks as g

    case = DecodeCase(4, 4, 2, 1, 16, (200, 90, 64, 130), 64)
    b = get_decode_backend("torch-naive")
    samples, check = g.guarded_decode(b, case, seed=11, device="cpu", samples=9)
    assert check["passed"], check
    assert len(samples) == 9 and check["calls"] == 9 and check["sequences_checked"] >= 6
    cache, fn = {}, b.timed_fn

    def cached(*x, **kw):
        if x[0].data_ptr() not in cache:
            cache[x[0].data_ptr()] = fn(*x, **kw)
        return cache[x[0].data_ptr()]

    cheat = dataclasses.replace(b, timed=cached)
    _, check = g.guarded_decode(cheat, case, seed=11, device="cpu", samples=9)
    assert not check["passed"] and set(check["failures"]) & {"stale", "wrong"}, check


def test_gpu_decode_tells_apart_two_caches_of_a_large_bf16_batch():
    """Two bf16 decode outputs of one large shape sum to within 8 eps of their |sum| of each
    other: the stale rule compares another cache's checksum bit for bit (with the tolerance,
    an honest decode at the GPU run's B = 16, H = 32 failed as stale)."""
    from flashbench.backends.decode import get_decode_backend
    from flashbench.measure.decode import DecodeCase
    from tools.gpu import checks as g

    case = DecodeCase(16, 32, 8, 1, 128, (64,) * 16, 64)
    _, check = g.guarded_decode(get_decode_backend("torch-naive"), case, seed=3, device="cpu",
                                samples=6)
    assert check["passed"], check


def test_the_absorbed_mla_rows_time_through_the_guard(monkeypatch):
    """gpu_decode.run_mla: each timed call on a cache from a pool, every output checked (2
    random sequences of each new cache against float64), with the Triton decode stood in by
    torch's naive decode on CPU tensors; one cached on q's address gets no time. Before, the
    MLA rows checked sequence 0 of the first call and timed 20 calls on one cache."""
    import functools
    import types

    import torch

    from flashbench.kernels.torch_decode import naive_decode
    from tools.gpu import checks
    from tools.gpu import decode as gd

    def decode(q, k, v, lens, table, causal=True, check=False, dv=512, memo=None):
        # a correct kernel accumulates in fp32 and rounds once: torch's naive decode in bf16
        # itself (P rounded before P @ V) failed the baseline rule on 4 of 25 pools' seeds
        o = naive_decode(q.float(), k.float(), k[..., :dv].float(), lens, table,
                         causal).to(q.dtype)
        return o if memo is None else memo.setdefault(q.data_ptr(), o)

    def decode_forward(q, k, v, lens, table, causal=True, dv=512):
        return decode(q, k, v, lens, table, causal, dv=dv), None, types.SimpleNamespace(
            num_splits=1)

    mla_inputs = gd.mla_inputs
    monkeypatch.setattr(gd, "mla_cases", lambda quick: [(2, 128)])
    monkeypatch.setattr(gd, "mla_inputs", lambda B, n, device, seed=0: mla_inputs(B, n, "cpu",
                                                                                  seed))
    monkeypatch.setattr(gd.triton_decode, "decode_forward", decode_forward)
    monkeypatch.setattr(gd.triton_decode, "triton_decode", decode)
    monkeypatch.setattr(checks, "guarded_decode", functools.partial(
        checks.guarded_decode, device="cpu", samples=6))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    row, = gd.run_mla(True, 1.0, lambda _: None)
    assert row["check"]["passed"] and row["check"]["sequences_checked"] >= 2 and "gbs" in row
    monkeypatch.setattr(gd.triton_decode, "triton_decode", functools.partial(decode, memo={}))
    row, = gd.run_mla(True, 1.0, lambda _: None)
    assert "gbs" not in row and "not counted" in row["skipped"], row
