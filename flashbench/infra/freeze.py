"""A kernel's worker held still with everything it started: SIGSTOP to the worker, its
process group, its live descendants and every process of its session (/proc), scanned again
until a scan finds none new (a fork that raced the last one), then SIGCONT to the same.
Before (2026-12-07), the worker's group and the worker alone were stopped: a red-team
probe's helper, forked at import into a process group of its own (``setpgid``, the
worker's session kept), ran on while torch's row was timed and stopped the harness 20 ms at
a time (torch-sdpa 22.6 ms against 1.9: the kernel "8.76x faster", PASS, and a second
user's honest twin slowed 2x), or forked busy children it never waited for (SIGCHLD
ignored: their CPU is in no process's reading; 2.6x, PASS). Nested holds of one worker
are one hold: the outer one continues it. Linux; elsewhere the worker and its group alone.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import threading
import time

from flashbench.infra.cpuload import descendants, processes

__all__ = ["held", "is_held", "family", "wait_stopped", "tracer", "signal_tree", "stop", "cont",
           "resume", "continued", "counting_continues", "end_descendants", "adopt", "command",
           "orphans", "reaping", "children"]

_HELD: dict[int, set[int]] = {}  # a held worker -> the processes its hold stopped
_CONTINUED = [0]  # SIGCONTs this process received under counting_continues()


def continued() -> int:
    """How many times this process was continued (SIGCONT) under
    :func:`counting_continues`: each, a stop it did not make (SIGSTOP from another process,
    or a shell's Ctrl-Z and ``fg``). The same probe's helper stopped the harness 20 ms at
    a time while torch's row was timed; once the family stops with the worker, it may still
    see its worker stop first and stop the harness before its own SIGSTOP lands."""
    return _CONTINUED[0]


@contextlib.contextmanager
def counting_continues():
    """Count this process's SIGCONTs (:func:`continued`) in the block (main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def count(signum, frame):
        _CONTINUED[0] += 1

    old = signal.signal(signal.SIGCONT, count)
    try:
        yield
    finally:
        signal.signal(signal.SIGCONT, old)


def family(pid: int, table: dict | None = None) -> set[int]:
    """``pid``, its live descendants, and the processes of its process group and of its
    session where those are not this process's own (a worker leads a session of its own;
    one that shares the harness's is followed by its parents alone); ``table``: a
    :func:`~flashbench.infra.cpuload.processes` reading, else one now."""
    rows = processes() if table is None else table
    mine = {os.getpid(), os.getpgid(0), os.getsid(0)}
    found = {pid, *descendants(pid, rows)}
    me = rows.get(pid)
    if me is not None:
        found |= {p for p, (_, group, session, _) in rows.items()
                  if (group == me[1] and group not in mine)
                  or (session == me[2] and session not in mine)}
        found |= {d for p in list(found) for d in descendants(p, rows)}
    found.discard(os.getpid())
    return found


def signal_tree(pid: int, sig: int) -> None:
    """``sig`` to the worker's process group and to the worker itself (each where it is)."""
    for send in (os.killpg, os.kill):
        try:
            send(pid, sig)
        except OSError:
            pass  # no such group, or the worker ended


def wait_stopped(pid: int, wait_s: float = 0.05) -> None:
    """Until every thread of ``pid`` has stopped, for up to ``wait_s``: a signal takes hold
    when each thread next runs in the kernel (a sleeping one is woken to stop: a reader's
    test caught it running)."""
    end = time.perf_counter() + wait_s
    while time.perf_counter() <= end:
        try:
            states = []
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
        except OSError:
            return  # ended, or no /proc: each read then fails
        if all(state in "tTZX" for state in states):
            return
        time.sleep(0)


def tracer(pid: int) -> int:
    """The process tracing ``pid`` (0: none, or it ended, or no /proc): a traced process's
    SIGSTOP goes to its tracer, and stops none of its other threads (infra/sealed.py)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("TracerPid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def stop(*roots: int, also=(), stopped: set[int] | None = None) -> set[int]:
    """SIGSTOP to each root (its group too) and to ``also`` at once, then to what a scan
    finds of the roots' families not yet sent it, until none is new, each waited for; the
    processes it was sent to (also onto ``stopped``, as sent)."""
    stopped = set() if stopped is None else stopped
    new = set(roots) | set(also)
    stopped.update(new)  # before any signal: an interrupt between continues them all
    for pid in set(also) - set(roots):  # what they started first: it may watch them
        try:
            os.kill(pid, signal.SIGSTOP)
        except OSError:
            pass
    for pid in roots:
        signal_tree(pid, signal.SIGSTOP)
    for _ in range(32):  # a process forks at most once a round: it is stopped after it
        for pid in new:
            wait_stopped(pid)
        table = processes()
        new = set().union(*(family(pid, table) for pid in roots)) - stopped
        if not new:
            break
        stopped |= new
        for pid in new:
            try:
                os.kill(pid, signal.SIGSTOP)
            except OSError:
                pass
    return stopped


def cont(roots, stopped) -> None:
    """SIGCONT to the roots' groups and to each process :func:`stop` stopped."""
    for pid in roots:
        signal_tree(pid, signal.SIGCONT)
    for pid in stopped:
        try:
            os.kill(pid, signal.SIGCONT)
        except OSError:
            pass


@contextlib.contextmanager
def held(*pids: int):
    """The workers ``pids`` and their families stopped for the block (those already held by
    an outer block: left to it)."""
    roots = [p for p in dict.fromkeys(pids) if p not in _HELD]
    if not roots:
        yield
        return
    stopped: set[int] = set()
    try:  # a scan first, then all at once: a helper that sees its worker stop acts
        table = processes()
        stop(*roots, also=set().union(*(family(p, table) for p in roots)), stopped=stopped)
        for pid in roots:
            _HELD[pid] = stopped
        yield
    finally:
        for pid in roots:
            _HELD.pop(pid, None)
        cont(roots, stopped)


def is_held(pid: int) -> bool:
    """Whether a :func:`held` block holds worker ``pid`` now."""
    return pid in _HELD


def resume(pid: int) -> None:
    """SIGCONT to worker ``pid``'s family, unless a hold holds it: what another kernel's
    process may have stopped before the harness held it (a row starts with its own worker
    running)."""
    if pid not in _HELD:
        cont([pid], family(pid))


def end_descendants(pid: int) -> int:
    """SIGKILL every live descendant of ``pid`` (each stopped first, so that none forks
    meanwhile; again until none is left), ``pid`` itself spared; how many. The review's
    worker is its descendants' subreaper: a helper a side's call forked into a group of its
    own came back to it and outlived the review (a red team, 2026-12-07)."""
    ended = set()
    for _ in range(16):
        table = processes()
        alive = {p for p in family(pid, table) - {pid} - ended if table[p][3] not in "ZX"}
        if not alive:
            break
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for p in alive:
                try:
                    os.kill(p, sig)
                except OSError:
                    pass
        ended |= alive
        time.sleep(0.01)  # reaped by their parent or the subreaper, or re-parented
    return len(ended)


PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER = 36, 37


def adopt(on: bool = True) -> bool:
    """Make this process the subreaper of its descendants (``on``), or no longer (an orphan
    of a later, unrelated process tree would stay a zombie here); whether it worked."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0,
                                                       0) == 0
    except (OSError, AttributeError):
        return False


def _adopting() -> bool:
    """Whether this process is its descendants' subreaper now."""
    flag = ctypes.c_int(0)
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(
            PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) == 0 and bool(flag.value)
    except (OSError, AttributeError):
        return False


def children() -> set[int]:
    """This process's children now (/proc), zombies too."""
    return {p for p, row in processes().items() if row[0] == os.getpid()}


def command(pid: int) -> str:
    """Process ``pid``'s command line, its first 120 characters ("?" where unread)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:120]
    except OSError:
        return "?"


def orphans(keep=(), spare_sessions=(), grace: float = 0.0) -> list[str]:
    """Kill and reap this process's children but ``keep`` and those in ``spare_sessions``,
    each with its process group where that is neither this process's nor a kept one's,
    again until none is left (a killed one's children come here where this process is
    their subreaper); "pid N: its command" of each that was running (not a zombie).
    ``grace``: seconds given once to those running to end first (a worker killed a moment
    ago, re-parented here when a kernel killed its zygote, read as left running)."""
    me, found = os.getpid(), []
    for _ in range(8):
        rows = processes()
        spared = {os.getpgid(0)} | {rows[p][1] for p in keep if p in rows}
        strays = [(p, row) for p, row in rows.items() if row[0] == me and p not in keep
                  and row[2] not in spare_sessions]
        if not strays:
            break
        if grace > 0 and any(row[3] not in "ZX" for _, row in strays):
            time.sleep(grace)
            grace = 0.0
            continue
        for pid, (_, group, _, state) in strays:
            if state not in "ZX":
                found.append(f"pid {pid}: {command(pid)}")
            for send, target in ((os.killpg, group), (os.kill, pid)):
                if send is os.kill or (group > 1 and group not in spared):
                    with contextlib.suppress(OSError):
                        send(target, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
    return found


@contextlib.contextmanager
def reaping():
    """What the block leaves running is this process's to end: it is the subreaper of its
    descendants for the block (an orphan, double-forked or ``setsid``, is re-parented here,
    not to init), and at the block's end each child it did not have at the start is killed
    with its group and reaped (:func:`orphans`). Yields a list that then holds "pid N: its
    command" of each that still ran. A daemon left by the review's listing of the suites
    lived through the review, where it could kill base's processes (an open end of the
    red team of 2026-12-07, closed the same day)."""
    was = _adopting()
    adopt()
    before = children()
    found: list[str] = []
    try:
        yield found
    finally:
        found += orphans(keep=before)
        if not was:
            adopt(False)
