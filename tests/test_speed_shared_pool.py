"""A user's kernel gets inputs the harness made and wrote (issue 35): the worker maps the
pool's pages (:mod:`flashbench.timed.shared`) and runs no code while contents are made, and
a backward's dO is written after the stage's forward ran (:meth:`Pool.arm`). Before this
change the worker refilled its own pool (a kernel that wrapped ``Tensor.copy_`` attended
every new input there, outside every clock: PASS, 1.86x over sdpa) and its forward could
read dO from the slot (precomputed gradients: PASS, ~2x)."""

import json
import os
import sys
import textwrap

import pytest
import torch

from flashbench.cli import main
from flashbench.inputs import Shape
from flashbench.measure.workerjudge import judge_cpu as _judge_cpu
from flashbench.measure.workerpool import harness_pool
from flashbench.timed import guard
from flashbench.timed.attention import grad_maker
from flashbench.timed.shared import attach, share

KERNELS = textwrap.dedent('''
    import os
    import sys

    import torch

    _F = torch.nn.functional.scaled_dot_product_attention
    _MEMO, _STATE = {}, {"orig": None, "last": []}


    def _log(word):
        with open(os.environ["SHARED_LOG"], "a") as log:
            log.write(word + "\\n")


    def _key(q):
        return (q.data_ptr(), float(q.flatten()[0]), float(q.flatten()[-1]))


    def _hooked_copy(dst, src, *a, **kw):
        out = _STATE["orig"](dst, src, *a, **kw)
        last = _STATE["last"]
        last.append(dst)
        if len(last) >= 3:
            q, k, v = last[-3:]
            if q.dim() == 4 and k.dim() == 4 and q.shape[-1] == k.shape[-1] == v.shape[-1]:
                _MEMO[_key(q)] = _F(q, k, v)
        return out


    def refill_hook(q, k, v, causal=False, scale=None):
        """Wraps Tensor.copy_ at its first call: each new q, k, v written by a refill in
        this process is attended there; then a call is a lookup."""
        if _STATE["orig"] is None:
            _STATE["orig"] = torch.Tensor.copy_
            torch.Tensor.copy_ = _hooked_copy
        o = _MEMO.pop(_key(q), None)
        _log("hit" if o is not None else "miss")
        return _F(q, k, v) if o is None else o


    class _Precomputed(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, o, dq, dk, dv):
            ctx.grads = (dq, dk, dv)
            return o.clone()

        @staticmethod
        def backward(ctx, do):
            return (*ctx.grads, None, None, None, None)


    def _do_of(q):
        """dO, where the caller's frames hold it: a 4-tuple of tensors led by q's storage."""
        f = sys._getframe(2)
        while f is not None:
            for value in list(f.f_locals.values()):
                if (isinstance(value, tuple) and len(value) == 4
                        and all(isinstance(t, torch.Tensor) for t in value)
                        and value[0].data_ptr() == q.data_ptr()):
                    return value[3]
            f = f.f_back
        return None


    def peek_do(q, k, v, causal=False, scale=None):
        """Its forward finds dO and computes the gradients there (outside the clock); the
        timed backward hands them back."""
        do = _do_of(q)
        _log("found" if do is not None else "none")
        with torch.enable_grad():
            leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
            o = _F(*leaves)
            grads = torch.autograd.grad(o, leaves, do.to(o.dtype)) if do is not None \\
                else [torch.zeros_like(t) for t in leaves]
        return _Precomputed.apply(q, k, v, o.detach(), *grads)


    def honest_grad(q, k, v, causal=False, scale=None):
        """sdpa's math form, for the backward: torch's CPU flash backward at fp32 (an
        approximate exp) is beyond the gradient rule on about 1 content in 400 at 1x2x64x32
        (docs/speed.md); this form on none of 40,000."""
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
            return _F(q, k, v, is_causal=causal)


    def scribble_do(q, k, v, causal=False, scale=None):
        """A backward that writes into dO (the worker's own copy of it)."""
        o = _F(q, k, v)
        if o.requires_grad:
            o.register_hook(lambda g: g.mul_(2.0))
        return o


    for _f in (peek_do, honest_grad, scribble_do):  # speed times a declared backward only
        _f.flashbench_differentiable = True
''')


