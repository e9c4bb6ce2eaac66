"""A/A: how much noise does the review's pairing leave in one round of a short call?

Two copies of this repository's committed HEAD (``git archive``) are loaded into one
process as the review's worker loads base and head (``worker_process.py``'s ``Sides``), so both
sides run identical code and every round's log-ratio, log(head/base), is noise. For up
to ``--points`` grid points whose call is shorter than 0.2 s (the review's short calls),
each round is measured both ways, in the same run, the two ways alternating which goes
first:

- blocks: one request per side, as the review measured short calls before (set up, one
  untimed call, then the block's samples: 5 when a sample is under 20 ms, 3 under
  0.1 s, else 1), the round's value per side its fastest sample;
- pairs: one request for both sides (``worker_process.py``'s ``pair_point``: both set up, one
  untimed call each, then the samples alternating A B B A A B ...), as the review
  measures them now.

Rounds alternate the sides' order (AB, BA, ...). Printed per grid point: seconds per
call, and the standard deviation of the rounds' log-ratios (one round's spread, the
figure a review's prior estimates) and their mean, for both ways; then the median and
the root mean square of the standard deviations over the grid points.

    python -m studies.review_interleave                      # 16 rounds, 10 grid points
    python -m studies.review_interleave --rounds 24 --points 6

Run it on a quiet machine with the review's settings, for example
``OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 NUMPY_MADVISE_HUGEPAGE=0
taskset -c 1 python -m studies.review_interleave`` (as ``review --threads 1``).
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from flashbench.review import worker_process as W  # (the worker, a standalone script)
from flashbench.review.ab import SHORT_SAMPLE, VERY_SHORT

ROOT = Path(__file__).resolve().parents[1]

SUITES = ("bench_reference.TimeAttention.time_attention",
          "bench_backends.TimeCPUBackend.time_backend",
          "bench_reference.TimeSoftmax.time_softmax",
          "bench_grad.TimeBackward.time_backward")


def _copy(dest: Path) -> Path:
    dest.mkdir()
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def _per_block(number: int, seconds: float) -> int:
    sample = number * seconds
    return 5 if sample < VERY_SHORT else 3 if sample < SHORT_SAMPLE else 1


def block_round(sides, point, order) -> float:
    name, index, _, number, seconds = point
    values = {}
    for side in order:
        sides.use(side)
        reply = W.time_point(sides.suites[side], {
            "name": name, "index": index, "number": number, "warmup": True,
            "samples": _per_block(number, seconds)})
        values[side] = min(reply["samples"])
    return math.log(values["head"] / values["base"])


def pair_round(sides, point, order) -> float:
    name, index, _, number, seconds = point
    reply = W.pair_point(sides, {"op": "pair", "name": name, "index": index,
                                 "number": number, "order": list(order),
                                 "samples": _per_block(number, seconds)})
    return math.log(min(reply["head"]) / min(reply["base"]))


def short_points(sides, limit: int) -> list:
    found = []
    suites = sides.suites["base"]
    for name in SUITES:
        b = suites.benchmarks[name]
        for index, combo in enumerate(itertools.product(*b.params)):
            sides.use("base")
            reply = W.time_point(suites, {"name": name, "index": index, "number": 0,
                                          "samples": 1})
            if reply["status"] == "ok" and min(reply["samples"]) < W.WARMUP_BELOW:
                found.append((name, index, ", ".join(combo), reply["number"],
                              min(reply["samples"])))
    return found[::max(1, len(found) // limit)][:limit]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=16, help="rounds per way (default 16)")
    p.add_argument("--points", type=int, default=10, help="grid points (default 10)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        a, b = _copy(Path(tmp) / "a"), _copy(Path(tmp) / "b")
        sides = W.Sides(str(a / "benchmarks"), {"base": str(a), "head": str(b)})
        points = short_points(sides, args.points)
        print(f"A/A, HEAD on both sides, one process; {args.rounds} rounds per way per grid "
              f"point; sd and mean of the rounds' log(head/base)\n")
        print("| grid point | s per call | blocks: sd | blocks: mean | pairs: sd | "
              "pairs: mean |")
        print("|---|---|---|---|---|---|")
        sds = {"blocks": [], "pairs": []}
        for point in points:
            got = {"blocks": [], "pairs": []}
            for r in range(args.rounds):
                order = ("base", "head") if r % 2 == 0 else ("head", "base")
                ways = ("blocks", "pairs") if r % 4 < 2 else ("pairs", "blocks")
                for way in ways:
                    measure = block_round if way == "blocks" else pair_round
                    got[way].append(measure(sides, point, order))
            for way in got:
                sds[way].append(statistics.stdev(got[way]))
            label = f"{point[0].split('.')[1]}({point[2]})"
            print(f"| {label} | {point[4]:.4f} | {statistics.stdev(got['blocks']):.4f} | "
                  f"{statistics.mean(got['blocks']):+.4f} | "
                  f"{statistics.stdev(got['pairs']):.4f} | "
                  f"{statistics.mean(got['pairs']):+.4f} |", flush=True)
        os.chdir(ROOT)
    print()
    for way, values in sds.items():
        rms = math.sqrt(statistics.mean(v * v for v in values))
        print(f"{way}: one round's sd of log(head/base), median {statistics.median(values):.4f}"
              f", root mean square {rms:.4f} over {len(values)} grid points")
    ratio = (statistics.mean(v * v for v in sds["blocks"])
             / statistics.mean(v * v for v in sds["pairs"]))
    print(f"variance ratio blocks / pairs: {ratio:.2f} (rounds needed for one precision)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
