"""A process per timing request: the review's worker forks one for each.

The worker holds both commits' imported suites and runs no grid point itself; each timing
request (a grid point's setup, its untimed calls, its samples and teardown) runs in a child
forked from it, so its calls meet the allocator as in asv's own process for that point.
glibc raises its mmap and trim thresholds after large frees: in one long-lived process every
earlier request's frees had raised them, and a head adding fresh 512 KB temporaries read
1.07x where asv's processes see 1.13-1.34x (docs/review.md, "One process per request").
What a child imported the worker imports after it (:func:`learn`), so later children start
with it. Standalone (the worker loads it by path); Linux. Not on a machine with a GPU: a
CUDA context does not cross a fork, and one per request would cost each a second or more.
"""

import ctypes
import importlib
import json
import os
import signal
import sys

ENV = "FLASHBENCH_REVIEW_PROCESS"  # "request": a process per timing request, "one": none
TIMING_OPS = ("time", "pair")  # accuracy tracks are deterministic: they stay in the worker


def wanted() -> tuple[bool, str]:
    """(fork per timing request?, why): ``$FLASHBENCH_REVIEW_PROCESS`` (review --process sets
    it) or the machine's default."""
    asked = os.environ.get(ENV, "")
    if asked in ("request", "one"):
        return asked == "request", f"--process {asked}"
    if not hasattr(os, "fork") or not sys.platform.startswith("linux"):
        return False, "this system has no fork"
    if any(os.path.exists(p) for p in ("/dev/nvidiactl", "/proc/driver/nvidia/version")):
        return False, "a GPU machine: a CUDA context does not cross a fork"
    return True, "a process per timing request"


def _loaded(sides) -> set:
    """Every module loaded here: the shared ones and each side's own (put aside or not)."""
    return set(sys.modules).union(*(set(m) for m in sides.modules.values()))


def _child(sides, req: dict, parent: int, out: int) -> None:
    """Answer ``req`` on the pipe ``out`` and exit; killed with the worker (a hung call is
    ended by stopping the worker)."""
    status = 0
    try:
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
        if os.getppid() != parent:  # the worker ended before the line above
            os._exit(1)
        before = _loaded(sides)
        reply = sides.answer(req)
        reply = dict(reply, errors=sides.errors, imported=sorted(_loaded(sides) - before))
        with os.fdopen(out, "w") as pipe:
            pipe.write(json.dumps(reply) + "\n")
    except BaseException:  # the worker says this request's process died, and why
        import traceback

        traceback.print_exc()
        status = 1
    finally:
        sys.stderr.flush()
        os._exit(status)


def ask(sides, req: dict) -> tuple[dict, list]:
    """(the reply of ``req`` answered in a child, the modules the child imported). A suite's
    setup_cache is computed here first, once a review (asv: once a run), for every child."""
    for side in [req.get("side")] if req.get("side") else req.get("order") or []:
        if side in sides.suites and side not in sides.errors:
            sides.use(side)
            sides.suites[side].prepare(req.get("name"), req.get("index"), setup=False)
    read, write = os.pipe()
    sys.stderr.flush()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        _child(sides, req, parent, write)
    os.close(write)
    with os.fdopen(read) as pipe:
        line = pipe.readline()
    _, status = os.waitpid(pid, 0)
    if not line:
        how = (f"killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
               else f"exited with status {os.WEXITSTATUS(status)}")
        return {"status": "failed", "reason": f"worker died (the request's process {how})"}, []
    reply = json.loads(line)
    sides.errors.update(reply.pop("errors", None) or {})  # a side refused there
    return reply, reply.pop("imported", None) or []


def learn(sides, names: list, entry_points) -> None:
    """Import ``names`` here, where later children find them: the shared ones once, a side's
    own under each side (a side whose import replaces a shared function is refused, as at
    its first import). A name that does not import is left to the children."""
    names = [n for n in names if not n.startswith("__") and n not in sys.modules]
    own = [n for n in names if sides._owned(n)]
    for name in [n for n in names if not sides._owned(n)]:
        try:
            importlib.import_module(name)
        except BaseException:  # noqa: B036 (a module's import may even exit)
            pass
    for side in [s for s in sides.trees if s not in sides.errors] if own else []:
        before = entry_points()
        sides.use(side)
        for name in own:
            try:
                importlib.import_module(name)
            except BaseException:  # noqa: B036
                pass
        sides.refuse_changes(side, before, "its import")
    sides.entry = entry_points()


def relay(sides, fork: bool, lines, out, entry_points) -> None:
    """Answer each JSON request line on ``out`` until ``exit``: where ``fork``, a timing in
    a process of its own (:func:`ask`), then :func:`learn` what it imported."""
    for line in lines:
        req = json.loads(line)
        if req.get("op") == "exit":
            break
        if fork and req.get("op") in TIMING_OPS:
            refused = set(sides.errors)
            reply, imported = ask(sides, req)
            out.write(json.dumps(reply) + "\n")
            out.flush()
            if reply.get("status") == "ok" and set(sides.errors) == refused:
                learn(sides, imported, entry_points)  # nothing from a request that failed
            continue
        out.write(json.dumps(sides.answer(req)) + "\n")
        out.flush()
