"""The review's measuring process: a standalone script that holds both commits' code.

``serve``: today's suites once per commit's tree, kept apart (:class:`Sides`) in one process
whose speed cancels in each round's ratio (docs/review.md); JSON lines in and out. ``peakmem``:
a fresh process's peak memory. Only each side's own flashbench is imported (libwatch.import_own).

    python worker_process.py serve BENCHMARK_DIR SIDE=TREE [SIDE=TREE ...]
    python worker_process.py peakmem BENCHMARK_DIR NAME I
"""

import functools
import gc
import importlib.util
import itertools
import json
import math
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
if sys.path and os.path.abspath(sys.path[0] or ".") == HERE:
    del sys.path[0]  # the script's folder holds flashbench.review's modules: not top level

SAMPLE_SECONDS = 0.010  # one timing sample lasts at least this long
WARMUP_BELOW = 0.2  # a call cheaper than this gets an untimed call before its samples
LOADED = {}  # the harness's standalone modules (libwatch, pointfork), loaded by path (_load)


def _reason(exc: BaseException) -> str:  # a SyntaxError's place too: its text has none
    at = f" ({exc.filename}, line {exc.lineno})" if isinstance(exc, SyntaxError) else ""
    return traceback.format_exception_only(type(exc), exc)[-1].strip()[:500] + at


class Suites:
    """Today's benchmarks, discovered once, with their setup_cache values."""

    def __init__(self, root: str, only: str | None = None, importer: bool = True):
        from asv_runner._aux import update_sys_path
        from asv_runner.discovery import disc_benchmarks, get_benchmark_from_name

        if importer:  # once per process (Sides installs it before the first side)
            update_sys_path(root)
        if only is None:
            self.benchmarks = {b.name: b for b in disc_benchmarks(root)}
        else:  # only that benchmark's module is imported (a small baseline, as asv)
            self.benchmarks = {only: get_benchmark_from_name(root, only)}
        self.caches = {}

    def describe(self) -> list:  # each benchmark's grid: the review's labels and asv's
        out = []
        for name in sorted(self.benchmarks):
            b = self.benchmarks[name]
            combos = list(itertools.product(*b.params)) if b.params else [()]
            values = list(itertools.product(*b._params)) if b._params else [()]
            labels = [", ".join(map("=".join, zip(b.param_names, c, strict=True))) for c in combos]
            skips = {tuple(s) for s in b._skip_tuples}
            out.append({"name": name, "type": b.type, "unit": b.unit, "version": b.version,
                        "timeout": b.timeout, "labels": labels, "asv_labels": [
                            ", ".join(c) for c in combos],  # asv's own --bench form
                        "not_applicable": [i for i, v in enumerate(values) if v in skips]})
        return out

    def prepare(self, name: str, index: int, setup: bool = True):
        """Set up a grid point (``setup`` False: its setup_cache only): (b, None), (None, reply)."""
        b = self.benchmarks.get(name)
        if b is None:
            return None, {"status": "missing", "reason": f"no benchmark {name} here"}
        b.set_param_idx(index) if b.params else None
        if tuple(b._current_params) in {tuple(s) for s in b._skip_tuples}:
            return None, {"status": "not-applicable", "reason": "declared by skip_params"}
        if b._setup_cache is not None:
            if (key := b.setup_cache_key) not in self.caches:
                try:
                    self.caches[key] = ("ok", b.do_setup_cache())
                except NotImplementedError as exc:
                    self.caches[key] = ("skipped", _reason(exc))
                except Exception as exc:  # a suite's own failure: reported, not fatal
                    self.caches[key] = ("failed", "setup_cache: " + _reason(exc))
            state, value = self.caches[key]
            if state != "ok":
                return None, {"status": state, "reason": value}
            b.set_cache(value)
        try:
            for step in b._setups if setup else ():
                step(*b._build_params())
        except NotImplementedError as exc:
            return None, {"status": "skipped", "reason": _reason(exc)}
        except Exception as exc:
            return None, {"status": "failed", "reason": "setup: " + _reason(exc)}
        return b, None

    @staticmethod
    def teardown(b) -> str | None:
        """The first teardown's failure (a suite checks its timed outputs there), or None."""
        failed = None
        for teardown in b._teardowns:
            try:
                teardown(*b._build_params())
            except Exception as exc:
                failed = failed or "teardown: " + _reason(exc)
        return failed


