"""SIGTERM and SIGINT as an exception (:class:`Interrupted`), so that every ``with`` and
``finally`` of a long run (the review's worktrees and workers) runs before it ends."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

__all__ = ["Interrupted", "signals_raise"]


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGINT arrived; the run (a review) cleaned up and stops."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextmanager
def signals_raise():
    """SIGTERM/SIGINT raise :class:`Interrupted` (main thread only), so every ``with``
    and ``finally`` inside runs: workers stopped, worktrees removed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Interrupted(signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
