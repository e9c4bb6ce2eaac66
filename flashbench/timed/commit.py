"""A user's kernel's outputs committed at its run's reply (:mod:`flashbench.measure.speedworker`):
on a CPU the harness reads each output from the worker's memory as the reply arrives, the
worker stopped meanwhile (:class:`MemoryReader`: nothing read inside the clock); on a GPU, or
where that memory cannot be read, the worker sums each output before it replies, inside the
clock, and an empty request sums as many (the worker's :func:`blank` of them: their launches
cancel). The harness sums the copies it fetches after. Before, nothing bound an output to the
moment the clock stopped: a kernel that returned its output half done and finished it in the
worker's ``collect`` (patched from its module) PASSed, timed on half the work. Exact: the
output's bytes in logical order summed as 64-bit words, mod 2**64, the same in any layout;
to match them after the reply an output must be its final bits at the reply."""

from __future__ import annotations

import contextlib
import os
import time

from flashbench.infra import freeze
from flashbench.timed.guard import WRONG

__all__ = ["received", "checksums", "checksums_of", "blank", "said_bytes",
           "changed_after_reply", "checksum_s", "where", "MemoryReader", "frozen", "digests",
           "MAX_TENSORS", "MAX_RUNS"]

_MASK = 0xFFFFFFFF
_INTS: dict = {}  # element size -> torch's integer dtype of that size, filled at first use


def _bits(x):
    """The checksum of tensor ``x``: its bytes in logical (C) order, zero-padded to a whole
    number of 8-byte words, summed as unsigned 64-bit words. On a CPU a Python int (numpy,
    on this thread: torch's sum woke the worker's sleeping OpenMP threads for each output,
    0.4 ms a call of 1.9; one element at a time widened to int64 it took 32 us for 512 KiB
    here, word by word 8 us), elsewhere a 0-d int64 tensor on its device (wrapping); both
    read mod 2**64, and the same for the same values in any layout."""
    b = x.detach().view(_ints()[x.element_size()])  # same element size: any strides
    if b.device.type != "cpu":
        return _device_bits(b)
    return _word_sum(b.numpy())


def _ints() -> dict:
    if not _INTS:
        import torch

        _INTS.update({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64})
    return _INTS


def _word_sum(a) -> int:
    """:func:`_bits` of numpy array ``a``, any strides (a copy where not C-contiguous)."""
    import numpy as np

    raw = _bytes(a)
    whole = raw.size - raw.size % 8
    total = int(raw[:whole].view(np.uint64).sum(dtype=np.uint64)) if whole else 0
    return total + int.from_bytes(raw[whole:].tobytes(), "little")


def _device_bits(b):
    """:func:`_bits` by torch, of ``b`` (any tensor: its bytes are read): a 0-d int64
    tensor."""
    import torch

    raw = b.contiguous().reshape(-1).view(torch.uint8)
    if raw.numel() % 8 or raw.storage_offset() % 8:  # a copy, zero-padded, 8-byte aligned
        raw = torch.cat([raw, raw.new_zeros(-raw.numel() % 8)])
    words = raw.view(torch.int64)
    return (words & _MASK).sum() + ((words >> 32).sum() << 32)  # each half's without overflow


def _plain(x) -> bool:
    import torch

    return (type(x) is torch.Tensor and x.layout == torch.strided
            and x.element_size() in (1, 2, 4, 8) and x.device.type != "meta")


def _items(out) -> tuple:
    return tuple(out) if isinstance(out, tuple | list) else (out,)


def checksums_of(outs: list) -> list:
    """:func:`checksums` of each output in ``outs``, read back from a device in one copy
    (one synchronisation for all, not one per tensor)."""
    import torch

    found = [[_bits(x) if _plain(x) else None for x in _items(o)] for o in outs]
    sums = [t for row in found for t in row if isinstance(t, torch.Tensor)]
    try:
        values = iter(torch.stack(sums).tolist() if sums else [])
    except RuntimeError:  # tensors on several devices
        values = iter([int(t) for t in sums])
    return [[None if t is None else [(next(values) if isinstance(t, torch.Tensor) else t)
                                     % 2**64, x.nbytes]
             for t, x in zip(row, _items(o), strict=True)] for row, o in zip(found, outs,
                                                                               strict=True)]