def _sample(func, number: int, timer=time.perf_counter) -> float:
    enabled = gc.isenabled()
    gc.disable()
    try:
        start = timer()
        for _ in range(number):
            func()
        return timer() - start
    finally:
        if enabled:
            gc.enable()


def _run(suites: Suites, req: dict, measure, skips: bool = True) -> dict:
    """``measure(b)`` of the grid point ``req`` names, between its setup and teardown; an
    exception is "failed" (NotImplementedError "skipped" where ``skips``)."""
    b, reply = suites.prepare(req["name"], req["index"])
    if b is None:
        return reply
    try:
        reply = measure(b)
    except Exception as exc:
        skipped = skips and isinstance(exc, NotImplementedError)
        reply = {"status": "skipped" if skipped else "failed", "reason": _reason(exc)}
    failed = suites.teardown(b)  # a suite's check of its timed outputs fails the point
    return {"status": "failed", "reason": failed} if failed and reply["status"] == "ok" else reply


def _call(b):
    """(one call of ``b``, its timer: the suite's own, as asv's)."""
    timer = getattr(b, "timer", None) or time.perf_counter
    return functools.partial(b.func, *b._build_params()), timer


def time_point(suites: Suites, req: dict) -> dict:
    """Per-call seconds of ``samples`` samples; ``number`` 0 calibrates it first."""

    def measure(b):
        func, timer = _call(b)
        number, samples = int(req.get("number") or 0), []
        if number <= 0:  # calibrate: the first calls are also the warm-up; a call under a
            once = _sample(func, 1, timer)  # sample: the faster of two (a slow first, a late wake)
            once = min(once, _sample(func, 1, timer)) if once < SAMPLE_SECONDS else once
            number = max(1, math.ceil(1.2 * SAMPLE_SECONDS / max(once, 1e-9)))
            if once < WARMUP_BELOW and number > 1:
                _sample(func, number, timer)
            elif number == 1:  # a call longer than a sample: it is the calibration's sample
                samples.append(once)  # (the sampler discards calibration blocks)
        elif req.get("warmup"):
            _sample(func, 1, timer)
        while len(samples) < max(1, int(req.get("samples", 1))):
            samples.append(_sample(func, number, timer) / number)
        return {"status": "ok", "number": number, "samples": samples}

    return _run(suites, req, measure, skips=False)


class Lane:
    """One side of a pair: set up with an untimed call (:meth:`open`), samples of ``number``
    calls, its teardown (:meth:`close`). Each in a process of its own: forklane.ForkedLane."""

    def __init__(self, sides: "Sides", side: str, req: dict, number: int):
        self.sides, self.side, self.req, self.number, self.b = sides, side, req, number, None

    def open(self) -> dict | None:
        """None, or the failure that ends the pair (naming this side)."""
        sides, side = self.sides, self.side
        sides.use(side)
        b, reply = sides.suites[side].prepare(self.req["name"], self.req["index"])
        if b is None:
            return dict(reply, side=side)
        self.b, self.call, self.timer = b, *_call(b)
        _sample(self.call, 1, self.timer)  # it may not replace a shared function
        why = sides.refuse_changes(side, sides.entry, "a call of its code")
        return None if why is None else {"status": "failed", "side": side, "reason": why}

    def sample(self) -> float:
        self.sides.use(self.side)
        return _sample(self.call, self.number, self.timer) / self.number

    def close(self) -> str | None:
        """Its teardown's failure (its outputs failed the suite's check), or None."""
        self.sides.use(self.side)
        return None if self.b is None else self.sides.suites[self.side].teardown(self.b)


