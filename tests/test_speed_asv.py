"""asv's time_ suites of kernels on fresh inputs, outputs checked in teardown (issue 35):
a kernel that caches on an address, id() or a fingerprint fails the benchmark. Before this
change the suites timed one set of inputs and never read an output: these caches passed."""

import numpy as np
import pytest

from benchmarks.bench_backends import TimeCPUBackend
from benchmarks.bench_decode import TimeDecodeCPU, TimeMergeStates
from benchmarks.bench_grad import TimeBackward
from benchmarks.bench_reference import TimeAttention, TimeModels, TimeSoftmax
from benchmarks.bench_variants import TimeVariantReference
from benchmarks.common import FreshCalls, KernelFailed, need


def _memo(fn, key):
    cache = {}

    def cached(q, k, v, **kw):
        if key(q) not in cache:
            cache[key(q)] = fn(q, k, v, **kw)
        return cache[key(q)]

    return cached


def test_every_call_sees_new_contents_and_an_honest_kernel_passes():
    call = FreshCalls("1x2x64x64x16", need("reference", "online_attention"), causal=True)
    seen = []
    inner = call.fn
    call.fn = lambda q, k, v, **kw: seen.append((id(q), q.copy())) or inner(q, k, v, **kw)
    for _ in range(6):
        call()
    assert all(a[0] != b[0] for a, b in zip(seen, seen[1:], strict=False))  # never twice in a row
    assert len({x.tobytes() for _, x in seen}) == 6  # contents never repeat
    call.verify()


@pytest.mark.parametrize("key", [id, lambda q: q.ctypes.data, lambda q: q[..., :2, :].tobytes()],
                         ids=["id", "pointer", "fingerprint"])
def test_a_cache_fails_the_reference_suite_in_teardown(key):
    args = ("1x1x256x256x64", "fp64", True, "streamed")
    suite = TimeAttention()
    suite.setup(*args)
    suite.call.fn = _memo(suite.call.fn, key)
    for _ in range(4):
        suite.time_attention(*args)
    with pytest.raises(KernelFailed, match="stale or wrong"):
        suite.teardown(*args)


def test_the_torch_suite_checks_its_outputs_too():
    args = ("torch-sdpa", "fp32", "1x4/2x128x128x32", False)
    suite = TimeCPUBackend()
    suite.setup(*args)
    for _ in range(3):
        suite.time_backend(*args)
    suite.teardown(*args)  # honest: passes
    suite.setup(*args)
    suite.call.fn = _memo(suite.call.fn, lambda q: q.data_ptr())
    for _ in range(3):
        suite.time_backend(*args)
    with pytest.raises(KernelFailed, match="stale or wrong"):
        suite.teardown(*args)


def _id_memo(fn):
    """A cache keyed on the first argument's id(): the same arrays return the first result."""
    cache = {}

    def cached(*args, **kw):
        if id(args[0]) not in cache:
            cache[id(args[0])] = fn(*args, **kw)
        return cache[id(args[0])]

    return cached


SUITES = [  # (suite class, its time_ method, small parameters): every other kernel time_ suite
    (TimeSoftmax, "time_softmax", (256, 1024, "fp64", "online")),
    (TimeModels, "time_model", ("1x2x128x128x32", "standard_model", "fp32")),
    (TimeBackward, "time_backward", ("1x1x128x128x32", "fp64", True, "streamed", "bwd")),
    (TimeBackward, "time_backward", ("1x1x128x128x32", "fp64", False, "one-shot", "bwd")),
    (TimeVariantReference, "time_attention", ("1x1x512x512x32", "fp64", "causal window=(256,0)",
                                              "streamed")),
    (TimeVariantReference, "time_attention", ("1x1x256x256x32", "fp64", "sinks", "one-shot")),
    (TimeDecodeCPU, "time_decode", ("reference-split8", "2x4/2x2x32:300,77:p16")),
    (TimeDecodeCPU, "time_decode", ("torch-sdpa", "2x4/2x2x32:300,77:p16")),
    (TimeMergeStates, "time_merge_states", ()),
]


