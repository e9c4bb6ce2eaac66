"""A CPU worker's call inputs written by the harness into the worker's own buffers, the
worker's whole process tree stopped, just before the run request that uses them; the worker
let go only once that request is sent and the clock runs (:mod:`flashbench.measure.
speedworker`). Before, the harness wrote each content into pages the worker maps and the
worker copied it in (``fill``) and readied its calls (``stage``) before the run: a thread
kept since the warm-up computed each content in those moments and the timed calls looked
the outputs up (a red-team probe, 2026-12-06: PASS, 16x over its honest twin, 33 of 33
calls precomputed). Now no code of the kernel's runs between the moment a call's inputs
exist in its memory and the clock's start. Through ``/proc/<pid>/mem`` (:meth:`Placer.of`
says whether this process may write it); the harness reads the inputs back at the reply,
the worker stopped again, to find a call that wrote into them.
"""

from __future__ import annotations

import os
import signal

from flashbench.infra.cpuload import descendants
from flashbench.timed.commit import _send, _wait_stopped

__all__ = ["Hold", "Placer", "PlacesRefused"]

ROUNDS = 8  # scans of the worker's descendants for processes started as the hold began


class PlacesRefused(ValueError):
    """The worker's ``places`` are not buffers of its pool's slots (the row fails)."""


class Hold:
    """The worker ``pid``'s process group, itself and every descendant (``known``, then as
    /proc finds them until no new one shows) stopped (SIGSTOP) from construction to
    :meth:`release` (SIGCONT to each): a helper in its own session is stopped too."""

    def __init__(self, pid: int, known=()):
        self.pid, self.pids, self.held = pid, [pid], True
        _send(pid, signal.SIGSTOP)
        pending = [p for p in known if p != pid]
        for _ in range(ROUNDS):
            for p in pending:
                _kill(p, signal.SIGSTOP)
            self.pids += pending
            for p in self.pids:
                _wait_stopped(p)
            pending = [p for p in descendants(pid) if p not in self.pids]
            if not pending:
                break

    def release(self) -> None:
        if not self.held:
            return
        self.held = False
        _send(self.pid, signal.SIGCONT)
        for p in self.pids[1:]:
            _kill(p, signal.SIGCONT)


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except OSError:
        pass  # ended


class Placer:
    """Writes a pool's slots into the worker's buffers (``places``: per slot, per argument,
    [address, bytes] or None, as the worker's prepare replied) and reads them back."""

    def __init__(self, pid: int, places: list, slots: list):
        self.pid, self.places = pid, _checked(places, slots)
        self.fd: int | None = None

    @classmethod
    def of(cls, pid: int, places, slots: list) -> Placer | None:
        """None where this process may not write the worker's memory (the worker then
        copies its inputs in itself); PlacesRefused where ``places`` are not its buffers."""
        try:
            os.close(os.open(f"/proc/{pid}/mem", os.O_RDWR))
        except OSError:
            return None
        return cls(pid, places, slots)

    def _open(self) -> int:
        if self.fd is None:
            self.fd = os.open(f"/proc/{self.pid}/mem", os.O_RDWR)
        return self.fd

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def write(self, i: int, args, start: int = 0, stop: int | None = None) -> None:
        """Slot ``i``'s arguments [start:stop] (CPU tensors) written at its places (the
        worker stopped: :class:`Hold`); OSError where a write falls short."""
        fd = self._open()
        for x, place in list(zip(args, self.places[i], strict=True))[start:stop]:
            if x is None:
                continue
            data = _raw(x)
            if os.pwrite(fd, data, place[0]) != len(data):
                raise OSError(f"a short write into the worker's slot {i}")

    def place(self, known, slots: list, args: list, start: int, stop: int | None) -> Hold:
        """The worker's tree stopped (:class:`Hold`, ``known``: its descendants) and the
        arguments [start:stop] of ``slots`` (``args``: every slot's) written: the hold, to
        be let go by the request that uses them; OSError (let go) where a write fails."""
        hold = Hold(self.pid, known)
        try:
            for i in slots:
                self.write(i, args[i], start, stop)
        except BaseException:
            hold.release()
            raise
        return hold

    def read_back(self, pool, slots: list) -> None:
        """The slots' inputs read back from the worker's buffers (stopped at the reply): a
        call that wrote into one is counted in ``pool``'s :meth:`~flashbench.timed.pool.
        Pool.modified`."""
        for i in slots:
            for j in self.changed(i, pool.slots[i]):
                name = pool.names[j] if j < len(pool.names) else f"argument {j + 1}"
                pool.changed[name] = pool.changed.get(name, 0) + 1
            pool.checked += 1

    def changed(self, i: int, args) -> list[int]:
        """The positions of slot ``i``'s arguments whose bytes in the worker's buffers are
        not ``args``'s (read now; the worker stopped)."""
        fd, found = self._open(), []
        for j, (x, place) in enumerate(zip(args, self.places[i], strict=True)):
            if x is not None and os.pread(fd, place[1], place[0]) != _raw(x).tobytes():
                found.append(j)
        return found


def _raw(x):
    """Tensor ``x``'s bytes in logical order (a numpy view, or a copy where strided)."""
    import torch

    return x.detach().contiguous().reshape(-1).view(torch.uint8).numpy()


def _checked(places, slots: list) -> list:
    """``places`` where each is [address, the slot's argument's bytes], none overlaps
    another and an absent argument has none; else PlacesRefused, naming the first fault."""
    try:
        got = [[None if p is None else (int(p[0]), int(p[1])) for p in slot]
               for slot in places]
    except (TypeError, ValueError, IndexError) as exc:
        raise PlacesRefused(f"its worker's buffers were not given as [address, bytes] "
                            f"({exc})") from None
    if len(got) != len(slots) or any(len(g) != len(s) for g, s in zip(got, slots,
                                                                        strict=False)):
        raise PlacesRefused("its worker named buffers for another pool's slots")
    spans = []
    for i, (slot, args) in enumerate(zip(got, slots, strict=True)):
        for j, (place, x) in enumerate(zip(slot, args, strict=True)):
            want = None if x is None else x.nbytes
            if (place is None) != (want is None) or (place and (place[1] != want
                                                                or place[0] <= 0)):
                raise PlacesRefused(f"its worker's buffer for slot {i}'s argument {j + 1} "
                                    f"is {place}, for {want} bytes")
            if place and want:
                spans.append(place)
    spans.sort()
    for (a, n), (b, _) in zip(spans, spans[1:], strict=False):
        if a + n > b:
            raise PlacesRefused("two of its worker's input buffers overlap")
    return got