@pytest.fixture
def kernels(tmp_path, monkeypatch):
    (tmp_path / "fbshared.py").write_text(KERNELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("SHARED_LOG", str(tmp_path / "log.txt"))
    yield tmp_path / "log.txt"
    sys.modules.pop("fbshared", None)


def _rows(capsys, *args):
    rc = main(["speed", "--dtype", "fp32", "--json", "--quiet", "--seed", "5", *args])
    return rc, {r["backend"]: r for r in json.loads(capsys.readouterr().out)["rows"]}


def test_a_kernel_that_wraps_the_pools_writes_never_sees_a_new_input(kernels, capsys):
    rc, rows = _rows(capsys, "--shape", "1x2x128x32", "--only", "fbshared:refill_hook")
    calls = kernels.read_text().split()
    row = rows["fbshared:refill_hook"]  # it is right, only slower
    assert row["status"] == "PASS", (row["failures"], row["reason"])
    assert "hit" not in calls and calls.count("miss") >= 10, calls.count("hit")


def test_a_backwards_forward_finds_no_do_to_precompute_with(kernels, capsys):
    rc, rows = _rows(capsys, "--shape", "1x2x64x32", "--pass", "bwd",
                     "--only", "fbshared:peek_do", "fbshared:honest_grad")
    peek, honest = rows["fbshared:peek_do"], rows["fbshared:honest_grad"]
    assert honest["status"] == "PASS", honest["failures"]
    # it finds the slot's dO tensor, all zeros for new contents when its forward runs: the
    # gradients it precomputed are wrong for the dO its timed call then gets
    assert "found" in kernels.read_text().split()
    assert rc == 1 and peek["status"] == "FAIL" and guard.WRONG in peek["failures"], peek


def test_a_backward_that_writes_into_do_is_named(kernels, capsys):
    """dO is the worker's own buffer, written by the harness with the worker stopped just
    before the run, read back at the reply (where the harness may not write the worker's
    memory: the worker's copy, compared with the harness's pages after each call)."""
    rc, rows = _rows(capsys, "--shape", "1x2x64x32", "--pass", "bwd",
                     "--only", "fbshared:scribble_do")
    row = rows["fbshared:scribble_do"]
    assert rc == 1 and guard.MODIFIED in row["failures"], row["failures"]
    said = row["failures"][guard.MODIFIED]
    assert said.startswith("do in ") and "read back from its worker's buffers" in said, said


def test_a_late_argument_is_drawn_after_setup_and_rebuilt_from_its_pair():
    shape = Shape(1, 2, 16, 16, 8)
    make = grad_maker(shape, "fp32")
    late = lambda d: make((0, d))[3:]  # noqa: E731 - dO alone
    pool = guard.Pool(make, 2, seed=4, names=("q", "k", "v", "do"), late=late)
    for _ in range(2):
        pool.next()
    for _ in range(3):  # a round hands out its returning contents first
        pool.refill(salt=99, upto=1)  # new contents, dO not drawn yet
        if pool.next_is_new():
            break
        pool.next()
    assert pool.next_is_new()
    slot, seed, args = pool.next()
    assert isinstance(seed, int) and not bool(args[3].any())  # zeros until armed
    pool.arm(7, [slot])
    content = pool.seeds[slot]
    assert isinstance(content, tuple) and content[0] == seed
    for got, want in zip(pool.slots[slot], make(content), strict=True):
        assert torch.equal(got, want)
    pool.arm(8, [slot])  # armed once: a second arm changes nothing
    assert pool.seeds[slot] == content
    first = guard.Pool(make, 2, seed=4, late=late)  # a pool's first contents: whole
    assert all(isinstance(s, int) and torch.equal(a[3], make(s)[3])
               for s, a in zip(first.seeds, first.slots, strict=True))
    again = guard.Pool(make, 2, seed=4, late=late)  # unsalted: the pool's seed alone
    for p in (first, again):
        for _ in range(4):
            i = p.next()[0]
            p.arm(None, [i])
    assert first.seeds == again.seeds and any(isinstance(s, tuple) for s in first.seeds)


def test_a_write_into_an_input_is_found_though_its_slot_is_refilled_after():
    """The fingerprints were taken again at a refill: a kernel's write into a slot that
    was refilled before the run ended was never seen (now compared before it is written)."""
    pool = harness_pool("1x2x16x16x8", "fp32", 2, 3)
    used = set()
    for _ in range(4):
        slot, _, args = pool.next()
        if slot not in used:
            args[0][0, 0, 0, 0] += 1.0
            used.add(slot)
    pool.refill(salt=5)  # both slots handed out; new contents written over one of them
    changed = pool.modified()
    assert changed is not None and changed.startswith("q in "), changed


def test_the_worker_maps_the_harness_pages_and_their_name_goes():
    pool = harness_pool("1x2x16x16x8", "fp32", 3, 1)
    shared = share(pool)
    try:
        theirs = attach(shared.spec())
    finally:
        shared.unlink()
    assert not os.path.exists(shared.path)
    for mine, other in zip(pool.slots, theirs, strict=True):
        assert all(torch.equal(a, b) for a, b in zip(mine, other, strict=True))
    pool.slots[0][1].fill_(2.5)  # the harness's write is the worker's input
    assert bool((theirs[0][1] == 2.5).all())
    theirs[1][0].zero_()  # and a worker's write is the harness's to find
    assert pool.modified() is None  # slot 1 never handed out: not read
    pool.used[1] = True
    assert pool.modified() is not None


def test_cpu_while_inputs_are_written_and_copied_is_weighed_against_copying():
    """From the moment a request's inputs (a backward's dO too) are written to the end of
    the worker's copies of them, the worker may spend :data:`COPY_FACTOR` x what copying as
    many bytes costs the harness: more is work on the new inputs outside the clock. The
    stage of a backward runs its forward: not weighed against the calls."""
    from flashbench.measure.workerjudge import COPY_FACTOR

    readings = {"idle": 0.0, "stage": 3.0, "run": 1.0, "pairs": 10, "nulls": 10, "null": 0.0,
                "copied": 100 * 2**20, "copy_s_per_byte": 1e-10}  # 0.0105 s to copy here
    faults = {}
    _judge_cpu({**readings, "load": 0.03}, 1.0, faults, "bwd")
    assert faults == {}
    _judge_cpu({**readings, "load": 0.5}, 1.0, faults, "bwd")
    assert guard.OUTSIDE in faults and f"{COPY_FACTOR:g}x what copying" in faults[guard.OUTSIDE]
    faults = {}
    _judge_cpu({**readings, "load": 0.03}, 1.0, faults, "fwd")  # readying 3 s, running 1 s
    assert guard.OUTSIDE in faults and "readying its calls" in faults[guard.OUTSIDE]


def test_a_full_ram_file_system_is_refused_up_front(monkeypatch, tmp_path):
    """A full /dev/shm (a container's 64 MiB) would fault a write past its room (SIGBUS)
    in either process: the file's blocks are reserved when it is made, and where /dev/shm
    has no room the temporary directory holds it; where neither has, a clear error."""
    import errno
    import tempfile

    from flashbench.timed import shared as sh

    real = os.posix_fallocate
    full = {"/dev/shm"}

    def fallocate(fd, offset, size):
        if os.path.dirname(os.readlink(f"/proc/self/fd/{fd}")) in full:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, offset, size)

    monkeypatch.setattr(os, "posix_fallocate", fallocate)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    path = sh._file(4096)
    assert os.path.dirname(path) == str(tmp_path) and os.path.getsize(path) == 4096
    os.unlink(path)
    full.add(str(tmp_path))
    with pytest.raises(OSError, match="no room for the timed inputs"):
        sh._file(4096)
    assert not os.listdir(tmp_path)  # nothing left behind


