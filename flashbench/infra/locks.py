"""Exclusive file locks (``flock``), written once for every module that needs one.

A lock is held on a path: a folder is locked on its own descriptor (no lock file is
created inside it), any other path is opened (created if need be) and locked. The lock
belongs to the open descriptor: it ends when the descriptor is closed, also when the
process dies, so a lock that can be taken belongs to nobody alive.

- :func:`locked`: a ``with`` block under the lock (waits for it);
- :func:`acquire` / :func:`release`: a lock held across calls (a review's session
  folder), or tried without waiting (``wait=False``: None when another holds it).

Used by :mod:`flashbench.infra.machine` (~/.asv-machine.json), :mod:`flashbench.site` (the
site folder and the npm cache) and :mod:`flashbench.review.gitops` (review sessions).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["acquire", "release", "locked"]


def acquire(path: str | os.PathLike, wait: bool = True) -> int | None:
    """An exclusive lock on ``path`` (a folder, or a file created if missing); returns
    the descriptor that holds it, or None when ``wait`` is False and another holds it.
    OSError when the path cannot be opened."""
    path = Path(path)
    if path.is_dir():
        fd = os.open(path, os.O_RDONLY)
    else:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd


def release(fd: int) -> None:
    """End the lock that :func:`acquire` returned (closing its descriptor)."""
    os.close(fd)


@contextmanager
def locked(path: str | os.PathLike) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` for the ``with`` block (waits for it)."""
    fd = acquire(path)
    assert fd is not None
    try:
        yield
    finally:
        release(fd)