def where(out) -> list:
    """Per tensor of a call's output: where a CPU tensor's elements lie in this process,
    [address, element size, shape, strides in elements]; None for any other (a device's, or
    not a plain tensor). Nothing is read: the harness reads them (:class:`MemoryReader`)."""
    return [[x.data_ptr(), x.element_size(), list(x.shape), list(x.stride())]
            if _plain(x) and x.device.type == "cpu" else None for x in _items(out)]


class MemoryReader:
    """A CPU worker's outputs read by the harness from the worker's memory
    (``/proc/<pid>/mem``) as soon as its run's reply arrives, its process group stopped
    meanwhile (SIGSTOP, then SIGCONT): what they held at the reply, digested here
    (:func:`_digest`), outside the clock. Summed by the worker inside the clock, the first
    read of an output that had left the core's caches cost 45-75 us a request here
    (1x4x256x64 fp32: 0.70-0.84 ms a call of 0.55-0.59 on the worker's own clock, 0.58-0.61
    before the sums). :meth:`of` gives None where this process may not read the worker's
    memory (the worker sums inside the clock). :meth:`stop` is the worker's call as its
    reply's last byte is read, before the harness parses it (a red-team probe's worker sent
    replies that took 400 ms to unpickle while a thread finished its outputs: 4.2x, PASS)."""

    def __init__(self, pid: int):
        self.pid, self.held = pid, False
        self.traced: str | None = None  # the first process found traced at a reply: a fault
        self.family: list = []  # its descendants at the request's start: stopped with it
        self._stopped: set = set()

    @classmethod
    def of(cls, pid: int) -> MemoryReader | None:
        try:
            os.close(os.open(f"/proc/{pid}/mem", os.O_RDONLY))
        except OSError:
            return None
        return cls(pid)

    def stop(self) -> None:
        """SIGSTOP to the worker, :attr:`family` and what each started since, its group's
        and its session's processes (:func:`flashbench.infra.freeze.stop`: a process it
        started in the request, in a group of its own, worked on after the reply), now
        (:meth:`read` or :meth:`resume` sends SIGCONT)."""
        self.held, self._stopped = True, set()  # first: an interrupt meanwhile resumes
        freeze.stop(self.pid, also=self.family, stopped=self._stopped)

    def resume(self) -> None:
        freeze.cont((self.pid,), self._stopped)
        self.held = False

    def read(self, said, calls: int, limit: int, then=None) -> list:
        """Per call, what :func:`digests` gives of the outputs the worker's reply placed
        (``said``: a :func:`where` per call), read now, the worker stopped (since
        :meth:`stop`, or from here), then ``then()`` (the harness reads its inputs back),
        then let go; a call's entry None where the reply is not that, or a tensor holds
        more than ``limit`` bytes or cannot be read."""
        if not self.held:
            self.stop()
        fd = None
        try:
            for pid in self._stopped:
                freeze.wait_stopped(pid)
            if then is not None:
                then()
            found = [(pid, by) for pid in sorted(self._stopped) if (by := freeze.tracer(pid))]
            if found:  # not stopped: its bytes now need not be those at the reply
                self.traced = self.traced or (
                    f"process {found[0][0]} of its worker's family was traced by process "
                    f"{found[0][1]} at its run's reply, so the SIGSTOP that holds it then "
                    "need not stop it: its outputs cannot be bound to the reply")
                return [None] * calls
            if not isinstance(said, list) or len(said) != calls:
                return [None] * calls
            try:
                fd = os.open(f"/proc/{self.pid}/mem", os.O_RDONLY)
            except OSError:
                fd = None
            return [self._call(fd, placed, limit) for placed in said]
        finally:
            if fd is not None:
                os.close(fd)
            self.resume()

    @staticmethod
    def _call(fd, placed, limit: int) -> list | None:
        try:
            if len(placed) > MAX_TENSORS:  # the harness reads at most that many a call
                return None
            return [None if t is None else _read_digest(fd, *t, limit) for t in placed]
        except (TypeError, ValueError, OverflowError, OSError):  # not what where() gives
            return None



