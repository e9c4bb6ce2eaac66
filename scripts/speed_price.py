"""Study: what do the guards cost a correct kernel, and which part of it is honest? (issue 35)

Question: the median time per call of correct kernels in four arms, alternating in one run
(ROUNDS rounds, the arms' order rotating each round, SAMPLES calls per arm and round):
bare-hot (the same inputs every call, the output freed at once: what asv's time_ suites and
the review did), bare-pool (the guard's refilled input pool, nothing else: cold inputs are
honest), guarded-drop (flashbench.timed.timed_calls around a call that frees its output at
once) and guarded (timed_calls as the harness runs it). guarded / bare-pool is the guard's
own cost: target within 3% for calls of 1 ms or more on a CPU. Per arm: the host clock's
median and p10-p90 per call, the process's CPU time (all threads) and minor page faults per
call, read by a probe around the call in every arm alike.
Answer: docs/speed.md, "The price".

Usage: python scripts/speed_price.py [--rounds 10] [--samples 10]
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import subprocess
import time

import numpy as np
import torch

from flashbench.backends import get_backend
from flashbench.inputs import Shape
from flashbench.timed.attention import attention_maker, pool_size
from flashbench.timed.guard import Pool, timed_calls

CASES = [("torch-sdpa", Shape(1, 8, 512, 512, 64), "fp32"),
         ("torch-sdpa", Shape(1, 8, 1024, 1024, 64), "fp32"),
         ("torch-naive", Shape(1, 8, 512, 512, 64), "fp32")]
ARMS = ("bare-hot", "bare-pool", "guarded-drop", "guarded")


def probed(fn, cpu: list, faults: list, keep: bool):
    """``fn`` with the process's CPU time (s) and minor page faults of each call appended to
    ``cpu`` and ``faults``; the output freed inside the call unless ``keep``."""
    def call(*args):
        f0, c0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.process_time()
        out = fn(*args)
        if not keep:
            out = None
        c1, f1 = time.process_time(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        cpu.append(c1 - c0)
        faults.append(f1 - f0)
        return out

    return call


def bare(call, args_of, samples: int) -> list[float]:
    """``samples`` calls after one warm-up, each on ``args_of()``; host clock per call (s)."""
    call(*args_of())
    out = []
    for _ in range(samples):
        args = args_of()
        t0 = time.perf_counter()
        call(*args)
        out.append(time.perf_counter() - t0)
    return out


def run_arm(arm: str, fn, make, fixed, size: int, seed: int, samples: int, rec: dict) -> None:
    cpu, faults = [], []
    if arm == "bare-hot":
        wall = bare(probed(fn, cpu, faults, False), lambda: fixed, samples)
    elif arm == "bare-pool":
        pool = Pool(make, size, seed)
        wall = bare(probed(fn, cpu, faults, False), lambda: pool.next()[2], samples)
    else:
        pool = Pool(make, size, seed)
        batch = timed_calls(probed(fn, cpu, faults, arm == "guarded"), pool, samples, warmup=1)
        wall = batch.samples_s
    rec["wall"] += wall
    rec["cpu"] += cpu[1:]  # the warm-up's probe is the first in every arm
    rec["faults"] += faults[1:]


def revision() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" (with uncommitted changes)" if dirty else "")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--samples", type=int, default=10)
    a = p.parse_args()
    if a.rounds < 1 or a.samples < 3:
        p.error("--rounds must be >= 1 and --samples >= 3")
    load0 = os.getloadavg()
    print(f"git {revision()}; torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; "
          f"load average {load0[0]:.1f} at the start")
    print(f"{a.rounds} rounds x {a.samples} calls per arm (one warm-up each), arms in a "
          f"rotating order; wall: host clock per call; CPU: time.process_time per call (all "
          f"threads); faults: ru_minflt per call")
    print("| backend | case | arm | median ms | p10-p90 ms | CPU ms | faults/call "
          "| / bare-hot | / bare-pool |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, shape, dtype in CASES:
        b = get_backend(name)
        make = attention_maker(shape, dtype)
        fixed = make(0)
        size = pool_size(shape, dtype, a.samples)

        def fn(q, k, v, b=b):
            return b.timed_fn(q, k, v, causal=False)

        recs = {arm: {"wall": [], "cpu": [], "faults": []} for arm in ARMS}
        for r in range(a.rounds):
            for i in range(len(ARMS)):
                arm = ARMS[(i + r) % len(ARMS)]
                run_arm(arm, fn, make, fixed, size, 1000 * r + i, a.samples, recs[arm])
        med = {arm: float(np.median(recs[arm]["wall"])) for arm in ARMS}
        for arm in ARMS:
            w = np.asarray(recs[arm]["wall"]) * 1e3
            p10, p90 = np.percentile(w, [10, 90])
            print(f"| {name} | {shape.spec()} {dtype} | {arm} | {med[arm] * 1e3:.3f} | "
                  f"{p10:.3f}-{p90:.3f} | {np.median(recs[arm]['cpu']) * 1e3:.3f} | "
                  f"{np.mean(recs[arm]['faults']):.0f} | {med[arm] / med['bare-hot']:.3f} | "
                  f"{med[arm] / med['bare-pool']:.3f} |")
    load1 = os.getloadavg()
    print(f"load average {load1[0]:.1f} at the end; the guard's own cost: guarded / "
          f"bare-pool (target <= 1.03 for calls of 1 ms or more on a CPU)")


if __name__ == "__main__":
    main()
