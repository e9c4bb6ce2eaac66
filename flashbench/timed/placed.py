"""A CPU worker's call inputs posted inside the run request's clock
(:mod:`flashbench.measure.speedworker`). The harness makes each content in its own memory;
it starts the clock, copies the calls' inputs into the pages the worker maps (:func:`post`,
by ``ctypes.memmove``: no thread pool woken) and sends the run request; the worker, waiting
on its pipe all along, copies them into its own buffers and makes the calls. An empty
request posts as many bytes (contents seen already) and the worker copies them the same
way, so the posting and the copies cancel in the round trips' difference. A byte sent
after the copies instead (the request first) woke the worker twice: the harness, preempted
by it, waited for a CPU while the calls ran. Before, the contents were written and copied
in (``fill``) and the calls readied (``stage``) before the run: a kept thread attended each
content there (a red-team probe, 2026-12-06: PASS, 16x over its honest twin). Stopping the
worker across the post instead (SIGSTOP, SIGCONT once the request was sent) cost an honest
2-thread kernel 2-4x at 0.3 ms a call: its OpenMP pool woke slowly from the stop. The
harness reads the inputs back from the worker's buffers at the reply (:class:`Places`).
"""

from __future__ import annotations

import ctypes
import os

__all__ = ["Places", "PlacesRefused", "post"]

_MEMMOVE = ctypes.memmove


class PlacesRefused(ValueError):
    """The worker's ``places`` are not buffers of its pool's slots (the row fails)."""


def post(mail: list, slots: list, args: list, start: int) -> None:
    """The arguments [start:] of ``slots`` (``args``: every slot's, this process's own CPU
    tensors; a slot may come twice) copied into the pages the worker maps (``mail``: the
    same slots' views)."""
    for i in slots:
        for dst, src in list(zip(mail[i], args[i], strict=True))[start:]:
            if dst is not None:
                _MEMMOVE(dst.data_ptr(), src.data_ptr(), src.nbytes)


class Places:
    """Where the worker's own buffers lie (``places``: per slot, per argument, [address,
    bytes] or None, as its prepare replied), read back through ``/proc/<pid>/mem`` with the
    worker stopped (:meth:`read_back`)."""

    def __init__(self, pid: int, places: list, slots: list):
        self.pid, self.places = pid, _checked(places, slots)
        self.fd: int | None = None

    @classmethod
    def of(cls, pid: int, places, slots: list) -> Places | None:
        """None where this process may not read the worker's memory (the worker's own
        comparison stands alone then); PlacesRefused where ``places`` are not its buffers."""
        found = cls(pid, places, slots)
        try:
            found.fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
        except OSError:
            return None
        return found

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

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
        not ``args``'s, or can no longer be read there (read now; the worker stopped)."""
        import numpy as np

        found = []
        for j, (x, place) in enumerate(zip(args, self.places[i], strict=True)):
            got = None if x is None else _read(self.fd, place)
            if x is not None and (got is None or not np.array_equal(  # memcmp's speed: a
                    np.frombuffer(got, np.uint8), _raw(x))):  # memoryview's != was 17x slower
                found.append(j)
        return found


def _read(fd: int | None, place) -> bytes | None:
    try:
        return os.pread(fd, place[1], place[0])
    except (OSError, TypeError):  # unmapped by the kernel since, or not open
        return None


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