@contextlib.contextmanager
def frozen(*pids: int):
    """The workers ``pids`` stopped for the block, each with its group, its descendants and
    its session's processes (:func:`flashbench.infra.freeze.held`): while the harness
    writes a request's new contents into the pages one maps (a red-team probe's kept
    thread read each content as it was written and computed it there, where no reading of
    the worker's CPU looked: 12x, PASS), or while another worker's row is timed."""
    with freeze.held(*pids):
        yield


MAX_TENSORS = 16  # tensors of one call's output the harness reads (o, lse; dq, dk, dv)
MAX_RUNS = 2**16  # reads of one tensor that spans more than the limit (a view of a larger
# buffer: its rows read apart)


def _bytes(a):
    """Numpy array ``a``'s bytes in logical order (a copy where not C-contiguous)."""
    import numpy as np

    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


def _digest(a) -> list:
    """[the first 16 bytes of the SHA-256 of numpy array ``a``'s bytes in logical order, as
    an int; its bytes]: a linear sum of words could be matched after the reply by a kernel
    that knew it (a red-team probe, 2026-12-05: bf16 zeros at the reply, the true output
    after it, 16 near-zero elements' bits rewritten, within the accuracy rule, so that the
    words summed to 0 again: PASS, 4.2x over its honest self)."""
    import hashlib

    raw = _bytes(a)
    return [int.from_bytes(hashlib.sha256(memoryview(raw)).digest()[:16], "big"), raw.size]


def digests(out) -> list:
    """:func:`_digest` of each plain tensor of a fetched output (CPU copies), None for any
    other: what :class:`MemoryReader` gives of the same bytes."""
    return [_digest(x.detach().view(_ints()[x.element_size()]).numpy()) if _plain(x)
            and x.device.type == "cpu" else None for x in _items(out)]


def _read_digest(fd, address: int, size: int, shape: list, strides: list, limit: int) -> list:
    """:func:`_digest` of the tensor at ``address`` in the memory open as ``fd``: one read
    of its span, or where that is over ``limit`` bytes (a view of a larger buffer), one
    read of each row along its last dimension."""
    import numpy as np

    if fd is None or size not in (1, 2, 4, 8) or any(n < 0 for n in shape) or \
            any(st < 0 for st in strides) or len(shape) != len(strides):
        raise ValueError("not a tensor's place")
    count = int(np.prod(shape, dtype=object)) if shape else 1
    if count == 0:
        return [_digest(np.zeros(0, np.uint8))[0], 0]
    if count * size > limit:
        raise ValueError("more bytes than the case's outputs")
    span = size * (1 + sum((n - 1) * st for n, st in zip(shape, strides, strict=True)))
    if span <= limit:
        return _digest(_strided(_pread(fd, span, address), size, shape, strides))
    last_n, last_st = shape[-1], strides[-1]  # over the limit: a tensor of >= 1 dimension
    run = size * (1 + (last_n - 1) * last_st)
    if run > limit or count // last_n > MAX_RUNS:
        raise ValueError("spread too thin to read")
    rows = [_strided(_pread(fd, run, address + size * sum(
        i * st for i, st in zip(at, strides, strict=False))), size, [last_n], [last_st])
        for at in np.ndindex(*shape[:-1])]
    return _digest(np.stack(rows).reshape(shape))


def _pread(fd, n: int, address: int) -> bytes:
    data = os.pread(fd, n, address)
    if len(data) != n:
        raise OSError("a short read")
    return data


