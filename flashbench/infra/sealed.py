"""The harness's memory kept from the kernels' workers (Linux; elsewhere nothing is done).

A red-team probe's kernel (2026-12-06) opened ``/proc/<harness>/mem`` from its worker for
reading and writing at import: a worker runs as the harness's user (root on these machines,
and no Yama), so every reading, seed and verdict the harness held was writable. The harness
makes itself not dumpable (:func:`sealed`), so that only a process holding CAP_SYS_PTRACE
may read or write its memory (ptrace, ``/proc/<pid>/mem``, ``/proc/<pid>/environ``); each
worker drops that capability for good before any kernel's module is imported, and is made
dumpable again so that the harness reads its outputs (:func:`worker_sealed`). The zygote
that forks the workers is not dumpable either, nor, where the harness runs as root, any
worker (so that none reads or writes another's; elsewhere the OS's ptrace scope decides).
A worker may still signal the harness (speed stops every other worker while one's row is
timed, and checks the harness's scheduling).
"""

from __future__ import annotations

import contextlib
import ctypes
import os

__all__ = ["sealed", "worker_sealed", "dumpable", "set_dumpable"]

PR_GET_DUMPABLE, PR_SET_DUMPABLE, PR_CAPBSET_DROP = 3, 4, 24
CAP_SYS_PTRACE = 19
_CAPABILITY_V3 = 0x20080522


def _libc():
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def dumpable() -> int | None:
    """This process's dumpable flag (1: its user's processes may read its memory), None
    where there is no prctl."""
    libc = _libc()
    try:
        return None if libc is None else int(libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0))
    except AttributeError:
        return None


def set_dumpable(on: bool) -> bool:
    """Set this process's dumpable flag; whether it worked."""
    libc = _libc()
    try:
        return libc is not None and libc.prctl(PR_SET_DUMPABLE, int(on), 0, 0, 0) == 0
    except AttributeError:
        return False


@contextlib.contextmanager
def sealed():
    """This process not dumpable for the block (a kernel's run), as it was after."""
    before = dumpable()
    set_dumpable(False)
    try:
        yield
    finally:
        if before is not None:
            set_dumpable(bool(before))


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def worker_sealed() -> bool:
    """A worker's, before it imports a kernel: CAP_SYS_PTRACE dropped from its bounding set
    (no program it runs gets it back) and from its effective, permitted and inheritable
    sets, then dumpable again unless root (below). Whether it holds no CAP_SYS_PTRACE now."""
    libc = _libc()
    if libc is None or not hasattr(libc, "capget"):
        return False
    libc.prctl(PR_CAPBSET_DROP, CAP_SYS_PTRACE, 0, 0, 0)  # refused without CAP_SETPCAP
    header, data = _Header(_CAPABILITY_V3, 0), (_Data * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        return False
    bit = ~(1 << CAP_SYS_PTRACE) & 0xFFFFFFFF
    data[0].effective &= bit
    data[0].permitted &= bit
    data[0].inheritable &= bit
    done = libc.capset(ctypes.byref(header), data) == 0
    # a forked worker inherits the zygote's 0: kept where the harness runs as root (it reads
    # the worker's memory by its CAP_SYS_PTRACE), so that no other worker reads or writes
    # it; else set back to 1, the harness's only way to read it
    set_dumpable(os.geteuid() != 0)
    return done
