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
import sys
from pathlib import Path

__all__ = ["best_peaks", "remember", "remembered", "unreadable", "peaks_file", "PEAKS_FILE",
           "CAP"]

PEAKS_FILE = "peaks.json"
COPY = "copy GB/s"
CAP = 5.0  # a remembered peak stands for at most this x the run's own (busy: 4.6x low)
_SEEN = {}  # path -> the file as this process first read it, and what it measured since
_PROBLEM = {}  # path -> what was wrong with it when first read (unreadable())
_SAID = set()  # paths whose problem was said on stderr


def _key(what: str) -> str:
    import torch

    return (f"{platform.node()} ({platform.machine()}) | {os.cpu_count()} CPUs | "
            f"{torch.get_num_threads()} threads | torch {torch.__version__} | {what}")


def _read(path: Path) -> dict:
    """The file's plausible entries (finite, positive numbers); anything else is dropped: a
    corrupt file (even one that fails to parse by recursion) is replaced, never fatal, and
    said (:func:`unreadable`, on stderr and in the roofline's "how")."""
    if not path.exists():
        return {}
    try:
        known = json.loads(path.read_text())
    except Exception as exc:  # noqa: BLE001 (OSError, ValueError, RecursionError: one answer)
        _PROBLEM[str(path)] = " ".join(str(exc).split())[:120] or type(exc).__name__
        known = None
    if not isinstance(known, dict):
        _PROBLEM.setdefault(str(path), "not a JSON object")
        return {}
    good = {k: float(v) for k, v in known.items() if isinstance(k, str)
            and isinstance(v, int | float) and math.isfinite(v) and v > 0}
    if len(good) < len(known):
        _PROBLEM[str(path)] = (f"{len(known) - len(good)} of its {len(known)} entries not a "
                               "positive finite number, dropped")
    return good


def unreadable() -> str | None:
    """What was wrong with the peaks file as this process read it, said once on stderr
    (None where it read cleanly or is absent): it is rewritten with what was readable."""
    problem = _PROBLEM.get(str(_path()))
    if problem is not None and str(_path()) not in _SAID:
        _SAID.add(str(_path()))
        print(f"flashbench: warning: the remembered peaks {_path()} were unreadable "
              f"({problem}): rewritten", file=sys.stderr)
    return problem


def _path() -> Path:
    cache = Path(os.environ.get("FLASHBENCH_CACHE", Path.home() / ".cache" / "flashbench"))
    return cache / PEAKS_FILE


def peaks_file() -> Path:
    """Where this machine's best peaks are kept (speed's header names it: a newcomer saw a
    % peak of "the best this machine has measured" and could not tell where that was)."""
    return _path()


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
