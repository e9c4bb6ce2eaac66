"""The review's worker script on a tiny suite: discovery, calibrated timing, tracks,
skips, failures, what the suites print, and fresh-process peak memory."""

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from flashbench.review.workers import Worker, peak_memory

SUITE = '''
import time


class Things:
    params = ([1, 2, 3],)
    param_names = ["n"]
    skip_params = [(3,)]

    def setup(self, n):
        print("suites may print; the protocol must not care")
        if n == 2:
            raise NotImplementedError("n=2 is not in this commit")

    def time_sleep(self, n):
        time.sleep(0.002)

    def track_value(self, n):
        return 10.0 * n


def time_broken():
    raise RuntimeError("broken on purpose")


def peakmem_big():
    bytearray(200 * 1024 * 1024)
'''


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("tree")
    (root / "benchmarks").mkdir()
    (root / "benchmarks" / "__init__.py").write_text("")
    (root / "benchmarks" / "suite.py").write_text(textwrap.dedent(SUITE))
    return root


@pytest.fixture
def worker(tree, tmp_path):
    w = Worker("base", tree, tree / "benchmarks", tmp_path / "w.log").start()
    yield w
    w.stop()


def test_discovery_lists_grid_points_and_declared_skips(worker):
    listing = {b["name"]: b for b in worker.ask(op="list")["benchmarks"]}
    things = listing["suite.Things.time_sleep"]
    assert things["labels"] == ["n=1", "n=2", "n=3"] and things["not_applicable"] == [2]
    assert things["type"] == "time" and things["unit"] == "seconds"
    assert listing["suite.Things.track_value"]["type"] == "track"
    assert listing["suite.peakmem_big"]["type"] == "peakmemory"


def test_timing_calibrates_to_ten_milliseconds_and_reports_statuses(worker):
    r = worker.ask(op="time", name="suite.Things.time_sleep", index=0, number=0, samples=3)
    assert r["status"] == "ok" and len(r["samples"]) == 3
    assert r["number"] >= 3 and r["number"] * min(r["samples"]) >= 0.009
    assert all(0.002 <= s < 0.05 for s in r["samples"])
    r = worker.ask(op="time", name="suite.Things.time_sleep", index=0, number=2, samples=1,
                   warmup=True)
    assert r["number"] == 2 and len(r["samples"]) == 1
    skipped = worker.ask(op="time", name="suite.Things.time_sleep", index=1, number=0, samples=1)
    assert skipped == {"status": "skipped", "reason": "NotImplementedError: n=2 is not in "
                       "this commit"}
    na = worker.ask(op="time", name="suite.Things.time_sleep", index=2, number=0, samples=1)
    assert na["status"] == "not-applicable"
    broken = worker.ask(op="time", name="suite.time_broken", index=0, number=0, samples=1)
    assert broken["status"] == "failed" and "broken on purpose" in broken["reason"]
    gone = worker.ask(op="time", name="suite.nothing", index=0, number=0, samples=1)
    assert gone["status"] == "missing"


def test_tracks_return_their_value(worker):
    assert worker.ask(op="track", name="suite.Things.track_value", index=0) == {
        "status": "ok", "value": 10.0}


def test_a_dead_worker_is_reported_and_restarted(worker):
    worker.proc.kill()
    worker.proc.wait()
    r = worker.ask(op="track", name="suite.Things.track_value", index=0)
    assert r == {"status": "ok", "value": 10.0}  # restarted for the request


def test_peak_memory_is_the_fresh_processs_own(tree, tmp_path):
    """A child of a large process must not report the parent's size (ru_maxrss would)."""
    big = np.ones(80_000_000)  # 640 MB in this process
    r = peak_memory(tree, tree / "benchmarks", "suite.peakmem_big", 0, tmp_path / "p.log", 120)
    assert r["status"] == "ok"
    assert 200 * 2**20 < r["value"] < 400 * 2**20, r
    del big


def test_script_alone_prints_usage():
    script = Path(__file__).resolve().parents[1] / "flashbench" / "review" / "worker.py"
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert r.returncode == 2 and "serve" in r.stderr