@pytest.mark.parametrize(("cls", "method", "args"), SUITES,
                         ids=[f"{c.__name__}-{a[:1]}" for c, _, a in SUITES])
def test_every_kernel_suite_passes_an_honest_call_and_fails_a_cache(cls, method, args):
    """Failed before this change: these suites timed one set of inputs and had no teardown."""
    suite = cls()
    suite.setup(*args)
    for _ in range(3):
        getattr(suite, method)(*args)
    suite.teardown(*args)  # honest: passes
    suite.setup(*args)
    suite.call.fn = _id_memo(suite.call.fn)
    for _ in range(4):
        getattr(suite, method)(*args)
    with pytest.raises(KernelFailed, match="stale or wrong"):
        suite.teardown(*args)


ROWS_READ = {  # the inputs each output row is computed from, one row of this matrix each
    TimeSoftmax: lambda x: x,
    TimeMergeStates: lambda o, lse: np.concatenate(
        [np.moveaxis(o, 0, -2).reshape(-1, o.shape[0] * o.shape[-1]),
         np.moveaxis(lse, 0, -1).reshape(-1, lse.shape[0])], axis=1),
}


@pytest.mark.parametrize("cls", list(ROWS_READ), ids=lambda c: c.__name__)
def test_no_output_row_of_a_call_could_come_from_a_row_cache(cls):
    """TimeSoftmax and TimeMergeStates rewrote one row of their inputs a call: a cache keyed
    on the arrays' id() that kept its last inputs and outputs and recomputed only the rows
    that changed was right, and faster (found 2026-12-05). Now every row an output row
    reads differs from the same slot's previous call."""
    args = next(a for c, _, a in SUITES if c is cls)
    method = next(m for c, m, _ in SUITES if c is cls)
    suite = cls()
    suite.setup(*args)
    last, reusable = {}, []
    inner = suite.call.fn

    def watching(*xs, **kw):
        rows = ROWS_READ[cls](*xs).copy()
        if id(xs[0]) in last:
            reusable.append(int((rows == last[id(xs[0])]).all(axis=1).sum()))
        last[id(xs[0])] = rows
        return inner(*xs, **kw)

    suite.call.fn = watching
    for _ in range(6):
        getattr(suite, method)(*args)
    suite.teardown(*args)
    assert len(reusable) == 4 and reusable == [0] * 4, reusable


def test_a_wrong_variant_fails_the_variant_suite():
    """The check applies the variant: the window ignored (plain causal) is caught. Query rows
    below 256 see the same keys with or without the window, and each call's checked row is
    drawn at random: 3 calls missed the window one run in 8 (a flaky failure), 24 miss it
    with probability 2**-24."""
    args = ("1x1x512x512x32", "fp64", "causal window=(256,0)", "one-shot")
    suite = TimeVariantReference()
    suite.setup(*args)
    inner = suite.call.fn
    suite.call.fn = lambda q, k, v, **kw: inner(q, k, v, causal=True)
    for _ in range(24):
        suite.time_attention(*args)
    with pytest.raises(KernelFailed, match="stale or wrong"):
        suite.teardown(*args)


@pytest.mark.parametrize("direction", ["fwd", "bwd"])
def test_the_gpu_suites_pool_and_check_run_on_cpu_tensors(direction):
    """bench_gpu.fresh_pass (TimeAttentionGPU, TimeHeadDimGPU) with CPU tensors: an honest
    backend passes, a cache keyed on the tensor's address fails. Before this change the GPU
    suites timed one set of inputs and never read an output."""
    from benchmarks.bench_gpu import fresh_pass
    from benchmarks.common import timed_backend

    b = timed_backend("torch-sdpa")
    args = ("1x4/2x128x128x32", "fp32", True, direction)
    call = fresh_pass(b, *args, device="cpu")
    for _ in range(3):
        call()
    call.verify()
    call = fresh_pass(b, *args, device="cpu")
    call.fn = _memo_ptr(call.fn)
    for _ in range(4):
        call()
    with pytest.raises(KernelFailed, match="stale or wrong"):
        call.verify()


