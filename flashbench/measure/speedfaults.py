"""The run's own faults while ``flashbench speed`` times (``meta.interference``, each a
FAIL of the whole run): other processes of the run that used CPU while the harness timed
its own row, the harness, the zygote or a worker scheduled or limited not as at the start
(a kernel's import set it: set back), and the harness stopped and continued from outside.
"""

from __future__ import annotations

import time

from flashbench.backends.strays import kept_as, others_cpu, priority, said
from flashbench.infra.cpuload import TICK as _TICK
from flashbench.infra.freeze import continued

__all__ = ["INTERFERENCE_TICKS", "INTERFERENCE", "timed_alone", "others_kept", "rescheduled",
           "stopped_outside"]

# the harness's own rows: other processes of the run may use 2 ticks + 5% of their time
# (a worker's OpenMP threads spin a while after its last request)
INTERFERENCE_TICKS, INTERFERENCE = 2, 0.05


def timed_alone(interference: list, first: tuple, time_row, case, b, *args):
    """``time_row(case, b, *args)``, the harness's own row, with what else this run's
    processes did meanwhile onto ``interference``: their CPU (/proc) over 2 ticks + 5% of
    the row's time, or this process's scheduling changed from ``first`` (set back)."""
    c0, t0 = others_cpu(), time.perf_counter()
    row = time_row(case, b, *args)
    used, wall = others_cpu() - c0, time.perf_counter() - t0
    rescheduled(interference, first, f"while {b.name} was timed on {case.label()}")
    if used > INTERFERENCE_TICKS * _TICK + INTERFERENCE * wall:
        interference.append(f"other processes of this run (a kernel's worker, or what it "
                            f"started) used {used:.3g} s of CPU in the {wall:.3g} s {b.name} "
                            f"was timed on {case.label()} (/proc): its times are not its own")
    return row


def others_kept(interference: list, first: tuple, mine: tuple, worker, when: str) -> None:
    """Onto ``interference``: the zygote, or the row's own worker, scheduled or limited not
    as this process was at the start (:func:`~flashbench.backends.strays.kept_as`); set
    back."""
    from flashbench.backends import zygote

    pids = [(z, "the zygote (every worker forked from it inherits it)")
            for z in zygote.zygote_pids()]
    if worker is not None and worker.proc is not None:
        pids.append((worker.proc.pid, "its worker"))
    for pid, who in pids:
        why = kept_as(pid, first, mine)
        if why is None:
            continue
        back = "set back"
        if kept_as(pid, first, mine) is not None:  # the OS refused (a hard limit raised):
            back = "replaced (the OS refused to set it back)"  # started again as it was
            if worker is not None and pid == worker.proc.pid:
                worker.close()
                worker.call({"op": "null"})  # a new one, from a zygote set back or new
            else:
                zygote._close_zygote()
        interference.append(f"{who} was not scheduled as this process {when} ({why}): {back}")


def stopped_outside(interference: list, since: int, when: str) -> None:
    """Onto ``interference``: this process was stopped and continued from outside (a
    SIGCONT since ``since``, a :func:`~flashbench.infra.freeze.continued` reading)."""
    if continued() != since:
        interference.append(f"this process was stopped from outside and continued (SIGCONT) "
                            f"{when}: a kernel's process, or a shell's Ctrl-Z and fg; the "
                            f"times of that stretch are not the code's")


def rescheduled(interference: list, first: tuple, when: str) -> None:
    """Onto ``interference``: this process's scheduling (:func:`~flashbench.backends.strays.
    priority`) changed from ``first``, ``when``; set back."""
    now = priority()
    if now != first:
        back = "set back" if priority(first) == first else "not set back (the OS refused)"
        interference.append(f"this process's scheduling was changed {when} ({said(first)} "
                            f"-> {said(now)}): {back}")