def pair_point(sides: "Sides", req: dict, lane=Lane) -> dict:
    """Both sides' calls of one grid point (op "pair"): one untimed call each, then
    samples in ABBA order, each side's modules put back before its sample (``lane``: how a
    side runs). Reply: each side's per-call seconds; a failure names its ``side``."""
    order, number = list(req.get("order") or []), int(req.get("number") or 0)
    if len(order) != 2 or len(set(order)) != 2 or not set(order) <= set(sides.trees):
        return {"error": f"a pair needs two of this worker's sides, got {order!r}"}
    if number <= 0:
        return {"error": "a pair needs the calibrated number of calls per sample"}
    for side in [s for s in order if s in sides.errors]:
        return {"status": "failed", "side": side, "reason": sides.errors[side]}
    lanes, side = {}, order[0]
    try:
        for side in order:
            lanes[side] = lane(sides, side, req, number)
            opened = lanes[side].open()
            if opened is not None:
                return opened
        samples = {s: [] for s in order}
        for k in range(max(1, int(req.get("samples", 1)))):
            for side in order if k % 2 == 0 else order[::-1]:
                samples[side].append(lanes[side].sample())
    except Exception as exc:  # forklane.MachineBusy: a busy machine, not measured
        return {"status": "busy" if type(exc).__name__ == "MachineBusy" else "failed",
                "side": side, "reason": _reason(exc)}
    finally:
        failed = {s: one.close() for s, one in lanes.items()}
    for side in [s for s in order if failed.get(s)]:  # its outputs failed the suite's check
        return {"status": "failed", "side": side, "reason": failed[side]}
    return {"status": "ok", "number": number, **samples}


def track_point(suites: Suites, req: dict) -> dict:
    def measure(b):
        value = b.func(*b._build_params())
        try:
            return {"status": "ok", "value": float(value)}
        except (TypeError, ValueError):
            return {"status": "failed", "reason": f"track returned {value!r}, not a number"}

    return _run(suites, req, measure)


