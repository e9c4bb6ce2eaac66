"""Study: what do the guards cost a correct kernel? (issue 35, "the price")

Question: the median time per call of a correct kernel timed bare (the same inputs every call,
the host clock, nothing checked: what asv's time_ suites and the review did) against the
guarded timer (flashbench.timed: a refilled input pool, clocks captured at import, threads
counted, outputs kept; the checks run after the clock). Side by side in one run: the two
alternate, ROUNDS times, each with SAMPLES calls; the ratio is guarded / bare of the medians
over all calls. Target: within 3% for calls of 1 ms or more on a CPU.

Usage: python -m studies.speed_price [--rounds 5] [--samples 10]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from flashbench.backends import get_backend
from flashbench.inputs import Shape
from flashbench.timed.attention import attention_maker, pool_size
from flashbench.timed.guard import Pool, timed_calls

CASES = [("torch-sdpa", Shape(1, 8, 512, 512, 64), "fp32"),
         ("torch-sdpa", Shape(1, 8, 1024, 1024, 64), "fp32"),
         ("torch-naive", Shape(1, 8, 512, 512, 64), "fp32")]


def bare(fn, args, samples: int) -> list[float]:
    fn(*args)
    out = []
    for _ in range(samples):
        t0 = time.perf_counter()
        fn(*args)
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--samples", type=int, default=10)
    a = p.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; host clock per call; "
          f"{a.rounds} alternating rounds x {a.samples} calls each way")
    print("| backend | case | bare median ms | guarded median ms | guarded / bare |")
    print("|---|---|---|---|---|")
    for name, shape, dtype in CASES:
        b = get_backend(name)
        make = attention_maker(shape, dtype)
        fixed = make(0)

        def call(q, k, v, b=b):
            return b.timed_fn(q, k, v, causal=False)

        plain, guarded = [], []
        for r in range(a.rounds):
            plain += bare(call, fixed, a.samples)
            pool = Pool(make, pool_size(shape, dtype, a.samples), seed=r)
            guarded += timed_calls(call, pool, a.samples, warmup=1).samples_s
        mb, mg = statistics.median(plain), statistics.median(guarded)
        print(f"| {name} | {shape.spec()} {dtype} | {mb * 1e3:.3f} | {mg * 1e3:.3f} | "
              f"{mg / mb:.3f} |")


if __name__ == "__main__":
    main()