@pytest.mark.parametrize("direction", ["fwd", "bwd"])
def test_a_gpu_suites_calls_checked_sample_after_sample_pass_an_honest_kernel(direction):
    """A GPU suite's FreshCalls lives on across asv's samples (``prepared``: built and warmed
    once, verified in each sample's teardown). The rows earlier samples wrote stay in the
    inputs: the replay starts from them, not from the setup's contents (a row checked beside
    the new one that an earlier sample had written was replayed wrong, a correct kernel
    failed). A short N makes the checked rows hit earlier-written ones."""
    from benchmarks.bench_gpu import fresh_pass
    from benchmarks.common import timed_backend

    call = fresh_pass(timed_backend("torch-sdpa"), "1x2x8x16", "fp32", False, direction,
                      device="cpu")
    call()  # the warm-up, as prepared() makes it
    call.forget()
    for _ in range(6):  # six samples of three calls, each verified in its teardown
        for _ in range(3):
            call()
        call.verify()


def _memo_ptr(fn):
    cache = {}

    def cached(*args, **kw):
        key = args[0].data_ptr()
        if key not in cache:
            cache[key] = fn(*args, **kw)
        return cache[key]

    return cached


def test_the_fp8_suite_checks_against_the_dequantised_inputs():
    """bench_gpu.fresh_fp8 with a stand-in forward (float32 attention of the dequantised
    e4m3 inputs, on CPU): passes; the same forward cached on the address fails."""
    import torch

    from benchmarks.bench_gpu import fresh_fp8

    def forward(q8, k8, v8, qd, kd, vd, causal):
        q, k, v = (x.float() * d for x, d in ((q8, qd), (k8, kd), (v8, vd)))
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal), None

    def quantize(x):
        d = x.float().abs().amax() / 448
        return (x.float() / d).to(torch.float8_e4m3fn), d

    for memo in (False, True):
        call = fresh_fp8(forward, quantize, lambda v: v, "1x2x128x128x32", True, device="cpu")
        if memo:
            call.fn = _memo_ptr(call.fn)
        for _ in range(4):
            call()
        if memo:
            with pytest.raises(KernelFailed, match="stale or wrong"):
                call.verify()
        else:
            call.verify()


def test_a_skipped_setup_stays_a_skip_in_teardown(monkeypatch):
    """asv runs teardown after a setup that raised NotImplementedError (an old commit): the
    teardown must not fail on the call setup never made."""
    import benchmarks.bench_reference as br

    def missing(*names):
        raise NotImplementedError("this commit lacks it")

    monkeypatch.setattr(br, "need", lambda *a: missing())
    suite = TimeSoftmax()
    with pytest.raises(NotImplementedError):
        suite.setup(256, 1024, "fp64", "online")
    suite.teardown(256, 1024, "fp64", "online")  # no AttributeError


def test_the_attention_rows_are_checked_against_an_independent_float64_computation(monkeypatch):
    """A commit whose reference.attention is wrong AND timed by TimeAttention: the rows are
    checked by scipy's softmax in benchmarks/common, not by the thing timed. Before this
    change the check called the commit's own reference.attention and passed."""
    import flashbench.reference as reference

    right = reference.attention

    def broken(q, k, v, **kw):  # scores off by a factor: a wrong softmax temperature
        return right(q * 1.5, k, v, **kw)

    monkeypatch.setattr(reference, "attention", broken)
    args = ("1x2x64x64x16", "fp64", True, "one-shot")
    suite = TimeAttention()
    suite.setup(*args)
    for _ in range(3):
        suite.time_attention(*args)
    with pytest.raises(KernelFailed, match="stale or wrong"):
        suite.teardown(*args)
    monkeypatch.setattr(reference, "attention", right)
    suite.setup(*args)
    for _ in range(3):
        suite.time_attention(*args)
    suite.teardown(*args)  # the commit's reference, right: passes


