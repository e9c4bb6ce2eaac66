"""What a side's code may not leave in the review's worker, which runs both commits: an
at-fork hook (it would run in every process the worker forks for the other side) and a
thread (it would run beside the other side's requests), watched from the worker's load of
``libwatch`` (which loads this file by path) on. Imports nothing of flashbench.
"""

import sys
import threading

AT_FORK = "an at-fork hook in the review's worker"  # the words of a refusal (review/rules.py)
TREES: set = set()  # the sides' trees, each with a trailing separator (libwatch.refuse_shadows)


def watch_at_fork() -> None:
    """From here on (the review worker's load of libwatch, before either side's import
    and any snapshot of the entry points), ``os.register_at_fork`` raises for a caller in a
    side's tree (:data:`TREES`) or in code of no file (``exec``): a red team's head
    (2026-12-07) registered one at import, and its code ran in every process the worker
    forked for base. Libraries anywhere else pass (torch registers one)."""
    import os
    import posix

    if getattr(os.register_at_fork, "_watched", False):
        return
    real = os.register_at_fork

    def register_at_fork(**hooks):
        where = sys._getframe(1).f_code.co_filename
        path = os.path.realpath(where)
        if (where.startswith("<") and not where.startswith("<frozen")) or any(
                path.startswith(tree) for tree in TREES):
            raise RuntimeError(f"{where} registered {AT_FORK} (os.register_at_fork): it would "
                               "run in every process the worker forks for the other side")
        return real(**hooks)

    register_at_fork._watched = True
    os.register_at_fork = posix.register_at_fork = register_at_fork


def count_threads() -> None:
    """From here on (as :func:`watch_at_fork`), every thread ``_thread`` starts is in
    :data:`STARTED` until its target returns (:func:`threads` counts them): ``threading``
    lists only the threads it started, and one started with a C function as its target
    (``_thread.start_new_thread(time.sleep, ...)``) is not even in ``sys._current_frames``.
    threading's own copy of the function is replaced too (a side could call it)."""
    import _thread

    if getattr(_thread.start_new_thread, "_watched", False):
        return
    real, lock = _thread.start_new_thread, _thread.allocate_lock()

    def start_new_thread(function, args, kwargs=None):
        def counted(*a, **k):
            try:
                return function(*a, **k)
            finally:
                with lock:  # after the starter added it
                    STARTED.discard(_thread.get_ident())

        with lock:
            ident = real(counted, args) if kwargs is None else real(counted, args, kwargs)
            STARTED.add(ident)
        return ident

    start_new_thread._watched = True
    _thread.start_new_thread = _thread.start_new = start_new_thread
    if getattr(threading, "_start_new_thread", None) is real:  # Python 3.11, 3.12
        threading._start_new_thread = start_new_thread


STARTED: set = set()  # idents of the threads started since count_threads, still running


def threads() -> int:
    """Threads running: those ``threading`` lists and those ``_thread`` started since
    :func:`count_threads` (a native one that never went through ``_thread``: not)."""
    return len({t.ident for t in threading.enumerate()} | STARTED)
