"""The plumbing of a process per request (:mod:`pointfork`, beside it): a child forked from
the review's worker leading a process group of its own and dying with the worker
(:func:`forked`), length-prefixed pickles over its pipes, and a pair's side run in a
process of its own, taking turns with the other's and cross-checked on the worker's clock
(:class:`ForkedLane`; in the worker's own process: :class:`ClockedLane`). Standalone
(loaded by path, by pointfork); Linux.
"""

import ctypes
import os
import pickle
import signal
import struct
import sys
import time

_SIZE = struct.Struct("<Q")
CHILDREN = set()  # the running children's pids: each one's process group goes with the worker
ENDED = set()  # the process groups of the children reaped (each child led one)
PIPES = set()  # the worker's ends of its children's pipes: a later child closes them
CLOCK_RATIO = 0.8  # a pair's sample timed under this x its round trip on the worker's clock..
CONFIRM = 10  # ... in this many samples more of its side: clock tampered (ForkedLane.sample)
SLACK = 1e-3  # s: a sample's allowance for the worker's wake-up (a sample lasts 10 ms or more)
_WALL = time.perf_counter  # the worker's clock, taken before any side's code is imported


def on_term(signum, frame) -> None:
    """The worker stopped (a request past its limit): its children's whole groups go too."""
    for pid in list(CHILDREN):
        kill_group(pid)
    os._exit(128 + signum)


CONTINUED = [0]  # SIGCONTs this process received (a request's child: since its fork)
STOPPED = ("was stopped and continued from outside (SIGCONT) during its samples: another "
           "process of the review's worker (the other side's code may) stopped it")


def _continued(signum, frame) -> None:
    CONTINUED[0] += 1


def kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def _own(sides, side: str) -> set:
    """The modules of ``side``'s own tree loaded now (in sys.modules or put aside)."""
    names = set(sys.modules) if side == sides.active else set(sides.modules.get(side, ()))
    return {n for n in names if sides._owned(n)}


def _loaded(sides) -> dict:
    return {"shared": {n for n in sys.modules if not sides._owned(n)},
            **{side: _own(sides, side) for side in sides.trees}}


def _spawn() -> tuple[int, int, int]:
    """Fork a child leading a process group of its own, dying with the worker: (pid, read
    fd, write fd), each side's ends of a request pipe and a reply pipe (pid 0: the child)."""
    to_child, from_child = os.pipe(), os.pipe()
    sys.stderr.flush()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        os.setpgid(0, 0)
        for fd in (to_child[1], from_child[0], *PIPES):  # another child's end: its EOF is
            os.close(fd)  # its worker's (or its own) ending, not this child's
        PIPES.clear()
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
        if os.getppid() != parent:  # the worker ended before the line above
            os._exit(1)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        CONTINUED[0] = 0  # a stop from outside, counted from here
        signal.signal(signal.SIGCONT, _continued)
        return 0, to_child[0], from_child[1]
    CHILDREN.add(pid)
    try:
        os.setpgid(pid, pid)
    except OSError:  # it did so itself, or already ended
        pass
    os.close(to_child[0])
    os.close(from_child[1])
    PIPES.update((from_child[0], to_child[1]))
    return pid, from_child[0], to_child[1]


def _send(pipe, obj) -> None:
    body = pickle.dumps(obj)
    pipe.write(_SIZE.pack(len(body)) + body)
    pipe.flush()


def _receive(pipe):
    """The next length-prefixed message (a length first: a grandchild may hold the pipe),
    or None where the child died before or while writing it."""
    head = pipe.read(_SIZE.size)
    size = _SIZE.unpack(head)[0] if len(head) == _SIZE.size else 0
    body = pipe.read(size) if size else b""
    return pickle.loads(body) if size and len(body) == size else None


def _reap(pid: int) -> str:
    """Wait for the child, kill its group (a pool its code left goes too): how it ended."""
    _, status = os.waitpid(pid, 0)
    kill_group(pid)
    CHILDREN.discard(pid)
    ENDED.add(pid)  # its group's leftovers, dying now, are no daemon (pointfork._left)
    return (f"killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
            else f"exited with status {os.WEXITSTATUS(status)}")


def _exit_child(run) -> None:
    """``run()``, then exit without the parent's exit handlers (1 and a traceback: raised)."""
    status = 0
    try:
        run()
    except BaseException:
        import traceback

        traceback.print_exc()
        status = 1
    finally:
        sys.stderr.flush()
        os._exit(status)


def _imported(sides, before: dict) -> dict:
    after = _loaded(sides)
    return {k: sorted(after[k] - before[k]) for k in after}


