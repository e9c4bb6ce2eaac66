"""The gallery of tricks (issue 35): each way a kernel can look faster than it is FAILs by
name under the guarded timer, in this process and under ``flashbench speed --backend`` (its
worker process), with a correct kernel's PASS unchanged beside it. On main before this
change nothing timed a user's kernel, and every suite timed the same inputs unchecked: each
of these passed (or was never looked at)."""

import json
import sys
import textwrap
import time

import pytest
import torch

from flashbench.backends import Backend
from flashbench.cli import main
from flashbench.inputs import Shape
from flashbench.measure.speed import (
    FLOOR_MARGIN,
    Roofline,
    SpeedCase,
    measure_roofline,
    row_from,
)
from flashbench.measure.speedrun import time_backend
from flashbench.timed import guard

TRICKS = textwrap.dedent('''
    import gc
    import threading
    import time

    import torch

    def _attn(q, k, v, causal=False, scale=None):
        s = (q.double() @ k.double().transpose(-1, -2)) * q.shape[-1] ** -0.5
        return (torch.softmax(s, -1) @ v.double()).to(q.dtype)

    def good(q, k, v, causal=False, scale=None):
        return _attn(q, k, v)

    def good_threads(q, k, v, causal=False, scale=None):
        """Correct: the heads computed by a thread pool that is shut down (joined) before
        it returns (its threads may stay listed in /proc a moment longer)."""
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(2) as pool:
            heads = list(pool.map(lambda h: _attn(q[:, h], k[:, h], v[:, h]),
                                  range(q.shape[1])))
        return torch.stack(heads, 1)

    _PTR, _ID, _HASH = {}, {}, {}

    def memo_pointer(q, k, v, causal=False, scale=None):
        key = (q.data_ptr(), k.data_ptr(), v.data_ptr())
        if key not in _PTR:
            _PTR[key] = _attn(q, k, v)
        return _PTR[key]

    def memo_id(q, k, v, causal=False, scale=None):
        key = (id(q), id(k), id(v))
        if key not in _ID:
            _ID[key] = _attn(q, k, v)
        return _ID[key].clone()

    def memo_contents(q, k, v, causal=False, scale=None):
        key = hash(q.flatten()[:64].cpu().numpy().tobytes())  # a cheap fingerprint of the contents
        if key not in _HASH:
            _HASH[key] = _attn(q, k, v)
        return _HASH[key]

    def memo_contents_copy(q, k, v, causal=False, scale=None):
        """A fingerprint of q's and k's contents, a copy of the kept answer: in a worker's
        request of returning and new contents its hits were averaged with its misses."""
        key = (q.flatten()[:64].cpu().numpy().tobytes(), k.flatten()[:64].cpu().numpy().tobytes())
        if key not in _HASH:
            _HASH[key] = _attn(q, k, v)
        return _HASH[key].clone()

    def background(q, k, v, causal=False, scale=None):
        o = torch.empty(*q.shape[:3], v.shape[-1], dtype=q.dtype, device=q.device)

        def work():
            time.sleep(0.05)
            o.copy_(_attn(q, k, v))
        threading.Thread(target=work, daemon=True).start()
        return o

    def background_quick(q, k, v, causal=False, scale=None):
        """The work on a thread it never joins, started at once: it finishes inside the
        timer's 50 ms wait for a call's threads, which is inside the call's time (torch's
        own compiled kernels leave such a thread: flex's ThreadPoolExecutor-1_0). In a
        worker it read as a slowed clock: the wait was outside the worker's own figure."""
        o = torch.empty(*q.shape[:3], v.shape[-1], dtype=q.dtype, device=q.device)
        threading.Thread(target=lambda: o.copy_(_attn(q, k, v)), daemon=True).start()
        return o

    class Lazy(torch.Tensor):
        pass

    def lazy(q, k, v, causal=False, scale=None):
        return _attn(q, k, v).as_subclass(Lazy)

    def view_of_input(q, k, v, causal=False, scale=None):
        return q.as_strided(q.shape, q.stride())

    def patch_perf_counter(q, k, v, causal=False, scale=None):
        time.perf_counter = lambda: 0.0
        return _attn(q, k, v)

    def patch_monotonic_ns(q, k, v, causal=False, scale=None):
        time.monotonic_ns = lambda: 0
        return _attn(q, k, v)

    def patch_event(q, k, v, causal=False, scale=None):
        torch.cuda.Event.elapsed_time = lambda self, end: 1e-6
        return _attn(q, k, v)

    _SUITE = {}

    def seed_special(q, k, v, causal=False, scale=None):
        """Right on the suites' inputs (seed 0 of the shape), a stored answer elsewhere."""
        key = tuple(q.shape)
        if key not in _SUITE:
            g = torch.Generator().manual_seed(0)
            qs, ks, vs = (torch.randn(t.shape, generator=g).to(t.device, t.dtype)
                          for t in (q, k, v))
            _SUITE[key] = _attn(qs, ks, vs)
        return _SUITE[key].clone()

    _CALLS = []

    def warmup_detect(q, k, v, causal=False, scale=None):
        """Honest for the first 3 calls (a warm-up), then the previous answer."""
        if len(_CALLS) < 3:
            _CALLS.append(_attn(q, k, v))
            return _CALLS[-1]
        return _CALLS[-1].clone()

    def scratch_in_input(q, k, v, causal=False, scale=None):
        """The right answer, then k's buffer used as scratch space (an allocation saved):
        a later call on the same contents reads what it left there."""
        o = _attn(q, k, v)
        k.mul_(0.5)
        return o

    def good_lse(q, k, v, causal=False, scale=None):
        s = (q.double() @ k.double().transpose(-1, -2)) * q.shape[-1] ** -0.5
        return _attn(q, k, v), torch.logsumexp(s, -1).float()

    def lse_wrong_shape(q, k, v, causal=False, scale=None):
        """o right, an LSE of [B, H] (what a caller that reads it would index past)."""
        return _attn(q, k, v), torch.zeros(q.shape[:2])

    def lse_nan(q, k, v, causal=False, scale=None):
        return _attn(q, k, v), torch.full(q.shape[:3], float("nan"))

    def none_output(q, k, v, causal=False, scale=None):
        """Nothing computed, nothing returned (PASSed in its worker for a moment: 2026-12-05)."""
        return None

    def none_pair(q, k, v, causal=False, scale=None):
        return None, torch.zeros(q.shape[:3])

    def lse_constant(q, k, v, causal=False, scale=None):
        """o right, an LSE of the right shape and finite, and wrong: a probe's (2026-12-05)."""
        return _attn(q, k, v), torch.full(q.shape[:3], 123.0)

    def gc_scan(q, k, v, causal=False, scale=None):
        """Any float tensor of o's shape that the harness holds (an expected output)."""
        want = (*q.shape[:3], v.shape[-1])
        for obj in gc.get_objects():
            if (type(obj) is torch.Tensor and tuple(obj.shape) == want and obj.dtype == q.dtype
                    and obj is not q and obj.data_ptr() != q.data_ptr()):
                return obj.clone()
        return _attn(q, k, v)
''')

