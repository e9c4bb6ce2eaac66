"""A CPU worker's inputs are posted inside its run request's clock (issue 35,
:mod:`flashbench.timed.placed`): the harness makes each content in its own memory, starts
the clock, copies it into the pages the worker maps and sends the request, and the worker
copies it in. Before, a thread kept since the warm-up computed each
new content while the worker copied it in (``fill``) and readied its calls (``stage``), and
the timed calls looked the outputs up: PASS, 16x over its honest twin, 33 of 33 calls
served (a red-team probe, 2026-12-06)."""

import json
import os
import subprocess
import sys
import textwrap
import time
from types import SimpleNamespace

import pytest
import torch

from flashbench.cli import main
from flashbench.measure import speedworker
from flashbench.timed import guard
from flashbench.timed.placed import Places, PlacesRefused

KERNELS = textwrap.dedent('''
    import os
    import sys
    import threading
    import time

    import torch

    _F = torch.nn.functional.scaled_dot_product_attention
    _STATE, _DONE = {}, {}


    def _log(word):
        with open(os.environ["PLACED_LOG"], "a") as log:
            log.write(word + "\\n")


    def _key(q, k, v):
        return tuple(float(t.flatten()[i]) for t in (q, k, v) for i in (0, 1, -1))


    def _timing():
        f = sys._getframe(1)
        while f is not None:
            s = f.f_locals.get("self")
            if isinstance(getattr(s, "timing", None), dict) and "slots" in s.timing:
                return s.timing
            f = f.f_back
        return None


    def _poll(timing):
        """Every buffer the worker holds of its inputs, watched: each new content is
        attended as soon as it shows, on this thread."""
        buffers = list(timing["slots"]) + list(timing["shared"])
        seen = [None] * len(buffers)
        while True:
            for i, slot in enumerate(buffers):
                q, k, v = slot[:3]
                key = _key(q, k, v)
                if key != seen[i]:
                    o = _F(q.clone(), k.clone(), v.clone())
                    if _key(q, k, v) == key:
                        _DONE[key], seen[i] = o, key
            time.sleep(0.002)


    def precomputed(q, k, v, causal=False, scale=None):
        """Honest in the warm-up, where it starts its thread; then a lookup, zeros where the
        thread has not attended the content yet."""
        if "thread" not in _STATE:
            timing = _timing()
            if timing is not None:
                _STATE["thread"] = threading.Thread(target=_poll, args=(timing,), daemon=True)
                _STATE["thread"].start()
            return _F(q, k, v)
        o = _DONE.get(_key(q, k, v))
        _log("hit" if o is not None else "miss")
        return torch.zeros_like(q) if o is None else o.clone()


    def honest(q, k, v, causal=False, scale=None):
        return _F(q, k, v, is_causal=causal)


    def _shift(reply):
        places = reply.get("places")
        if places:
            places[0][0][0] = places[0][1][0]  # slot 0's q said to lie where its k lies
        return reply


    from flashbench.backends import child as _child

    if os.environ.get("PLACED_LIE") == "1":
        _prepare = _child.Server._prepare
        _child.Server._prepare = lambda self, r: _shift(_prepare(self, r))
''')


@pytest.fixture()
def kernels(user_module, tmp_path, monkeypatch):
    """The module above (conftest's ``user_module``), its calls' log."""
    monkeypatch.setenv("PLACED_LOG", str(tmp_path / "log.txt"))
    (tmp_path / "log.txt").write_text("")
    user_module("fbplaced", KERNELS)
    return tmp_path / "log.txt"


def _rows(capsys, *args):
    rc = main(["speed", "--dtype", "fp32", "--json", "--quiet", "--seed", "6", *args])
    return rc, {r["backend"]: r for r in json.loads(capsys.readouterr().out)["rows"]}


def test_a_kept_thread_never_attends_a_new_content_before_the_clock(kernels, capsys):
    rc, rows = _rows(capsys, "--shape", "1x2x256x64", "--causal", "off",
                     "--only", "fbplaced:precomputed", "fbplaced:honest")
    cheat, honest = rows["fbplaced:precomputed"], rows["fbplaced:honest"]
    assert honest["status"] == "PASS", honest["failures"]
    calls = kernels.read_text().split()
    assert "hit" in calls  # the contents it saw in earlier requests, it had ready
    # a new content exists in the worker only once its run request is sent and the clock
    # runs: the calls on it found nothing precomputed, and their zeros fail the row
    assert rc == 1 and cheat["status"] == "FAIL", cheat
    assert guard.WRONG in cheat["failures"], cheat["failures"]
    # k no more than a request of its pool holds (10 samples: 3 slots, 2 calls a request):
    # empty requests padded to more posted calls only added their copies' noise
    assert 1 <= honest["calls_per_request"] <= 2, honest["calls_per_request"]


