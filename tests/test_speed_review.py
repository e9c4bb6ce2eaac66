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
    "urandom": "import os\nos.urandom = lambda n: bytes(n)\n" + HONEST,
    "rng": "import numpy.random\nnumpy.random.default_rng = lambda *a: None\n" + HONEST,
}


def _tree(root, text):
    (root / "flashbench").mkdir(parents=True)
    (root / "flashbench" / "__init__.py").write_text(text)
    return root


@pytest.fixture(scope="module")
def w(tmp_path_factory):
    """One worker holding an honest base and every head (each head a side of its own, as
    base and head are in a review): each start imports the guard's torch._dynamo."""
    tmp = tmp_path_factory.mktemp("speed")
    bench = tmp / "today" / "benchmarks"
    bench.mkdir(parents=True)
    (bench / "__init__.py").write_text("")
    (bench / "suite.py").write_text(textwrap.dedent(SUITE))
    trees = {"base": _tree(tmp / "base", HONEST), "honest": _tree(tmp / "honest", HONEST),
             **{head: _tree(tmp / head, text) for head, text in CHEATS.items()}}
    worker = Worker("timing", trees, bench, tmp / "w.log").start()
    yield worker
    worker.stop()


def test_a_head_that_memoises_on_id_fails_the_pair_and_base_stays_ok(w):
    r = w.ask_pair(("base", "memo"), name="suite.Fresh.time_call", index=0, number=4,
                   samples=3)
    assert (r["status"], r["side"]) == ("failed", "memo"), r
    assert "stale or wrong output" in r["reason"]
    ok = w.ask(side="base", op="time", name="suite.Fresh.time_call", index=0, number=4,
               samples=3)
    assert ok["status"] == "ok", ok
    r = w.ask_pair(("base", "honest"), name="suite.Fresh.time_call", index=0, number=4,
                   samples=3)
    assert r["status"] == "ok", r


def test_a_head_that_patches_numpy_at_import_is_refused_by_name(w):
    assert "numpy" in w.errors and "numpy.sum" in w.errors["numpy"], w.errors
    assert not {"base", "honest", "memo"} & set(w.errors), w.errors  # the others import
    base = w.ask(side="base", op="track", name="suite.track_numpy_sum", index=0)
    assert base == {"status": "ok", "value": 3.0}  # the original was put back
    head = w.ask(side="numpy", op="track", name="suite.track_numpy_sum", index=0)
    assert head["status"] == "failed" and "numpy.sum" in head["reason"]


def test_a_head_that_fixes_the_suites_seeds_at_import_is_refused_by_name(w):
    """Where the suites draw each run's seeds (os.urandom, numpy.random) is watched: a
    head that made os.urandom constant had every request's inputs known in advance, and
    precomputed them (all rows "faster", exit 0: a probe, 2026-12-05)."""
    assert "os.urandom" in w.errors["urandom"], w.errors
    assert "numpy.random.default_rng" in w.errors["rng"], w.errors
    assert not {"base", "honest", "memo"} & set(w.errors), w.errors
    r = w.ask_pair(("base", "honest"), name="suite.Fresh.time_call", index=0, number=4,
                   samples=3)
    assert r["status"] == "ok", r  # both put back for the others


def test_a_call_that_patches_the_clock_refuses_its_side_from_then_on(w):
    assert w.ask(side="base", op="track", name="suite.track_patches_the_clock",
                 index=0)["status"] == "ok"
    r = w.ask(side="clock", op="track", name="suite.track_patches_the_clock", index=0)
    assert r["status"] == "failed" and "time.perf_counter" in r["reason"], r
    r = w.ask_pair(("base", "clock"), name="suite.Fresh.time_call", index=0, number=2,
                   samples=2)
    assert (r["status"], r["side"]) == ("failed", "clock")
    assert w.ask(side="base", op="track", name="suite.track_numpy_sum",
                 index=0)["status"] == "ok"


CHEAT = '''

_honest_online_attention = online_attention
_MEMO = {}


def online_attention(q, k, v, *args, **kwargs):  # noqa: F811 - the cheat under review
    key = (id(q), id(k), id(v), args, tuple(sorted(kwargs.items())))
    if key not in _MEMO:
        _MEMO[key] = _honest_online_attention(q, k, v, *args, **kwargs)
    return _MEMO[key]
'''


@pytest.mark.slow
def test_a_head_that_memoises_the_reference_on_id_is_never_faster(tmp_path):
    """Issue 35's reproduction: on main this head was "faster, head/base 0.000, exit 0".
    Now every call sees new contents: a hit returns a stale row, which fails the head
    (exit 1), and a miss computes honestly: never "faster"."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    clone = tmp_path / "clone"
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(["git", "clone", "-q", str(root), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "-q", "-b", "cheat",
                    subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], check=True,
                                   capture_output=True, text=True).stdout.strip()], check=True)
    init = clone / "flashbench" / "reference" / "__init__.py"
    init.write_text(init.read_text() + CHEAT)
    subprocess.run([*git, "-C", str(clone), "commit", "-qam", "cheat"], check=True)
    base = subprocess.run(["git", "-C", str(clone), "rev-parse", "cheat~1"], check=True,
                          capture_output=True, text=True).stdout.strip()
    r = subprocess.run([sys.executable, "-m", "flashbench.cli", "review", base, "cheat",
                        "--bench", "TimeAttention.*1024x1024x64.*streamed", "--quick",
                        "--threads", "1", "--json"], cwd=clone, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(clone)}, timeout=900)
    report = json.loads(r.stdout)
    verdicts = [row.get("verdict") for row in report["rows"]]
    assert r.returncode in (0, 1, 2) and "faster" not in verdicts, (r.returncode, verdicts)
    failed = [row for row in report["rows"] if row.get("verdict") == "failed"]
    assert all("stale or wrong" in json.dumps(row) for row in failed)
