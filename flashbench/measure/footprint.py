"""Memory a check case needs, and memory this machine has: refuse before allocating.

``flashbench check`` materialises the [B, H, Nq, Nk] score matrix in the float64 reference,
then per dtype in the standard model and the materialising torch backends, one after
another: the peak is the largest of them and grows with B * H * Nq * Nk.
:data:`BYTES_PER_SCORE` bounds their measured peak bytes per score element with some
margin (the measurements: docs/backends.md); streaming parts (flash_model, the online
reference, Triton, flex) hold O(N * block) and are covered by the per-row term
(:data:`BYTES_PER_ROW_VALUE`).
"""

from __future__ import annotations

import os
from pathlib import Path

from flashbench.inputs.problem import Shape

__all__ = ["BYTES_PER_SCORE", "check_case_bytes", "decode_case_bytes", "packed_case_bytes",
           "available_bytes", "too_big", "decode_too_big", "packed_too_big", "human"]

BYTES_PER_SCORE = 24  # peak bytes per element of [B, H, Nq, Nk] (docs/backends.md)
# float64, about 32 live [.., N, d] arrays: inputs, o, the gradients and dO of the backward
# cases, copies per dtype (16 read 1.69 GB where a check of 96x8x64x128, its four default
# dtypes forward and backward, peaked at 2.15 GB resident: a fresh-eyes review, 2026-12-06)
BYTES_PER_ROW_VALUE = 8 * 32
BYTES_PER_CACHE_VALUE = 8 * 16  # a decode cache's K and V values (one pass, no gradients)


def check_case_bytes(shape: Shape) -> int:
    """Peak memory of one ``flashbench check`` case, in bytes (the steps run one after
    another, so the larger score term counts, not both)::

        max(24 * B * H, 32) * Nq * Nk      (score matrices: reference, models, torch
                                            peers; or the exactness test's float64
                                            softmax of one head, about 4 copies)
      + 256 * B * H * (Nq + Nk) * max(d, dv)   (inputs, outputs, gradients, copies)
    """
    s = shape
    score_bytes = max(BYTES_PER_SCORE * s.B * s.H, 4 * 8) * s.Nq * s.Nk
    rows = s.B * s.H * (s.Nq + s.Nk) * max(s.d, s.head_dim_v)
    return score_bytes + BYTES_PER_ROW_VALUE * rows


def packed_case_bytes(packed: tuple) -> int:
    """:func:`check_case_bytes` for a packed batch ``(shape, lengths, key lengths or None)``:
    the reference, the models and the peers run a sequence at a time (:mod:`flashbench.
    reference.varlen`), so the score term is the largest sequence's (the packed totals'
    square read 32 sequences of ~450 rows at H = 8 as 42.7 GB; their padded batch, the
    count x the longest's, grows with the count too), and the rows are the packed rows::

        max(24 * H, 32) * max(Nq_i * Nk_i) + 256 * H * (sum Nq_i + sum Nk_i) * max(d, dv)
    """
    s, lens, keys = packed
    keys = lens if keys is None else keys
    pairs = [int(q) * int(k) for q, k in zip(lens, keys, strict=True)]
    score_bytes = max(BYTES_PER_SCORE * s.H, 4 * 8) * max(pairs, default=0)
    rows = s.H * (sum(map(int, lens)) + sum(map(int, keys))) * max(s.d, s.head_dim_v)
    return score_bytes + BYTES_PER_ROW_VALUE * rows


