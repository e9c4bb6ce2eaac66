"""One worker's requests timed on the harness's clock (:class:`Clocked`) and the CPU its
process tree has used (:func:`cpu_s`): :mod:`flashbench.measure.speedworker`'s parts."""

from __future__ import annotations

from flashbench.backends.strays import now_since_boot
from flashbench.infra.cpuload import stat_cpu
from flashbench.timed.guard import Pool
from flashbench.timed.placed import post

__all__ = ["Clocked", "cpu_s", "WARM_S"]

WARM_S = 5e-3  # a CPU worker's threads kept busy this long before each run and empty request


def cpu_s(pid: int, family=()) -> float | None:
    """The process's CPU time (utime + stime of all its threads, /proc/<pid>/stat, and of
    the children it waited for), seconds, + that of the processes ``family`` (its
    descendants, as :func:`_calls` last found them: a probe's worker forked a helper at
    prepare that did each stage's work while the stage waited, on no reading); None where
    there is no /proc."""
    own = stat_cpu(f"/proc/{pid}/stat", children=True)
    return None if own is None else own + sum(stat_cpu(f"/proc/{p}/stat", children=True)
                                              or 0.0 for p in family)


class Clocked:
    """Requests to one worker, each round trip timed on this process's clock."""

    def __init__(self, worker, limit_per_call: float):
        self.worker, self.limit = worker, limit_per_call
        self.pid, self.family = worker.proc.pid, []  # its descendants: _calls finds them
        self.since = now_since_boot()  # its row's start: a process left later is its own
        self.pad = 0  # blank outputs a run and an empty request sum: k on a GPU, else none
        self.reader = None  # a CPU worker's: its outputs read by this process at each reply
        self.places = None  # ... and its inputs read back (timed.placed.Places)
        self.mail = None  # the pages it maps, where a CPU worker's inputs are posted
        self.start = 0  # the first argument a run posts (a backward's dO: its last)
        self.warming = False  # its threads kept busy before each run (a CPU's: _timed)

    def ask(self, calls: int = 1, on_reply=None, most_bytes=None, on_clock=None,
            **request) -> tuple:
        """(round trip, s, on this process's clock; the reply); the time limit: ``calls``
        x the per-call limit, + 2 (``on_reply``, ``most_bytes``, ``on_clock``: the
        worker's call's)."""
        from flashbench.backends.tensors import BackendFailed
        from flashbench.backends.worker import OverLimit, set_time_limit, time_limit

        saved = time_limit()
        allowed = min(86400.0, self.limit * (calls + 2))
        set_time_limit(allowed)
        try:
            reply = self.worker.call(request, on_reply, most_bytes, on_clock)
            return self.worker.round_trip_s, reply
        except OverLimit:
            raise BackendFailed(  # the limit as the user gave it, not the request's
                f"exceeded the per-call time limit of {self.limit:g} s (--timeout): a "
                f"request of {calls} call(s) ran past {allowed:g} s; its worker was stopped"
            ) from None
        finally:
            set_time_limit(saved)

    def posting(self, slots: list, pool: Pool, start: int, k: int) -> dict:
        """The request's fields and ``on_clock`` posting the slots' arguments [start:] once
        its clock has started, before it is sent (:mod:`flashbench.timed.placed`), padded
        to ``k`` slots with contents the worker has seen, so that every request copies as
        many bytes (none: not posting)."""
        if self.mail is None:
            return {}
        seen = [i for i in dict.fromkeys(pool.upcoming(pool.size) + list(range(pool.size)))
                if not pool.fresh[i] and i not in slots]  # the next run's first
        slots = list(slots) + (seen * k)[:max(0, k - len(slots))]

        def send():
            post(self.mail, slots, pool.slots, start)
        return {"on_clock": send, "posted": slots, "start": start}

    def null(self, pool: Pool, k: int, warmed: bool = False, **request) -> float:
        """An empty request's round trip; where inputs are posted, k slots' worth, those the
        next run uses first (the last run's, hot in the worker's cache, read 0.06 ms less)."""
        if not warmed:  # as a run is: whatever its threads' spinning costs the clock cancels
            self.warm()
        return self.ask(op="null", **self.posting([], pool, self.start, k), **request)[0]

    def warm(self) -> None:
        if self.warming:  # its threads awake when the request comes (TimedServer._warm)
            self.ask(op="warm", s=WARM_S)

    def over_limit(self, runs: list, null: float) -> None:
        """BackendFailed where a request's calls took more than the per-call limit each
        (the harness's clock: round trip less the fastest empty one, over its calls); a
        request may run to (calls + 2) x the limit before it is stopped."""
        from flashbench.backends.tensors import BackendFailed

        worst = max((rt - null) / n for rt, n in runs)
        if worst > self.limit:
            raise BackendFailed(f"exceeded the per-call time limit of {self.limit:g} s "
                                f"(--timeout): a call took {worst:.3g} s (the harness's clock)")