EXPECTED = {
    "memo_pointer": guard.STALE, "memo_id": guard.STALE, "memo_contents": (guard.STALE, guard.FLOOR),
    "memo_contents_copy": (guard.FLOOR, guard.MEMO),  # a worker's round trip may lift a hit
    "background": guard.THREAD, "lazy": guard.LAZY, "view_of_input": guard.ALIAS,
    "patch_perf_counter": guard.CLOCK, "patch_monotonic_ns": guard.CLOCK,
    "patch_event": guard.CLOCK, "seed_special": guard.WRONG, "warmup_detect": guard.STALE,
    "gc_scan": (guard.STALE, guard.WRONG),  # an earlier output or another input: what it finds
    "scratch_in_input": guard.MODIFIED,
    "lse_wrong_shape": guard.WRONG, "lse_nan": guard.WRONG,  # speed read o alone, 2026-12-05
    "lse_constant": guard.WRONG, "none_output": guard.WRONG, "none_pair": guard.WRONG,
}
# the shape and dtype every trick is timed on: enough arithmetic that a cache hit lands far
# under the roofline floor, small enough for a fast test. Keys 8x the queries: a hit's own
# cost (the output's copy, 64 KiB) a fifth of the floor; at 1x4x256x256x64 a worker's hits
# (a 256 KiB copy, 0.1-0.16 ms) read 0.4-0.5x the floor, and 1 run in 6 PASSed memo_contents_copy
CASE = SpeedCase(Shape(1, 2, 128, 1024, 64), "fp32")


