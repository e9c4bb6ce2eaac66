"""A user's kernel's outputs committed at its run's reply (:mod:`flashbench.measure.speedworker`):
its worker sums each output's bits before it replies, inside the harness's clock, and the
harness sums the copies it fetches after. Before, nothing bound an output to the moment the
clock stopped: a kernel that returned its output half done and finished it in the worker's
``collect`` (patched from its module) PASSed, timed on half the work. An empty request sums
as many bytes (the worker's :func:`blank` of the calls' outputs), so the round trip less the
empty one stays the calls' alone. Exact: integer sums of the elements' bit patterns, mod
2**64, in any order or layout, one read of each output; to match them after the reply an
output must be its final bits at the reply (docs/speed.md, "What it guarantees")."""

from __future__ import annotations

import time

__all__ = ["checksums", "blank", "said_bytes", "changed_after_reply", "checksum_s"]

_MASK = 0xFFFFFFFF


def _bits(x) -> int:
    import torch

    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    b = x.detach().view(ints[x.element_size()])  # same element size: any strides
    if x.element_size() < 8:
        return int(b.sum(dtype=torch.int64))
    return (int((b & _MASK).sum()) + (int((b >> 32).sum()) << 32)) % 2**64  # no overflow


def checksums(out) -> list:
    """Per tensor of a call's output (a tensor, or a tuple or list of them): [the sum of
    its elements' bit patterns, its bytes]; None for anything else (a lazy or subclassed
    output is failed by name elsewhere)."""
    import torch

    items = tuple(out) if isinstance(out, tuple | list) else (out,)
    return [[_bits(x), x.nbytes] if type(x) is torch.Tensor and x.layout == torch.strided
            and x.element_size() in (1, 2, 4, 8) else None for x in items]


def blank(out, device) -> list:
    """Tensors of ``out``'s plain tensors' shapes and dtypes on ``device`` (the worker's own:
    an empty request sums them, as a run sums its calls' outputs)."""
    import torch

    items = tuple(out) if isinstance(out, tuple | list) else (out,)
    return [torch.zeros(x.shape, dtype=x.dtype, device=device) for x in items
            if type(x) is torch.Tensor and x.layout == torch.strided]


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
