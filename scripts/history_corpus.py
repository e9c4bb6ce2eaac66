"""Measure flashbench.history on a large synthetic asv results corpus.

    python scripts/history_corpus.py [--files 1000] [--benchmarks 200] [--dir DIR]

Writes DIR/<machine>/<commit>-<env>.json files in asv's results schema (version 2)
plus benchmarks.json: ``--benchmarks`` benchmarks per file, a quarter of them
accuracy tracks with the TrackAccuracy parameter grid (kernel x dtype x causal),
a quarter device-time tracks (N x d), the rest plain timings with 4 parameter
combinations, with CIs, quartiles and samples. Then it times, in one fresh process
each, load_results alone and load_results + every summary (error bands, throughput,
steps), and reports wall time (s, time.perf_counter) and peak RSS (MiB,
resource.getrusage: the whole process, Python and pandas included).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

MEASURE = """
import resource, sys, time, warnings
t0 = time.perf_counter()
from flashbench.history import load_results, error_bands, throughput, steps
t_import = time.perf_counter() - t0
t0 = time.perf_counter()
df = load_results(sys.argv[1])
t_load = time.perf_counter() - t0
t0 = time.perf_counter()
if sys.argv[2] == "all":
    error_bands(df); throughput(df); steps(df)
t_sum = time.perf_counter() - t0
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"{len(df)} {t_import:.3f} {t_load:.3f} {t_sum:.3f} {rss:.0f}")
"""


def make_corpus(root: Path, files: int, benchmarks: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    acc = benchmarks // 4
    dev = benchmarks // 4
    meta = {"version": 2}
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
        else:
            name = f"bench_misc.Time{i}.time_thing"
            params = [["1", "2"], ["'a'", "None"]]
            meta[name] = {"name": name, "type": "time", "unit": "seconds",
                          "param_names": ["n", "word"], "params": params}
        grids[name] = params
    root.mkdir(parents=True, exist_ok=True)
    (root / "benchmarks.json").write_text(json.dumps(meta))
    columns = ["result", "params", "version", "started_at", "duration", "stats_ci_99_a",
               "stats_ci_99_b", "stats_q_25", "stats_q_75", "stats_number", "stats_repeat",
               "samples"]
    machine = root / "synthetic-machine"
    machine.mkdir(exist_ok=True)
    for f in range(files):
        commit = f"{f:08x}" + "0" * 32
        results = {}
        for name, params in grids.items():
            n = 1
            for p in params:
                n *= len(p)
            values = [rng.uniform(1e-3, 2e-3) for _ in range(n)]
            results[name] = [values, params, "v1", 1700000000000 + f, 1.0,
                             [v * 0.95 for v in values], [v * 1.05 for v in values],
                             [v * 0.98 for v in values], [v * 1.02 for v in values],
                             [1] * n, [5] * n,
                             [[v * (1 + 0.01 * k) for k in range(5)] for v in values]]
        data = {"commit_hash": commit, "env_name": "env", "date": 1700000000000 + f * 60000,
                "params": {"machine": "synthetic-machine"}, "python": "3.11",
                "requirements": {}, "env_vars": {}, "result_columns": columns,
                "results": results, "durations": {}, "version": 2}
        (machine / f"{commit[:8]}-env.json").write_text(json.dumps(data))


def measure(root: Path, what: str) -> dict:
    out = subprocess.run([sys.executable, "-c", MEASURE, str(root), what], check=True,
                         capture_output=True, text=True).stdout.split()
    rows, t_import, t_load, t_sum, rss = out
    return {"rows": int(rows), "import_s": float(t_import), "load_s": float(t_load),
            "summaries_s": float(t_sum), "peak_rss_mib": float(rss)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--files", type=int, default=1000)
    p.add_argument("--benchmarks", type=int, default=200)
    p.add_argument("--dir", help="corpus folder (default: a temporary one)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.dir or tmp)
        make_corpus(root, args.files, args.benchmarks)
        size = sum(f.stat().st_size for f in root.rglob("*.json")) / 2**20
        print(f"corpus: {args.files} files x {args.benchmarks} benchmarks, {size:.0f} MiB")
        for what in ("load", "all"):
            m = measure(root, what)
            total = m["load_s"] + m["summaries_s"]
            print(f"{'load only' if what == 'load' else 'load + summaries'}: {m['rows']} rows, "
                  f"load {m['load_s']:.2f} s, summaries {m['summaries_s']:.2f} s, "
                  f"total {total:.2f} s (import {m['import_s']:.2f} s not counted), "
                  f"peak RSS {m['peak_rss_mib']:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
