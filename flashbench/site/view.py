"""The results as the site shows them: the choices a user makes, not the VM's noise.

asv's filter panel offers every field of every results file's ``params``: each kernel
update of a VM ("Linux 6.18.44-fc-...") and each RAM figure became a choice, though the
machine name already says what the machine is (``flashbench.infra.machine``). And every
value of a benchmark parameter is offered even where no machine ever ran it (a GPU-only
backend on a site of CPU machines: empty graphs). :func:`view_config` publishes from a
copy of the results without :data:`NOISE` fields and without parameter values that no
results file measured; the committed files are never changed. More: docs/asv.md ("The
offline site").
"""

from __future__ import annotations

import itertools
import json
import math
import sys
from pathlib import Path

from flashbench.infra.asv import LATEST_DATE
from flashbench.site.window import PATH_KEYS

NOISE = ("os", "ram", "num_cpu", "arch")  # facts that drift or that the machine name holds


def _read(path: Path) -> dict | None:
    """A results file's JSON; None, said on stderr, for one that is not (left out): not
    JSON, not an object, its results no object, its commit no string, its date no time (a
    probe, 2026-12-07: a string of results was a traceback, a number for a commit failed
    asv publish without naming the file, a list was left out unsaid)."""
    try:
        data = json.loads(path.read_text())
        why = ("not a JSON object" if not isinstance(data, dict) else
               "'results' is not an object" if not isinstance(data.get("results", {}), dict)
               else "'commit_hash' is not a string"
               if not isinstance(data.get("commit_hash"), str) else
               f"'date' {data.get('date')!r} is no time in milliseconds from 1970 to 2100"
               if data.get("date") is not None and (isinstance(data["date"], bool) or not
                                                    isinstance(data["date"], int) or not
                                                    0 <= data["date"] <= LATEST_DATE)
               else None)
    except (OSError, ValueError) as exc:
        why = f"({exc})"
    if why is not None:
        print(f"flashbench.site: skipped {path}: not a readable results file: {why}",
              file=sys.stderr)
        return None
    return data


def _finite(value, count: list):
    """``value`` with every infinite number made None, asv's "failed" (``count[0]`` counts
    them): one Infinity timing left asv publish running for good (a probe, 2026-12-07).
    NaN, asv's "skipped", stays."""
    if isinstance(value, float) and value in (math.inf, -math.inf):
        count[0] += 1
        return None
    return [_finite(v, count) for v in value] if isinstance(value, list) else value


def _measured(results: dict, names: dict) -> dict:
    """benchmark -> per parameter, the values some result measured (not None)."""
    seen: dict = {}
    for data in results:
        columns = data.get("result_columns", [])
        if "result" not in columns or "params" not in columns:
            continue
        at, pa = columns.index("result"), columns.index("params")
        for name, row in data.get("results", {}).items():
            if name not in names or len(row) <= max(at, pa) or not isinstance(row[pa], list) \
                    or not row[pa]:
                continue
            values = row[at] if isinstance(row[at], list) else [row[at]]
            if len(row[pa]) != len(names[name]["params"]):
                continue  # an older grid with other parameters: not this one's values
            mine = seen.setdefault(name, [set() for _ in row[pa]])
            for combo, value in zip(itertools.product(*row[pa]), values, strict=False):
                if value is not None and value == value:  # asv writes a skip as NaN
                    for i, v in enumerate(combo):
                        mine[i].add(v)
    return seen


def _keep(params: list, measured: list) -> list[int]:
    """Indices into the flattened product of ``params`` whose every value was measured."""
    return [i for i, combo in enumerate(itertools.product(*params))
            if all(v in measured[k] for k, v in enumerate(combo))]


def _trim_result(row: list, columns: list, measured: list) -> list:
    """One benchmark's row of a results file without the values left out (asv drops a
    row's trailing empty columns: those stay absent)."""
    at = columns.index("params")
    params = row[at] if at < len(row) else None
    if not isinstance(params, list) or len(measured) != len(params):
        return row
    keep, size = _keep(params, measured), len(list(itertools.product(*params)))
    out = list(row)
    for i, column in enumerate(columns[:len(row)]):
        if column == "params":
            out[i] = [[v for v in vals if v in measured[k]] for k, vals in enumerate(params)]
        elif isinstance(row[i], list) and len(row[i]) == size:
            out[i] = [row[i][j] for j in keep]
    return out


def view_tree(results: Path, tree: Path) -> int:
    """Write the site's copy of ``results`` into ``tree``; returns how many parameter
    values it left out (never measured by any results file)."""
    files = {p: data for p in sorted(results.glob("*/*.json"))
             if p.name != "machine.json" and (data := _read(p)) is not None}
    meta_path = results / "benchmarks.json"  # missing: asv publish says so itself
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    names = {n: b for n, b in meta.items() if isinstance(b, dict) and b.get("params")}
    seen = _measured(files.values(), names)
    trim = {n for n, b in names.items()
            if seen.get(n) and len(seen[n]) == len(b["params"]) and all(seen[n])}
    dropped = 0
    for name in trim:
        bench, measured = names[name], seen[name]
        before = sum(map(len, bench["params"]))
        bench["params"] = [[v for v in vals if v in measured[k]]
                           for k, vals in enumerate(bench["params"])]
        dropped += before - sum(map(len, bench["params"]))
    tree.mkdir(parents=True)
    if meta_path.is_file():
        (tree / "benchmarks.json").write_text(json.dumps(meta))
    folders = sorted(results.iterdir()) if results.is_dir() else []
    for folder in (p for p in folders if (p / "machine.json").is_file()):
        (tree / folder.name).mkdir()
        machine = json.loads((folder / "machine.json").read_text())
        (tree / folder.name / "machine.json").write_text(json.dumps(
            {k: v for k, v in machine.items() if k not in NOISE}))
    infinite = [0]
    for path, data in files.items():
        if not (tree / path.parent.name).is_dir():
            continue
        data["params"] = {k: v for k, v in data.get("params", {}).items() if k not in NOISE}
        columns = data.get("result_columns", [])
        if "params" in columns:
            data["results"] = {n: _trim_result(row, columns, seen[n])
                               if n in trim and isinstance(row, list) else row
                               for n, row in data.get("results", {}).items()}
        data["results"] = {n: _finite(row, infinite)
                           for n, row in data.get("results", {}).items()}
        (tree / path.parent.name / path.name).write_text(json.dumps(data))
    if infinite[0]:
        print(f"flashbench.site: {infinite[0]} infinite value(s) in the results shown as "
              "failed (asv's null): no real timing or error is infinite", file=sys.stderr)
    return dropped


def view_config(config: Path, conf: dict, work: Path) -> Path:
    """A copy of ``conf`` (read from ``config``) publishing from :func:`view_tree` of its
    results folder, in ``work``; its path."""
    base = config.parent
    copy = {k: (str((base / v).resolve()) if k in PATH_KEYS and isinstance(v, str) else v)
            for k, v in conf.items()}
    view_tree(Path(copy.get("results_dir", base / "results")), work / "results")
    copy["results_dir"] = str(work / "results")
    path = work / "asv.conf.json"
    path.write_text(json.dumps(copy, indent=1))
    return path
