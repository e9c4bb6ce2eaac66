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
timed, and checks the harness's scheduling). Nor may a worker, or any process it starts, call
``ptrace`` (:func:`no_ptrace`): a red team's helper (2026-12-07) made itself traced, so the
SIGSTOP at its run's reply went to its tracer and stopped none of its threads.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import struct

__all__ = ["sealed", "worker_sealed", "dumpable", "set_dumpable", "no_ptrace"]

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
    no_ptrace()
    return done


# (seccomp's AUDIT_ARCH, ptrace's syscall number) of the machines these workers run on
_PTRACE = {"x86_64": (0xC000003E, 101), "aarch64": (0xC00000B7, 117)}
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def no_ptrace() -> bool:
    """A seccomp filter on this process and all it starts from here on: ``ptrace`` fails
    with EPERM (PTRACE_TRACEME too), as does any system call of another ABI (x32's, i386's
    ``int 0x80``: another number for ptrace); the rest pass. A red team's helper made itself
    traced (PTRACE_TRACEME): a traced process's SIGSTOP stops only the thread it is given
    to, until its tracer says, so its other thread computed after its run's reply while the
    harness waited for it to stop, and read it done (a quarter of the work timed: PASS,
    1.5x). Whether the filter holds (False on another machine or without seccomp)."""
    libc, machine = _libc(), _PTRACE.get(platform.machine())
    if libc is None or machine is None:
        return False
    arch, nr = machine
    ld, jeq, jset, ret = 0x20, 0x15, 0x45, 0x06  # BPF_LD|W|ABS, JMP|JEQ|K, JMP|JSET|K, RET|K
    program = b"".join(struct.pack("HBBI", *i) for i in (
        (ld, 0, 0, 4),  # seccomp_data.arch
        (jeq, 0, 4, arch),  # another ABI: refused
        (ld, 0, 0, 0),  # seccomp_data.nr
        (jset, 2, 0, 0x40000000),  # x32's numbers: refused
        (jeq, 1, 0, nr),  # ptrace: refused
        (ret, 0, 0, 0x7FFF0000),  # SECCOMP_RET_ALLOW
        (ret, 0, 0, 0x00050000 | errno.EPERM)))  # SECCOMP_RET_ERRNO
    buffer = ctypes.create_string_buffer(program)
    fprog = _Program(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    prctl = libc.prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong,
                      ctypes.c_ulong]
    prctl(PR_SET_NO_NEW_PRIVS, 1, None, 0, 0)  # needed without CAP_SYS_ADMIN
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0) == 0