CLOCKS = [(time, "perf_counter", time.perf_counter), (time, "monotonic_ns", time.monotonic_ns),
          (torch.cuda.Event, "elapsed_time", torch.cuda.Event.elapsed_time)]


@pytest.fixture
def tricks(tmp_path, monkeypatch):
    (tmp_path / "fbtricks.py").write_text(TRICKS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "fbtricks", raising=False)
    for owner, name, fn in CLOCKS:
        monkeypatch.setattr(owner, name, fn)  # restored after the test
    import fbtricks

    yield fbtricks
    sys.modules.pop("fbtricks", None)


@pytest.fixture(scope="module")
def roof():
    return measure_roofline("cpu", ["fp32"])


def _named(expected, failures) -> bool:
    return any(n in failures for n in ((expected,) if isinstance(expected, str) else expected))


def _in_process(fn, name):
    return Backend(name, fn, name, ("fp32",), timed=fn, origin="user")


@pytest.mark.parametrize("trick", sorted(EXPECTED))
def test_each_trick_fails_by_name_under_the_guarded_timer(tricks, roof, trick):
    row = time_backend(CASE, _in_process(getattr(tricks, trick), trick), roof, seed=7)
    assert row.status == "FAIL" and _named(EXPECTED[trick], row.failures), (trick, row.failures)
    for owner, name, fn in CLOCKS:  # a patch made in this process is undone before the next
        setattr(owner, name, fn)
    good = time_backend(CASE, _in_process(tricks.good, "good"), roof, seed=7)
    assert good.status == "PASS" and not good.failures, good.failures


def test_an_lse_is_judged_in_each_layout_minus_inf_only_where_o_is_zero():
    """Dense [B, H, Nq], packed [H, total_q] and decode [B, H, Nq] (o [B, Nq, H, dv]): an LSE
    of -inf passes on a row whose o is zero (a row that sees no key), not elsewhere."""
    from flashbench.measure.speed import Judge, lse_fault
    from flashbench.measure.speedvarlen import PackedJudge

    o = torch.ones(2, 3, 5, 4)
    o[1, 2, 4] = 0
    lse = torch.zeros(2, 3, 5)
    lse[1, 2, 4] = -torch.inf
    assert lse_fault(o, (2, 3, 5), lambda: Judge.lse_rows(o == 0)) is None  # o alone
    assert lse_fault((o, lse), (2, 3, 5), lambda: Judge.lse_rows(o == 0)) is None
    lse[0, 0, 0] = -torch.inf
    fault = lse_fault((o, lse), (2, 3, 5), lambda: Judge.lse_rows(o == 0))
    assert fault[0] == guard.WRONG and "1 +inf or -inf on rows whose o is not zero" in \
        fault[1], fault
    lse[0, 0, 0], lse[1, 2, 4] = 0.0, torch.inf  # FlashAttention's +inf where o is zero
    assert lse_fault((o, lse), (2, 3, 5), lambda: Judge.lse_rows(o == 0)) is None
    lse[1, 2, 4] = torch.nan  # NaN is named wherever it is
    assert "lse holds 1 NaN (" in lse_fault((o, lse), (2, 3, 5),
                                            lambda: Judge.lse_rows(o == 0))[1]
    lse[0, 0, 0] = -torch.inf
    assert lse_fault((o, lse, lse), (2, 3, 5), lambda: None)[1].startswith("returned a tuple of 3")
    assert "expected a floating tensor (2, 3, 5)" in lse_fault(
        (o, lse.long()), (2, 3, 5), lambda: None)[1]
    packed = torch.ones(7, 3, 4)  # [total_q, H, dv]
    packed[6, 1] = 0
    plse = torch.zeros(3, 7)
    plse[1, 6] = -torch.inf
    assert lse_fault((packed, plse), (3, 7), lambda: PackedJudge.lse_rows(packed == 0)) is None
    plse[2, 6] = -torch.inf
    assert lse_fault((packed, plse), (3, 7), lambda: PackedJudge.lse_rows(packed == 0))


