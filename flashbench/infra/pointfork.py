"""A process per request: the review's worker forks one for each timing and track.

The worker holds both commits' imported suites and runs none of their code itself; each
request (a grid point's setup, calls and teardown; a setup_cache, its value pickled back)
runs in a child forked from it, so its calls meet the allocator as in asv's own process
(glibc's mmap threshold, raised by earlier frees: docs/review.md, "One process per
request"); a pair's two sides run in a process each (forklane.ForkedLane), taking turns.
The worker imports what a child imported (:func:`learn`). A child leads a process group,
killed when it ends. Standalone (loaded by path); Linux; not with a GPU (CUDA and fork).
"""

import ctypes
import importlib
import importlib.util
import json
import os
import pickle
import signal
import sys

ENV = "FLASHBENCH_REVIEW_PROCESS"  # "request": a process per request, "one": none
FORKED_OPS = ("time", "pair", "track")
THREADED = "thread(s) in the review's worker"  # a side refused for a thread it left there


def _sibling(name: str):
    """A standalone module beside this one, loaded by path (as the worker loads this one)."""
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(os.path.dirname(os.path.abspath(__file__)), name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


forklane = _sibling("forklane")  # the fork plumbing, a pair's sides (its clock taken now)


def wanted() -> tuple[bool, str]:
    """(fork per request?, why): ``$FLASHBENCH_REVIEW_PROCESS`` (review --process sets it)
    or the machine's default."""
    asked = os.environ.get(ENV, "")
    if asked in ("request", "one"):
        return asked == "request", f"--process {asked}"
    note = f" ({ENV}={asked!r} is neither 'request' nor 'one': ignored)" if asked else ""
    if not hasattr(os, "fork") or not sys.platform.startswith("linux"):
        return False, "this system has no fork" + note
    if any(os.path.exists(p) for p in ("/dev/nvidiactl", "/proc/driver/nvidia/version")):
        return False, "a GPU machine: a CUDA context does not cross a fork" + note
    return True, "a process per timing request" + note


def adopt() -> None:
    """Make the worker its descendants' subreaper: a daemon a side's import leaves (a double
    fork) is re-parented here, where :func:`_left` finds it, not to init."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def _left(sides, blamed: list) -> int:
    """Kill the processes re-parented to the worker that no request is (zombies reaped),
    and refuse the ``blamed`` sides, whose imports or calls ran since the last look: a
    probe's head left CPU burners at import that spun while base's requests ran (all rows
    "faster"); a red team's (2026-12-07) forked, from a call, a helper in a group of its
    own that outlived its request and stopped or killed base's (exit 0). How many."""
    stray = []
    for name in [n for n in os.listdir("/proc") if n.isdigit() and int(n) not in forklane.CHILDREN]:
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) != os.getpid():
            continue
        if fields[0] != "Z":  # alive: its group (never the worker's own), then itself
            if int(fields[2]) not in forklane.ENDED:  # a request's group, killed: dying
                stray.append(int(name))
            if int(fields[2]) not in (0, 1, os.getpgid(0)):
                forklane.kill_group(int(fields[2]))
            try:
                os.kill(int(name), signal.SIGKILL)
            except OSError:
                pass
        try:
            os.waitpid(int(name), 0)
        except ChildProcessError:
            pass
    for side in blamed if stray else ():
        sides.errors.setdefault(side, f"its import or a call left {len(stray)} process(es) "
                                      "running in the review's worker (killed)")
    return len(stray)


def _checked(sides, req: dict, reply: dict) -> dict:
    """``reply``, or a failure where the request's child left a process in the worker's
    tree (:func:`_left`: killed, its sides refused). Not after a request answered in the
    worker itself (``--process one``): a pool a library keeps there (inductor's compile
    workers) would read as one; a helper a call forks there is docs/review.md's open end."""
    if _sides_of(req) and _left(sides, _sides_of(req)):
        return {"status": "failed", "reason": "; ".join(dict.fromkeys(
            sides.errors.get(s, "") for s in _sides_of(req)))}
    return reply


def _sides_of(req: dict) -> list:
    """The sides a request runs: its ``side``, or a pair's ``order``."""
    return [req["side"]] if req.get("side") else list(req.get("order") or [])


def _caches(sides, req: dict) -> None:
    """Compute a suite's setup_cache in a child, once a review (asv: once a run), its value
    kept here for every later child; a side whose setup_cache changed a shared library is
    refused there, as in a request."""
    for side in _sides_of(req):
        if side not in sides.suites or side in sides.errors:
            continue
        suites = sides.suites[side]
        b = suites.benchmarks.get(req.get("name"))
        if b is None or b._setup_cache is None or b.setup_cache_key in suites.caches:
            continue

        def work(side=side, suites=suites, key=b.setup_cache_key):
            sides.use(side)
            suites.prepare(req.get("name"), req.get("index"), setup=False)
            sides.refuse_changes(side, sides.entry, "its setup_cache")
            try:
                return {}, pickle.dumps(suites.caches[key])
            except Exception as exc:  # asv pickles the value too
                return {}, pickle.dumps(("failed", f"setup_cache: its value does not "
                                                   f"pickle: {type(exc).__name__}: {exc}"))

        reply, value, _ = forklane.forked(sides, work)
        suites.caches[b.setup_cache_key] = pickle.loads(value) if value else (
            "failed", "setup_cache: " + str(reply.get("reason")))


