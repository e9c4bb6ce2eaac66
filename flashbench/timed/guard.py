"""The guarded timer: timed calls that the code under test cannot make look faster.

- :class:`~flashbench.timed.pool.Pool` (re-exported): inputs built before the clock, refilled
  in place between rounds, each slot fingerprinted when filled (a kernel that writes into its
  inputs: **modified its inputs in place**, read after the calls).
- :func:`timed_calls`: warm-up, then one clock reading pair per call with the clocks captured
  when this module was imported (a patched ``time.perf_counter``, ``time.monotonic_ns`` or
  ``torch.cuda.Event.elapsed_time`` is named), the whole batch's wall time on a second clock,
  the threads each call left running; after each call, outside the clock, the output's
  structure is checked and a copy kept, the kernel's buffers released (:class:`Kept`).
- :func:`structural`: an output's own faults (lazy, not dense, aliases an input, an earlier
  call's buffer). Values: :mod:`flashbench.measure.speed`. Guarantees and limits: docs/speed.md.
"""

from __future__ import annotations

import mmap
import sys
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from flashbench.timed.pool import Pool
from flashbench.timed.threads import joined, new_threads, thread_census

__all__ = ["Pool", "Batch", "timed_calls", "structural", "tampered_clocks", "thread_census",
           "l2_flusher", "Kept", "L2_FLUSH_BYTES", "STALE", "WRONG", "LAZY", "ALIAS",
           "THREAD", "FLOOR", "CLOCK", "OUTSIDE", "MODIFIED", "MEMO", "CHECKS"]

# the failure names a row carries (DESIGN.md, "Timed calls")
STALE, WRONG, LAZY, ALIAS, THREAD, FLOOR, CLOCK = (
    "stale", "wrong", "lazy type", "aliases an input", "thread left running",
    "below the roofline floor", "clock tampered")
OUTSIDE = "work outside the timed call"  # a worker's CPU or device busy while it idles
MODIFIED = "modified its inputs in place"  # as check names it (backends.outputs)
MEMO = "faster on inputs seen before"  # a worker's requests on returning contents
CHECKS = (STALE, WRONG, LAZY, ALIAS, THREAD, FLOOR, CLOCK, OUTSIDE, MODIFIED, MEMO)

# captured at import, before any kernel's module is imported (the worker imports this first)
_CLOCKS = {"time.perf_counter": (time, "perf_counter", time.perf_counter),
           "time.perf_counter_ns": (time, "perf_counter_ns", time.perf_counter_ns),
           "time.monotonic_ns": (time, "monotonic_ns", time.monotonic_ns),
           "time.monotonic": (time, "monotonic", time.monotonic)}
_PERF = time.perf_counter
_WALL_NS = time.monotonic_ns
L2_FLUSH_BYTES = 256 * 1024 * 1024
_FLUSH: dict = {}


def l2_flusher(device: str) -> Callable[[], object] | None:
    """On "cuda": a function that zeroes a 256 MB buffer (evicts the L2 cache); else None."""
    if device != "cuda":
        return None
    import torch

    dev = torch.cuda.current_device()
    if dev not in _FLUSH:
        _FLUSH[dev] = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    return _FLUSH[dev].zero_


def _capture_event_clock() -> None:
    torch = sys.modules.get("torch")
    if torch is not None and "torch.cuda.Event.elapsed_time" not in _CLOCKS:
        event = torch.cuda.Event
        _CLOCKS["torch.cuda.Event.elapsed_time"] = (event, "elapsed_time", event.elapsed_time)
        _CLOCKS["torch.cuda.synchronize"] = (torch.cuda, "synchronize", torch.cuda.synchronize)


_capture_event_clock()


def tampered_clocks() -> list[str]:
    """Names of the clock functions that are no longer the ones captured at import."""
    return [name for name, (owner, attr, fn) in _CLOCKS.items() if getattr(owner, attr) is not fn]


@dataclass
class Batch:
    """What :func:`timed_calls` saw: per call its time (s), content seed, slot and output
    (a copy of it; the output itself where it has a structural fault); the batch's wall time
    on the second clock (s); the faults found while it ran, structural ones included."""

    samples_s: list
    seeds: list
    slots: list
    outputs: list
    wall_s: float
    host_s: list  # per call, the host clock's time including the device synchronisation
    faults: dict  # failure name -> the first instance, in words