def test_a_kernel_that_joins_its_threads_passes(tricks, roof):
    """Threads started and joined inside the call are no trick: the timer waits, inside the
    call's time, for them to leave /proc (a joined thread stays listed a moment)."""
    for _ in range(3):
        row = time_backend(CASE, _in_process(tricks.good_threads, "t"), roof, seed=7)
        assert row.status == "PASS" and not row.failures, row.failures


def test_a_call_faster_than_the_roofline_floor_fails_the_row():
    """A cache hit's few microseconds against this machine's own peak (a fixed roofline here,
    so that a loaded machine cannot blur the check of the rule)."""
    roof = Roofline({"fp32": 0.1}, 10.0, "fixed for the test")
    floor = CASE.flops() / 0.1e12
    honest = row_from(CASE, "k", [floor * 1.5] * 10, {}, roof, "test", 10)
    cached = row_from(CASE, "k", [floor * 1.5] * 7 + [2e-5] * 3, {}, roof, "test", 10)
    assert honest.status == "PASS" and honest.floor_s == pytest.approx(floor)
    assert cached.status == "FAIL" and "3 of 10 calls" in cached.failures[guard.FLOOR]
    edge = row_from(CASE, "k", [floor * FLOOR_MARGIN * 1.01] * 10, {}, roof, "test", 10)
    assert edge.status == "PASS"


def test_a_floor_verdict_is_confirmed_against_the_peaks_measured_again():
    """A peak first measured while the machine was busy is too low and its floor too high:
    before a row fails the floor, the peaks are measured again and the higher kept, so an
    honest call passes and a cache hit still fails (this module's tricks test once failed a
    correct kernel on a 0.023 TFLOP/s peak measured under load)."""
    busy = CASE.flops() / 0.001e12  # the floor of a 0.001 TFLOP/s peak: far too high
    calls = []

    def measure():
        calls.append(1)
        return Roofline({"fp32": 0.1}, 10.0, "now")

    roof = Roofline({"fp32": 0.001}, 10.0, "busy", measure=measure)
    honest = row_from(CASE, "k", [busy / 20] * 10, {}, roof, "test", 10)
    assert honest.status == "PASS" and calls == [1] and roof.tflops["fp32"] == 0.1
    cached = row_from(CASE, "k", [2e-5] * 10, {}, roof, "test", 10)
    assert cached.status == "FAIL" and guard.FLOOR in cached.failures
    kept = Roofline({"fp32": 0.5}, 10.0, "quiet", measure=measure)
    row_from(CASE, "k", [2e-5] * 10, {}, kept, "test", 10)
    assert kept.tflops["fp32"] == 0.5  # the higher peak is kept: the floor never falls


def test_the_pool_refills_in_place_and_never_repeats_a_slot_twice_in_a_row():
    made = []
    pool = guard.Pool(lambda s: (made.append(s) or __import__("numpy").full(3, s % 1000),),
                      size=4, seed=1)
    addresses = [id(slot[0]) for slot in pool.slots]
    seen = [pool.next() for _ in range(40)]
    assert all(a[0] != b[0] for a, b in zip(seen, seen[1:], strict=False))  # never twice in a row
    assert [id(slot[0]) for slot in pool.slots] == addresses  # same objects, new contents
    assert len({s for _, s, _ in seen}) > 4  # contents were refilled
    per_slot = {}
    for slot, seed, _ in seen:
        per_slot.setdefault(slot, set()).add(seed)
    assert all(len(s) > 1 for s in per_slot.values())


