"""The review's worker script on a tiny suite: discovery, calibrated timing, tracks,
skips, failures, what the suites print, and fresh-process peak memory."""

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from flashbench.review.worker_client import Worker, lane_cpus, peak_memory

SUITE = '''
import os
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


COUNT = os.path.join(os.path.dirname(__file__), "long_calls.txt")  # a timing runs in a child


def time_long():
    with open(COUNT, "a") as f:
        f.write("1")
    time.sleep(0.03)


def track_long_calls():
    return float(os.path.getsize(COUNT)) if os.path.exists(COUNT) else 0.0


def time_broken():
    raise RuntimeError("broken on purpose")


def peakmem_big():
    bytearray(200 * 1024 * 1024)


def track_torch_imported():
    import sys
    return float("torch" in sys.modules)
'''


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("tree")
    (root / "benchmarks").mkdir()
    (root / "benchmarks" / "__init__.py").write_text("")
    (root / "benchmarks" / "suite.py").write_text(textwrap.dedent(SUITE))
    return root


@pytest.fixture(scope="module")
def worker(tree):
    """One worker for the module's one-sided requests; a test that kills it leaves it
    restarted."""
    w = Worker("base", {"base": tree}, tree / "benchmarks", tree / "w.log").start()
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
    # calibrated toward 10 ms a sample; a calibration call slowed by load gives fewer calls
    # (CI, 2026-12-03: number 3, then 2.1 ms a call: 6.3 ms), so half of it is what holds
    assert r["number"] >= 2 and r["number"] * min(r["samples"]) >= 0.005
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


def test_a_call_longer_than_a_sample_calibrates_with_that_one_call(worker):
    """Calibration blocks are discarded by the sampler: for a call longer than a sample
    (number 1) the calibrating call is the block's sample, not a second call."""
    before = worker.ask(op="track", name="suite.track_long_calls", index=0)["value"]
    r = worker.ask(op="time", name="suite.time_long", index=0, number=0, samples=1)
    after = worker.ask(op="track", name="suite.track_long_calls", index=0)["value"]
    assert r["status"] == "ok" and r["number"] == 1 and len(r["samples"]) == 1
    assert 0.03 <= r["samples"][0] < 0.5
    assert after - before == 1
    r = worker.ask(op="time", name="suite.time_long", index=0, number=0, samples=2)
    assert len(r["samples"]) == 2  # the first call, then one more
    assert worker.ask(op="track", name="suite.track_long_calls", index=0)["value"] == after + 2


def test_each_timing_worker_gets_cpus_of_its_own(monkeypatch):
    import os

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert lane_cpus(1) == [frozenset({3})]
    assert lane_cpus(1, 2) == [frozenset({3}), frozenset({2})]
    assert lane_cpus(2, 2) == [frozenset({2, 3}), frozenset({0, 1})]
    assert lane_cpus(4) == [None]  # one worker on every CPU: left to the scheduler
    assert lane_cpus(8) == [None]  # more threads than CPUs: one worker, unpinned
    with pytest.raises(ValueError, match="needs 5 CPUs; this process may use 4"):
        lane_cpus(1, 5)
    with pytest.raises(ValueError, match="needs --threads"):
        lane_cpus(None, 2)
    from flashbench.review import Options

    Options(jobs=2, threads=2).check()
    Options(jobs=2, reuse=True).check()  # no workers with --reuse (a note says so)
    for bad, why in ((Options(jobs=2), "needs --threads"),
                     (Options(jobs=3, threads=2), "needs 6 CPUs; this process may use 4"),
                     (Options(jobs=0), "jobs must be an integer >= 1"),
                     (Options(jobs=True), "jobs must be an integer >= 1")):
        with pytest.raises(ValueError, match=why):
            bad.check()