def _load(name: str, *path: str):
    """A standalone module of flashbench/, loaded by path once (whatever a side holds)."""
    if name not in LOADED:
        spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, "..", *path))
        LOADED[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(LOADED[name])
    return LOADED[name]


_guard = functools.partial(_load, "libwatch", "infra", "libwatch.py")  # infra/libwatch.py


def entry_points() -> dict:
    """numpy's, torch's, time's callables and this script's timer (libwatch)."""
    return _guard().entry_points({f"worker_process.{n}": globals()[n] for n in (
        "_sample", "_call", "time_point", "pair_point")} | {
        f"worker_process.Lane.{n}": vars(Lane)[n] for n in ("open", "sample", "close")})


class Sides:
    """Each commit's copy of the suites and of the modules they import: a module named at
    the top of a tree (flashbench, the benchmarks package) is a side's, the rest (numpy,
    torch) is shared. :meth:`use` swaps them in ``sys.modules``, and the side's finders
    (libwatch.Importers), and puts its tree first on the path and as the working directory."""

    def __init__(self, root: str, trees: dict):
        from asv_runner._aux import update_sys_path

        self.trees = {side: os.path.abspath(tree) for side, tree in trees.items()}
        self.tops = {os.path.basename(os.path.normpath(root))} | {
            name for tree in self.trees.values() for name in _guard().top_level_names(tree)}
        self.modules = {side: {} for side in self.trees}
        self.pythonpath = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        self.suites, self.errors, self.active, self.imports = {}, {}, None, _guard().Importers()
        update_sys_path(root)
        for side in self.trees:
            self.use(side)
            before, names = entry_points(), set(sys.modules)
            try:
                _guard().refuse_shadows(self.trees[side])  # its own numpy would be the suites'
                self.suites[side] = Suites(root, importer=False)
                _guard().import_own(self.trees[side])
            except BaseException as exc:  # this commit's suites do not import
                self.errors[side] = _guard().discovery_error(exc, _reason(exc))
            self.refuse_changes(side, before, "its import", names)
        self.entry = entry_points()

    def refuse_changes(self, side: str, before: dict, when: str, names=None) -> str | None:
        """Refuse ``side`` when its code replaced a shared function (libwatch.refusal), or
        (``names``: sys.modules before its import) loaded a shared module (Importers.hooked)."""
        why = _guard().refusal(before, entry_points(), when, globals()) or (
            None if names is None else self.imports.hooked(names, self._owned))
        if why is not None:
            self.errors[side] = why
        return why

    def _owned(self, name: str) -> bool:
        return name != "__main__" and name.partition(".")[0] in self.tops

    def use(self, side: str) -> None:
        self.imports.use(side)
        if side == self.active:
            return
        owned = [n for n in list(sys.modules) if self._owned(n)]
        if self.active is not None:
            self.modules[self.active] = {n: sys.modules[n] for n in owned}
        for name in owned:
            del sys.modules[name]
        sys.modules.update(self.modules[side])
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") not in self.trees.values()]
        sys.path.insert(0, self.trees[side])
        # processes the suites start (peak memory tracks) import this side's flashbench too
        os.environ["PYTHONPATH"] = os.pathsep.join([self.trees[side]] + self.pythonpath)
        os.chdir(self.trees[side])
        self.active = side

    def answer(self, req: dict, lane=None) -> dict:  # lane: how a pair's sides run
        reply = self._answer(req, lane or Lane)
        ran = req.get("order") or [req.get("side")]  # a pair's later change: its first side's
        for side in [s for s in ran if s in self.trees and s not in self.errors]:
            if self.refuse_changes(side, self.entry, "a call of its code"):
                return {"status": "failed", "side": side, "reason": self.errors[side]}
        self.entry = entry_points()  # modules imported by the calls join the watch
        return reply

    def _answer(self, req: dict, lane) -> dict:
        if req.get("op") == "pair":
            return pair_point(self, req, lane)
        side = req.get("side")
        if side not in self.trees:
            return {"error": f"no side {side!r} in this worker (it has {', '.join(self.trees)})"}
        if side in self.errors:
            return {"status": "failed", "reason": self.errors[side]}
        self.use(side)
        op, suites = req.get("op"), self.suites[side]
        if op == "list":
            return {"benchmarks": suites.describe()}
        if op in ("time", "track"):
            return (time_point if op == "time" else track_point)(suites, req)
        return {"error": f"unknown op {op!r}"}


def serve(root: str, trees: dict, out) -> int:
    """A JSON reply line on ``out`` per request line on stdin, after ``{"ready": true, "pid",
    "errors": {side: why}, "process", "why"}``. Ops: ``list``, ``time``, ``pair``, ``track``,
    ``exit`` (where it forks, each timing in a process of its own: infra/pointfork). Reply
    ``status``: "ok", "skipped" (NotImplementedError), "not-applicable" (skip_params),
    "missing", "failed" (the error's last line in ``reason``)."""
    fork, why = (points := _load("pointfork", "infra", "pointfork.py")).wanted()
    points.adopt()  # a daemon a side's import leaves comes back to the worker (pointfork)
    try:
        sides = Sides(root, trees)
    except BaseException as exc:  # asv_runner itself failed
        out.write(json.dumps({"error": "cannot load the suites: " + _reason(exc)}) + "\n")
        out.flush()
        return 1
    out.write(json.dumps({"ready": True, "pid": os.getpid(), "errors": sides.errors,
                          "process": "request" if fork else "one", "why": why}) + "\n")
    out.flush()
    points.relay(sides, fork, sys.stdin, out, entry_points, Lane)
    return 0


def peak_rss() -> float:
    """This process's peak resident set size in bytes: Linux's VmHWM (ru_maxrss keeps the
    parent's peak from before exec); elsewhere asv's own get_maxrss."""
    try:
        with open("/proc/self/status") as f:
            return next(float(line.split()[1]) * 1024.0 for line in f if line[:6] == "VmHWM:")
    except (OSError, StopIteration):
        from asv_runner.benchmarks._maxrss import get_maxrss

        return float(get_maxrss())


def peakmem(root: str, name: str, index: int, out) -> int:
    try:
        suites = Suites(root, only=name)
    except Exception as exc:  # gone from this commit's view of the suites
        out.write(json.dumps({"status": "missing", "reason": _reason(exc)}) + "\n")
        return 0

    def measure(b):
        b.func(*b._build_params())
        return {"status": "ok", "value": peak_rss()}

    out.write(json.dumps(_run(suites, {"name": name, "index": index}, measure)) + "\n")
    return 0


def main(argv: list) -> int:
    # Replies go to the original stdout; whatever the suites print goes to stderr.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    if len(argv) >= 3 and argv[0] == "serve" and all("=" in a for a in argv[2:]):
        return serve(os.path.abspath(argv[1]), dict(a.split("=", 1) for a in argv[2:]), out)
    if len(argv) == 4 and argv[0] == "peakmem":
        return peakmem(argv[1], argv[2], int(argv[3]), out)
    sys.stderr.write(next(part for part in __doc__.split("\n\n")
                          if "python worker_process.py serve" in part) + "\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
