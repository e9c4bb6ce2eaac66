"""The threads a timed call leaves behind (:mod:`flashbench.timed.guard`'s **thread left
running**): a census of the process's threads, Python's and the OS's, the wait, inside the
timed window, for the threads a call joined to leave /proc, and the harness's watch of a
kernel worker's threads (:class:`ThreadWatch`).
"""

from __future__ import annotations

import os
import threading
import time

from flashbench.infra.cpuload import stat_cpu

__all__ = ["thread_census", "new_threads", "joined", "JOIN_S", "SPINNING", "without_spinning",
           "ThreadWatch", "thread_cpu"]

JOIN_S = 0.05  # a call's exited threads may stay in /proc this long (timed: joined)
_PERF = time.perf_counter  # captured at import, before a kernel's module (guard imports this)


def thread_census() -> tuple[frozenset, int | None]:
    """(live Python threads' idents, OS threads in /proc/self/task or None without /proc)."""
    idents = frozenset(t.ident for t in threading.enumerate() if t.is_alive())
    try:
        tasks = len(os.listdir("/proc/self/task"))
    except OSError:
        tasks = None
    return idents, tasks


def new_threads(harness: frozenset, tasks_before: int | None) -> str | None:
    """A Python thread alive that the harness did not have before the first call (warm-up
    included), or more OS threads than just before this call; else None."""
    new = [t for t in threading.enumerate() if t.is_alive() and t.ident not in harness]
    if new:
        return f"{len(new)} new Python thread(s) alive after the call ({new[0].name})"
    tasks = thread_census()[1]
    if tasks is not None and tasks_before is not None and tasks > tasks_before:
        return f"{tasks - tasks_before} new OS thread(s) alive after the call (/proc/self/task)"
    return None


def joined(tasks_before: int | None) -> None:
    """Wait, inside the timed window, up to :data:`JOIN_S` for the OS threads a call started
    to be gone: a thread the call joined (a ``with ThreadPoolExecutor``) can stay listed in
    /proc for a moment after ``join()`` returns; one that outlives the wait is left running.
    The wait is the call's time: work a native thread finishes in it is not hidden."""
    if tasks_before is None:
        return
    deadline = _PERF() + JOIN_S
    while (thread_census()[1] or 0) > tasks_before and _PERF() < deadline:
        time.sleep(1e-4)


def thread_cpu(pid: int) -> dict[int, float] | None:
    """{thread id: its CPU seconds} of a process's threads; None where there is no /proc."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    cpu = {int(t): stat_cpu(f"/proc/{pid}/task/{t}/stat") for t in tids}
    return {t: c for t, c in cpu.items() if c is not None}  # None: it ended meanwhile


class ThreadWatch:
    """A kernel worker's threads, read from /proc by the harness (user code cannot touch
    it): a thread not there after the warm-up that is alive after a run's reply is watched
    until the next stage, and is **left running** if it ends meanwhile or uses CPU (a
    thread that finishes the call's work after the reply). One that stays idle is a pool
    the kernel keeps, grown after the warm-up (a ``ThreadPoolExecutor`` starts a thread when
    none is idle): no fault, and its work in later calls is inside their time. Before, any
    new thread alive after a reply failed the row (a kept pool of 16 that grew: 3 runs in 7).
    """

    def __init__(self, pid: int):
        self.pid = pid
        now = thread_cpu(pid)
        self.base = set() if now is None else set(now)
        self.marks: dict[int, float] = {}
        self.fault: str | None = None  # the first thread left running, in words

    def after_run(self) -> None:
        """Right after a run's reply: the threads to watch, and their CPU now."""
        now = thread_cpu(self.pid) or {}
        self.marks = {t: c for t, c in now.items() if t not in self.base}

    def check(self) -> str | None:
        """Before the next stage (and before the fetch): why a watched thread was left
        running, or None."""
        if not self.marks:
            return None
        now, why = thread_cpu(self.pid) or {}, None
        for tid, cpu in self.marks.items():
            if tid not in now:
                why = why or (f"a thread the kernel started (tid {tid}) ended after its "
                              "call's reply: it ran past the call (/proc, read by the harness)")
            elif now[tid] > cpu:
                why = (f"a thread the kernel started (tid {tid}) used {now[tid] - cpu:.3g} s "
                       "of CPU after its call's reply, outside the timed calls (/proc, read "
                       "by the harness)")
        self.marks = {}
        self.fault = self.fault or why
        return why


def _spins(count: str) -> bool:
    """Whether a GOMP_SPINCOUNT (a number, maybe with a k, M, G or T suffix, or INFINITE)
    spins longer than libgomp's default 300,000."""
    v = count.strip().lower()
    scale = {"k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}.get(v[-1:], 1)
    try:
        return v in ("infinite", "infinity") or float(v[:-1] if scale != 1 else v) * scale > 3e5
    except ValueError:
        return False  # not a setting libgomp reads


# OpenMP settings that keep a pool's threads spinning between calls (more than libgomp's
# default spin, which the worker's idle check tolerates)
SPINNING = {"OMP_WAIT_POLICY": lambda v: v.strip().lower() == "active",
            "GOMP_SPINCOUNT": _spins,
            "KMP_BLOCKTIME": lambda v: v.strip().lower() in ("infinite", "infinity")}


def without_spinning(environ=os.environ) -> list[str]:
    """Remove from ``environ`` the settings of :data:`SPINNING` that spin: each one's
    threads, busy while a kernel's worker idles between requests, read as **work outside the
    timed call** (an honest kernel FAILed under OMP_WAIT_POLICY=active). Called before torch
    is imported, so the harness's own kernels run as the workers do. A sentence for each."""
    dropped = [f"{name}={environ.pop(name)}" for name, spins in SPINNING.items()
               if name in environ and spins(environ[name])]
    return [f"unset for this run: {', '.join(dropped)} (OpenMP threads that spin between "
            "calls are indistinguishable from work a kernel leaves running; libgomp's "
            "default spin applies, the same for every kernel)"] if dropped else []