def test_the_worker_can_be_pinned_to_one_cpu(tree, tmp_path):
    """With --threads N, the timing worker runs on the last N CPUs; without --threads
    it is not pinned."""
    import os

    allowed = sorted(os.sched_getaffinity(0))
    assert lane_cpus(None) == [None]
    (cpus,) = lane_cpus(1)
    if len(allowed) == 1:
        assert cpus is None  # nothing to choose: one CPU
        return
    assert cpus == frozenset(allowed[-1:])
    w = Worker("timing", {"base": tree, "head": tree}, tree / "benchmarks",
               tmp_path / "w.log", 1, cpus)
    try:
        w.start()
        assert os.sched_getaffinity(w.proc.pid) == cpus
        for side in ("base", "head"):
            assert w.ask(side=side, op="track", name="suite.Things.track_value",
                         index=0)["value"] == 10.0
    finally:
        w.stop()


# --------------------------------------- both commits in one process (modules kept apart)

TWO_SIDED_SUITE = """
import flashbench


def track_commit():
    return flashbench.VALUE


def track_lazy():
    from flashbench.lazy import LAZY  # imported inside the call, first under either side
    return LAZY


def track_pid():
    import os
    return float(os.getpid())


def track_ppid():
    import os
    return float(os.getppid())


def track_child_process_imports_the_commit():
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", "import flashbench; print(flashbench.VALUE)"],
                         cwd="/", capture_output=True, text=True, check=True).stdout
    return float(out)


def track_cwd_is_the_tree():
    import os
    return float(os.path.exists("which_tree_" + str(int(flashbench.VALUE))))


def time_sleep_by_commit():  # head (VALUE 2) sleeps twice as long; every call logged
    import os
    import time
    with open(os.path.join(os.path.dirname(__file__), "calls.log"), "a") as f:
        f.write(f"{int(flashbench.VALUE)}\\n")
    time.sleep(0.015 * flashbench.VALUE)  # long enough that load adds little


def track_colorsys_hooked():  # a shared module imported first in a call
    import colorsys
    return float(getattr(colorsys, "HOOKED", 0.0))


class NotInHead:
    def setup(self):
        if flashbench.VALUE == 2.0:
            raise NotImplementedError("not in this commit")

    def time_nothing(self):
        pass
"""


def _commit_tree(root: Path, value: float, broken: bool = False) -> Path:
    pkg = root / "flashbench"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('this commit is broken')\n" if broken
                                     else f"VALUE = {value}\n")
    (pkg / "lazy.py").write_text(f"LAZY = {value * 10}\n")
    (root / f"which_tree_{int(value)}").write_text("")
    return root


@pytest.fixture(scope="module")
def two_sided(tmp_path_factory):
    top = tmp_path_factory.mktemp("two")
    bench = top / "today" / "benchmarks"
    bench.mkdir(parents=True)
    (bench / "__init__.py").write_text("")
    (bench / "suite.py").write_text(textwrap.dedent(TWO_SIDED_SUITE))
    return bench, _commit_tree(top / "base", 1.0), _commit_tree(top / "head", 2.0)


@pytest.fixture(scope="module")
def both(two_sided):
    """One worker holding base and head for the module's two-sided requests."""
    bench, base, head = two_sided
    w = Worker("timing", {"base": base, "head": head}, bench, bench.parent / "w.log").start()
    yield w
    w.stop()


@pytest.fixture(scope="module")
def with_broken(two_sided):
    """One worker holding base and a head whose flashbench does not import."""
    bench, base, _ = two_sided
    broken = _commit_tree(bench.parent.parent / "broken", 3.0, broken=True)
    w = Worker("timing", {"base": base, "head": broken}, bench,
               bench.parent / "b.log").start()
    yield w
    w.stop()


def test_one_process_runs_each_commits_own_code(both):
    """Base and head share one process (a process's own speed cancels in each round's
    ratio) yet each request runs its own commit's modules: imports at load time, imports
    inside the call (first made under either side), and the working directory."""
    w = both
    assert w.errors == {}

    def track(side, name):
        r = w.ask(side=side, op="track", name=f"suite.{name}", index=0)
        assert r["status"] == "ok", r
        return r["value"]

    assert [track(s, "track_commit") for s in ("base", "head", "head", "base")] == [
        1.0, 2.0, 2.0, 1.0]
    assert track("head", "track_lazy") == 20.0  # first imported under head
    assert track("base", "track_lazy") == 10.0  # then under base: base's own file
    assert track("head", "track_lazy") == 20.0
    # each request in a process of its own, forked from the one worker both sides share
    assert track("base", "track_ppid") == track("head", "track_ppid") == w.proc.pid
    assert track("base", "track_pid") != track("head", "track_pid")
    # a child process (peak memory tracks measure in one) imports that commit's too
    assert track("head", "track_child_process_imports_the_commit") == 2.0
    assert track("base", "track_child_process_imports_the_commit") == 1.0
    assert track("base", "track_cwd_is_the_tree") == 1.0
    assert track("head", "track_cwd_is_the_tree") == 1.0
    timed = w.ask(side="head", op="time", name="suite.track_commit", index=0, number=0,
                  samples=1)
    assert timed["status"] == "ok"
    with pytest.raises(Exception, match="no side 'other'"):
        w.ask(side="other", op="track", name="suite.track_commit", index=0)


