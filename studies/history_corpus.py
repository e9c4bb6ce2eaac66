"""Measure flashbench.history on a large synthetic asv results corpus.

    python -m studies.history_corpus [--files 1000] [--benchmarks 200] [--dir DIR]
                                     [--jobs N] [--runs 3] [--machines 1]
    python -m studies.history_corpus --cache [--cache-dir DIR] [--modes M,...] ...

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
process's own peak RSS (getrusage ru_maxrss), or where larger the largest sum of
RSS over the process and its load_results workers, sampled every 5 ms from outside
(/proc; shared pages of the forked workers count in each process, so this
over-states the memory actually used). ``--machines K`` writes K
machines' folders of ``--files`` files each (the same commits).

``--cache`` measures the history cache instead (flashbench.history.cache), each mode
in a fresh process, the modes interleaved run by run: load + every summary without
a cache, with a cold (emptied) cache, a warm one, a warm one without samples, and
after one new results file (written 10 s before) refresh_cache alone and load +
summaries; the table gives medians and each total as a multiple of the first mode's.
After each run the new file is deleted and the cache refreshed, so every run's warm
modes read the cache of the corpus as generated.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tools.asv_corpus import corpus_grids, machine_names, make_corpus, write_file

MEASURE = """
import resource, sys, time
from flashbench.history import load_results, error_bands, throughput, steps
from flashbench.history.load import refresh_cache
root, what, jobs, cache, samples = sys.argv[1:6]
jobs = None if jobs == "auto" else int(jobs)
cache = False if cache == "off" else cache
t0 = time.perf_counter()
if what == "refresh":
    n = refresh_cache(root, cache=cache, jobs=jobs)
else:
    df = load_results(root, jobs=jobs, cache=cache, samples=samples == "1")
    n = len(df)
t_load = time.perf_counter() - t0
t0 = time.perf_counter()
if what == "all":
    error_bands(df); throughput(df); steps(df)
t_sum = time.perf_counter() - t0
print(n, t_load, t_sum, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


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


def watched(cmd: list[str], cwd: Path | None = None) -> tuple[str, float, float]:
    """(stdout, wall seconds, peak RSS MiB of the process tree, sampled every 5 ms) of
    ``cmd``; SystemExit if it fails."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, text=True)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, sum(_rss_kib(p) for p in _tree(proc.pid)))
        time.sleep(0.005)
    out, _ = proc.communicate()
    if proc.returncode:
        raise SystemExit(f"{cmd[2:4] if cmd[1] == '-c' else cmd[:4]} failed "
                         f"(exit {proc.returncode})")
    return out, time.perf_counter() - t0, peak / 1024


def measure(root: Path, what: str, jobs: str, cache: str = "off", samples: bool = True) -> dict:
    """One fresh process: ``what`` is load, all (load + summaries) or refresh."""
    out, _, peak = watched([sys.executable, "-c", MEASURE, str(root), what, jobs, cache,
                            "1" if samples else "0"])
    rows, t_load, t_sum, own_kib = out.split()
    return {"rows": int(rows), "load_s": float(t_load), "summaries_s": float(t_sum),
            "peak_mib": max(peak, int(own_kib) / 1024)}


CACHE_MODES = {  # name -> (what, samples, cache emptied first, results files added first)
    "no cache": ("all", True, False, 0),
    "cold cache": ("all", True, True, 0),
    "warm cache": ("all", True, False, 0),
    "warm without samples": ("all", False, False, 0),
    "+1 file: refresh_cache": ("refresh", True, False, 1),
    "+1 file: load + summaries": ("all", True, False, 1),
}


def cache_figures(root: Path, args, grids: dict) -> None:
    """Each mode of CACHE_MODES in --modes, interleaved run by run, side by side."""
    where = Path(args.cache_dir)
    chosen = [m for m in CACHE_MODES if m in args.modes.split(",")] if args.modes \
        else list(CACHE_MODES)
    added: list[Path] = []
    runs: dict[str, list] = {m: [] for m in chosen}
    machine, cpu = machine_names(args.machines)[0]
    for _ in range(args.runs):
        for mode in chosen:
            what, samples, empty, new = CACHE_MODES[mode]
            if empty:
                shutil.rmtree(where, ignore_errors=True)
            for _ in range(new):  # written 10 s ago: not "racily clean" (cache.py)
                added.append(write_file(root / machine, args.files + len(added), grids,
                                        random.Random(len(added)),
                                        {"machine": machine, "cpu": cpu}))
                ago = time.time_ns() - 10**10
                os.utime(added[-1], ns=(ago, ago))
            runs[mode].append(measure(root, what, args.jobs, "off" if mode == "no cache"
                                      else str(where), samples))
        if added:  # the corpus as generated again, and its cache one part, before the next run
            for path in added:
                path.unlink()
            added.clear()
            measure(root, "refresh", args.jobs, str(where))
    base = statistics.median(r["load_s"] + r["summaries_s"] for r in runs[chosen[0]])
    print(f"{'mode':28} {'rows/files':>10} {'load s':>7} {'summ. s':>7} {'total s':>7} "
          f"{'x ' + chosen[0]:>14} {'peak MiB':>9}")
    for mode in chosen:
        rs = runs[mode]
        total = statistics.median(r["load_s"] + r["summaries_s"] for r in rs)
        print(f"{mode:28} {rs[0]['rows']:>10} "
              f"{statistics.median(r['load_s'] for r in rs):7.2f} "
              f"{statistics.median(r['summaries_s'] for r in rs):7.2f} {total:7.2f} "
              f"{total / base:14.2f} {statistics.median(r['peak_mib'] for r in rs):9.0f}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--files", type=int, default=1000)
    p.add_argument("--benchmarks", type=int, default=200)
    p.add_argument("--dir", help="corpus folder (default: a temporary one)")
    p.add_argument("--jobs", default="auto", help="load_results(jobs=...): auto or a number")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--machines", type=int, default=1, help="machines, --files each")
    p.add_argument("--cache", action="store_true",
                   help="measure the history cache: no cache, cold, warm, one new file")
    p.add_argument("--cache-dir", help="the cache's folder (default: a temporary one)")
    p.add_argument("--modes", help="--cache: comma-separated modes, of: " +
                   ", ".join(CACHE_MODES))
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.dir or Path(tmp) / "corpus")
        meta = {"version": 2}
        grids = corpus_grids(args.benchmarks, meta)
        if not (root / "benchmarks.json").exists():
            make_corpus(root, args.files, args.benchmarks, machines=args.machines)
        size = sum(f.stat().st_size for f in root.rglob("*.json")) / 2**20
        print(f"corpus: {args.machines} machine(s) x {args.files} files x {args.benchmarks} "
              f"benchmarks, {size:.0f} MiB; jobs={args.jobs}, {os.cpu_count()} CPUs, "
              f"{args.runs} runs, median" + ("" if args.cache else " (max)"))
        if args.cache:
            args.cache_dir = args.cache_dir or str(Path(tmp) / "cache")
            cache_figures(root, args, grids)
            return 0
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
