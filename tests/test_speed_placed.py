"""A CPU worker's inputs are written by the harness into the worker's own buffers, its whole
process tree stopped, just before the run request that lets it go (issue 35,
:mod:`flashbench.timed.placed`). Before, a thread kept since the warm-up computed each new
content while the worker copied it in (``fill``) and readied its calls (``stage``), and the
timed calls looked the outputs up: PASS, 16x over its honest twin, 33 of 33 calls served
(a red-team probe, 2026-12-06)."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from flashbench.cli import main
from flashbench.timed import guard
from flashbench.timed.placed import Hold, Placer, PlacesRefused

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
def kernels(tmp_path, monkeypatch):
    (tmp_path / "fbplaced.py").write_text(KERNELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("PLACED_LOG", str(tmp_path / "log.txt"))
    (tmp_path / "log.txt").write_text("")
    yield tmp_path / "log.txt"
    sys.modules.pop("fbplaced", None)


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


def test_a_worker_that_names_false_buffers_fails_by_name(kernels, capsys, monkeypatch):
    monkeypatch.setenv("PLACED_LIE", "1")
    rc, rows = _rows(capsys, "--shape", "1x2x64x32", "--only", "fbplaced:honest")
    row = rows["fbplaced:honest"]
    assert rc == 1 and row["status"] == "FAIL", row
    assert "two of its worker's input buffers overlap" in row["reason"], row["reason"]


def test_where_the_harness_may_not_write_the_worker_it_copies_its_inputs_in(
        kernels, capsys, monkeypatch):
    """The fills' path (a harness that may not open /proc/<worker>/mem for writing): an
    honest kernel passes, and its inputs are still compared after its calls."""
    monkeypatch.setattr(Placer, "of", classmethod(lambda cls, *a: None))
    rc, rows = _rows(capsys, "--shape", "1x2x64x32", "--only", "fbplaced:honest")
    assert rc == 0 and rows["fbplaced:honest"]["status"] == "PASS", rows


def test_places_must_be_the_slots_own_buffers():
    slots = [(torch.zeros(4), torch.zeros(2), None), (torch.zeros(4), torch.zeros(2), None)]
    good = [[[1000, 16], [2000, 8], None], [[3000, 16], [4000, 8], None]]
    assert Placer(os.getpid(), good, slots).places[1][0] == (3000, 16)
    for bad, why in (
            ([[[1000, 16], [1008, 8], None], good[1]], "overlap"),
            ([[[1000, 12], [2000, 8], None], good[1]], "argument 1"),
            ([[[1000, 16], [2000, 8], [5000, 4]], good[1]], "argument 3"),
            ([good[0]], "another pool"),
            ([[["x", 16], [2000, 8], None], good[1]], "[address, bytes]")):
        with pytest.raises(PlacesRefused, match=fr"{why}"):
            Placer(os.getpid(), bad, slots)


def test_a_placer_writes_and_reads_back_another_process_memory():
    """The write lands at the named address in the other process; a change made there
    after it is found by the read-back."""
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent("""
            import sys, time, torch
            x = torch.zeros(8)
            print(x.data_ptr(), flush=True)
            sys.stdin.readline()
            print(float(x.sum()), flush=True)
            x[3] = -1.0
            sys.stdin.readline()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        address = int(child.stdout.readline())
        args = (torch.arange(8, dtype=torch.float32),)
        placer = Placer.of(child.pid, [[[address, 32]]], [args])
        if placer is None:
            pytest.fail("this process may not write its own child's memory here")
        placer.place([], [0], [args], 0, None).release()
        child.stdin.write("\n")
        child.stdin.flush()
        assert float(child.stdout.readline()) == float(args[0].sum())
        time.sleep(0.1)
        hold = Hold(child.pid)
        try:
            assert placer.changed(0, args) == [0]
        finally:
            hold.release()
            placer.close()
    finally:
        child.kill()
        child.wait()


def test_a_hold_stops_a_helper_in_a_session_of_its_own():
    """A descendant that left the worker's process group is stopped by the hold too."""
    worker = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent("""
            import os, subprocess, sys, time
            helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                      start_new_session=True)
            print(helper.pid, flush=True)
            time.sleep(60)
        """)], stdout=subprocess.PIPE, text=True, start_new_session=True)
    helper = int(worker.stdout.readline())
    try:
        hold = Hold(worker.pid)
        states = {p: _state(p) for p in (worker.pid, helper)}
        hold.release()
        assert states == {worker.pid: "T", helper: "T"}, states
        assert _state(helper) != "T" or _settled(helper)
    finally:
        for pid in (helper, worker.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        worker.wait()


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def _settled(pid: int) -> bool:
    """The helper let go: no longer stopped within a second."""
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        if _state(pid) != "T":
            return True
        time.sleep(0.01)
    return False
