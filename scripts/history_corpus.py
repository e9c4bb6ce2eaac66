"""Measure flashbench.history on a large synthetic asv results corpus.

    python scripts/history_corpus.py [--files 1000] [--benchmarks 200] [--dir DIR]
                                     [--jobs N] [--runs 3]

Writes DIR/<machine>/<commit>-<env>.json files in asv's results schema (version 2)
plus benchmarks.json: ``--benchmarks`` benchmarks per file, a quarter of them
accuracy tracks with the TrackAccuracy parameter grid (kernel x dtype x causal),
an eighth device-time tracks as they were before suites recorded their shape
(N x d: the legacy table of flashbench.history.suites), an eighth timings that
record their problem as parameters (backend, dtype, shape x causal x direction:
throughput from ``Shape.parse(shape).flops``), the rest plain timings, each with
4 parameter combinations but the accuracy tracks' 8 (1,000 rows per file at 200
benchmarks), with CIs, quartiles and 5 samples per point; about 2% of the points
skipped (NaN: every file holds NaN, like real results) and 1% failed (null).
Every file records its processor (``params.cpu``), as asv does.

Then, ``--runs`` times in a fresh process each, it measures load_results alone
and load_results + every summary (error_bands, throughput, steps): wall time in
seconds (time.perf_counter, imports not counted) and peak memory in MiB: the
largest sum of RSS over the process and its load_results workers, sampled every
5 ms from outside (/proc; shared pages of the forked workers count in each
process, so this over-states the memory actually used).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MEASURE = """
import sys, time
from flashbench.history import load_results, error_bands, throughput, steps
jobs = None if sys.argv[3] == "auto" else int(sys.argv[3])
t0 = time.perf_counter()
df = load_results(sys.argv[1], jobs=jobs)
t_load = time.perf_counter() - t0
t0 = time.perf_counter()
if sys.argv[2] == "all":
    error_bands(df); throughput(df); steps(df)
t_sum = time.perf_counter() - t0
print(len(df), t_load, t_sum)
"""


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
        grids[name] = params
    return grids


def machine_names(machines: int) -> list[tuple[str, str]]:
    """(machine, cpu) of each machine: one is ``synthetic-machine``, several
    ``synthetic-machine-<k>`` with processor "Synthetic CPU k"."""
    if machines == 1:
        return [("synthetic-machine", "Synthetic CPU")]
    return [(f"synthetic-machine-{k}", f"Synthetic CPU {k}") for k in range(machines)]


def make_corpus(root: Path, files: int, benchmarks: int, seed: int = 0,
                machines: int = 1) -> dict:
    """``files`` results files per machine (one per commit, the same commits on every
    machine), ``benchmarks`` benchmarks each, under ``root``; returns the grids."""
    rng = random.Random(seed)
    meta = {"version": 2}
    grids = corpus_grids(benchmarks, meta)
    root.mkdir(parents=True, exist_ok=True)
    (root / "benchmarks.json").write_text(json.dumps(meta))
    for name, cpu in machine_names(machines):
        (root / name).mkdir(exist_ok=True)
        for f in range(files):
            write_file(root / name, f, grids, rng, {"machine": name, "cpu": cpu})
    return grids


COLUMNS = ["result", "params", "version", "started_at", "duration", "stats_ci_99_a",
           "stats_ci_99_b", "stats_q_25", "stats_q_75", "stats_number", "stats_repeat",
           "samples"]


def write_file(folder: Path, f: int, grids: dict, rng: random.Random, machine: dict) -> Path:
    """The results file of commit number ``f`` in ``folder`` (``machine``: asv's params)."""
    commit = f"{f:08x}" + "0" * 32
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


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    except (OSError, StopIteration):
        return 0


def _tree(pid: int) -> list[int]:
    """pid and its descendants (Linux /proc)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            kids = [int(k) for k in f.read().split()]
    except OSError:
        return [pid]
    return [pid] + [p for k in kids for p in _tree(k)]


def measure(root: Path, what: str, jobs: str) -> dict:
    proc = subprocess.Popen([sys.executable, "-c", MEASURE, str(root), what, jobs],
                            stdout=subprocess.PIPE, text=True)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, sum(_rss_kib(p) for p in _tree(proc.pid)))
        time.sleep(0.005)
    out, _ = proc.communicate()
    if proc.returncode:
        raise SystemExit(f"measurement failed (exit {proc.returncode})")
    rows, t_load, t_sum = out.split()
    return {"rows": int(rows), "load_s": float(t_load), "summaries_s": float(t_sum),
            "peak_mib": peak / 1024}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--files", type=int, default=1000)
    p.add_argument("--benchmarks", type=int, default=200)
    p.add_argument("--dir", help="corpus folder (default: a temporary one)")
    p.add_argument("--jobs", default="auto", help="load_results(jobs=...): auto or a number")
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.dir or tmp)
        if not (root / "benchmarks.json").exists():
            make_corpus(root, args.files, args.benchmarks)
        size = sum(f.stat().st_size for f in root.rglob("*.json")) / 2**20
        print(f"corpus: {args.files} files x {args.benchmarks} benchmarks, {size:.0f} MiB; "
              f"jobs={args.jobs}, {os.cpu_count()} CPUs, {args.runs} runs, median (max)")
        for what in ("load", "all"):
            runs = [measure(root, what, args.jobs) for _ in range(args.runs)]
            total = [r["load_s"] + r["summaries_s"] for r in runs]
            peak = [r["peak_mib"] for r in runs]
            label = "load only" if what == "load" else "load + summaries"
            print(f"{label}: {runs[0]['rows']} rows, load "
                  f"{statistics.median(r['load_s'] for r in runs):.2f} s, summaries "
                  f"{statistics.median(r['summaries_s'] for r in runs):.2f} s, total "
                  f"{statistics.median(total):.2f} s ({max(total):.2f} s), peak memory "
                  f"{statistics.median(peak):.0f} MiB ({max(peak):.0f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