def test_inputs_are_posted_on_the_clock_before_the_request_goes_out(kernels, monkeypatch):
    """The clock starts, the inputs are posted, then the request is written: one wake-up
    of the worker, which waits on its pipe all along (a byte sent after the posting woke it
    twice, and the harness it preempted waited for a CPU while the calls ran)."""
    from flashbench.backends import worker as workers

    order, real = [], time.perf_counter

    class Pipe:  # the worker's stdin, each write said
        def __init__(self, pipe):
            self.pipe = pipe

        def write(self, data):
            order.append("request")
            return self.pipe.write(data)

        def __getattr__(self, name):  # flush, close: the pipe's own
            return getattr(self.pipe, name)

    w = workers.Worker("fbplaced:honest")
    try:
        w.call({"op": "null"})  # started, its module loaded
        w.proc.stdin = Pipe(w.proc.stdin)
        with monkeypatch.context() as m:
            m.setattr(workers, "time", SimpleNamespace(
                perf_counter=lambda: (order.append("clock"), real())[1],
                monotonic=time.monotonic, sleep=time.sleep))
            w.call({"op": "null"}, on_clock=lambda: order.append("posted"))
    finally:
        w.close()
    assert order[:3] == ["clock", "posted", "request"], order


def test_a_worker_that_names_false_buffers_fails_by_name(kernels, capsys, monkeypatch):
    monkeypatch.setenv("PLACED_LIE", "1")
    rc, rows = _rows(capsys, "--shape", "1x2x64x32", "--only", "fbplaced:honest")
    row = rows["fbplaced:honest"]
    assert rc == 1 and row["status"] == "FAIL", row
    assert "two of its worker's input buffers overlap" in row["reason"], row["reason"]


def test_where_inputs_are_not_posted_the_worker_copies_them_in(kernels, capsys, monkeypatch):
    """The fills' path (a GPU's), taken on this CPU: an honest kernel passes there too
    (test_speed_shared_pool's writer into dO is named on the posting path)."""
    monkeypatch.setattr(speedworker, "_mailbox", lambda *a: None)
    rc, rows = _rows(capsys, "--shape", "1x2x64x32", "--only", "fbplaced:honest")
    assert rc == 0 and rows["fbplaced:honest"]["status"] == "PASS", rows


def test_places_must_be_the_slots_own_buffers():
    slots = [(torch.zeros(4), torch.zeros(2), None), (torch.zeros(4), torch.zeros(2), None)]
    good = [[[1000, 16], [2000, 8], None], [[3000, 16], [4000, 8], None]]
    assert Places(os.getpid(), good, slots).places[1][0] == (3000, 16)
    for bad, why in (
            ([[[1000, 16], [1008, 8], None], good[1]], "overlap"),
            ([[[1000, 12], [2000, 8], None], good[1]], "argument 1"),
            ([[[1000, 16], [2000, 8], [5000, 4]], good[1]], "argument 3"),
            ([good[0]], "another pool"),
            ([[["x", 16], [2000, 8], None], good[1]], "[address, bytes]")):
        with pytest.raises(PlacesRefused, match=fr"{why}"):
            Places(os.getpid(), bad, slots)


def test_the_harness_reads_another_process_inputs_back():
    """A change made in the other process's buffer after it was given is found there."""
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent("""
            import sys, torch
            x = torch.arange(8, dtype=torch.float32)
            print(x.data_ptr(), flush=True)
            sys.stdin.readline()
            x[3] = -1.0
            print("changed", flush=True)
            sys.stdin.readline()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        address = int(child.stdout.readline())
        args = (torch.arange(8, dtype=torch.float32),)
        places = Places.of(child.pid, [[[address, 32]]], [args])
        if places is None:
            pytest.fail("this process may not read its own child's memory here")
        assert places.changed(0, args) == []
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "changed"
        assert places.changed(0, args) == [0]
        places.close()
    finally:
        child.kill()
        child.wait()


def test_each_run_and_empty_request_follows_a_warm_request(kernels, capsys, monkeypatch):
    """On a CPU the worker's threads are kept busy just before each run and each empty
    request, outside their clock (TimedServer._warm): idle between requests a worker's CPUs
    slept, and an honest 0.27 ms sdpa read a median 13x torch's row (docs/speed.md)."""
    from flashbench.backends import worker as workers

    ops, real = [], workers.Worker.call

    def call(self, request, *args, **kwargs):
        reply = real(self, request, *args, **kwargs)
        ops.append((request.get("op"), self.round_trip_s))
        return reply

    monkeypatch.setattr(workers.Worker, "call", call)
    rc, rows = _rows(capsys, "--shape", "1x2x64x32", "--causal", "off",
                     "--only", "fbplaced:honest")
    row = rows["fbplaced:honest"]
    assert rc == 0 and row["status"] == "PASS", rows
    assert "threads kept busy 5 ms before each" in row["clock"], row["clock"]
    names = [op for op, _ in ops]
    timed = [i for i, op in enumerate(names) if op in ("run", "null")
             and i > names.index("prepare")]  # the worker's own first empty ones: before it
    assert names.count("run") >= 10 and all(names[i - 1] == "warm" for i in timed), names
    # and one more before the threads are counted (ThreadWatch): the pool it starts is the
    # harness's, not a thread the kernel left running (an honest 1x1x32x32 FAILed so)
    first = names.index("prepare") + 1
    assert names[first] == "warm" and names.count("warm") == len(timed) + 1, names
    warm = [rt for op, rt in ops if op == "warm"]
    assert min(warm) >= speedworker.WARM_S, warm  # deadline-bound on the worker's clock
