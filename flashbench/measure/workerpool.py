"""The harness's side of a kernel worker's inputs (:mod:`flashbench.measure.speedworker`):
the pool made here from the run's seed, the harness's torch on one thread while it writes
them, and what copying them costs this process (the yardstick of the worker's copies).
"""

from __future__ import annotations

import contextlib
import math
import time

import numpy as np

from flashbench.timed.guard import Pool

__all__ = ["harness_pool", "copy_s_per_byte", "nbytes", "one_thread", "harness_device",
           "warm_slots"]


def nbytes(args) -> int:
    """The bytes of a slot's tensors (None: none)."""
    return sum(0 if x is None else x.nbytes for x in args)


def copy_s_per_byte(size: int) -> float:
    """This process's CPU seconds per byte copied by ``ctypes.memmove`` (as the worker
    copies a call's inputs), the least of 3 copies of ``size`` bytes, at least 64 MiB: more
    than a cache holds, as the worker's copies read what another core wrote (a 6 MiB copy
    here ran 20x faster than the worker's of the same slots)."""
    import ctypes

    n = max(int(size), 64 << 20)
    src, dst = np.ones(n, np.uint8), np.ones(n, np.uint8)  # both paged in
    best = math.inf
    for _ in range(3):
        t0 = time.process_time()
        ctypes.memmove(dst.ctypes.data, src.ctypes.data, n)
        best = min(best, time.process_time() - t0)
    return max(best, 1e-7) / n


@contextlib.contextmanager
def one_thread():
    """The harness's torch on one thread while it makes a worker's inputs: its pool's
    threads spin a while after a parallel op (OpenMP's wait), on the CPUs the worker's calls
    start on a moment later (an honest kernel's median read 0.9-4.5 ms against 0.6-0.9 ms)."""
    import torch

    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


def harness_pool(shape: str, dtype: str, size: int, seed: int, direction: str = "fwd",
                 decode: dict | None = None, varlen=None, gqa: bool = True,
                 varlen_k=None, softcap: float | None = None) -> Pool:
    """The pool of a worker's calls, made in this process from the run's seed (the worker
    maps its slots: :func:`flashbench.timed.shared.share`): the inputs as the judges
    rebuild them (CPU draws; ``softcap``: q and k scaled as its case's), k and v expanded to
    q's heads for a function without GQA (``gqa`` False; a backward expands them in its
    graph), a backward's dO late."""
    from flashbench.backends.tensors import expand_kv
    from flashbench.inputs.problem import Shape
    from flashbench.timed.attention import attention_maker, do_maker, grad_maker, varlen_maker
    from flashbench.timed.decode import decode_maker
    from flashbench.timed.pool import names_for

    late = None
    if direction == "decode":
        make = decode_maker(decode, dtype, "cpu")
    elif varlen is not None:
        packed = varlen_maker(list(varlen), Shape.parse(shape), dtype, "cpu", varlen_k, softcap)

        def make(s):
            q, k, v, cu_q, cu_k = packed(s)
            return (q, *((k, v) if gqa else expand_kv(q, k, v)), cu_q, cu_k)
    elif direction == "fwd":
        qkv = attention_maker(Shape.parse(shape), dtype, "cpu", "cpu", softcap)

        def make(s):
            q, k, v = qkv(s)
            return (q, *((k, v) if gqa else expand_kv(q, k, v)))
    else:
        make = grad_maker(Shape.parse(shape), dtype, "cpu", "cpu", softcap)
        if direction == "bwd":
            late = do_maker(Shape.parse(shape), dtype, "cpu", "cpu")
    return Pool(make, size, seed, names_for(direction, varlen is not None), late=late)


def harness_device() -> str:
    """The device a kernel's worker runs on, as this process knows it (the worker picks
    "cuda" where torch sees one: backends.child)."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def warm_slots(pool: Pool, warmup: int) -> list[int]:
    """The slots of the warm-up's calls: the first contents in turn, the pool's order
    untouched (drawn from it, a warm-up longer than the pool started its second round and
    filled new contents before the worker mapped them, timed later as new)."""
    return [i % pool.size for i in range(warmup)]