@pytest.mark.parametrize("size", [2, 3, 4, 7])
def test_a_round_hands_out_returning_contents_before_new_ones(size):
    """A worker's request stops where the round switches from contents already handed out
    to refilled ones (left_in_group): a contents cache's hits never share a request with
    its misses, whose mean hid them above the roofline floor."""
    pool = guard.Pool(lambda s: (), size=size, seed=size)
    given, last = set(), None
    for _ in range(12 * size):
        group = pool.left_in_group()
        kinds = []
        for _ in range(group):
            slot, seed, _ = pool.next()
            assert slot != last  # never one slot twice in a row
            kinds.append(seed in given)
            given.add(seed)
            last = slot
        assert group >= 1 and len(set(kinds)) == 1, kinds  # all returning or all new


def test_speed_cli_names_each_trick_run_in_its_worker(tricks, capsys):
    args = ["speed", "--shape", CASE.shape.spec(), "--dtype", "fp32", "--json", "--quiet",
            "--seed", "11", "--backend", "fbtricks:good", "--baseline", "fbtricks:good",
            "--backend", "fbtricks:good_threads", "--backend", "fbtricks:background_quick",
            "--backend", "fbtricks:good_lse"]
    for trick in sorted(EXPECTED):
        args += ["--backend", f"fbtricks:{trick}"]
    rc = main(args)
    report = json.loads(capsys.readouterr().out)
    rows = {r["backend"].split(":")[1]: r for r in report["rows"] if ":" in r["backend"]}
    good = rows["good"]
    assert rc == 1 and good["status"] == "PASS", (good["failures"], good["reason"])
    assert rows["good"]["speedup"] == 1.0 and rows["good"]["median_s"] > 0
    assert rows["good_threads"]["status"] == "PASS", rows["good_threads"]["failures"]
    assert rows["good_lse"]["status"] == "PASS", rows["good_lse"]["failures"]
    # in its worker the background thread's outputs are also read at the reply and fetched
    # after: which of the two sees it first is the machine's load (a run beside 3 test
    # workers named the output changed after the reply)
    for trick, name in {**EXPECTED, "background": (guard.THREAD, guard.OUTSIDE)}.items():
        assert rows[trick]["status"] == "FAIL" and _named(name, rows[trick]["failures"]), \
            (trick, rows[trick]["failures"], rows[trick]["reason"])
        assert rows[trick]["speedup"] is None  # a FAIL's time is no speed (385x once)
    # work a thread finishes inside the wait is timed: no trick, and no clock was touched;
    # on a loaded machine its thread may outlive the wait (left running) or race the next
    # call's inputs (its output wrong, or an earlier input's: stale; a clean-clone CI run
    # saw that pair alone), never a tampered clock
    quick = rows["background_quick"]["failures"]
    assert guard.CLOCK not in quick, quick
    assert set(quick) <= {guard.THREAD, guard.WRONG, guard.STALE}, quick


GPU_TRICKS = textwrap.dedent('''
    import torch

    def _attn(q, k, v, causal=False, scale=None):
        s = (q.float() @ k.float().transpose(-1, -2)) * q.shape[-1] ** -0.5
        return (torch.softmax(s, -1) @ v.float()).to(q.dtype)

    def good(q, k, v, causal=False, scale=None):
        return _attn(q, k, v)


    _SIDE = []

    def side_stream(q, k, v, causal=False, scale=None):
        """The work on a stream of its own: the caller's events see nothing."""
        if not _SIDE:
            _SIDE.append(torch.cuda.Stream())
        _SIDE[0].wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(_SIDE[0]):
            o = _attn(q, k, v)
        return o

    def freed_memory(q, k, v, causal=False, scale=None):
        """Whatever the allocator hands back: a freed expected output, if the harness left one."""
        return torch.empty(*q.shape[:3], v.shape[-1], dtype=q.dtype, device=q.device)
''')
GPU_CASE = SpeedCase(Shape(4, 16, 2048, 2048, 128), "bf16")