def timed_calls(call: Callable, pool: Pool, samples: int, warmup: int = 2,
                device: str = "cpu", flush: Callable[[], object] | None = None,
                setup: Callable | None = None) -> Batch:
    """Time ``samples`` calls of ``call(*args)``, each on the pool's next arguments
    (``setup``: ``args = setup(*args)`` first, outside the clock: a backward's forward).

    On ``device`` "cuda": the L2 ``flush()`` before each call, the device synchronised, CUDA
    events around the call with ``torch.cuda.synchronize()`` (the whole device) before the
    end event, and the host clock around the same span as a bound (a device time above it is
    a tampered clock); the call's host launch is inside its time, as every backend's. On "cpu":
    the host clock. Nothing about an output is judged inside the window; after it, its
    structure is checked (:func:`structural`, against the earlier outputs still alive), a
    copy kept and the call's own buffers released before the next call (:class:`Kept`).
    """
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    _capture_event_clock()
    cuda = device == "cuda"
    if cuda:
        import torch

        sync = _CLOCKS["torch.cuda.synchronize"][2]
        elapsed = _CLOCKS["torch.cuda.Event.elapsed_time"][2]
    harness = thread_census()[0]
    late = pool.late_n

    def ready(slot, args):
        """The call's arguments: setup's, then the pool's late ones drawn (after setup)."""
        if setup is not None:
            args = (*setup(*args[:len(args) - late]), *args[len(args) - late:])
        pool.arm(None, [slot])
        return args

    for _ in range(warmup):
        slot, _, raw = pool.next()
        call(*ready(slot, raw))
    if cuda:
        sync()
    faults: dict = {}
    times, host, seeds, slots, outputs = [], [], [], [], []
    kept = Kept(faults)
    wall0 = _WALL_NS()
    for _ in range(samples):
        slot, _, raw = pool.next()
        args = ready(slot, raw)
        seed = pool.seeds[slot]  # after arm: (contents, dO) where dO came late
        tasks = thread_census()[1]
        if cuda:
            if flush is not None:
                flush()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            # the device idle before the start: a flush left running would hide the launch,
            # and as much of a side stream's work as overlaps it (a review, 2026-12-07)
            sync()
            t0 = _PERF()
            start.record()
            out = call(*args)
            joined(tasks)
            sync()
            end.record()
            end.synchronize()
            t1 = _PERF()
            times.append(elapsed(start, end) * 1e-3)
        else:
            t0 = _PERF()
            out = call(*args)
            joined(tasks)
            t1 = _PERF()
            times.append(t1 - t0)
        host.append(t1 - t0)
        left = new_threads(harness, tasks)
        if left is not None:
            faults.setdefault(THREAD, left)
        seeds.append(seed)
        slots.append(slot)
        outputs.append(kept.keep(out, (*raw, *args)))
        out = args = None  # the call's own buffers go back to the allocator before the next
    wall = (_WALL_NS() - wall0) * 1e-9
    outputs = [kept.output(o) for o in outputs]
    patched = tampered_clocks()
    if patched:
        faults.setdefault(CLOCK, f"{', '.join(patched)} replaced during the run")
    changed = pool.modified()
    if changed is not None:
        faults.setdefault(MODIFIED, changed)
    if cuda and any(t > h * 1.05 + 1e-4 for t, h in zip(times, host, strict=True)):
        faults.setdefault(CLOCK, "device time above the host's time of the same call")
    if sum(host) > wall * 1.05 + 1e-3:
        faults.setdefault(CLOCK, f"the calls' times add up to {sum(host):.4g} s, more than the "
                                 f"batch's {wall:.4g} s on a second clock")
    return Batch(times, seeds, slots, outputs, wall, host, faults)


def _span(t) -> tuple[int, int]:
    """[first byte, last byte) of a strided tensor's storage."""
    s = t.untyped_storage()
    return s.data_ptr(), s.data_ptr() + s.nbytes()


def _items(out) -> tuple:
    return tuple(out) if isinstance(out, tuple | list) else (out,)


def _fault(out, args, spans) -> tuple[str, str] | None:
    """:func:`structural` against ``spans``: (device, first byte, last byte) of the storages
    of earlier calls' outputs that are still alive."""
    import torch

    items = _items(out)
    if not items or items[0] is None:  # (o, None) is o alone; None as o is no output
        return WRONG, "returned no output (None as o)"
    for t in items:
        if t is None:
            continue
        if type(t) is not torch.Tensor:
            why = ("a subclass can compute when it is read" if isinstance(t, torch.Tensor)
                   else "what it returns is read as torch tensors")
            return LAZY, f"returned a {type(t).__module__}.{type(t).__qualname__}, not a " \
                         f"plain torch.Tensor ({why})"
        if t.device.type == "meta":
            return LAZY, "returned a tensor on the meta device: it holds no values"
        if t.layout != torch.strided:
            return LAZY, f"returned a {t.layout} tensor: no dense values"
        lo, hi = _span(t)
        for a in args:
            if isinstance(a, torch.Tensor) and a.device == t.device:
                alo, ahi = _span(a)
                if lo < ahi and alo < hi:
                    return ALIAS, "its output shares memory with an input (a view of it)"
        if any(dev == t.device and lo < ehi and elo < hi for dev, elo, ehi in spans):
            return STALE, ("returned the buffer of an earlier call's output: each call's "
                           "output is checked after later calls ran, so a buffer reused across "
                           "calls (a serving engine's or CUDA graph's static output) reads as "
                           "a cached result; return a new tensor each call (o.clone())")
    return None


