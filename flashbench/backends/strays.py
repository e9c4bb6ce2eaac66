"""Processes a kernel's code left running where no worker's end reaches them.

A worker's process group dies with it, but a double fork and ``setsid`` leave it: a probe's
kernel (2026-12-05) started such a daemon at import, which stopped the harness 8 ms in 10
while torch's peers were timed (the kernel read 7.7x faster than them), or rewrote the
``--json`` file once the harness had exited (a wrong kernel's row PASS). The harness makes
itself its descendants' subreaper (:func:`adopt`), so an orphan is re-parented to it, not
to init, and :func:`sweep` kills each child in a session of its own that is not a zygote
or a worker, with everything in its session. Linux (elsewhere both do nothing).
"""

from __future__ import annotations

import ctypes
import os
import signal

from flashbench.infra.cpuload import tree_cpu

__all__ = ["adopt", "sweep", "others_cpu", "priority"]

PR_SET_CHILD_SUBREAPER = 36


def adopt(on: bool = True) -> bool:
    """Make this process the subreaper of its descendants (``on``), or no longer (an orphan
    of a later, unrelated process tree would stay a zombie here); whether it worked."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0,
                                                       0) == 0
    except (OSError, AttributeError):
        return False


def _stat(pid: int) -> tuple[int, int, int, str] | None:
    """(parent pid, process group, session id, state) of ``pid``, None where it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[1]), int(fields[2]), int(fields[3]), fields[0]
    except (OSError, IndexError, ValueError):
        return None


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:120]
    except OSError:
        return "?"


def _known() -> set[int]:
    """The zygotes' and the workers' own processes (each leads a session of its own)."""
    from flashbench.backends.worker import worker_pids
    from flashbench.backends.zygote import zygote_pids

    return {*worker_pids(), *zygote_pids()}


def sweep() -> list[str]:
    """Kill (and reap) this process's children that lead or sit in a session that is
    neither this process's nor a zygote's or worker's, with their sessions' processes; a
    description of each killed ("pid N: its command")."""
    if not os.path.isdir("/proc"):
        return []
    me, mine, known, found = os.getpid(), os.getsid(0), _known(), []
    ours = os.getpgid(0)
    for _ in range(8):  # a killed stray's own children are re-parented here: again
        strays = [(int(n), st) for n in os.listdir("/proc") if n.isdigit()
                  and (st := _stat(int(n))) is not None and st[0] == me
                  and int(n) not in known and st[2] not in (mine, *known)]
        if not strays:
            break
        for pid, (_, group, _, state) in strays:
            if state != "Z":
                found.append(f"pid {pid}: {_command(pid)}")
            if group > 1 and group != ours:  # its group (never this process's own)
                try:
                    os.killpg(group, signal.SIGKILL)
                except OSError:
                    pass
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
    return found


def others_cpu() -> float:
    """CPU seconds (user + system, /proc) that this process's descendants have used: the
    zygote, the workers and whatever they started. Read around the harness's own timings,
    where none of them should run (a probe's kernel forked busy processes at import and
    killed them at its first timed request: torch's peers read up to 20x slower)."""
    return tree_cpu()  # a reaped one's too


def priority(restore: tuple | None = None) -> tuple:
    """This process's (nice, autogroup nice) as the OS reports them now (None where it has
    none); with ``restore``, set back to it first where it differs and the OS allows (a
    probe's kernel set the harness's to 19 from its worker while torch's peers were timed)."""
    def group() -> int | None:
        try:
            with open("/proc/self/autogroup") as f:
                return int(f.read().split("nice")[1])
        except (OSError, IndexError, ValueError):
            return None

    if restore is not None:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, restore[0])
            if restore[1] is not None and group() != restore[1]:
                with open("/proc/self/autogroup", "w") as f:
                    f.write(str(restore[1]))
        except OSError:
            pass
    return os.getpriority(os.PRIO_PROCESS, 0), group()