LATE_POOL = textwrap.dedent('''
    import threading

    import torch

    _CALLS, _PARKED = [0], threading.Event()


    def late_pool(q, k, v, causal=False, scale=None):
        """Correct; at its 8th call (after the warm-up and k's calibration) its pool grows
        by one thread that then waits for work (a ThreadPoolExecutor starts one when none
        is idle)."""
        _CALLS[0] += 1
        if _CALLS[0] == 8:
            threading.Thread(target=_PARKED.wait, daemon=True).start()
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)
''')


def test_a_pool_that_grows_after_the_warm_up_is_no_thread_left_running(tmp_path, monkeypatch,
                                                                         capsys):
    """A kept ThreadPoolExecutor(16) that grew after the warm-up read "thread left running"
    in 3 runs of 7 (a probe, 2026-12-05): any new thread alive after a reply failed the row.
    A thread that stays idle is now no fault; one that ends or works after its call's reply
    still is (the gallery's ``background``: tests/test_tricks.py)."""
    (tmp_path / "fblatepool.py").write_text(LATE_POOL)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    rc, rows = _rows(capsys, "--shape", "1x2x64x32", "--only", "fblatepool:late_pool")
    row = rows["fblatepool:late_pool"]
    assert rc == 0 and row["status"] == "PASS", row["failures"]
    sys.modules.pop("fblatepool", None)


