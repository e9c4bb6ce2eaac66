"""A user's kernel's outputs committed at its run's reply (:mod:`flashbench.measure.speedworker`):
its worker sums each output's bits before it replies, inside the harness's clock, and the
harness sums the copies it fetches after. Before, nothing bound an output to the moment the
clock stopped: a kernel that returned its output half done and finished it in the worker's
``collect`` (patched from its module) PASSed, timed on half the work. On a GPU an empty
request sums as many outputs (the worker's :func:`blank` of them: their launches cancel); on a
CPU a call's time holds one read of its output (padded, the sums' jitter hid a memo). Exact:
integer sums of the elements' bit patterns, mod 2**64, in any order or layout, one read of
each output; to match them after the reply an output must be its final bits at the reply."""

from __future__ import annotations

import time

from flashbench.timed.guard import WRONG

__all__ = ["received", "checksums", "checksums_of", "blank", "said_bytes",
           "changed_after_reply", "checksum_s"]

_MASK = 0xFFFFFFFF


def _bits(x):
    """The sum of tensor ``x``'s elements' bit patterns: on a CPU a Python int (numpy, on
    this thread: torch's sum woke the worker's sleeping OpenMP threads for each output, 0.4
    ms a call of 1.9), elsewhere a 0-d int64 tensor on its device (wrapping); both read mod
    2**64, and the same for the same bits."""
    import torch

    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    b = x.detach().view(ints[x.element_size()])  # same element size: any strides
    if b.device.type == "cpu":
        import numpy as np

        a = b.numpy()
        if x.element_size() < 8:
            return int(a.sum(dtype=np.int64))
        return int((a & _MASK).sum(dtype=np.uint64)) + (int((a >> 32).sum()) << 32)
    return _device_bits(b)


def _device_bits(b):
    """:func:`_bits` by torch, of ``b`` (the bits as integers): a 0-d int64 tensor."""
    import torch

    if b.element_size() < 8:
        return b.sum(dtype=torch.int64)
    return (b & _MASK).sum() + ((b >> 32).sum() << 32)  # each half's sum without overflow


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


def checksums(out) -> list:
    """Per tensor of a call's output (a tensor, or a tuple or list of them): [the sum of
    its elements' bit patterns mod 2**64, its bytes]; None for anything else (a lazy or
    subclassed output is failed by name elsewhere)."""
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


def changed_after_reply(said: list, outputs: list) -> str | None:
    """Why the fetched ``outputs`` (None: failed by structure) are not what the worker
    summed at its replies (``said``, one per call, in order), or None."""
    if len(said) != len(outputs):
        return (f"its worker summed {len(said)} calls' outputs at its replies, for "
                f"{len(outputs)} calls")
    for i, (sums, out) in enumerate(zip(said, outputs, strict=True)):
        if out is None:
            continue
        if _as_said(sums) != checksums(out):
            return (f"call {i + 1}'s output changed after its run's reply (the sum of its "
                    "bits at the reply and in the copy fetched after differ): its work went "
                    "on after the clock stopped")
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