def test_a_pair_interleaves_both_commits_samples_abba(two_sided, both, with_broken):
    """op "pair": both sides set up, one warm-up call each, then samples alternating
    A B B A A B ..., each run with its own commit's modules."""
    bench = two_sided[0]
    log = bench / "calls.log"
    log.unlink(missing_ok=True)
    w = both
    r = w.ask_pair(("head", "base"), name="suite.time_sleep_by_commit", index=0,
                   number=2, samples=3)
    assert r["status"] == "ok" and r["number"] == 2, r
    assert len(r["base"]) == len(r["head"]) == 3
    assert 1.5 < min(r["head"]) / min(r["base"]) < 2.5  # each its own commit's code
    assert log.read_text().split() == (["2", "1"] + ["2"] * 2 + ["1"] * 4 + ["2"] * 4
                                       + ["1"] * 2)  # warm-ups, then H B B H H B
    skipped = w.ask_pair(("base", "head"), name="suite.NotInHead.time_nothing",
                         index=0, number=1, samples=1)
    assert (skipped["status"], skipped["side"]) == ("skipped", "head"), skipped
    assert "not in this commit" in skipped["reason"]
    with pytest.raises(Exception, match="a pair needs two"):
        w.ask_pair(("base", "base"), name="suite.time_sleep_by_commit", index=0,
                   number=1, samples=1)
    with pytest.raises(Exception, match="calibrated number"):
        w.ask_pair(("base", "head"), name="suite.time_sleep_by_commit", index=0,
                   number=0, samples=1)
    r = with_broken.ask_pair(("base", "head"), name="suite.time_sleep_by_commit", index=0,
                             number=1, samples=1)
    assert (r["status"], r["side"]) == ("failed", "head")
    assert "this commit is broken" in r["reason"]


def test_a_two_sided_worker_that_dies_is_restarted_with_both_sides(both):
    w = both
    first = w.proc.pid
    w.proc.kill()
    w.proc.wait()
    assert w.ask(side="head", op="track", name="suite.track_commit", index=0)[
        "value"] == 2.0  # restarted for the request
    assert w.proc.pid != first
    assert w.ask(side="base", op="track", name="suite.track_commit", index=0)[
        "value"] == 1.0


def test_a_commit_whose_suites_do_not_import_fails_only_its_side(with_broken):
    w = with_broken
    assert list(w.errors) == ["head"]  # issue 36 (12): it names the cause, not discovery
    assert w.errors["head"] == ("its flashbench failed to import: ImportError: this commit "
                                "is broken")
    r = w.ask(side="head", op="track", name="suite.track_commit", index=0)
    assert r["status"] == "failed" and "this commit is broken" in r["reason"]
    assert w.ask(side="base", op="track", name="suite.track_commit", index=0)[
        "value"] == 1.0


def test_a_commit_whose_tree_shadows_a_shared_library_is_refused(two_sided):
    """A head whose tree holds numpy.py would have its own numpy under the suites' checks
    (its tree is first on the path): refused by name; base is measured as before."""
    bench, base, _ = two_sided
    shadow = _commit_tree(bench.parent.parent / "shadow", 4.0)
    (shadow / "numpy.py").write_text("def dot(a, b):\n    return 0\n")
    w = Worker("timing", {"base": base, "head": shadow}, bench, bench.parent / "s.log").start()
    try:
        assert list(w.errors) == ["head"] and "its tree holds numpy.py" in w.errors["head"]
        assert w.ask(side="base", op="track", name="suite.track_commit", index=0)[
            "value"] == 1.0
    finally:
        w.stop()


