"""The best peaks this machine has shown: a CPU's matmul and copy peaks measured while other
processes load it come out low (4.6x low under two busy loops on 2 CPUs), the roofline floor
(FLOPs or bytes over the peak) too high, and a correct kernel fails it. A CPU's roofline
uses the higher of this run's peak and the best remembered for the same host, CPU count,
torch thread count and torch version (``$FLASHBENCH_CACHE/peaks.json``).
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

__all__ = ["best_peaks", "PEAKS_FILE"]

PEAKS_FILE = "peaks.json"
COPY = "copy GB/s"


def _key(what: str) -> str:
    import torch

    return (f"{platform.node()} ({platform.machine()}) | {os.cpu_count()} CPUs | "
            f"{torch.get_num_threads()} threads | torch {torch.__version__} | {what}")


def best_peaks(tflops: dict, copy_gbs: float) -> tuple[dict, float, bool]:
    """(matmul TFLOP/s per dtype, copy GB/s), each the higher of the measured one and the
    best remembered on this machine, and whether any remembered one was higher; the bests
    are written back (an unreadable file is replaced, an unwritable cache skipped)."""
    path = Path(os.environ.get("FLASHBENCH_CACHE", Path.home() / ".cache" / "flashbench"))
    path = path / PEAKS_FILE
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    known = known if isinstance(known, dict) else {}
    best, raised = {}, False
    for what, value in {**tflops, COPY: copy_gbs}.items():
        old = known.get(_key(what))
        high = max(value, old) if isinstance(old, int | float) else value
        raised |= high > value
        known[_key(what)] = best[what] = high
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known, indent=1, sort_keys=True))
        tmp.replace(path)
    except OSError:
        pass
    copy = best.pop(COPY)
    return best, copy, raised
