"""The review's worker under issue 35: a side whose timed outputs fail the suite's own check
(teardown) fails, and a side whose code replaces a function both sides share (numpy, time)
is refused by name, the other side unchanged. Before this change the worker swallowed
teardown errors and never compared the shared libraries: both heads were measured."""

import textwrap

import pytest

from flashbench.review.worker_client import Worker

SUITE = """
import numpy as np

import flashbench


class Fresh:
    def setup(self):
        self.slots = [np.zeros(1000) for _ in range(4)]
        self.i, self.kept = 0, []

    def time_call(self):
        x = self.slots[self.i % 4]
        x[0] = self.i  # same array, new contents
        self.kept.append((self.i, flashbench.double_first(x)))
        self.i += 1

    def teardown(self):
        for i, got in self.kept:
            if got != 2 * i:
                raise RuntimeError(f"call {i}: stale or wrong output {got}")


def track_numpy_sum():
    return float(np.sum([1.0, 2.0]))


def track_patches_the_clock():
    import time
    if flashbench.CHEAT == "clock":
        time.perf_counter = lambda: 0.0
    return 1.0
"""

HONEST = "CHEAT = None\n\ndef double_first(x):\n    return 2 * float(x[0])\n"
CHEATS = {
    "memo": "CHEAT = 'memo'\n_M = {}\n\ndef double_first(x):\n"
            "    if id(x) not in _M:\n        _M[id(x)] = 2 * float(x[0])\n    return _M[id(x)]\n",
    "numpy": "import numpy\nnumpy.sum = lambda *a, **k: 0.0\n" + HONEST,
    "clock": HONEST.replace("None", "'clock'"),
}


def _tree(root, text):
    (root / "flashbench").mkdir(parents=True)
    (root / "flashbench" / "__init__.py").write_text(text)
    return root


@pytest.fixture
def sides(tmp_path):
    bench = tmp_path / "today" / "benchmarks"
    bench.mkdir(parents=True)
    (bench / "__init__.py").write_text("")
    (bench / "suite.py").write_text(textwrap.dedent(SUITE))

    def start(head: str):
        trees = {"base": _tree(tmp_path / f"base-{head}", HONEST),
                 "head": _tree(tmp_path / f"head-{head}", CHEATS.get(head, HONEST))}
        return Worker("timing", trees, bench, tmp_path / f"{head}.log").start()

    return start


def test_a_head_that_memoises_on_id_fails_the_pair_and_base_stays_ok(sides):
    w = sides("memo")
    try:
        r = w.ask_pair(("base", "head"), name="suite.Fresh.time_call", index=0, number=4,
                       samples=3)
        assert (r["status"], r["side"]) == ("failed", "head"), r
        assert "stale or wrong output" in r["reason"]
        ok = w.ask(side="base", op="time", name="suite.Fresh.time_call", index=0, number=4,
                   samples=3)
        assert ok["status"] == "ok", ok
    finally:
        w.stop()
    honest = sides("honest")
    try:
        r = honest.ask_pair(("base", "head"), name="suite.Fresh.time_call", index=0, number=4,
                            samples=3)
        assert r["status"] == "ok", r
    finally:
        honest.stop()


def test_a_head_that_patches_numpy_at_import_is_refused_by_name(sides):
    w = sides("numpy")
    try:
        assert "head" in w.errors and "numpy.sum" in w.errors["head"], w.errors
        base = w.ask(side="base", op="track", name="suite.track_numpy_sum", index=0)
        assert base == {"status": "ok", "value": 3.0}  # the original was put back
        head = w.ask(side="head", op="track", name="suite.track_numpy_sum", index=0)
        assert head["status"] == "failed" and "numpy.sum" in head["reason"]
    finally:
        w.stop()


def test_a_call_that_patches_the_clock_refuses_its_side_from_then_on(sides):
    w = sides("clock")
    try:
        assert w.ask(side="base", op="track", name="suite.track_patches_the_clock",
                     index=0)["status"] == "ok"
        r = w.ask(side="head", op="track", name="suite.track_patches_the_clock", index=0)
        assert r["status"] == "failed" and "time.perf_counter" in r["reason"], r
        r = w.ask_pair(("base", "head"), name="suite.Fresh.time_call", index=0, number=2,
                       samples=2)
        assert (r["status"], r["side"]) == ("failed", "head")
        assert w.ask(side="base", op="track", name="suite.track_numpy_sum",
                     index=0)["status"] == "ok"
    finally:
        w.stop()
