"""CPU targets of the float64 backward: streamed vs one-shot, time and peak memory, side by side.

    python -m studies.bwd_targets [--threads 1] [--repeat 3]

Issue 13's targets: the streamed backward (``reference.online_attention_grad``, block 64)
within 2x the one-shot backward's time (``reference.attention_grad``) at B = H = 1,
N = 4096, d = 64, and at most 10% of its peak memory at N = 8192. Each figure comes from a
fresh process: time is the minimum of ``--repeat`` wall-clock calls, one-shot and streamed
alternating; memory the peak RSS (``ru_maxrss``, as asv's ``peakmem_``) and the call's
own peak. ``--threads`` sets OPENBLAS_NUM_THREADS / OMP_NUM_THREADS in the child
processes (default: as they are). The method in full, and the figures: docs/backward.md
("CPU targets").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import json, resource, sys, time
import numpy as np
from flashbench import reference as R
from flashbench.inputs import Shape, make_qkv

mode, n, causal, repeat = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", int(sys.argv[4])
q, k, v = make_qkv(Shape(1, 1, n, n, 64), "normal", 0)
do = np.random.default_rng(1).standard_normal(q.shape)
o, lse = R.online_attention(q, k, v, causal=causal)
calls = {"one-shot": lambda: R.attention_grad(q, k, v, do, causal=causal),
         "streamed": lambda: R.online_attention_grad(q, k, v, o, lse, do, causal=causal)}


def rss_kib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() // 1024


if mode == "time":
    best = {name: float("inf") for name in calls}
    for _ in range(repeat):
        for name, fn in calls.items():
            t = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t)
    print(json.dumps(best))
else:
    before = rss_kib()
    calls[mode]()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    print(json.dumps({"peak_kib": peak, "call_kib": peak - before}))
"""


def child(args: list[str], env: dict) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, *args], env=env, check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=None,
                    help="BLAS threads in the measuring processes (default: unchanged)")
    ap.add_argument("--repeat", type=int, default=3, help="timed calls per implementation")
    ap.add_argument("--time-n", type=int, default=4096)
    ap.add_argument("--mem-n", type=int, default=8192)
    args = ap.parse_args(argv)
    env = dict(os.environ)
    if args.threads is not None:
        env.update(OPENBLAS_NUM_THREADS=str(args.threads), OMP_NUM_THREADS=str(args.threads))
    threads = env.get("OPENBLAS_NUM_THREADS", "unset (OpenBLAS default)")
    print(f"float64 backward, B = H = 1, d = 64, block = 64; BLAS threads: {threads}; "
          f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}")
    ok = True
    for causal in (False, True):
        t = child(["time", str(args.time_n), "1" if causal else "0", str(args.repeat)], env)
        ratio = t["streamed"] / t["one-shot"]
        ok &= ratio <= 2.0
        print(f"time   N={args.time_n} causal={causal!s:5}: one-shot {t['one-shot']:.3f} s, "
              f"streamed {t['streamed']:.3f} s (min of {args.repeat} wall-clock calls): "
              f"streamed / one-shot = {ratio:.2f} (target <= 2)")
    for causal in (False, True):
        m = {impl: child([impl, str(args.mem_n), "1" if causal else "0", "1"], env)
             for impl in ("one-shot", "streamed")}
        ratio = m["streamed"]["peak_kib"] / m["one-shot"]["peak_kib"]
        call_ratio = m["streamed"]["call_kib"] / m["one-shot"]["call_kib"]
        ok &= ratio <= 0.10
        print(f"memory N={args.mem_n} causal={causal!s:5}: process peak RSS one-shot "
              f"{m['one-shot']['peak_kib'] / 1024:.0f} MiB, streamed "
              f"{m['streamed']['peak_kib'] / 1024:.0f} MiB: ratio {ratio:.3f} (target <= 0.10); "
              f"the call's own peak {m['one-shot']['call_kib'] / 1024:.0f} vs "
              f"{m['streamed']['call_kib'] / 1024:.0f} MiB: ratio {call_ratio:.3f}")
    print("targets met" if ok else "targets NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
