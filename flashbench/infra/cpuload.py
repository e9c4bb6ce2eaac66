"""CPU time from /proc: a process's (its threads', and its children's it waited for), a
process tree's, the busy time of the CPUs this process may run on, and from these what
processes *outside* a run used while it measured: the speed run marks a row timed while
they kept a CPU busy, the review does not judge a timing whose rounds met them (and the
review's note on --threads against those CPUs). Linux; elsewhere the readings are None.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import dataclass

__all__ = ["TICK", "stat_cpu", "processes", "descendants", "tree_cpu", "machine_cpu", "outside_cpu",
           "cpu_limit", "Load", "load_note", "cpus_watched", "threads_note"]

TICK = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01  # /proc's unit
# the CPUs this process may run on as it starts (imported before any kernel's worker runs):
# read at each reading instead, a kernel that changed the harness's affinity between two
# readings added a CPU's busy time since boot to one (8114 CPUs busy on 2, a red team)
_CPUS = frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None


def cpus_watched() -> frozenset:
    """The CPUs :func:`machine_cpu` reads: this process's allowed ones at its start."""
    return _CPUS if _CPUS is not None else frozenset(range(os.cpu_count() or 1))


def stat_cpu(path: str, children: bool = False) -> float | None:
    """utime + stime, seconds, of a /proc ``stat`` file (a process's: all its threads; or
    one thread's, /proc/<pid>/task/<tid>/stat), + cutime + cstime (its children it waited
    for) where ``children``; None where it cannot be read."""
    try:
        with open(path) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return sum(int(x) for x in fields[11:15 if children else 13]) * TICK


def processes() -> dict[int, tuple[int, int, int, str]]:
    """pid -> (parent, process group, session, state) of every process /proc shows (none
    where there is no /proc)."""
    rows = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return rows
    for n in names:
        if n.isdigit():
            try:
                with open(f"/proc/{n}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                rows[int(n)] = (int(fields[1]), int(fields[2]), int(fields[3]), fields[0])
            except (OSError, IndexError, ValueError):
                continue
    return rows


def descendants(pid: int, table: dict | None = None) -> list[int]:
    """The live processes whose parents lead to ``pid`` (/proc, or a :func:`processes`
    reading; none where there is none)."""
    parent = {p: row[0] for p, row in (processes() if table is None else table).items()}
    found: set[int] = set()
    for p in parent:
        chain = []
        while p in parent and p != pid and p not in found and len(chain) < 64:
            chain.append(p)
            p = parent[p]
        if p == pid or p in found:
            found.update(chain)
    return sorted(found)


def tree_cpu(pid: int | None = None) -> float:
    """CPU seconds the live descendants of ``pid`` (default this process) have used, each
    with the children it reaped."""
    return sum(stat_cpu(f"/proc/{p}/stat", children=True) or 0.0
               for p in descendants(os.getpid() if pid is None else pid))


def machine_cpu() -> float | None:
    """CPU seconds the CPUs this process may run on (:func:`cpus_watched`) have spent busy
    since boot (/proc/stat: user, nice, system, irq, softirq, steal), None where unreadable."""
    mine = _CPUS
    total = 0
    try:
        with open("/proc/stat") as f:
            for line in f:
                name, *v = line.split()
                if not name.startswith("cpu") or name == "cpu":
                    continue
                if mine is None or int(name[3:]) in mine:
                    total += sum(int(v[i]) for i in (0, 1, 2, 5, 6, 7))
    except (OSError, ValueError, IndexError):
        return None
    return total * TICK


def outside_cpu(start: tuple | None = None):
    """What processes outside this run did on this process's CPUs: called bare, a reading
    to pass back later; with it, the CPU seconds they used in between (the CPUs' busy time,
    /proc/stat, less this process's, its descendants' and those reaped), None where
    unreadable. A timing taken while they ran (another job, a build) reads slower, and a
    comparison with one taken while they did not is not the code's own."""
    t = os.times()
    now = (machine_cpu(), t.user + t.system + t.children_user + t.children_system
           + tree_cpu())
    if start is None:
        return now
    if now[0] is None or start[0] is None:
        return None
    return max(0.0, (now[0] - start[0]) - (now[1] - start[1]))


def cpu_limit(value, name: str) -> float:
    """A limit in CPUs: a number >= 0, ``inf`` included (ValueError naming ``name``)."""
    try:
        limit = float(value)
    except (TypeError, ValueError):
        limit = math.nan
    if isinstance(value, bool) or not limit >= 0:
        raise ValueError(f"{name} must be a number of CPUs >= 0 (inf: judge whatever else "
                         f"runs), got {value!r}")
    return limit


@dataclass
class Load:
    """What processes outside this run used over the intervals watched: ``cpu`` seconds of
    theirs in ``wall`` seconds (:func:`outside_cpu` less two of /proc's ticks, its rounding,
    an interval)."""

    cpu: float = 0.0
    wall: float = 0.0

    @property
    def cpus(self) -> float | None:
        """CPUs they kept busy on average (None: nothing watched, or no /proc)."""
        return self.cpu / self.wall if self.wall > 0 else None

    @staticmethod
    def start(read) -> tuple:
        """A reading of ``read`` (:func:`outside_cpu`; None: not read) and the wall clock."""
        return (None if read is None else read()), time.monotonic()

    def add(self, read, start: tuple) -> None:
        """The interval since ``start`` (:meth:`start`'s)."""
        used = None if start[0] is None else read(start[0])
        if used is not None:
            self.cpu += max(0.0, used - 2 * TICK)
            self.wall += time.monotonic() - start[1]


def load_note(cpus: list, limit: float, who: str, option: str) -> str:
    """A header line: what processes outside ``who`` kept busy (each of ``cpus`` a reading of
    :attr:`Load.cpus`, None unread) while it measured, and how many ``option``'s ``limit``
    put aside."""
    if not (seen := [x for x in cpus if x is not None]):
        return f"Processes outside {who}: not read (no /proc, or nothing measured)."
    return (f"Processes outside {who} kept {statistics.median(seen):.2f} CPUs busy (median of "
            f"{len(seen)} timings, at most {max(seen):.2f}; /proc): "
            f"{sum(x > limit for x in seen)} above {limit:g} ({option}), not judged.")


def threads_note(threads: int, cpus: int | None = None) -> str:
    """The review header's note on --threads; ``cpus``: this process's (its affinity). As
    many threads as CPUs or more leave the timing worker unpinned (review.worker_client.
    lane_cpus: no CPU left over), where the note said "fewer threads than cores"."""
    if cpus is None and hasattr(os, "sched_getaffinity"):
        cpus = len(os.sched_getaffinity(0))
    few = cpus is None or threads < cpus
    return (f"Measured with {threads} thread(s) per worker (OpenMP, OpenBLAS and MKL thread "
            "pools): " + ("fewer threads than cores keep a busy machine's load from "
                          "stretching one side's calls." if few else
                          f"as many as or more than the {cpus} CPUs this process may use: the "
                          "worker is not pinned, and a busy machine's load stretches one "
                          "side's calls (single rounds of an unchanged function read "
                          "0.47x-1.68x, a probe at --threads 64 on 2 CPUs)."))