class _LazyRows:
    """A lazy output: each row is computed when it is read (after the suite's clock)."""

    def __init__(self, q, k, v, causal):
        self.q, self.k, self.v, self.causal = q.copy(), k.copy(), v.copy(), causal
        self.shape = (*q.shape[:-1], v.shape[-1])

    def __getitem__(self, index):
        from benchmarks.common import attention_row

        rows = index[-2]
        return np.stack([attention_row((self.q, self.k, self.v), int(r), causal=self.causal)
                         for r in rows], axis=-2)


def test_a_lazy_output_is_faster_than_the_machine_and_fails_in_teardown():
    """Right on every row the suite reads, computed when read: the row checks pass, and the
    call itself took microseconds for work this machine's own matmul needs milliseconds for
    (benchmarks/floor.py). An honest kernel on the same grid point passes."""
    args = ("1x2x512x512x64", "fp64", True, "one-shot")
    suite = TimeAttention()
    suite.setup(*args)
    assert suite.call.work is not None  # judged: an attention shape on CPU arrays
    for _ in range(3):
        suite.time_attention(*args)
    suite.teardown(*args)  # honest
    suite.setup(*args)
    suite.call.fn = lambda q, k, v, causal: _LazyRows(q, k, v, causal)
    for _ in range(3):
        suite.time_attention(*args)
    with pytest.raises(KernelFailed, match="not exactly a numpy array"):  # (2026-12-07:
        suite.teardown(*args)  # before, "faster than this machine can go": the floor's)


def test_the_floor_judges_what_it_can_bound_and_nothing_else():
    """The floor's work: the forward's FLOPs over the visible pairs and q, k, v read once;
    nothing for a window (it skips keys), a case that is not an attention shape (decode,
    merge, softmax) or arrays not laid out as the shape says."""
    from benchmarks import floor

    q, k, v = (np.zeros((1, 2, 4, 8)) for _ in range(3))
    flops, nbytes = floor.work("1x2x4x4x8", (q, k, v), {"causal": False})
    assert flops == 2 * 2 * (8 + 8) * 16 and nbytes == 3 * q.nbytes
    assert floor.work("1x2x4x4x8", (q, k, v), {"causal": True})[0] == 2 * 2 * 16 * 10
    assert floor.work("1x2x4x4x8", (q, k, v), {"causal": True, "window": (1, 0)}) is None
    assert floor.work("", (q, k, v), {}) is None
    assert floor.work("2x4/2x2x32:300,77:p16", (q, k, v), {}) is None
    assert floor.work("1x2x8x8x8", (q, k, v), {}) is None  # q holds 4 rows, not 8
    assert floor.too_fast(1.0, flops, nbytes) is None
    why = floor.too_fast(1e-12, 1e9, 1e6)
    assert why.startswith("its fastest call took 1e-12 s, under 0.5 x")
    assert (512, None, "cpu") in floor._ROOFS  # once a process; the confirmation anew


def test_the_device_floor_is_measured_around_a_synchronised_device(monkeypatch):
    """The GPU suites' floor (a device's bf16 and fp16 matmuls, a device copy, host-clocked
    around a synchronisation), run here on torch's CPU device, where the synchronisation is
    nothing: positive, finite, once a process; fp8 arguments halve the floor (x 2 peak)."""
    import math

    import torch

    from benchmarks import floor

    peak, bandwidth = floor._device_roofline(256, "cpu")
    assert math.isfinite(peak) and peak > 0 and math.isfinite(bandwidth) and bandwidth > 0
    measured = []
    monkeypatch.setattr(floor, "_measure", lambda n, half, device: measured.append(n) or (1e12, 1e11))
    assert floor.too_fast(0.6e-3, 1e9, 0, device="meta-test") is None  # 1 ms floor, 0.6 ms
    assert floor.too_fast(0.4e-3, 1e9, 0, device="meta-test").startswith("its fastest call")
    fp8 = torch.float8_e4m3fn
    assert floor.too_fast(0.4e-3, 1e9, 0, dtype=fp8, device="meta-test") is None  # 0.5 ms
    assert "x 2 for fp8" in floor.too_fast(0.2e-3, 1e9, 0, dtype=fp8, device="meta-test")
    assert measured == [4096, 8192, 8192]  # the small peak once, each confirmation anew


