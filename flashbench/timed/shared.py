"""A pool's slots in memory the harness and a kernel's worker both map.

The harness writes every input a worker's calls get (:class:`flashbench.timed.pool.Pool`,
its contents made in the harness's process); the worker maps the same pages and copies each
call's inputs from them into its own buffers, so no code runs in the worker while contents
are made (a kernel that wrapped ``Tensor.copy_`` attended each new input as the worker's
own refill wrote it, outside every clock: PASS, 1.86x over sdpa, 2026-12-05), and the
harness reads the slots itself to see a write into an input. One file in /dev/shm (a RAM
file system; the temporary directory where it has no room), mapped with
``torch.from_file(shared=True)``, removed once both have mapped it.
"""

from __future__ import annotations

import os
import tempfile

__all__ = ["Shared", "share", "attach"]

ALIGN = 64  # bytes: each tensor starts on a cache line (any dtype's view is aligned)


class Shared:
    """The mapped file of a pool's slots: ``path`` (until :meth:`unlink`), ``nbytes``, and
    ``layout``: per slot, per argument, ``(offset, dtype name, shape)`` or None."""

    def __init__(self, path: str, nbytes: int, layout: list):
        self.path, self.nbytes, self.layout = path, nbytes, layout

    def spec(self) -> dict:
        """What a worker needs to map it (plain data: the request's)."""
        return {"path": self.path, "nbytes": self.nbytes, "layout": self.layout}

    def unlink(self) -> None:
        """The file's name removed (its pages live while a process maps them)."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def _file(nbytes: int) -> str:
    """A new file of ``nbytes``, its blocks reserved (a full RAM file system would fault
    the first write past its end, SIGBUS, rather than refuse it): in /dev/shm where it has
    room, else in the temporary directory (its pages are the page cache's all the same)."""
    places = [d for d in ("/dev/shm",) if os.path.isdir(d) and os.access(d, os.W_OK)]
    tried = []
    for where in (*places, tempfile.gettempdir()):
        fd, path = tempfile.mkstemp(prefix="flashbench-pool-", dir=where)
        try:
            reserve = getattr(os, "posix_fallocate", None)  # Linux; elsewhere: no reserve
            reserve(fd, 0, max(nbytes, 1)) if reserve else os.ftruncate(fd, max(nbytes, 1))
            return path
        except OSError as exc:
            os.unlink(path)
            tried.append(f"{where}: {exc.strerror or exc}")
        finally:
            os.close(fd)
    raise OSError(f"no room for the timed inputs' {nbytes / 2**20:.1f} MiB ("
                  + "; ".join(tried) + ")")


def _views(path: str, nbytes: int, layout: list) -> list[tuple]:
    import torch

    whole = torch.from_file(path, shared=True, size=max(nbytes, 1), dtype=torch.uint8)
    slots = []
    for args in layout:
        views = []
        for item in args:
            if item is None:
                views.append(None)
                continue
            offset, dtype, shape = item
            dt = getattr(torch, dtype)
            size = dt.itemsize * _count(shape)
            views.append(whole[offset:offset + size].view(dt).view(tuple(shape)))
        slots.append(tuple(views))
    return slots


def _count(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def share(pool) -> Shared:
    """``pool``'s slots moved into a new shared file (contents and fingerprints kept): from
    now on its refills write there. Its slots must be CPU torch tensors (or None)."""
    layout, at = [], 0
    for slot in pool.slots:
        args = []
        for t in slot:
            if t is None:
                args.append(None)
                continue
            if t.device.type != "cpu":
                raise ValueError(f"a shared pool's inputs live on the CPU, got {t.device}")
            at = -(-at // ALIGN) * ALIGN
            args.append((at, str(t.dtype).removeprefix("torch."), list(t.shape)))
            at += t.element_size() * t.numel()
        layout.append(args)
    path = _file(at)
    try:
        views = _views(path, at, layout)
    except BaseException:
        os.unlink(path)
        raise
    for i, (slot, mapped) in enumerate(zip(pool.slots, views, strict=True)):
        for src, dst in zip(slot, mapped, strict=True):
            if src is not None:
                dst.copy_(src)
        pool.slots[i] = mapped
    return Shared(path, at, layout)


def attach(spec: dict) -> list[tuple]:
    """The slots of a shared pool (:meth:`Shared.spec`), mapped in this process."""
    return _views(spec["path"], spec["nbytes"], spec["layout"])