HOOKING_IMPORT = """
import importlib.abc
import importlib.machinery
import sys


class Hooked(importlib.abc.MetaPathFinder):  # colorsys, marked (or slowed) wherever imported
    def find_spec(self, name, path=None, target=None):
        if name != "colorsys":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        real = spec.loader

        class Loader(importlib.abc.Loader):
            def exec_module(self, module):
                real.exec_module(module)
                module.HOOKED = 1.0

        spec.loader = Loader()
        return spec


sys.meta_path.insert(0, Hooked())
VALUE = 5.0
"""


def test_a_finder_one_side_adds_never_imports_the_others_modules(two_sided):
    """A head whose import puts a finder on sys.meta_path that hooks a shared module (one
    base imports lazily, in its calls) slowed base's calls: "faster", exit 0 (a probe,
    2026-12-05). Each side's finders are its own (libwatch.Importers): base's calls, and
    the worker's own import of what a call imported, never go through head's finder, first
    or second; head's own calls do."""
    bench, base, _ = two_sided
    hooking = _commit_tree(bench.parent.parent / "hooking", 5.0)
    (hooking / "flashbench" / "__init__.py").write_text(HOOKING_IMPORT)

    def hooked(w, side):
        r = w.ask(side=side, op="track", name="suite.track_colorsys_hooked", index=0)
        assert r["status"] == "ok", r
        return r["value"]

    for first in ("head", "base"):
        w = Worker("timing", {"base": base, "head": hooking}, bench,
                   bench.parent / f"hook-{first}.log", process="request").start()
        try:
            assert w.errors == {} and w.per_request[0]
            if first == "head":
                assert hooked(w, "head") == 1.0  # its finder works for its own calls
            assert hooked(w, "base") == 0.0
            assert hooked(w, "base") == 0.0  # imported in the worker since, through none
        finally:
            w.stop()


def test_a_side_whose_import_loads_a_shared_module_through_its_own_finder_is_refused(
        two_sided):
    """The same finder, and colorsys imported by head's own import: the hooked module was
    the one both sides held (before, base's calls read it: 1.0). Now head is refused by
    name at its import, the module is dropped, and base imports its own."""
    bench, base, _ = two_sided
    hooking = _commit_tree(bench.parent.parent / "hooking-at-import", 6.0)
    (hooking / "flashbench" / "__init__.py").write_text(HOOKING_IMPORT + "import colorsys\n")
    w = Worker("timing", {"base": base, "head": hooking}, bench,
               bench.parent / "hook-import.log", process="request").start()
    try:
        assert list(w.errors) == ["head"], w.errors
        assert "colorsys imported through a finder of its own" in w.errors["head"]
        r = w.ask(side="base", op="track", name="suite.track_colorsys_hooked", index=0)
        assert (r["status"], r["value"]) == ("ok", 0.0), r
    finally:
        w.stop()


def test_a_closed_worker_is_never_started_again(tree, tmp_path):
    """After close() (the review ending, or interrupted, while a sampling thread still
    runs) a request raises instead of starting a new process."""
    from flashbench.review.worker_client import WorkerError

    w = Worker("timing", {"timing": tree}, tree / "benchmarks", tmp_path / "w.log").start()
    w.close()
    assert w.proc is None
    with pytest.raises(WorkerError, match="was closed"):
        w.ask(op="track", name="suite.Things.track_value", index=0)
    with pytest.raises(WorkerError, match="was closed"):
        w.ask_pair(("timing", "timing"), name="suite.time_long", index=0, number=1)
    assert w.proc is None


def test_tracks_return_their_value(worker):
    assert worker.ask(op="track", name="suite.Things.track_value", index=0) == {
        "status": "ok", "value": 10.0}


def test_a_numpy_suite_is_served_without_torch(worker):
    """The watch of the shared libraries imports nothing ahead of need: it imported torch
    and torch._dynamo before the first snapshot (2.9 s of CPU each worker start, in
    reviews of numpy-only suites too); tests/test_libwatch.py holds it as strict."""
    assert worker.ask(op="track", name="suite.track_torch_imported", index=0) == {
        "status": "ok", "value": 0.0}


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