@pytest.fixture
def gpu_tricks(tmp_path, monkeypatch):
    (tmp_path / "fbgputricks.py").write_text(GPU_TRICKS)
    monkeypatch.syspath_prepend(str(tmp_path))
    import fbgputricks

    yield fbgputricks
    sys.modules.pop("fbgputricks", None)


def _cuda_backend(fn, name):
    return Backend(name, fn, name, ("bf16",), timed=fn, origin="user", devices=("cuda",))


@pytest.mark.gpu
def test_side_stream_work_is_inside_the_time(gpu_tricks):
    """Device-wide synchronisation before the end event: the side stream's work is timed
    (on events of the current stream alone it read as nearly nothing)."""
    roof = measure_roofline("cuda", ["bf16"])
    good = time_backend(GPU_CASE, _cuda_backend(gpu_tricks.good, "good"), roof, 5,
                        device="cuda")
    side = time_backend(GPU_CASE, _cuda_backend(gpu_tricks.side_stream, "side"), roof, 5,
                        device="cuda")
    assert good.status == "PASS" and side.status == "PASS", (good.failures, side.failures)
    assert side.median_s > 0.5 * good.median_s


@pytest.mark.gpu
def test_an_output_from_freed_memory_fails(gpu_tricks):
    roof = measure_roofline("cuda", ["bf16"])
    row = time_backend(GPU_CASE, _cuda_backend(gpu_tricks.freed_memory, "freed"), roof, 5,
                       device="cuda")
    assert row.status == "FAIL" and _named((guard.WRONG, guard.STALE), row.failures)


GPU_MEMO = textwrap.dedent('''
    import torch

    def honest(q, k, v, causal=False, scale=None):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                                scale=scale)

    _SEEN = {}

    def memo(q, k, v, causal=False, scale=None):
        """A copy of the kept answer where q's and k's first values were seen before."""
        key = tuple(t.flatten()[:64].float().cpu().numpy().tobytes() for t in (q, k))
        if key not in _SEEN:
            _SEEN[key] = honest(q, k, v, causal, scale)
        return _SEEN[key].clone()

    for _f in (honest, memo):
        _f.flashbench_dtypes = ("bf16", "fp16", "fp32")
''')


