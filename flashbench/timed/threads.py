"""The threads a timed call leaves behind (:mod:`flashbench.timed.guard`'s **thread left
running**): a census of the process's threads, Python's and the OS's, and the wait, inside
the timed window, for the threads a call joined to leave /proc.
"""

from __future__ import annotations

import os
import threading
import time

__all__ = ["thread_census", "new_threads", "joined", "JOIN_S"]

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
