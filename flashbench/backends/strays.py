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

import os
import signal
import time

from flashbench.infra.cpuload import TICK as _TICK
from flashbench.infra.cpuload import tree_cpu
from flashbench.infra.freeze import adopt, command, orphans

__all__ = ["adopt", "sweep", "escaped", "now_since_boot", "others_cpu", "priority", "said",
           "limits", "limits_said", "kept_as"]


def _stat(pid: int) -> tuple[int, int, int, str] | None:
    """(parent pid, process group, session id, state) of ``pid``, None where it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[1]), int(fields[2]), int(fields[3]), fields[0]
    except (OSError, IndexError, ValueError):
        return None


def _known() -> set[int]:
    """The zygotes' and the workers' own processes (each leads a session of its own)."""
    from flashbench.backends.worker import worker_pids
    from flashbench.backends.zygote import zygote_pids

    return {*worker_pids(), *zygote_pids()}


def sweep(spare=(), grace: float = 0.0) -> list[str]:
    """Kill (and reap) this process's children that lead or sit in a session that is
    neither this process's nor a zygote's or worker's, with their sessions' processes,
    ``spare`` (pids: children before a run) aside, after ``grace`` s for those ending
    (:func:`flashbench.infra.freeze.orphans`); a description of each killed ("pid N: its
    command")."""
    if not os.path.isdir("/proc"):
        return []
    known = _known()
    return orphans(keep=known | set(spare), spare_sessions={os.getsid(0), *known},
                   grace=grace)


def escaped(since: float | None = None) -> tuple[list[str], list[str]]:
    """This process's and the zygotes' children, in any state (a zombie too), that are no
    zygote or worker and sit outside this process's session: read while a worker lives, a
    process its kernel's code double-forked (re-parented here, its subreaper) or cloned with
    CLONE_PARENT (the zygote's child, its sibling); no reading of the worker's tree counts
    their CPU. A red-team probe's helper (2026-12-06) computed each new input while the
    harness wrote it and exited at the fetch: swept as a zombie, silently, and the kernel
    read 31x faster than its honest twin, PASS. Each is killed; returned as (those started
    after ``since``, a :func:`now_since_boot` reading; the others, started before it by a
    kernel stopped since, left for the run's next call without ``since``, which takes them
    all). A zygote's zombie is its to reap: told once."""
    if not os.path.isdir("/proc"):
        return [], []
    from flashbench.backends.zygote import zygote_pids

    me, mine, known = os.getpid(), os.getsid(0), _known()
    parents = {me, *zygote_pids()}  # a zygote's too: clone(CLONE_PARENT) from a worker
    found = [(int(n), st) for n in os.listdir("/proc") if n.isdigit() and int(n) not in known
             and int(n) not in _TOLD and (st := _stat(int(n))) is not None
             and st[0] in parents and st[2] != mine]
    after, before = [], []
    for pid, st in found:
        said = f"pid {pid}: " + ("ended (a zombie)" if st[3] == "Z" else
                                  f"running (its command line, a fork's: {command(pid)})")
        # /proc's start time is truncated to a clock tick: one started in since's own
        # tick, after it, may read up to a tick before it (a CI run's clone did)
        ours = since is None or _started(pid) + _TICK > since
        (after if ours else before).append(said)
        if ours and st[0] != me:
            _TOLD.add(pid)  # a zygote's zombie, told once
        try:
            os.kill(pid, signal.SIGKILL)
            if ours and st[0] == me:  # a zygote reaps its own
                os.waitpid(pid, 0)
        except (OSError, ChildProcessError):
            pass
    return after, before


_TOLD: set[int] = set()


def now_since_boot() -> float:
    """Seconds since boot (CLOCK_BOOTTIME: what /proc/<pid>/stat's start times count)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def _started(pid: int) -> float:
    """When ``pid`` started, seconds since boot, truncated to a clock tick (inf: unread)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19]) * _TICK
    except (OSError, IndexError, ValueError):
        return float("inf")


def others_cpu() -> float:
    """CPU seconds (user + system, /proc) that this process's descendants have used: the
    zygote, the workers and whatever they started. Read around the harness's own timings,
    where none of them should run (a probe's kernel forked busy processes at import and
    killed them at its first timed request: torch's peers read up to 20x slower)."""
    return tree_cpu()  # a reaped one's too


def priority(restore: tuple | None = None) -> tuple:
    """How the OS schedules this process now: (each distinct (nice, policy, its priority,
    CPUs allowed) of its threads, sorted; the autogroup nice, None where it has none); with
    ``restore`` (an earlier reading), each thread that differs set back to it first, where
    the OS allows. A probe's kernel set the harness's nice to 19 from its worker while
    torch's peers were timed; a red-team probe's (2026-12-06) pinned every harness thread to
    one CPU, or to SCHED_IDLE, at its import: an honest sdpa read 5.5x faster than torch's,
    PASS, and the header said "1 CPUs". ``flashbench speed`` reads it before any worker."""
    def group() -> int | None:
        try:
            with open("/proc/self/autogroup") as f:
                return int(f.read().split("nice")[1])
        except (OSError, IndexError, ValueError):
            return None

    tids = [int(t) for t in os.listdir("/proc/self/task")] if os.path.isdir(
        "/proc/self/task") else [0]
    if restore is not None:
        for tid in tids:
            _set_back(tid, restore[0])
        try:
            if restore[1] is not None and group() != restore[1]:
                with open("/proc/self/autogroup", "w") as f:
                    f.write(str(restore[1]))
        except OSError:
            pass
    return tuple(sorted({s for t in tids if (s := _scheduling(t)) is not None})), group()


