"""The best peaks this machine has shown: a CPU's matmul and copy peaks measured while other
processes load it come out low (4.6x low under two busy loops on 2 CPUs), the roofline floor
(FLOPs or bytes over the peak) too high, and a correct kernel fails it. A CPU's roofline
uses the higher of this run's peak and the best remembered for the same host, CPU count,
torch thread count and torch version (``$FLASHBENCH_CACHE/peaks.json``), read once a
process, and never more than :data:`CAP` x this run's own: a kernel's worker runs as the
same user and could raise the file's peaks, and with them lower the floor (docs/speed.md).
"""

from __future__ import annotations

import json
import math
import os
import platform
from pathlib import Path

__all__ = ["best_peaks", "remember", "remembered", "PEAKS_FILE", "CAP"]

PEAKS_FILE = "peaks.json"
COPY = "copy GB/s"
CAP = 5.0  # a remembered peak stands for at most this x the run's own (busy: 4.6x low)
_SEEN = {}  # path -> the file as this process first read it, and what it measured since


def _key(what: str) -> str:
    import torch

    return (f"{platform.node()} ({platform.machine()}) | {os.cpu_count()} CPUs | "
            f"{torch.get_num_threads()} threads | torch {torch.__version__} | {what}")


def _read(path: Path) -> dict:
    """The file's plausible entries (finite, positive numbers); anything else is dropped: a
    corrupt file (even one that fails to parse by recursion) is replaced, never fatal."""
    try:
        known = json.loads(path.read_text())
    except Exception:  # noqa: BLE001 (OSError, ValueError, RecursionError: all one answer)
        return {}
    if not isinstance(known, dict):
        return {}
    return {k: float(v) for k, v in known.items() if isinstance(k, str)
            and isinstance(v, int | float) and math.isfinite(v) and v > 0}


def _path() -> Path:
    cache = Path(os.environ.get("FLASHBENCH_CACHE", Path.home() / ".cache" / "flashbench"))
    return cache / PEAKS_FILE


def remember() -> dict:
    """The remembered peaks as this process first read them (``flashbench speed`` reads
    them first thing, before any kernel's worker could write the file), with what it has
    measured since."""
    return _SEEN.setdefault(str(_path()), _read(_path()))


def remembered() -> dict:
    """{what: the best peak remembered for this machine} (dtype names, "copy GB/s")."""
    prefix = _key("")
    return {k[len(prefix):]: v for k, v in remember().items() if k.startswith(prefix)}


def best_peaks(tflops: dict, copy_gbs: float,
               bounds: dict | None = None) -> tuple[dict, float, bool, list]:
    """(matmul TFLOP/s per dtype, copy GB/s), each the higher of the measured one and the
    best remembered on this machine, but at most :data:`CAP` x the measured one (or its
    ``bounds``, where higher: a precision's one-thread peak x the threads); whether any
    remembered one was higher; and the names of those capped (the file remembered more
    than this machine can have shown: corrupt, or raised by code under test). The file is
    read once a process, before any kernel's worker starts (a kernel's later writes never
    reach this run); the bests are written back, never the capped (an unwritable cache
    skipped)."""
    path = _path()
    known = remember()
    best, raised, capped = {}, False, []
    for what, value in {**tflops, COPY: copy_gbs}.items():
        old = known.get(_key(what), 0.0)
        # a capped run never lowers what is remembered: one busy run cut a remembered bf16
        # peak 50x, and the floors of every run after it
        known[_key(what)] = max(value, old)
        cap = CAP * max(value, (bounds or {}).get(what, 0.0))
        if old > cap:
            capped.append(what)
            old = cap
        best[what] = max(value, old)
        raised |= best[what] > value
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known, indent=1, sort_keys=True))
        tmp.replace(path)
    except OSError:
        pass
    copy = best.pop(COPY)
    return best, copy, raised, capped