def structural(out, args, earlier=()) -> tuple[str, str] | None:
    """(failure name, why) when an output (a tensor, or a tuple whose tensors are checked)
    is not a plain dense ``torch.Tensor`` (LAZY), shares storage with an input (ALIAS) or
    with an ``earlier`` call's output (STALE: the same buffer returned again); else None."""
    import torch

    return _fault(out, args, [(x.device, *_span(x)) for e in earlier for x in _items(e)
                              if type(x) is torch.Tensor])


class _Bytes(NamedTuple):
    """A CPU tensor's bytes in a mapping of their own, made back into a tensor after the
    batch (:func:`_tensor`)."""

    data: np.ndarray  # uint8
    dtype: object
    shape: tuple


def _copy(t):
    """A copy of tensor ``t``, made outside the clock. On the CPU: numpy copies its bytes into
    memory mapped from the OS (``mmap``), so that no long-lived object of the copy lands in
    the heap the code under test allocates from (a ``clone()``, or a ``torch.frombuffer``
    tensor, kept per call moved the kernel's next output to fresh pages every call: 16 page
    faults a call for a 64 KiB output, 1,024 for 4 MiB, as many as keeping the outputs)."""
    import torch

    t = t.detach()
    nbytes = t.numel() * t.element_size()
    if t.device.type == "cpu" and nbytes:
        try:
            src = t.contiguous().reshape(-1).view(torch.uint8).numpy()
            data = np.frombuffer(mmap.mmap(-1, nbytes), np.uint8)
        except (TypeError, ValueError, RuntimeError, OSError):
            pass  # a dtype numpy cannot see as bytes, or no mapping left: the heap's copy
        else:
            np.copyto(data, src)
            return _Bytes(data, t.dtype, tuple(t.shape))
    return t.clone()


def _tensor(x):
    """``x``, or the tensor a :class:`_Bytes` holds."""
    if not isinstance(x, _Bytes):
        return x
    import torch

    return torch.from_numpy(x.data).view(x.dtype).view(x.shape)


class Kept:
    """What :func:`timed_calls` (and a user's worker) keeps of each output, outside the clock.

    A clean output's tensors are copied and the kernel's own buffers released at once, so
    the next call's allocations reuse them as in any loop (kept, they took fresh pages from
    the OS inside the clock). An output with a structural fault is kept itself, its fault put
    in ``faults`` (:meth:`clean` False). STALE stays as strong as when every output was kept:
    a weak reference (Python's, to the storage's Python object) to each released storage
    tells whether the code under test still holds it, and one still alive that comes back is
    the same buffer returned again; one truly freed may be reused by anybody.
    """

    def __init__(self, faults: dict):
        self.faults = faults
        self.live: list = []  # (weak reference, device, first byte, last byte) per storage

    def keep(self, out, args):
        import torch

        self.live = [x for x in self.live if x[0]() is not None]
        bad = _fault(out, args, [x[1:] for x in self.live])
        items = _items(out)
        for t in items:
            if type(t) is torch.Tensor and t.layout == torch.strided and t.device.type != "meta":
                self.live.append((weakref.ref(t.untyped_storage()), t.device, *_span(t)))
        if bad is not None:
            self.faults.setdefault(*bad)
            return out
        return _Copied(type(out) if isinstance(out, tuple | list) else None,
                       [None if t is None else _copy(t) for t in items])

    @staticmethod
    def clean(kept) -> bool:
        return isinstance(kept, _Copied)

    @staticmethod
    def output(kept):
        """The output that :meth:`keep` returned ``kept`` for, as tensors again."""
        if not isinstance(kept, _Copied):
            return kept
        items = [_tensor(x) for x in kept.items]
        if kept.container is None:
            return items[0]
        return items if kept.container is list else tuple(items)


class _Copied(NamedTuple):
    container: type | None  # list, tuple (or a subclass: a tuple), None for one tensor
    items: list