def test_listing_is_a_workers_and_imports_no_guard(tree, worker, tmp_path):
    """list_suites lists what a serving worker lists, from a process that only imports
    the suites: before, it was a worker, whose guard imported torch._dynamo first (~2 s
    of CPU per review; this test's last suite saw it imported). A broken suite is named."""
    from flashbench.review.worker_client import WorkerError, list_suites

    assert list_suites(tree, tree / "benchmarks", tmp_path / "l.log") == worker.ask(
        op="list")["benchmarks"]
    bench = tmp_path / "listed" / "benchmarks"
    bench.mkdir(parents=True)
    (bench / "__init__.py").write_text("")
    (bench / "suite.py").write_text(textwrap.dedent(f"""
        import sys
        with open({str(tmp_path / "seen")!r}, "w") as f:
            f.write(str("torch._dynamo" in sys.modules))

        def track_one():
            return 1.0
        """))
    assert [b["name"] for b in list_suites(bench.parent, bench, tmp_path / "l.log")] == [
        "suite.track_one"]
    assert (tmp_path / "seen").read_text() == "False"
    (bench / "suite.py").write_text("import no_such_module\n")
    with pytest.raises(WorkerError, match="do not import: exit 1 .*no_such_module"):
        list_suites(bench.parent, bench, tmp_path / "l.log")


def test_script_alone_prints_usage():
    script = Path(__file__).resolve().parents[1] / "flashbench" / "review" / "worker_process.py"
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert r.returncode == 2 and "worker_process.py serve BENCHMARK_DIR SIDE=TREE" in r.stderr
    assert "peakmem" in r.stderr


# ------------------------------------------------ asv_runner's private API (finding 10)

API_SUITE = '''
import os
import time

CALLS = os.environ["API_CALLS"]


def _note(text):
    with open(CALLS, "a") as f:
        f.write(text + "\\n")


class Api:
    params = ([1, 2, 3], ["a", "b"])
    param_names = ["n", "s"]
    skip_params = [(3, "b")]
    timeout = 7

    def setup_cache(self):
        _note("setup_cache")
        return {"scale": 100.0}

    def setup(self, cache, n, s):
        if n == 2:
            raise NotImplementedError("n=2 is not in this commit")
        self.value = cache["scale"] * n + (s == "b")

    def teardown(self, cache, n, s):
        _note(f"teardown {n} {s}")

    def track_value(self, cache, n, s):
        return self.value

    def time_ticks(self, cache, n, s):
        pass

    time_ticks.timer = lambda: time.perf_counter() * 1e6  # the suite's own clock (us)


def peakmem_some():
    bytearray(50 * 1024 * 1024)
'''

EXERCISE = r'''
import json, os, sys
import asv_runner.discovery as discovery

USED = set()


class Spy:
    """A benchmark whose attribute reads are recorded."""

    def __init__(self, real):
        object.__setattr__(self, "_real", real)

    def __getattr__(self, name):
        USED.add(name)
        return getattr(object.__getattribute__(self, "_real"), name)


disc, by_name = discovery.disc_benchmarks, discovery.get_benchmark_from_name
discovery.disc_benchmarks = lambda root: [Spy(b) for b in disc(root)]
discovery.get_benchmark_from_name = lambda root, name: Spy(by_name(root, name))

sys.path.insert(0, os.path.dirname(sys.argv[1]))
import worker_process as worker

root = sys.argv[2]
suites = worker.Suites(root)
out = {"list": suites.describe()}
track, time_ = "apisuite.Api.track_value", "apisuite.Api.time_ticks"
out["tracks"] = [worker.track_point(suites, {"name": track, "index": i}) for i in range(6)]
out["time"] = worker.time_point(suites, {"name": time_, "index": 0, "number": 0, "samples": 2})
only = worker.Suites(root, only="apisuite.peakmem_some")
out["only"] = sorted(only.benchmarks)
b, reply = only.prepare("apisuite.peakmem_some", 0)
out["peakmem_prepared"] = reply is None
out["used"] = sorted(USED)
print(json.dumps(out))
'''