def learn(sides, imported: dict, entry_points, sides_asked: list) -> None:
    """Import here what a child imported, so later children start with it: the shared
    modules, and each side's own under that side only. A change to a shared function
    refuses the sides of the request (put back, as at a first import); a name that does
    not import is left to the children."""
    def load(names):
        for name in names:
            if not name.startswith("__") and name not in sys.modules:
                try:
                    importlib.import_module(name)
                except BaseException:  # noqa: B036 (a module's import may even exit)
                    pass

    sides.imports.use(None)  # a shared module through no side's finder (libwatch.Importers)
    load(imported.get("shared", ()))
    for side in sides_asked:
        why = sides.refuse_changes(side, sides.entry, "an import of its request")
        if why:  # put back; every side of the request refused, as the child could not tell
            for other in sides_asked:
                sides.errors.setdefault(other, why)
            return
    for side in [s for s in sides.trees if imported.get(s) and s not in sides.errors]:
        before, threads, names = entry_points(), _threads(), set(sys.modules)
        sides.use(side)
        load(imported[side])
        _left(sides, [side])
        if (more := _threads() - threads) > 0:  # later forks would hang on it, or run here
            sides.errors[side] = (f"its import started {more} thread(s) in the review's "
                                  "worker, which forks a process per request (a thread "
                                  "does not cross a fork)")
        sides.refuse_changes(side, before, "its import", names)
    sides.entry = entry_points()


def _threads() -> int:
    """This process's threads (native ones too: an OpenMP pool is not Python's)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        import threading

        return threading.active_count()


def _in_lanes(sides, req: dict, make) -> tuple[dict, dict]:
    """(reply, imported) of a pair whose sides each run in a process of their own."""
    opened = []

    def lane(*args):
        opened.append(forklane.ForkedLane(*args, make))
        return opened[-1]

    reply = sides.answer(req, lane=lane)
    imported = {}
    for one in opened:
        for key, names in one.imported.items():
            imported[key] = sorted({*imported.get(key, ()), *names})
    return reply, imported


def relay(sides, fork: bool, lines, out, entry_points, make) -> None:
    """Answer each JSON request line on ``out`` until ``exit``: where ``fork``, a timing or
    a track in a process of its own (forklane.forked), a pair's sides in one each
    (forklane.ForkedLane, running ``make``), having learnt what they imported."""
    if fork:
        signal.signal(signal.SIGTERM, forklane.on_term)
    signal.signal(signal.SIGCONT, forklane._continued)  # (a request's child resets it)

    def clocked(*args):  # a pair's side in this process: its samples on the worker's clock
        return forklane.ClockedLane(*args, make)
    _left(sides, list(sides.trees))  # the sides' imports, before the first request
    if any(THREADED in why for why in sides.errors.values()):  # it runs beside the other
        for side in sides.trees:  # side too (a red team's killed base's processes: OK)
            sides.errors.setdefault(side, f"the other side's import started {THREADED}, "
                                          "which run beside this side's requests")
    at_start = _threads()  # the libraries' own pools at import (OpenBLAS's survives a fork)
    for line in lines:
        req = json.loads(line)
        if req.get("op") == "exit":
            break
        threads = _threads()
        if fork and req.get("op") in FORKED_OPS and threads > at_start:  # a thread started
            # since (a GNU OpenMP pool after a parallel op): a child could hang on it
            reply = dict(sides.answer(req, lane=clocked), unforked=(
                f"the worker held {threads} threads, {threads - at_start} started after its "
                "imports"))
        elif fork and req.get("op") in FORKED_OPS:
            _caches(sides, req)
            refused = set(sides.errors)
            if req.get("op") == "pair":
                reply, imported = _in_lanes(sides, req, make)
            else:
                reply, _, imported = forklane.forked(sides, lambda r=req: (sides.answer(r), None))
            left = _checked(sides, req, reply)
            if left is reply and reply.get("status") == "ok" and set(sides.errors) == refused:
                learn(sides, imported, entry_points, _sides_of(req))  # none from a failure
            reply = left
        else:  # in this process (--process one): a stop from outside fails it
            stops = forklane.CONTINUED[0]
            reply = sides.answer(req, lane=clocked)
            if forklane.CONTINUED[0] != stops:
                reply = {"status": "failed", "reason": f"the worker {forklane.STOPPED}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()
