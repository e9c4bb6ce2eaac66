"""Reading asv's files: benchmarks.json, one results file, and the values inside.

Small pieces, each with one job: parse JSON (yyjson where installed), check that a
parsed file is an asv results file (schema version 2), turn recorded numbers and
samples into float64 arrays, and parameter reprs into values.
"""

from __future__ import annotations

import ast
import gc
import itertools
import json
import math
import warnings
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from flashbench.infra.asv import LATEST_DATE


class ResultsWarning(UserWarning):
    """A results file or entry that could not be read; the message names it and the reason."""


RESULT_KEYS = ("commit_hash", "env_name", "date", "params", "results", "result_columns")

# the largest results file asv wrote for this project's suites is 165 kB (gpu-results/),
# its benchmarks.json 140 kB; a 96 MB file held 1.19 GB as Python objects (a probe)
MAX_BYTES = 64 << 20


def read_bytes(path: Path) -> bytes:
    """``path``'s bytes; ValueError naming both sizes past :data:`MAX_BYTES`."""
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise ValueError(f"{size / 2**20:.0f} MiB, larger than any file asv writes for these "
                         f"suites (limit {MAX_BYTES >> 20} MiB): not read")
    return path.read_bytes()


def read_benchmarks(root: Path, problems: list | None = None) -> dict:
    """benchmarks.json of a results folder: benchmark name -> its entry ({} if absent).
    An unreadable file, or entries that are no objects, are reported: appended to
    ``problems`` as (file, why), for the report's list of what was skipped (a probe: only
    stderr said it), or else by a :class:`ResultsWarning`."""
    path = root / "benchmarks.json"
    if not path.exists():
        return {}
    lost = ("the units, types and parameter names of this folder's benchmarks are unknown, "
            "and the summaries that need them leave its results out")
    try:
        data = json.loads(read_bytes(path))
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError, RecursionError) as exc:  # UnicodeDecodeError: a ValueError
        data, why = {}, f"unreadable ({' '.join(str(exc).split())[:160]}): {lost}"
    else:
        bad = [k for k, v in data.items() if not isinstance(v, dict) and k != "version"]
        why = (f"{len(bad)} entries are no objects ({', '.join(bad[:3])}"
               f"{', ...' if len(bad) > 3 else ''}): their units, types and parameter "
               "names are unknown, and the summaries that need them leave their results out"
               if bad else None)
    if why is not None:
        if problems is None:
            warnings.warn(f"{path}: {why}", ResultsWarning, stacklevel=3)
        else:
            problems.append((str(path), why))
    return {k: v for k, v in data.items() if isinstance(v, dict)}