def forked(sides, work) -> tuple[dict, object, dict]:
    """(reply, extra, imported) of ``work()`` run in a child."""
    pid, read, write = _spawn()
    if pid == 0:
        os.close(read)

        def run():
            before = _loaded(sides)
            reply, extra = work()
            if CONTINUED[0]:
                reply = {"status": "failed", "reason": f"the request's process {STOPPED}"}
            with os.fdopen(write, "wb") as pipe:
                _send(pipe, (reply, extra, sides.errors, _imported(sides, before)))
        _exit_child(run)
    os.close(write)
    PIPES.difference_update((read, write))
    with os.fdopen(read, "rb") as pipe:
        got = _receive(pipe)
    how = _reap(pid)
    if got is None:
        return {"status": "failed", "reason": f"worker died (the request's process {how})"}, \
            None, {}
    reply, extra, errors, imported = got
    sides.errors.update(errors)  # a side refused there
    return reply, extra, imported


def _attempt(fn) -> tuple:
    """("ok", fn()) or ("raised", the exception: itself where it pickles)."""
    try:
        return "ok", fn()
    except Exception as exc:
        try:
            pickle.dumps(exc)
        except Exception:
            exc = RuntimeError(f"{type(exc).__name__}: {exc}")
        return "raised", exc


def _sched(pid: int | None) -> tuple[float, float, float]:
    """(seconds its threads ran, seconds they waited runnable for a CPU, its CPU seconds by
    /proc/PID/stat: exited threads' too, in ticks) of process ``pid``; None: this thread
    and this process. Zeros where /proc has none of it (schedstat: Linux)."""
    where = f"/proc/{pid}" if pid else "/proc/self"
    ran = waited = ticks = 0.0
    tasks = ["/proc/thread-self"] if pid is None else [
        f"{where}/task/{t}" for t in _listdir(f"{where}/task")]
    for task in tasks:
        try:
            with open(f"{task}/schedstat") as f:
                on, wait = f.read().split()[:2]
            ran, waited = ran + int(on) * 1e-9, waited + int(wait) * 1e-9
        except (OSError, ValueError):
            continue
    try:
        with open(f"{where}/stat") as f:
            ticks = sum(int(x) for x in f.read().rsplit(")", 1)[1].split()[11:13])
    except (OSError, ValueError, IndexError):
        pass
    return ran, waited, ticks / os.sysconf("SC_CLK_TCK")


def _listdir(path: str) -> list:
    try:
        return os.listdir(path)
    except OSError:
        return []


class MachineBusy(RuntimeError):
    """A side's samples failed the cross-check only by what it and the worker waited for a
    CPU (:func:`confirmed`): not measured on a busy machine, never "failed"."""


def confirmed(trip, number: int, side: str, null: float, pid: int | None = None) -> float:
    """The per-call seconds a sample claims (``trip()``: (claim, its time on the worker's
    clock)), where the claim's ``number`` calls are at least :data:`CLOCK_RATIO` of that time
    (less ``null``, an empty trip's, and :data:`SLACK`): sampled again up to :data:`CONFIRM`
    times until one agrees; none: **clock tampered**, unless some try would agree once the
    time the worker's thread and the side's process (``pid``; None: the side ran in this
    thread) waited, runnable, for a CPU is taken away (the kernel's schedstat; never below
    the CPU the side's process used meanwhile): then, after a pause, as many tries again,
    and if none agrees, :class:`MachineBusy`, not measured.
    Beside busy processes, each trip's wake-ups waited for a CPU and an honest softmax call
    of 3.6 ms read 0.45x in all 11 tries ("failed in head", exit 1); a side that claims its
    time less its own waits (which no aggregate tells from waits outside its timer) is not
    measured there either, never passed; one that keeps threads busy to lengthen its waits
    spends their CPU, which counts."""
    tries, excused = [], False
    for k in range(2 * (1 + CONFIRM)):
        if k == 1 + CONFIRM:  # none agreed: where waits explain it, a pause, then again
            if not excused:
                break
            time.sleep(0.2)
        watch = bool(tries)  # the /proc reads only once a try failed: not a sample's cost
        me, it = (_sched(None), _sched(pid) if pid else None) if watch else (None, None)
        claim, took = trip()
        if claim * number + SLACK >= CLOCK_RATIO * (took - null):
            return claim
        tries.append((claim * number, took - null))
        if not watch:
            continue
        me2, it2 = _sched(None), _sched(pid) if pid else None
        waited = me2[1] - me[1] + (it2[1] - it[1] if it else 0.0)
        used = max(it2[0] - it[0], it2[2] - it[2] - 0.02) if it else max(
            me2[0] - me[0], me2[2] - me[2] - 0.02)
        excused |= claim * number + SLACK >= CLOCK_RATIO * max(took - null - waited, used)
    what = (f"the {side} side's samples took {min(t for _, t in tries):.4g} s or more on the "
            f"worker's clock and claimed {max(c for c, _ in tries):.4g} s at most, under "
            f"{CLOCK_RATIO:g}x in all {len(tries)} tries")
    if excused:
        raise MachineBusy(f"the machine was busy: {what}, but within it once their waits "
                          "for a CPU (schedstat) are taken away: not measured here")
    raise RuntimeError(f"clock tampered: {what}, even less their waits for a CPU")