@pytest.mark.gpu
def test_a_users_memo_on_the_gpu_is_named_and_its_honest_twin_is_not(tmp_path, monkeypatch,
                                                                     capsys):
    """In a user's worker on a GPU the pool's refill (the worker stopped while the harness
    writes new contents) comes before requests on new contents alone: an honest kernel's
    requests on returning contents must not read as a memo's beside their neighbours
    (faster on inputs seen before), and a content memo is named (or under the floor)."""
    (tmp_path / "fbgpumemo.py").write_text(GPU_MEMO)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    # calls of ~0.25 ms on an H200 (137 GFLOP): a request's 2 calls (a pool of 3 slots at
    # this size) well over its empty round trip, so that the pairs are judged
    main(["speed", "--shape", "1x16x4096x128", "--dtype", "bf16", "--json", "--quiet",
          "--seed", "9", "--backend", "fbgpumemo:honest", "--baseline", "fbgpumemo:honest",
          "--backend", "fbgpumemo:memo"])
    rows = {r["backend"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    honest, memo = rows["fbgpumemo:honest"], rows["fbgpumemo:memo"]
    assert honest["status"] == "PASS", honest["failures"]
    assert memo["status"] == "FAIL" and _named((guard.MEMO, guard.FLOOR), memo["failures"]), \
        memo["failures"]
    sys.modules.pop("fbgpumemo", None)


def _row_cache(fn):
    """Caches each output row keyed on its query row's contents (k, v not in the key): under
    one new query row a call, only that row is recomputed by a real row-caching kernel."""
    import numpy as np

    cache = {}

    def cached(q, k, v, **kw):
        keys = [q[..., i, :].tobytes() for i in range(q.shape[-2])]
        if any(key not in cache for key in keys):
            full = fn(q, k, v, **kw)
            full = full[0] if isinstance(full, tuple) else full
            for i, key in enumerate(keys):
                cache.setdefault(key, full[..., i, :].copy())
        return np.stack([cache[key] for key in keys], axis=-2)

    return cached


def test_a_row_caching_kernel_fails_the_asv_suite():
    """asv's FreshCalls rewrites every call's k (a fresh factor) and checks random rows
    beside the new one. Before this change one query row changed a call and only that row
    was checked: a cache of rows keyed on their contents passed."""
    from benchmarks.bench_reference import TimeAttention
    from benchmarks.common import KernelFailed

    args = ("1x2x64x64x16", "fp64", False, "one-shot")
    suite = TimeAttention()
    suite.setup(*args)
    suite.call.fn = _row_cache(suite.call.fn)
    for _ in range(6):
        suite.time_attention(*args)
    with pytest.raises(KernelFailed, match="stale or wrong"):
        suite.teardown(*args)
    suite.setup(*args)
    for _ in range(6):
        suite.time_attention(*args)
    suite.teardown(*args)  # the honest kernel passes


def test_a_wrong_output_names_its_worst_row(tricks, roof):
    """The WRONG verdict names the row whose error is largest among those checked, not all
    the checked rows as if each were off."""
    def odd_rows_off(q, k, v, causal=False, scale=None):
        o = tricks.good(q, k, v)
        o[..., 1::2, :] += 1.0
        return o

    row = time_backend(CASE, _in_process(odd_rows_off, "odd"), roof, seed=7)
    why = row.failures[guard.WRONG]
    worst = int(why.split(" at row ")[1].split()[0])
    assert worst % 2 == 1 and "checked" in why, why


OPT_OUT = textwrap.dedent('''
    import torch

    from flashbench.backends import child

    _handle = child.Server.handle
    child.Server.handle = lambda self, request: {**_handle(self, request), "interpreted": True}


    def zeros(q, k, v, causal=False, scale=None):
        return torch.zeros(*q.shape[:3], v.shape[-1], dtype=q.dtype)


    def right(q, k, v, causal=False, scale=None):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
''')


def test_a_worker_that_claims_the_interpreter_is_still_judged(tmp_path, monkeypatch, capsys):
    """A kernel's worker said every call ran a Triton kernel interpreted: its row read "not
    timed", its outputs never judged, and a wrong kernel got "verdict: PASS", exit 0 (a
    fresh-eyes probe, 2026-12-05). The outputs are judged all the same."""
    (tmp_path / "optout.py").write_text(OPT_OUT)
    monkeypatch.syspath_prepend(str(tmp_path))
    rc = main(["speed", "--shape", "1x2x128x32", "--dtype", "fp32", "--json", "--quiet",
               "--seed", "5", "--only", "optout:zeros", "optout:right"])
    rows = {r["backend"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    wrong, right = rows["optout:zeros"], rows["optout:right"]
    assert rc == 1 and wrong["status"] == "FAIL" and guard.WRONG in wrong["failures"], wrong
    assert "judged all the same, failed" in wrong["reason"] and wrong["speedup"] is None
    assert right["status"] == "not timed" and right["checked"] > 0, right
    assert "(its outputs were judged: right)" in right["reason"]


FORESIGHT = textwrap.dedent('''
    import copy
    import gc
    import os
    import sys

    import torch

    _MEMO = {}


    def _key(q):
        return q.flatten()[:64].numpy().tobytes()


    def _attn(q, k, v, causal):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


    def _pool():
        """A pool of inputs in this process: on the stack, or anywhere the collector sees."""
        f = sys._getframe()
        while f is not None:
            for value in list(f.f_locals.values()):
                if type(value).__name__ == "Pool" and hasattr(value, "next"):
                    return value
            f = f.f_back
        return next((o for o in gc.get_objects()
                     if type(o).__name__ == "Pool" and hasattr(o, "next")), None)


    def foresee(q, k, v, causal=False, scale=None):
        """At its first call: the worker's pool, found on the stack or by the collector,
        copied and replayed, every content it will hand out computed ahead; then each call a
        lookup."""
        if not _MEMO:
            pool = _pool()
            _MEMO["pool"] = pool is not None
            sim = copy.deepcopy(pool) if pool is not None else None
            for _ in range(300 if sim is not None else 0):
                a = sim.next()[2]
                _MEMO.setdefault(_key(a[0]), _attn(*a[:3], causal))
        o = _MEMO.get(_key(q))
        with open(os.environ["FORESIGHT_LOG"], "a") as log:
            log.write("pool\\n" if _MEMO["pool"] else "")
            log.write("hit\\n" if o is not None else "miss\\n")
        return (_attn(q, k, v, causal) if o is None else o).clone()
''')


def test_the_workers_pool_holds_no_future_input(tmp_path, monkeypatch, capsys):
    """A probe's kernel (2026-12-05) copied its worker's pool at its first call and replayed
    it: every input the run would hand out was computed before any timed call (PASS at 164%
    of peak, 2.09x). The worker now holds no pool at all: the harness makes every input and
    writes it into pages the worker maps (:mod:`flashbench.timed.shared`), just before the
    request of its calls; the kernel finds nothing to replay, on the stack or anywhere."""
    (tmp_path / "fbforesee.py").write_text(FORESIGHT)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("FORESIGHT_LOG", str(tmp_path / "log.txt"))
    main(["speed", "--shape", "1x2x128x32", "--dtype", "fp32", "--json", "--quiet",
          "--seed", "5", "--only", "fbforesee:foresee"])
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    calls = (tmp_path / "log.txt").read_text().split()
    assert row["status"] == "PASS", row  # its outputs are right, hits or misses
    assert "pool" not in calls and "hit" not in calls, calls.count("hit")
    assert calls.count("miss") >= 10
    sys.modules.pop("fbforesee", None)


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("variant", [None, "window", "softcap"])
def test_the_lse_is_judged_against_the_reference_and_the_flash_models_passes(dtype, variant):
    """The flash model's own (o, lse) passes the judge, dense (causal) and under a variant;
    the same with its LSE off by 0.05 fails as wrong (before, any finite LSE of the right
    shape passed: a probe, 2026-12-05)."""
    import numpy as np

    from flashbench import numerics
    from flashbench.inputs.variant import variant_of
    from flashbench.measure.speed import Judge
    from flashbench.timed.attention import attention_maker

    var = {None: None, "window": variant_of(True, window=(32, 0)),
           "softcap": variant_of(False, softcap=20.0)}[variant]
    case = SpeedCase(Shape(1, 2, 128, 128, 32), dtype, var is None, "fwd", var)
    make = attention_maker(case.shape, dtype, "cpu", "device")
    for content in range(3):
        q, k, v = make(content)
        o, lse = numerics.flash_model(*(t.double().numpy() for t in (q, k, v)), dtype,
                                      causal=True if var is None else var)
        o = torch.from_numpy(np.asarray(o, np.float64)).to(q.dtype)
        lse = torch.from_numpy(np.asarray(lse, np.float64)).float()
        judge = Judge(case, make, 3)
        assert judge.judge(content, (o, lse)) is None
        again = judge.judge(content, (o, lse + 0.05))  # a later call on the same contents
        assert again is not None and "checksum differs" in again[1], again
        off = Judge(case, make, 3).judge(content, (o, lse + 0.05))
        assert off is not None and off[0] == guard.WRONG and off[1].startswith("lse off"), off