def decode_case_bytes(case) -> int:
    """Peak memory of one ``check --decode`` case (a
    :class:`flashbench.measure.decode.DecodeCase`), in bytes, the forward's estimate on
    the decode's sizes: the scores of every query row over its cache, and the cache's
    keys (a contiguous cache holds B x the longest; a paged pool every page, 3 spare)::

        24 * B * H * Nq * max(lens) + 128 * keys * Hkv * (d + d)   (BYTES_PER_CACHE_VALUE)
    """
    longest = max(max(case.lens), 1)
    if case.page_size is None:
        keys = case.B * longest
    else:
        keys = (sum(-(-n // case.page_size) for n in case.lens) + 3) * case.page_size
    return (BYTES_PER_SCORE * case.B * case.H * case.Nq * longest
            + BYTES_PER_CACHE_VALUE * keys * case.Hkv * 2 * case.d)


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_available() -> int | None:
    """Room left under a cgroup v2 memory limit (containers), if one is set."""
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text().strip())
    except (OSError, ValueError):
        return None
    return None if limit == "max" else max(int(limit) - used, 0)


def available_bytes() -> tuple[int | None, str]:
    """(bytes this process may still allocate, where the figure comes from): the
    smaller of /proc/meminfo's MemAvailable and a cgroup limit's headroom; else
    os.sysconf's free physical pages; (None, why) when nothing says."""
    found = [(b, src) for b, src in ((_meminfo_available(), "MemAvailable in /proc/meminfo"),
                                     (_cgroup_available(), "cgroup memory.max - memory.current"))
             if b is not None]
    if found:
        return min(found)
    try:
        pages = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        return pages, "os.sysconf free physical pages"
    except (ValueError, OSError, AttributeError):
        return None, "no memory figure on this system"


def human(n: float) -> str:
    """Bytes in decimal units: 1.5 GB, 24.0 TB; 1.2e+06 PB past a thousand PB (a probe
    read a 27-digit number of PB)."""
    for unit in ("B", "kB", "MB", "GB", "TB", "PB"):
        if n < 1000 or unit == "PB":
            return (f"{n:.0f} {unit}" if unit == "B" else
                    f"{n:.1f} {unit}" if n < 1000 else f"{n:.1e} {unit}")
        n /= 1000
    raise AssertionError("unreachable")


CHECK = "the check"  # what a refusal says the memory is for (speed: the timed outputs' check)


def _first_too_big(items, need, available: int | None) -> tuple | None:
    """(item, bytes it needs, bytes available, where that figure comes from) for the first
    of ``items`` whose ``need(item)`` exceeds what is available; None when all fit."""
    where = "given"
    if available is None:
        available, where = available_bytes()
        if available is None:
            return None
    for item in dict.fromkeys(items):
        if need(item) > available:
            return item, need(item), available, where
    return None


def too_big(shapes, available: int | None = None, purpose: str = CHECK) -> str | None:
    """None when every shape's check fits in memory, else a one-line refusal naming the
    first that does not, with both figures. ``available``: bytes (None: measure now)."""
    found = _first_too_big(shapes, check_case_bytes, available)
    if found is None:
        return None
    shape, need, available, where = found
    return (f"shape {shape.spec()} needs about {human(need)} of memory for {purpose} "
            f"(estimate: {BYTES_PER_SCORE} bytes per element of the B*H*Nq*Nk score "
            f"matrix, which the float64 reference materialises), but only "
            f"{human(available)} is available ({where}); try a smaller shape")


def packed_too_big(shapes, lengths, keys=None, available: int | None = None,
                   purpose: str = CHECK) -> str | None:
    """:func:`too_big` for packed batches of ``lengths`` (``keys``: the key lengths where they
    differ) at each of ``shapes``' H and head dims (:func:`packed_case_bytes`)."""
    items = [(s, tuple(lengths), None if keys is None else tuple(keys)) for s in shapes]
    found = _first_too_big(items, packed_case_bytes, available)
    if found is None:
        return None
    (shape, lens, ks), need, available, where = found
    return (f"a packed batch of {len(lens)} sequences ({sum(lens)} query rows over "
            f"{sum(ks or lens)} keys) at H={shape.H}, d={shape.d} needs about {human(need)} "
            f"of memory for {purpose} (estimate: {BYTES_PER_SCORE} bytes per score of each "
            f"sequence's Nq x Nk, the float64 reference materialising one sequence at a "
            f"time, {BYTES_PER_ROW_VALUE} per packed row value), but only {human(available)} "
            f"is available ({where}); try fewer or shorter sequences")


def decode_too_big(cases, available: int | None = None, purpose: str = CHECK) -> str | None:
    """:func:`too_big` for decode cases (:func:`decode_case_bytes`), before any cache is
    drawn: a length or page size past memory is a refusal, never a crash or a swap storm."""
    found = _first_too_big(cases, decode_case_bytes, available)
    if found is None:
        return None
    case, need, available, where = found
    return (f"decode case {case.spec()} needs about {human(need)} of memory for {purpose} "
            f"(estimate: {BYTES_PER_SCORE} bytes per score of each query row over its cache, "
            f"{BYTES_PER_CACHE_VALUE} per cached K and V value), but only {human(available)} "
            f"is available ({where}); try shorter cache lengths or smaller pages")
