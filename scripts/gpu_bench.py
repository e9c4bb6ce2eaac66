"""GPU check of the Triton kernel: correctness, then TFLOP/s against torch-sdpa.

One command on a CUDA machine (no asv needed):

    python scripts/gpu_bench.py [--out gpu-results]

1. Correctness: triton vs the float64 reference at several shapes (fp32 with IEEE
   dots, fp16, bf16; causal and not; Nq != Nk), and the baseline rule against the
   same-dtype standard model. Any failure stops the script with exit status 1.
2. Speed: triton and torch-sdpa, bf16 and fp16, d = 64 and 128, N = 1k..16k
   (B * N = 16384 tokens, H = 16), causal and not. Each time is
   the median of triton.testing.do_bench (warm-up, L2 flushed, CUDA events); TFLOP/s
   counts 4 * B * H * N * N * d (halved for causal), and "% peak" divides by the
   same run's measured bf16 matmul throughput.

Writes <out>/<date>-<gpu>.md and .json and prints the table.
"""

from __future__ import annotations

import argparse
import functools
import json
import pathlib
import sys
import time

import torch
from tabulate import tabulate

from flashbench import numerics, reference
from flashbench.accuracy import judge
from flashbench.backends import get_backend
from flashbench.inputs import Shape, make_qkv
from flashbench.kernels.checks import TORCH_DTYPES
from flashbench.timing import device_seconds, gpu_name, matmul_peak_tflops, tflops

CHECK_SHAPES = [Shape(1, 2, 1024, 1024, 64), Shape(2, 2, 777, 1500, 128),
                Shape(1, 4, 1500, 600, 64), Shape(1, 2, 2048, 2048, 256),
                Shape(1, 2, 129, 129, 16)]
TOKENS = 16384  # B * N held constant across N, as Triton's fused-attention tutorial does
HEADS = 16


def speed_shapes(max_n: int) -> list[Shape]:
    ns = [n for n in (1024, 2048, 4096, 8192, 16384) if n <= max_n]
    return [Shape(max(1, TOKENS // n), HEADS, n, n, d) for d in (64, 128) for n in ns]


def check_correctness() -> list[dict]:
    rows = []
    for shape in CHECK_SHAPES:
        q, k, v = make_qkv(shape, "normal", seed=0)
        for causal in (False, True):
            ref = reference.attention(q, k, v, causal=causal)
            for dtype in ("fp32", "fp16", "bf16"):
                t = [torch.from_numpy(x).to("cuda", TORCH_DTYPES[dtype]) for x in (q, k, v)]
                out = get_backend("triton")(*t, causal=causal)
                std = numerics.standard_model(q, k, v, dtype, causal=causal)
                j = judge(out, std, ref, dtype)
                ok = j["o"]["verdict"].passed and j["lse"]["verdict"].passed
                if dtype == "fp32":
                    ok = ok and j["o"]["kernel"]["max_abs"] <= 1e-5
                rows.append({"shape": shape.label(), "causal": causal, "dtype": dtype,
                             "o_max_abs": j["o"]["kernel"]["max_abs"],
                             "lse_max_abs": j["lse"]["kernel"]["max_abs"],
                             "o_ratio": j["o"]["verdict"].ratio, "passed": ok})
    return rows


def time_backends(max_n: int, peak: float) -> list[dict]:
    rows = []
    for shape in speed_shapes(max_n):
        for dtype in ("bf16", "fp16"):
            g = torch.Generator(device="cuda").manual_seed(0)
            q, k, v = (torch.randn(shape.B, shape.H, n, shape.d, device="cuda", generator=g,
                                   dtype=TORCH_DTYPES[dtype]) for n in (shape.Nq, shape.Nk,
                                                                        shape.Nk))
            for causal in (False, True):
                row = {"shape": shape.label(), "dtype": dtype, "causal": causal}
                for name in ("triton", "torch-sdpa"):
                    fn = get_backend(name).timed_fn
                    s = device_seconds(functools.partial(fn, q, k, v, causal=causal))
                    row[f"{name}_ms"] = s * 1e3
                    row[f"{name}_tflops"] = tflops(shape, causal, s)
                    row[f"{name}_pct_peak"] = 100 * row[f"{name}_tflops"] / peak
                row["speedup"] = row["torch-sdpa_ms"] / row["triton_ms"]
                rows.append(row)
                print(f"  {row['shape']} {dtype} causal={causal}: triton "
                      f"{row['triton_tflops']:.0f} TFLOP/s, sdpa {row['torch-sdpa_tflops']:.0f}",
                      flush=True)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="gpu-results", help="folder for the .md and .json")
    p.add_argument("--max-n", type=int, default=16384)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu_bench: no CUDA GPU visible to torch; this script only runs on a GPU",
              file=sys.stderr)
        return 2
    gpu, date = gpu_name(), time.strftime("%Y-%m-%d")
    print(f"{gpu}, torch {torch.__version__}", flush=True)
    checks = check_correctness()
    print(tabulate(checks, headers="keys", floatfmt=".2e"))
    peak = matmul_peak_tflops("bf16")
    print(f"measured bf16 matmul peak: {peak:.0f} TFLOP/s (8192^3 torch.matmul, do_bench median)")
    speed = time_backends(args.max_n, peak) if all(r["passed"] for r in checks) else []
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{date}-{gpu.replace(' ', '_')}"
    stem.with_suffix(".json").write_text(json.dumps(
        {"gpu": gpu, "date": date, "torch": torch.__version__, "matmul_peak_tflops": peak,
         "checks": checks, "speed": speed}, indent=1))
    md = [f"# Triton attention forward on {gpu}, {date}", "",
          f"bf16 matmul peak measured in the same run: {peak:.0f} TFLOP/s. Times: median of "
          "triton.testing.do_bench (warm-up, L2 flushed), ms. TFLOP/s = 4*B*H*N*N*d / time "
          "(halved when causal).", "", "## Correctness vs float64 reference", "",
          tabulate(checks, headers="keys", tablefmt="github", floatfmt=".2e"), "",
          "## Speed", "", tabulate(speed, headers="keys", tablefmt="github", floatfmt=".3g")]
    stem.with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md[-1:]))
    print(f"wrote {stem}.md and .json")
    return 0 if all(r["passed"] for r in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
