"""Study: what does posting a CPU worker's inputs inside its run request's clock cost an honest
user's kernel, against the fills it replaced? (issue 35)

Question: an honest 2-thread sdpa, as a user's kernel (`--backend mod:fn` in its worker),
timed by `flashbench speed` beside torch's in-process `torch-sdpa` row, in runs that
alternate the two arms (the order flipping each round, a fresh process per run, the seed
moving on): "posted" (the default: flashbench.timed.placed) and "filled" (the pages written
before the request and copied in by the worker's fill, the path a GPU keeps: the harness's
mailbox turned off in that run's process). Per arm, medians over the runs of three ratios
to torch-sdpa's median in the same run (the machine's drift between runs cancels): the user
row's median ("row"), its worker's own clock's median of the calls alone ("calls"), and
the row's median less the worker's ("clock": what the harness's clock adds to the calls:
the round trips, the posting, the subtraction of the empty requests). Posting changes the
last alone where it costs nothing in the calls; the first also carries the kernel's own
scatter in its worker (2-3x slow stretches of a 2-thread kernel here, in both arms).
Answer: docs/speed.md, "prepare / fill / stage / run".

Usage: python -m studies.posting_price [--shape 1x2x256x64] [--pass fwd] [--rounds 8]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ARMS = ("filled", "posted")
KERNEL = '''import torch


def honest(q, k, v, causal=False, scale=None):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
'''
RUN = r'''
import contextlib, io, json, os, sys
from flashbench.measure import speedworker
if os.environ["ARM"] == "filled":
    speedworker._mailbox = lambda *a: None  # the fills' path, as on a GPU
from flashbench.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    main(["speed", "--dtype", "fp32", "--json", "--quiet", "--causal", "off",
          "--seed", os.environ["SEED"], "--shape", os.environ["SHAPE"],
          "--pass", os.environ["PASS"], "--only", "pricekernel:honest", "torch-sdpa",
          "--samples", "20"])
rows = {r["backend"]: r for r in json.loads(out.getvalue())["rows"]}
print(json.dumps({b: [r["status"], r["median_s"], r.get("worker_median_s")]
                  for b, r in rows.items()}))
'''


def one_run(arm: str, shape: str, direction: str, seed: int, folder: str) -> tuple | None:
    """(row, calls, clock) over torch-sdpa's median in one `flashbench speed` run of
    ``arm`` (module docstring)."""
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, ARM=arm, SHAPE=shape, PASS=direction, SEED=str(seed),
               PYTHONPATH=os.pathsep.join([str(root), folder]))
    done = subprocess.run([sys.executable, "-c", RUN], env=env, capture_output=True,
                          text=True, cwd=folder)
    try:
        rows = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        print(f"{arm}: no rows ({done.stderr.strip()[-300:]})")
        return None
    (status, mine, own), (_, torch_s, _) = rows["pricekernel:honest"], rows["torch-sdpa"]
    if status != "PASS" or not mine or not torch_s or own is None:
        print(f"{arm}: the honest row says {status}")
        return None
    return mine / torch_s, own / torch_s, (mine - own) / torch_s


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="1x2x256x64")
    p.add_argument("--pass", dest="direction", default="fwd", choices=("fwd", "bwd", "fwdbwd"))
    p.add_argument("--rounds", type=int, default=8)
    args = p.parse_args(argv)
    ratios: dict = {arm: [] for arm in ARMS}
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "pricekernel.py").write_text(KERNEL)
        for r in range(args.rounds):
            for arm in ARMS if r % 2 == 0 else ARMS[::-1]:
                got = one_run(arm, args.shape, args.direction, 30 + r, folder)
                if got is not None:
                    ratios[arm].append(got)
    print(f"{args.shape} fp32 {args.direction}: the honest user row against torch-sdpa's "
          f"median in the same run (flashbench speed, --samples 20), {args.rounds} rounds; "
          "row: its median, calls: its worker's own clock's, clock: row less calls")
    for arm, got in ratios.items():
        for n, what in enumerate(("row", "calls", "clock") if got else ()):
            each = [g[n] for g in got]
            print(f"  {arm:>6} {what:>5}: median {statistics.median(each):+.3f}x over "
                  f"{len(each)} runs ({', '.join(f'{x:.3f}' for x in each)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
