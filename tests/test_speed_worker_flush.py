"""A user's kernel on a GPU is timed as the built-ins are, each call after an L2 flush (the
worker's, outside its own clock), and every empty request the harness subtracts makes as many
flushes as a run request of k calls (a run with fewer calls left in its round pads them), so
that a run's round trip less an empty one is the calls' alone. Driven here in-process with a
counting stand-in for the flusher (this machine has no GPU; on a CPU there is no flush).
Before this change a user's calls ran back to back with the L2 warm, the built-ins' cold."""

import sys
import textwrap

import pytest

from flashbench.backends.child import Server
from flashbench.measure.workerpool import harness_pool
from flashbench.timed import guard
from flashbench.timed.shared import share

KERNEL = textwrap.dedent('''
    import torch

    def attn(q, k, v, causal=False, scale=None):
        return torch.softmax(q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5, -1) @ v
''')


@pytest.fixture
def server(tmp_path, monkeypatch):
    (tmp_path / "fbflush.py").write_text(KERNEL)
    monkeypatch.syspath_prepend(str(tmp_path))
    events = []
    monkeypatch.setattr(guard, "l2_flusher", lambda device: lambda: events.append("flush"))
    srv = Server("fbflush:attn")
    yield srv, events
    sys.modules.pop("fbflush", None)


def test_each_call_follows_a_flush_and_the_empty_requests_match_a_full_run(server):
    srv, events = server
    pool = harness_pool("1x2x16x16x8", "fp32", 4, 3)
    shared = share(pool)
    try:
        srv.handle({"op": "prepare", "shared": shared.spec(), "causal": False, "warmup": [0],
                    "direction": "fwd", "variant": {}})
    finally:
        shared.unlink()
    srv.handle({"op": "fill", "slots": [1, 2, 3]})
    staged = srv.handle({"op": "stage", "slots": [1, 2, 3]})["staged"]
    events.clear()
    reply = srv.handle({"op": "run", "flushes": 5})
    assert "failed" not in reply and len(reply["own_s"]) == staged == 3
    assert events == ["flush"] * 5  # 2 to pad the run to k = 5 calls' flushes, 1 per call
    events.clear()
    srv.handle({"op": "null", "flushes": 5})
    assert events == ["flush"] * 5
    events.clear()
    srv.handle({"op": "null"})  # the harness's settle and sync probes: no flush
    assert events == []
