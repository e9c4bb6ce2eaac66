"""The bands' caches: one in memory per process, one on disk under ``$FLASHBENCH_CACHE``
(default ``~/.cache/flashbench``), a file per band named by its key, seeds and the
fingerprints of the models that measure it. An entry that is unreadable, of another case,
or whose edges are not finite numbers >= 0 is said on stderr, measured again and replaced.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path

__all__ = ["cached_band"]


def _cache_file(key: str, seeds: int, prints: str) -> Path:
    root = Path(os.environ.get("FLASHBENCH_CACHE", Path.home() / ".cache" / "flashbench"))
    name = hashlib.sha256(f"{key}|{seeds}|{prints}".encode()).hexdigest()[:24]
    return root / "bands" / f"{name}.json"


_MEMO: dict[tuple, dict] = {}


def _bad_edges(edges: dict) -> str | None:
    """What is wrong with a cached band's edges ({tensor: {statistic: value}}), None where
    each is a finite number >= 0 (a probe's NaN edge ended check as the user's bad input,
    exit 2, the file unnamed)."""
    for tensor, stats in edges.items():
        if not isinstance(stats, dict) or not stats:
            return f"edges of {tensor} are no statistics"
        for stat, value in stats.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value) or value < 0:
                return f"edge {stat} of {tensor} is {value!r}, not a finite number >= 0"
    return None


def cached_band(key: str, seeds: int, prints: Callable[[], str], measure: Callable[[], dict],
                cache: bool = True) -> dict:
    """The band ``key`` over ``seeds`` seeds: from memory, else from the disk cache (its file
    named by key, seeds and ``prints()``, the fingerprints of the models that measure it),
    else ``measure()``, kept in both (an unreadable entry is measured again, an unwritable
    cache skipped). ``cache`` False: memory only. Shared by :mod:`flashbench.bands.decode`."""
    memo = (key, seeds)
    if memo in _MEMO:
        return _MEMO[memo]
    path = _cache_file(key, seeds, prints()) if cache else None
    if path is not None and path.is_file():
        try:
            band = json.loads(path.read_text())
            why = ("not a band" if not isinstance(band, dict)
                   or not isinstance(band.get("edges"), dict) else
                   _bad_edges(band["edges"]) or (None if band.get("key") == key
                                                 else "another case's band"))
        except (OSError, ValueError, RecursionError) as exc:
            why = " ".join(str(exc).split())[:120] or type(exc).__name__
        if why is None:
            _MEMO[memo] = band
            return band
        # said, then measured again and replaced (a probe: a list there ended check with a
        # traceback; garbage was replaced without a word)
        print(f"flashbench: warning: the band cache entry {path} is unreadable ({why}): "
              "measured again", file=sys.stderr)
    band = measure()
    _MEMO[memo] = band
    if path is not None and _bad_edges(band.get("edges", {})) is None:  # else read back as
        # unreadable, measured and rewritten on every run (a review)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(band))
            tmp.replace(path)
        except OSError:
            pass  # no writable cache: measured again next time
    return band