class ClockedLane:
    """One side of a pair in the worker's own process (``--process one``, a GPU's default;
    ``make(sides, side, req, number)``, the worker's Lane), each sample cross-checked on the
    worker's clock as :class:`ForkedLane`'s are (:func:`confirmed`): a side that rebinds
    the suites' timer, or reaches the clock's reading, cannot make its samples short."""

    def __init__(self, sides, side: str, req: dict, number: int, make):
        self.lane, self.side, self.number = make(sides, side, req, number), side, number

    def open(self) -> dict | None:
        return self.lane.open()

    def sample(self) -> float:
        def trip():
            start = _WALL()
            claim = self.lane.sample()
            return claim, _WALL() - start
        return confirmed(trip, self.number, self.side, 0.0)

    def close(self) -> str | None:
        return self.lane.close()


class ForkedLane:
    """One side of a pair in a process of its own, forked from the worker as the other
    side's is (``make(sides, side, req, number)``, the worker's Lane, runs there), so each
    side's grid point meets the allocator as in asv's process (in one process the side set
    up second read 1.3x slower: docs/review.md). They take turns, a sample at a time; the
    idle one waits on its pipe."""

    def __init__(self, sides, side: str, req: dict, number: int, make):
        self.sides, self.side, self.req, self.number, self.make = sides, side, req, number, make
        self.pid, self.imported, self.null, self.replies, self.asks = None, {}, None, None, None

    def open(self) -> dict | None:
        pid, read, write = _spawn()
        if pid == 0:
            _exit_child(lambda: self._serve(os.fdopen(read, "rb"), os.fdopen(write, "wb")))
        self.pid, self.replies, self.asks = pid, os.fdopen(read, "rb"), os.fdopen(write, "wb")
        return self._ask(None)

    def sample(self) -> float:
        """A sample's per-call seconds as its process timed it, cross-checked on the
        worker's clock (:func:`confirmed`, less an empty round trip's)."""
        if self.null is None:  # a pipe's latency: the fastest of 3 empty round trips
            self.null = min(self._trip(b"n")[1] for _ in range(3))
        return confirmed(lambda: self._trip(b"s"), self.number, self.side, self.null,
                         self.pid)

    def _trip(self, op: bytes) -> tuple:
        start = _WALL()
        got = self._ask(op)
        return got, _WALL() - start

    def close(self) -> str | None:
        """Its teardown's failure, or a change its calls made to a shared function (None
        where its process died: the pair failed then). Its pipes are closed either way (a
        number left in PIPES would be closed by a later child, maybe its own pipe's)."""
        if self.replies is None:
            return None
        failed = None
        try:
            if self.pid is not None:
                failed, errors, self.imported = self._ask(b"c")
                self.sides.errors.update(errors)  # a side refused there
        except Exception as exc:
            failed = f"{type(exc).__name__}: {exc}"
        finally:
            PIPES.difference_update((self.replies.fileno(), self.asks.fileno()))
            self.replies.close()
            self.asks.close()
            self.replies = self.asks = self.pid = None
        return failed

    def _ask(self, op: bytes | None):
        if op is not None:
            try:
                self.asks.write(op)
                self.asks.flush()
            except OSError:  # it died: the reply's absence says so
                pass
        got = _receive(self.replies)
        if got is None:
            pid, self.pid = self.pid, None
            raise ChildProcessError(f"worker died (the {self.side} side's process "
                                    f"{_reap(pid)})")
        if op == b"c":
            _reap(self.pid)
        kind, value = got
        if kind == "raised":
            raise value
        return value

    def _serve(self, asks, replies) -> None:
        sides = self.sides
        before = _loaded(sides)
        lane = self.make(sides, self.side, self.req, self.number)
        _send(replies, _attempt(lane.open))
        while (op := asks.read(1)) in (b"s", b"n"):  # a sample, or an empty request
            got = _attempt(lane.sample) if op == b"s" else ("ok", None)
            if CONTINUED[0]:  # its samples' clock ran while it stood still (a red team's
                # head's helper stopped base's process 6 ms in 8: "faster", exit 0)
                got = "raised", RuntimeError(f"the {self.side} side's process {STOPPED}")
            _send(replies, got)
        failed = lane.close() or sides.refuse_changes(self.side, sides.entry,
                                                      "a call of its code")
        _send(replies, ("ok", (failed, sides.errors, _imported(sides, before))))