def parse_json(raw: bytes):
    """``raw`` parsed as JSON with NaN and +-Infinity (asv writes them), through yyjson.

    yyjson builds the Python objects 5x faster than the standard library, which
    reads the same values and is the fallback where yyjson is not installed.
    Raises ValueError (json.JSONDecodeError from the fallback) for invalid JSON.
    """
    if _depth(raw) > MAX_DEPTH:  # yyjson's conversion recurses in C: 100,000 deep crashed
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels (asv's own: 5)")  # (a probe)
    try:
        import yyjson
    except ImportError:
        return json.loads(raw)
    return yyjson.Document(raw, flags=yyjson.ReaderFlags.ALLOW_INF_AND_NAN).as_obj


MAX_DEPTH = 64  # of [ and { in a results file; brackets inside strings count too


def _depth(raw: bytes) -> int:
    """The deepest nesting of ``raw``'s brackets ([ and {, less ] and }), a bound: those
    inside strings count as well. In 4 MiB pieces (a copy per piece, not per file)."""
    depth = top = 0
    for start in range(0, len(raw), 1 << 22):
        run = np.cumsum(_STEP[np.frombuffer(raw, np.uint8, min(1 << 22, len(raw) - start),
                                            start)], dtype=np.int64) + depth
        top, depth = max(top, int(run.max())), int(run[-1])
    return top


_STEP = np.zeros(256, np.int8)
_STEP[[ord("["), ord("{")]], _STEP[[ord("]"), ord("}")]] = 1, -1


def read_results_file(path: Path) -> dict:
    """The parsed results file; raises ValueError with the reason it cannot be used."""
    raw = read_bytes(path)
    try:
        data = parse_json(raw)
    except UnicodeDecodeError as exc:
        raise ValueError(f"not text: {exc}") from None
    except ValueError as exc:
        raise ValueError(f"not valid JSON (truncated or corrupt): {exc}") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    if data.get("version") != 2:
        raise ValueError(f"results schema version {data.get('version')!r}, expected 2")
    missing = [k for k in RESULT_KEYS if k not in data]
    if missing:
        raise ValueError(f"missing keys {missing}")
    if not isinstance(data["results"], dict) or not isinstance(data["result_columns"], list):
        raise ValueError("'results' must be an object and 'result_columns' a list")
    for key in ("commit_hash", "env_name"):
        if not isinstance(data[key], str):
            raise ValueError(f"{key!r} is {data[key]!r}, expected a string")
    if isinstance(data["date"], bool) or not isinstance(data["date"], (int, float)) or not (
            0 <= data["date"] <= LATEST_DATE):  # 1e20 ended history with an OverflowError
        raise ValueError(f"'date' is {data['date']!r}, expected milliseconds since 1970 "
                         "(before 2100)")
    return data


def machine_facts(path: Path, data: dict) -> tuple[str, str | None]:
    """(machine, cpu) as asv recorded them in the file's ``params`` (machine: the
    folder's name where absent; cpu: None where absent)."""
    params = data["params"] if isinstance(data["params"], dict) else {}
    machine, cpu = params.get("machine"), params.get("cpu")
    return (machine if isinstance(machine, str) else path.parent.name,
            cpu if isinstance(cpu, str) else None)


def host_reader(roots: list[Path]):
    """``host(file)``: the host a results file's ``params`` recorded (its os and ram; one
    asv machine name can hold several hosts, whose BLAS may sum differently), ``file`` as
    the frame names it (relative to the one folder, else a path); None where unreadable.
    Each file read once, only when asked (the steps' files: history.steps)."""
    seen: dict[str, str | None] = {}

    def host(file: str) -> str | None:
        if file not in seen:
            path = roots[0] / file if len(roots) == 1 else Path(file)
            try:
                params = read_results_file(path).get("params")
            except (OSError, ValueError):
                params = None
            facts = [params.get(k) for k in ("os", "ram")] if isinstance(params, dict) else []
            seen[file] = (f"{facts[0]}, ram {facts[1]}"
                          if any(isinstance(f, (str, int)) for f in facts) else None)
        return seen[file]

    return host


NUMBERS = frozenset({int, float, type(None)})  # what asv writes for a value (NaN, inf: float)


def not_number(v) -> bool:
    """True for a recorded item that is no number: a bool, a string, a list, ... (None,
    a failed result, is not one; bool is an int to isinstance, not here)."""
    return type(v) not in NUMBERS


def floats(items: list, where: str, notes: list) -> np.ndarray:
    """float64 array of recorded numbers (None -> NaN); anything else NaN, noted. A bool
    or a numeric string is no number (np.array(..., float) read false as 0.0 and "0.5"
    as 0.5: a red team, 2026-12-08)."""
    if set(map(type, items)) <= NUMBERS:  # C speed
        try:
            return np.array(items, dtype=float)
        except OverflowError:  # an int past float range: below, as its sign's infinity
            pass
    odd = [v for v in items if not_number(v)]
    if odd:
        notes.append(f"{where}: {len(odd)} value(s) are not numbers (e.g. {odd[0]!r}); "
                     "read as NaN (a result's value: a failed result)")
    return np.array([math.nan if v is None or not_number(v) else _float(v) for v in items],
                    dtype=float)


def _float(v) -> float:
    try:
        return float(v)
    except OverflowError:
        return math.inf if v > 0 else -math.inf


def sample_column(samples: list, where: str, notes: list) -> tuple[np.ndarray, np.ndarray]:
    """(every sample as one float64 array, per point its number of samples or -1: none)."""
    if set(map(type, samples)) <= {list}:  # every point has a list (C speed)
        counts = np.fromiter(map(len, samples), np.int64, len(samples))
        listed = samples
    else:
        counts = np.array([len(x) if isinstance(x, list) else -1 for x in samples], np.int64)
        listed = [x for x in samples if isinstance(x, list)]
    flat = list(itertools.chain.from_iterable(listed))
    return floats(flat, where, notes), counts


def literal(text, cache: dict):
    """A parameter value from its repr ("'fp16'" -> 'fp16', "1024" -> 1024); else the text."""
    try:
        return cache[text]
    except KeyError:
        pass
    except TypeError:  # unhashable: not a repr asv writes
        return text
    try:
        value = ast.literal_eval(text) if isinstance(text, str) else text
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        value = text
    cache[text] = value
    return value


def as_repr(text) -> str:
    """A parameter value as asv writes it (its repr, a string) for the params label."""
    return text if isinstance(text, str) else repr(text)


@contextmanager
def gc_paused():
    """Millions of small containers, none cyclic: collection would only slow loading."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