def _strided(data: bytes, size: int, shape: list, strides: list):
    import numpy as np

    return np.lib.stride_tricks.as_strided(np.frombuffer(data, dtype=f"u{size}"), shape,
                                           [st * size for st in strides])


def checksums(out) -> list:
    """Per tensor of a call's output (a tensor, or a tuple or list of them): [its bytes in
    logical order summed as 64-bit words, mod 2**64; its bytes]; None for anything else (a
    lazy or subclassed output is failed by name elsewhere)."""
    return checksums_of([out])[0]


def blank(out, device) -> list:
    """Tensors of ``out``'s plain tensors' shapes and dtypes on ``device`` (the worker's own:
    an empty request sums them, as a run sums its calls' outputs)."""
    import torch

    return [torch.zeros(x.shape, dtype=x.dtype, device=device) for x in _items(out)
            if _plain(x)]


def _as_said(sums) -> list | None:
    try:
        return [list(s) if s else None for s in sums]
    except TypeError:  # not what a worker's run replies
        return None


def said_bytes(said: list) -> int:
    """The most bytes of one call's outputs the worker's replies give (0 where they say
    none): what an empty request sums. A figure that is not its output's fails it below."""
    calls = [_as_said(sums) or [] for sums in said]
    return max((sum(s[1] for s in c if len(s or ()) == 2 and isinstance(s[1], int))
                for c in calls), default=0)


def changed_after_reply(said: list, outputs: list, read: bool = False) -> str | None:
    """Why the fetched ``outputs`` (None: failed by structure) are not what was summed at
    their runs' replies (``said``, one per call, in order): by the worker, or (``read``)
    digests of what the harness read from its memory (:class:`MemoryReader`); or None."""
    if len(said) != len(outputs):
        return (f"its worker summed {len(said)} calls' outputs at its replies, for "
                f"{len(outputs)} calls")
    for i, (sums, out) in enumerate(zip(said, outputs, strict=True)):
        if out is None:
            continue
        if sums is None:
            return (f"call {i + 1}'s output was not where its worker placed it at its run's "
                    "reply, or could not be read or summed there")
        if _as_said(sums) != (digests(out) if read else checksums(out)):
            return (f"call {i + 1}'s output changed after its run's reply (its bytes at the "
                    "reply and in the copy fetched after differ): its work went on after "
                    "the clock stopped")
    return None


def checksum_s(nbytes: int) -> float:
    """This process's seconds to sum ``nbytes`` of output (:func:`checksums`), the least of
    5: what an empty request's sums may add to its round trip."""
    import torch

    x = torch.zeros(max(nbytes // 4, 1), dtype=torch.float32)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        checksums(x)
        best = min(best, time.perf_counter() - t0)
    return best


def received(outputs, calls: int, faults: dict) -> list:
    """The outputs a worker's fetch sent, one per call as the judges take them (None: none
    to judge), with a fault set in ``faults`` where they leave a call unjudged and no fault
    is named. A worker's None is its own claim that the output failed a structural check,
    and its faults are its own: a module that patched the fetch to send None for every
    output and no fault PASSed with nothing computed (1x4x1024x64, every pass, decode and
    varlen; before this check)."""
    import torch

    got = list(outputs) if isinstance(outputs, list) else []
    if len(got) != calls:
        faults.setdefault(WRONG, f"its worker sent {len(got)} outputs for {calls} calls")
        got = (got + [None] * calls)[:calls]

    def plain(o) -> bool:
        items = _items(o)
        return bool(items) and all(isinstance(x, torch.Tensor) or (x is None and j > 0)
                                   for j, x in enumerate(items))

    got = [o if plain(o) else None for o in got]
    if None in got and not faults:
        faults[WRONG] = (f"call {got.index(None) + 1}'s output did not come back (its "
                           "worker sent none, and named no fault)")
    return got