try:
    import resource
except ImportError:  # not a Unix
    resource = None
# the resource limits compared, each with its name and unit in the words of a report
_NAMED = (("AS", "address space", "bytes"), ("CPU", "CPU time", "s"),
          ("DATA", "data segment", "bytes"), ("FSIZE", "file size", "bytes"),
          ("NOFILE", "open files", "files"), ("NPROC", "processes", "processes"),
          ("STACK", "stack", "bytes"), ("MEMLOCK", "locked memory", "bytes"),
          ("RSS", "resident set", "bytes"))
_NAMED = tuple(n for n in _NAMED if hasattr(resource, "prlimit")
               and hasattr(resource, f"RLIMIT_{n[0]}"))
_LIMITS = tuple(getattr(resource, f"RLIMIT_{n[0]}") for n in _NAMED)


def limits(pid: int = 0) -> tuple:
    """Process ``pid``'s resource limits (address space, CPU time, files, processes, ...),
    (soft, hard) each; () where unread."""
    try:
        return tuple(resource.prlimit(pid, r) for r in _LIMITS)
    except OSError:
        return ()


def kept_as(pid: int, first: tuple, mine: tuple) -> str | None:
    """Where another process of the run (the zygote, a worker) is not scheduled as this one
    was at the start (``first``: a :func:`priority` reading; ``mine``: its :func:`limits`),
    what differed, each thread and limit set back where the OS allows; None where alike or
    gone. A second red team's kernel (2026-12-06) set the zygote to SCHED_IDLE, nice 19 and
    one CPU from its import, which every worker forked later inherited (an honest kernel
    read 6.6-12.7 ms against 0.5: 3-14x, PASS), or its address-space limit to 1 MB (an
    honest kernel FAILed "can't allocate memory")."""
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return None
    threads = tuple(sorted({st for t in tids if (st := _scheduling(t)) is not None}))
    now = limits(pid)
    if set(threads) <= set(first[0]) and now in ((), mine):
        return None
    for tid in tids:
        _set_back(tid, first[0])
    for r, was, got in zip(_LIMITS, mine, now, strict=False):
        if was != got:
            try:
                resource.prlimit(pid, r, was)
            except (OSError, ValueError):
                pass
    return f"threads: {_threads_said(threads)}" + (
        "" if now in ((), mine) else f"; resource limits: {limits_said(now, mine)}")


def limits_said(now: tuple, was: tuple) -> str:
    """The :func:`limits` that differ, in words: "address space (RLIMIT_AS) soft 1048576
    bytes, hard 1048576 bytes, were unlimited, unlimited"."""
    def value(v: int, unit: str) -> str:
        return "unlimited" if v == getattr(resource, "RLIM_INFINITY", -1) else f"{v} {unit}"

    return "; ".join(f"{name} (RLIMIT_{key}) soft {value(n[0], unit)}, hard "
                     f"{value(n[1], unit)}, were {value(w[0], unit)}, {value(w[1], unit)}"
                     for (key, name, unit), n, w in zip(_NAMED, now, was, strict=False)
                     if n != w) or "alike"


def _scheduling(tid: int) -> tuple | None:
    """(nice, policy, priority, CPUs allowed) of thread ``tid``; None where gone."""
    try:
        cpus = sorted(os.sched_getaffinity(tid)) if hasattr(os, "sched_getaffinity") else []
        policy = os.sched_getscheduler(tid) if hasattr(os, "sched_getscheduler") else None
        level = os.sched_getparam(tid).sched_priority if policy is not None else None
        nice = os.getpriority(os.PRIO_PROCESS, tid)
    except OSError:
        return None
    return nice, policy, level, tuple(cpus)


def _set_back(tid: int, first: tuple) -> None:
    """Thread ``tid``'s scheduling set to the first of ``first``'s where it is none of them."""
    now = _scheduling(tid)
    if now is None or now in first or not first:
        return
    nice, policy, level, cpus = first[0]
    try:
        if hasattr(os, "sched_setaffinity") and now[3] != cpus:
            os.sched_setaffinity(tid, cpus)
        if policy is not None and now[1:3] != (policy, level):
            os.sched_setscheduler(tid, policy, os.sched_param(level))
        if now[0] != nice:
            os.setpriority(os.PRIO_PROCESS, tid, nice)
    except OSError:
        pass


_POLICIES = {0: "SCHED_OTHER", 1: "SCHED_FIFO", 2: "SCHED_RR", 3: "SCHED_BATCH", 5: "SCHED_IDLE"}


def said(state: tuple) -> str:
    """A :func:`priority` reading in words: "threads: nice 0, SCHED_OTHER, CPUs 0-1;
    autogroup nice 0"."""
    return f"threads: {_threads_said(state[0])}; autogroup nice {state[1]}"


def _threads_said(threads: tuple) -> str:
    return "; ".join(f"nice {n}, {_POLICIES.get(p, f'policy {p}')}"
                     + (f" {level}" if level else "") + f", CPUs {_cpus_said(cpus)}"
                     for n, p, level, cpus in threads) or "none read"


def _cpus_said(cpus: tuple) -> str:
    """CPUs 0, 1, 2, 3, 8 as "0-3,8"."""
    runs: list[list[int]] = []
    for c in cpus:
        if runs and c == runs[-1][1] + 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)