@pytest.mark.parametrize("variant", ["softcap=30", "causal window=(256,0)", "sinks"])
def test_a_variant_reference_that_drops_its_variant_fails_its_own_suite(monkeypatch, variant):
    """The rows a variant suite checks are computed by the suite (benchmarks.common.
    attention_row), not by the commit's reference.attention it times: a one-shot reference
    that ignored the softcap passed its own check until 2026-12-06 (a red team)."""
    from flashbench import reference

    real = reference.attention

    def dropped(q, k, v, causal=False, window=(-1, -1), softcap=None, sinks=None, **kw):
        return real(q * 5.0 if softcap else q, k, v, causal=causal and window == (-1, -1),
                    softcap=None, sinks=None, **kw)  # the variant left out

    args = ("1x1x512x512x32", "fp64", variant, "one-shot")
    suite = TimeVariantReference()
    suite.setup(*args)
    suite.time_attention(*args)
    suite.teardown(*args)  # the real reference passes the suite's own rows
    monkeypatch.setattr(reference, "attention", dropped)
    suite.setup(*args)
    suite.time_attention(*args)
    with pytest.raises(KernelFailed, match="stale or wrong"):
        suite.teardown(*args)


def test_a_kernel_that_computes_only_the_rows_its_caller_will_check_fails():
    """A red team's kernel (2026-12-06) read the rows a call would check from its caller's
    frame (the new row and the extra rows drawn in setup) and computed those alone: 28 ms a
    call against 57 honest, verify passed. The extra rows are drawn once the call returns."""
    import sys

    reference = need("reference", "online_attention")

    def cheat(q, k, v, **kw):
        fc = sys._getframe(1).f_locals["self"]  # FreshCalls.__call__
        rows = {int(fc.rows[(fc.i - 1) % fc.BANK])}  # the new row: known before the call
        for name in ("extra", "checked", "rows_to_check"):  # and any drawn ahead
            rows |= {int(x) for x in np.ravel(getattr(fc, name, []))}
        o = np.zeros(q.shape[:-1] + (v.shape[-1],))
        idx = sorted(rows)
        o[..., idx, :] = reference(q[..., idx, :], k, v, **kw)[0]
        return o

    honest = FreshCalls("1x2x128x128x16", reference)
    for _ in range(4):
        honest()
    honest.verify()
    call = FreshCalls("1x2x128x128x16", cheat)
    for _ in range(4):
        call()
    with pytest.raises(KernelFailed, match="stale or wrong"):
        call.verify()


def test_a_lazy_output_fails_verify_by_name():
    """A red team's head (2026-12-07) returned an ndarray subclass that computed a row only
    when it was read: the rows FreshCalls checked were right, the call did a fraction of
    the work, and the review read it "faster" (0.15x, exit 0). An output that is not
    exactly a numpy array or torch tensor now FAILs verify; a tuple's items likewise."""
    import torch

    reference = need("reference", "attention")

    class Lazy(np.ndarray):
        pass

    class Box(tuple):  # a tuple whose iteration hides its lazy item (a review's)
        def __iter__(self):
            return iter(())

    for fn in (lambda q, k, v: reference(q, k, v)[0].view(Lazy),
               lambda q, k, v: (reference(q, k, v)[0], torch.nn.Parameter(torch.zeros(1))),
               lambda q, k, v: Box((reference(q, k, v)[0].view(Lazy),))):
        call = FreshCalls("1x2x64x64x16", fn)
        for _ in range(3):
            call()
        with pytest.raises(KernelFailed, match="not exactly a numpy array or torch tensor"):
            call.verify()
    honest = FreshCalls("1x2x64x64x16", lambda q, k, v: reference(q, k, v))  # (o, lse)
    for _ in range(3):
        honest()
    honest.verify()
