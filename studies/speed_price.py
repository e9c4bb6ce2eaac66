"""Study: what do the guards cost a correct kernel, and which part of it is honest? (issue 35)

Question: the median time per call of correct kernels in five arms, alternating in one run
(ROUNDS rounds, the arms' order rotating each round, SAMPLES calls per arm and round):
bare-hot (the same inputs every call, the output freed at once: asv's old time_ suites),
bare-pool (the guard's refilled input pool only: cold inputs are honest), guarded-drop
(flashbench.timed.timed_calls, the output freed inside the call), guarded (timed_calls as the
harness runs it) and guarded-keep (every output also held to the end: the guard before it
released them). guarded / bare-pool is the guard's own cost, target <= 1.03 for calls of
1 ms or more on a CPU (a 95% bootstrap interval over the paired rounds decides). Per arm: the
host clock per call (median, p10-p90), the process's CPU time (all threads) and minor page
faults per call, read by the same probe around the call in every arm.
Answer: docs/speed.md, "The price".

Usage: python -m studies.speed_price [--rounds 20] [--samples 10] [--threads 1]
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
from scipy.stats import bootstrap

from flashbench.backends import get_backend
from flashbench.inputs import Shape
from flashbench.timed.attention import attention_maker, pool_size
from flashbench.timed.guard import Pool, timed_calls

CASES = [("torch-sdpa", Shape(1, 8, 512, 512, 64), "fp32"),
         ("torch-sdpa", Shape(1, 8, 1024, 1024, 64), "fp32"),
         ("torch-naive", Shape(1, 8, 512, 512, 64), "fp32")]
ARMS = ("bare-hot", "bare-pool", "guarded-drop", "guarded", "guarded-keep")
TARGET = 1.03  # guarded / bare-pool, for calls of 1 ms or more on a CPU (issue 35)


def probed(fn, cpu: list, faults: list, keep: bool, held: list | None = None):
    """``fn`` with the process's CPU time (s) and minor page faults of each call appended to
    ``cpu`` and ``faults``; the output freed inside the call unless ``keep``; held in ``held``
    too when given (the guard before it released outputs: every one alive until the end)."""
    def call(*args):
        f0, c0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.process_time()
        out = fn(*args)
        if held is not None:
            held.append(out)
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
        held = [] if arm == "guarded-keep" else None
        batch = timed_calls(probed(fn, cpu, faults, arm != "guarded-drop", held), pool, samples,
                            warmup=1)
        wall = batch.samples_s
        del batch, held
    rec["wall"] += wall
    rec["cpu"] += cpu[1:]  # the warm-up's probe is the first in every arm
    rec["faults"] += faults[1:]
    rec["wall_rounds"].append(float(np.median(wall)))
    rec["cpu_rounds"].append(float(np.median(cpu[1:])))


def paired(recs: dict, arm: str, base: str, what: str) -> tuple[float, float, float]:
    """arm / base of ``what`` ("wall" or "cpu"): the median over rounds of the ratio of the
    round's medians, and its 95% bootstrap interval (rounds paired: each round ran every arm
    back to back, so a load that changes between rounds cancels)."""
    logs = np.log(np.asarray(recs[arm][f"{what}_rounds"])
                  / np.asarray(recs[base][f"{what}_rounds"]))
    ratio = float(np.exp(np.median(logs)))
    if len(logs) < 3:
        return ratio, float("nan"), float("nan")
    ci = bootstrap((logs,), np.median, confidence_level=0.95, method="percentile",
                   rng=np.random.default_rng(0)).confidence_interval
    return ratio, float(np.exp(ci.low)), float(np.exp(ci.high))


def verdict(lo: float, hi: float) -> str:
    if hi <= TARGET:
        return f"within {TARGET - 1:.0%}"
    if lo > TARGET:
        return f"over {TARGET - 1:.0%}"
    return f"not decided (the interval holds {TARGET})"


def processor() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


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
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--samples", type=int, default=10)
    p.add_argument("--threads", type=int, default=1,
                   help="torch's intra-op threads (default 1, as the asv suites and the review "
                        "run: a loaded machine then delays no second thread inside a call)")
    a = p.parse_args()
    if a.rounds < 1 or a.samples < 3 or a.threads < 1:
        p.error("--rounds and --threads must be >= 1, --samples >= 3")
    torch.set_num_threads(a.threads)
    load0 = os.getloadavg()
    print(f"git {revision()}; torch {torch.__version__}, {torch.get_num_threads()} thread(s); "
          f"{processor()}, {os.cpu_count()} CPUs; "
          f"load average {load0[0]:.1f} at the start")
    print(f"{a.rounds} rounds x {a.samples} calls per arm (one warm-up each), arms in a "
          f"rotating order; wall: host clock per call; CPU: time.process_time per call (all "
          f"threads); faults: ru_minflt per call (mean); ratios: median over rounds of the round's "
          f"medians' ratio")
    print("| backend | case | arm | median ms | p10-p90 ms | / bare-hot | / bare-pool [95% CI] "
          "| CPU ms | CPU / bare-pool [95% CI] | faults/call |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    verdicts = []
    for name, shape, dtype in CASES:
        b = get_backend(name)
        make = attention_maker(shape, dtype)
        fixed = make(0)
        size = pool_size(shape, dtype, a.samples)

        def fn(q, k, v, b=b):
            return b.timed_fn(q, k, v, causal=False)

        recs = {arm: {"wall": [], "cpu": [], "faults": [], "wall_rounds": [], "cpu_rounds": []}
                for arm in ARMS}
        for r in range(a.rounds):
            for i in range(len(ARMS)):
                arm = ARMS[(i + r) % len(ARMS)]
                run_arm(arm, fn, make, fixed, size, 1000 * r + i, a.samples, recs[arm])
        for arm in ARMS:
            w = np.asarray(recs[arm]["wall"]) * 1e3
            p10, p90 = np.percentile(w, [10, 90])
            ratio, lo, hi = paired(recs, arm, "bare-pool", "wall")
            cpu, clo, chi = paired(recs, arm, "bare-pool", "cpu")
            hot = paired(recs, arm, "bare-hot", "wall")[0]
            print(f"| {name} | {shape.spec()} {dtype} | {arm} | {np.median(w):.3f} | "
                  f"{p10:.3f}-{p90:.3f} | {hot:.3f} | "
                  f"{ratio:.3f} [{lo:.3f}, {hi:.3f}] | {np.median(recs[arm]['cpu']) * 1e3:.3f} | "
                  f"{cpu:.3f} [{clo:.3f}, {chi:.3f}] | {np.mean(recs[arm]['faults']):.0f} |")
            if arm == "guarded":
                verdicts.append(f"{name} {shape.spec()} {dtype}: wall {ratio:.3f} [{lo:.3f}, "
                                f"{hi:.3f}]: {verdict(lo, hi)}; CPU time {cpu:.3f} [{clo:.3f}, "
                                f"{chi:.3f}]: {verdict(clo, chi)}")
    load1 = os.getloadavg()
    print(f"load average {load1[0]:.1f} at the end. The guard's own cost, guarded / bare-pool "
          f"(target <= {TARGET} for calls of 1 ms or more on a CPU):")
    for line in verdicts:
        print(f"- {line}")


if __name__ == "__main__":
    main()