def _benchmark_names_used_by_the_worker():
    """Attributes the worker reads on asv_runner's benchmark objects (always named ``b``
    there), and what it imports from asv_runner."""
    import ast

    script = Path(__file__).resolve().parents[1] / "flashbench" / "review" / "worker_process.py"
    tree = ast.parse(script.read_text())
    attrs, imports = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id == "b":
            attrs.add(node.attr)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr" \
                and isinstance(node.args[0], ast.Name) and node.args[0].id == "b":
            attrs.add(node.args[1].value)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("asv_runner"):
            imports |= {f"{node.module}.{a.name}" for a in node.names}
    return attrs, imports


def test_every_asv_runner_name_the_worker_uses_is_exercised(tmp_path):
    """The worker relies on asv_runner internals (_params, _skip_tuples, _current_params,
    _setups, _build_params, set_param_idx, do_setup_cache, _aux.update_sys_path,
    benchmarks._maxrss, ...), bounded in pyproject.toml (asv_runner>=0.3,<0.4). This runs
    every one of them on a suite with parameters, skip_params, setup_cache, a setup that
    skips, a teardown and a timer of its own, checks what they gave, and fails when the
    worker starts to use a name that it does not exercise."""
    import importlib.metadata
    import json
    import os

    version = tuple(int(x) for x in importlib.metadata.version("asv_runner").split(".")[:2])
    assert (0, 3) <= version < (0, 4), "pyproject.toml bounds asv_runner to 0.3.x"
    root = tmp_path / "benchmarks"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "apisuite.py").write_text(textwrap.dedent(API_SUITE))
    calls = tmp_path / "calls.log"
    script = Path(__file__).resolve().parents[1] / "flashbench" / "review" / "worker_process.py"
    r = subprocess.run([sys.executable, "-c", EXERCISE, str(script), str(root)],
                       capture_output=True, text=True, timeout=300,
                       env={**os.environ, "API_CALLS": str(calls)})
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    listing = {b["name"]: b for b in out["list"]}
    api = listing["apisuite.Api.track_value"]
    assert api["labels"][:2] == ["n=1, s='a'", "n=1, s='b'"] and len(api["labels"]) == 6
    assert api["not_applicable"] == [5] and api["timeout"] == 7  # (3, 'b'), _skip_tuples
    assert api["type"] == "track" and api["unit"] == "unit"
    assert isinstance(api["version"], str) and len(api["version"]) >= 16
    assert listing["apisuite.peakmem_some"]["type"] == "peakmemory"
    assert listing["apisuite.peakmem_some"]["unit"] == "bytes"
    tracks = out["tracks"]
    # setup_cache's value reaches setup; set_param_idx picks (n, s) in asv's order
    assert [t.get("value") for t in tracks[:2]] == [100.0, 101.0]
    assert tracks[2]["status"] == tracks[3]["status"] == "skipped"
    assert tracks[4] == {"status": "ok", "value": 300.0}
    assert tracks[5]["status"] == "not-applicable"
    log = calls.read_text().splitlines()
    assert log.count("setup_cache") == 1  # once per worker (setup_cache_key)
    assert "teardown 1 a" in log and "teardown 1 b" in log and "teardown 3 a" in log
    # the suite's timer counts microseconds: a no-op call takes about 0.1 of them (1e-7
    # of perf_counter's seconds), and calibration sized number by that clock
    assert out["time"]["status"] == "ok" and out["time"]["number"] < 1000
    assert min(out["time"]["samples"]) > 1e-3
    assert out["only"] == ["apisuite.peakmem_some"] and out["peakmem_prepared"]
    attrs, imports = _benchmark_names_used_by_the_worker()
    assert attrs, "the worker reads no benchmark attribute named b.<x>?"
    missing = attrs - set(out["used"])
    assert not missing, f"worker_process.py uses asv_runner names this test does not run: {missing}"
    assert imports == {"asv_runner._aux.update_sys_path",
                       "asv_runner.discovery.disc_benchmarks",
                       "asv_runner.discovery.get_benchmark_from_name",
                       "asv_runner.benchmarks._maxrss.get_maxrss"}, imports


