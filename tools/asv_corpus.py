"""A synthetic asv results corpus: results files in asv's schema (version 2) with
benchmarks.json, machine.json per machine, made-up commits, about 2% of the points skipped
(NaN) and 1% failed (null). The history cache's tests and the history studies
(studies/history_corpus.py, studies/history_scale.py) write it."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path


def corpus_grids(benchmarks: int, meta: dict) -> dict:
    """benchmark name -> parameter grid (value reprs) of the corpus; fills ``meta``
    (benchmarks.json) with each benchmark's entry."""
    acc = benchmarks // 4
    dev = benchmarks // 8
    shaped = benchmarks // 8
    grids = {}
    for i in range(benchmarks):
        if i < acc:
            name = f"bench_accuracy.TrackAccuracy.track_metric{i}"
            params = [["'flash_model'", "'triton'"], ["'fp16'", "'bf16'"], ["False", "True"]]
            meta[name] = {"name": name, "type": "track", "unit": "max |O - O_fp64|",
                          "param_names": ["kernel", "dtype", "causal"], "params": params}
        elif i < acc + dev:
            name = f"bench_gpu{i}.TrackDeviceTime.track_device_time"
            params = [["'triton'"], ["'bf16'"], ["1024", "4096"], ["64", "128"], ["False"]]
            meta[name] = {"name": name, "type": "track", "unit": "seconds",
                          "param_names": ["backend", "dtype", "N", "d", "causal"],
                          "params": params}
        elif i < acc + dev + shaped:
            name = f"bench_fwd{i}.TimeFlash.time_flash"
            params = [["'triton'"], ["'bf16'"], ["'4x16x4096x4096x64'", "'16x16x1024x1024x128'"],
                      ["True"], ["'fwd'", "'fwd+bwd'"]]
            meta[name] = {"name": name, "type": "time", "unit": "seconds",
                          "param_names": ["backend", "dtype", "shape", "causal", "direction"],
                          "params": params}
        else:
            name = f"bench_misc.Time{i}.time_thing"
            params = [["1", "2"], ["'a'", "None"]]
            meta[name] = {"name": name, "type": "time", "unit": "seconds",
                          "param_names": ["n", "word"], "params": params}
        meta[name]["version"] = "v1"  # the results' version: asv publish matches them
        grids[name] = params
    return grids


def machine_names(machines: int) -> list[tuple[str, str]]:
    """(machine, cpu) of each machine: one is ``synthetic-machine``, several
    ``synthetic-machine-<k>`` with processor "Synthetic CPU k"."""
    if machines == 1:
        return [("synthetic-machine", "Synthetic CPU")]
    return [(f"synthetic-machine-{k}", f"Synthetic CPU {k}") for k in range(machines)]


def make_corpus(root: Path, files: int, benchmarks: int, seed: int = 0,
                machines: int = 1, commits: list[str] | None = None) -> dict:
    """``files`` results files per machine (one per commit, the same commits on every
    machine: ``commits``, else made-up hashes), ``benchmarks`` benchmarks each, under
    ``root``; returns the grids."""
    rng = random.Random(seed)
    meta = {"version": 2}
    grids = corpus_grids(benchmarks, meta)
    root.mkdir(parents=True, exist_ok=True)
    (root / "benchmarks.json").write_text(json.dumps(meta))
    for name, cpu in machine_names(machines):
        (root / name).mkdir(exist_ok=True)
        write_machine(root / name, cpu)
        for f in range(files):
            write_file(root / name, f, grids, rng, {"machine": name, "cpu": cpu},
                       commits[f] if commits else None)
    return grids


def write_machine(folder: Path, cpu: str) -> None:
    """The folder's machine.json, as asv writes it (asv publish skips a folder without)."""
    (folder / "machine.json").write_text(json.dumps(
        {"machine": folder.name, "cpu": cpu, "arch": "x86_64", "os": "Linux", "num_cpu": "2",
         "ram": "24000000", "version": 1}))


COLUMNS = ["result", "params", "version", "started_at", "duration", "stats_ci_99_a",
           "stats_ci_99_b", "stats_q_25", "stats_q_75", "stats_number", "stats_repeat",
           "samples"]


def write_file(folder: Path, f: int, grids: dict, rng: random.Random, machine: dict,
               commit: str | None = None) -> Path:
    """The results file of commit number ``f`` (hash ``commit``, else a made-up one) in
    ``folder`` (``machine``: asv's params)."""
    commit = commit or f"{f:08x}" + "0" * 32
    results = {}
    for name, params in grids.items():
        n = 1
        for p in params:
            n *= len(p)
        values = [rng.uniform(1e-3, 2e-3) for _ in range(n)]
        for k in range(n):  # about 2% skipped (NaN) and 1% failed (null)
            u = rng.random()
            values[k] = math.nan if u < 0.02 else None if u < 0.03 else values[k]
        results[name] = [values, params, "v1", 1700000000000 + f, 1.0,
                         *[[None if v is None else v * f for v in values]
                           for f in (0.95, 1.05, 0.98, 1.02)],
                         [1] * n, [5] * n,
                         [None if v is None else [v * (1 + 0.01 * k) for k in range(5)]
                          for v in values]]
    data = {"commit_hash": commit, "env_name": "env", "date": 1700000000000 + f * 60000,
            "params": machine, "python": "3.11", "requirements": {}, "env_vars": {},
            "result_columns": COLUMNS, "results": results, "durations": {}, "version": 2}
    path = folder / f"{commit[:8]}-env.json"
    path.write_text(json.dumps(data))
    return path