def test_the_watch_tells_a_parked_thread_from_one_that_works_or_ends_after_the_reply():
    import threading
    import time

    from flashbench.timed.threads import ThreadWatch

    watch = ThreadWatch(os.getpid())
    stop, go, done = threading.Event(), threading.Event(), threading.Event()
    parked = threading.Thread(target=stop.wait, daemon=True)
    parked.start()

    def busy():
        go.wait()
        end = time.thread_time() + 0.08  # 8 ticks of CPU after the "reply"
        while time.thread_time() < end:
            pass
        done.set()
        stop.wait()

    threading.Thread(target=busy, daemon=True).start()
    watch.after_run()
    assert watch.check() is None  # both idle since the reply
    watch.after_run()
    go.set()
    done.wait()
    why = watch.check()
    assert why is not None and "of CPU after its call's reply" in why, why
    watch.after_run()
    assert watch.check() is None and watch.fault == why  # both idle again; the first kept
    ends = threading.Event()
    short = threading.Thread(target=ends.wait, daemon=True)
    short.start()
    watch.after_run()
    ends.set()
    short.join()
    deadline = time.monotonic() + 5  # an exited thread can stay listed in /proc a moment
    while os.path.exists(f"/proc/self/task/{short.native_id}") and time.monotonic() < deadline:
        time.sleep(0.01)
    assert "ended after its call's reply" in watch.check()
    stop.set()


def test_a_long_warm_up_fills_no_new_contents_before_the_worker_maps_them():
    """Drawn from the pool, a warm-up of 25 calls on 16 slots started its second round:
    7 slots held new contents from before prepare, and the first requests timed as new ran
    on them (a review of this change)."""
    from flashbench.measure.workerpool import warm_slots

    pool = harness_pool("1x2x16x16x8", "fp32", 16, 3)
    seeds = list(pool.seeds)
    warm = warm_slots(pool, 25)
    assert len(warm) == 25 and set(warm) == set(range(16))
    assert pool.rounds == 0 and not any(pool.fresh) and pool.seeds == seeds


def test_a_backwards_two_fills_a_request_are_allowed_for():
    """A backward fills twice a request (its inputs, then dO): the per-request allowance
    counts fills, not requests (an honest backward at --samples 200 read "work outside the
    timed call": the fills' readings had begun before the harness's writes, and were
    allowed one request's cost per pair)."""
    readings = {"idle": 0.0, "stage": 0.0, "run": 1.0, "pairs": 100, "nulls": 100,
                "null": 0.5, "copied": 0, "copy_s_per_byte": 0.0, "load": 1.2}
    faults = {}
    _judge_cpu({**readings, "fills": 200}, 1.0, faults, "bwd")
    assert faults == {}
    _judge_cpu({**readings, "fills": 100}, 1.0, faults, "bwd")  # counted as one a request
    assert guard.OUTSIDE in faults