def test_asv_runner_maxrss_is_in_bytes():
    """The worker's fallback where /proc is missing: asv_runner's get_maxrss (private)."""
    from asv_runner.benchmarks._maxrss import get_maxrss

    from flashbench.review.worker_process import peak_rss

    here = peak_rss()  # VmHWM of this process, bytes
    assert here > 10 * 2**20
    assert get_maxrss() >= 0.9 * here  # ru_maxrss, in bytes too (never below the peak)


def test_workers_run_without_numpys_huge_page_advice_unless_the_user_says(monkeypatch):
    """Huge-page compaction stalled about one large call in ten by 1.4-1.8x in either
    worker: the workers' environment turns numpy's advice off; a user's setting stands."""
    from flashbench.review.worker_client import HUGEPAGE_VARIABLE, _env

    monkeypatch.delenv(HUGEPAGE_VARIABLE, raising=False)
    assert _env(Path("/tmp"))[HUGEPAGE_VARIABLE] == "0"
    monkeypatch.setenv(HUGEPAGE_VARIABLE, "1")
    assert _env(Path("/tmp"))[HUGEPAGE_VARIABLE] == "1"


def test_a_hanging_request_is_awaited_aloud_and_bounded_by_what_its_point_took(
        tmp_path, monkeypatch):
    """A head whose timed call hung kept a --quick review silent for 18 minutes (each
    request may run 2 x the suite's timeout + 60 s). Now a line a minute says what is
    awaited, and once a point has answered, its next request may run 20 x its calls at
    the slowest call seen (at least 60 s)."""
    import subprocess
    import sys

    from flashbench.review import run as review_run
    from flashbench.review import worker_client
    from flashbench.review.ab import Point
    from flashbench.review.worker_client import Worker

    monkeypatch.setattr(worker_client, "WAIT_LINE_S", 0.2)
    w = Worker("timing", {}, tmp_path, tmp_path / "w.log")
    lines = []
    w.say = lines.append
    w.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        reply = w.ask(timeout=0.9, side="head", op="time", name="bench.TimeX.time_x")
    finally:
        w.stop()
    assert reply == {"status": "failed", "reason": "timed out after 1 s"}
    assert len(lines) >= 2 and lines[0].startswith("still waiting on head of "
                                                   "bench.TimeX.time_x after 0 s"), lines

    asked = []

    class Fake:
        def ask(self, timeout, side, **request):
            asked.append(timeout)
            return {"status": "ok", "number": 10, "samples": [0.003, 0.004]}

        ask_pair = None

    lane = review_run._lane(Fake())
    point = Point("bench.TimeX.time_x", 0, "x", "time", "seconds", 600.0)
    from types import SimpleNamespace as plan

    lane.measure(point, "base", plan(number=0, per_block=1, warmup=False))
    # head's first request: the full limit too (its setup and first compile are its own)
    lane.measure(point, "head", plan(number=0, per_block=1, warmup=False))
    lane.measure(point, "head", plan(number=1000, per_block=3, warmup=False))
    lane.measure(point, "head", plan(number=10, per_block=1, warmup=True))
    assert asked == [1260.0, 1260.0, min(1260.0, 20 * 0.004 * 1000 * 5), 60.0]
    review_run._lane(Fake(), 60.0).measure(point, "base", plan(number=0, per_block=1,
                                                               warmup=False))
    assert asked[-1] == 120.0  # a first request: at most twice the budget (--quick: 60 s)


def test_a_syntax_error_in_a_side_names_its_file_and_line(monkeypatch):
    """A head with a missing colon read "setup: SyntaxError: expected ':'", no file, no
    line: the reason now says where."""
    import importlib

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "flashbench"
                                    / "review"))  # the worker's script, as it runs
    worker = importlib.import_module("worker_process")
    try:
        compile("def f(:\n    pass\n", "/tree/flashbench/reference/oneshot.py", "exec")
    except SyntaxError as exc:
        said = worker._reason(exc)
    assert said.startswith("SyntaxError: ") and said.endswith(
        "(/tree/flashbench/reference/oneshot.py, line 1)"), said
