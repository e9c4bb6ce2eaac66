"""The measurements the two open GPU findings and the slowed review head need.

    python -m tools.gpu.findings --out DIR [--dry-run]

1. ``exp2``: Triton's ``tl.exp2`` (the kernel's: ``exp2(qk * qk_scale - m)``) on 4M fp32
   arguments in [-40, 0], against float64 ``exp2`` of the same fp32 arguments: max and
   p99 error in units of the fp32 result's ulp, on the device.
2. The fp32 case B=2 H=2 Nq=777 Nk=1500 d=128 causal (triton, IEEE dots, fixed config)
   against float64: max |O - O_fp64|, the fp32 standard model's, their ratio (the
   baseline rule allows 2), and where the worst row is (its visible keys).
3. The slowed head's true cost: the bf16 forward at bench_gpu's shapes, autotuned
   against the worse config the slowed review head forces (BLOCK_M=64 BLOCK_N=32 warps=4
   stages=2), device time ratio (20 runs, L2 flushed).

Without a GPU (``--dry-run``) each part runs on the CPU where it can (the Triton
interpreter, small shapes) so the script is proven end to end; its figures then say
nothing about a GPU. Writes DIR/findings.json and prints one line per figure.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from flashbench.inputs import Shape  # noqa: E402
from flashbench.kernels.launch import Config, TritonKernel  # noqa: E402

SLOW = Config.of(num_warps=4, num_stages=2, BLOCK_M=64, BLOCK_N=32)  # the slowed head's


def _exp2_fn(X, Y, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + offs, mask=offs < N)
    tl.store(Y + offs, tl.exp2(x), mask=offs < N)


EXP2 = TritonKernel(_exp2_fn, "exp2_probe")


def ulp_errors(y32: np.ndarray, x32: np.ndarray) -> np.ndarray:
    """|y - exp2(x)| in ulps of the fp32 value nearest exp2(x) (float64 reference)."""
    ref = np.exp2(x32.astype(np.float64))
    ulp = np.spacing(ref.astype(np.float32)).astype(np.float64)
    return np.abs(y32.astype(np.float64) - ref) / ulp


def exp2_part(device: str, n: int) -> dict:
    x = torch.linspace(-40.0, 0.0, n, dtype=torch.float32, device=device)
    y = torch.empty_like(x)
    EXP2.launch(lambda meta: (triton.cdiv(n, meta["BLOCK"]),), (x, y, n), {},
                device=device, config=Config.of(num_warps=4, num_stages=1, BLOCK=1024))
    err = ulp_errors(y.cpu().numpy(), x.cpu().numpy())
    return {"what": "tl.exp2 on fp32 in [-40, 0] vs float64 exp2", "points": n,
            "max_ulp": float(err.max()), "p99_ulp": float(np.percentile(err, 99)),
            "share_exact": float(np.mean(err <= 0.5))}


def fp32_case_part(device: str, shape: Shape) -> dict:
    from flashbench import reference
    from flashbench.inputs import make_qkv
    from flashbench.kernels import attention
    from flashbench.kernels import triton_forward as triton_fwd
    from flashbench.numerics import standard_model

    q, k, v = make_qkv(shape, "normal", 0)
    o64, _ = reference.attention(q, k, v, causal=True)
    std, _ = standard_model(q, k, v, "fp32", causal=True)
    tq, tk, tv = (torch.from_numpy(t).to(torch.float32).to(device) for t in (q, k, v))
    with triton_fwd.default_config("fixed"):
        o, _ = attention.triton_attention(tq, tk, tv, causal=True)
    err = np.abs(o.cpu().double().numpy() - o64)
    std_err = np.abs(np.asarray(std, dtype=np.float64) - o64)
    b, h, row, col = np.unravel_index(int(err.argmax()), err.shape)
    visible = row + 1 + shape.Nk - shape.Nq  # bottom-right causal alignment
    return {"case": shape.spec() + " causal fp32", "max_abs": float(err.max()),
            "standard_max_abs": float(std_err.max()), "ratio": float(err.max() / std_err.max()),
            "worst": {"batch": int(b), "head": int(h), "row": int(row),
                      "visible_keys": int(max(0, min(shape.Nk, visible)))},
            "rows_over_2x": int((err.max(axis=-1) > 2 * std_err.max(axis=-1)).sum())}


def slow_config_part(shapes: list[str]) -> list[dict]:
    from flashbench.kernels import triton_forward as triton_fwd
    from flashbench.measure.timing import device_samples

    rows = []
    for spec in shapes:
        s = Shape.parse(spec)
        for causal in (False, True):
            g = torch.Generator(device="cuda").manual_seed(0)
            q, k, v = (torch.randn(s.B, h, n, s.d, device="cuda", generator=g,
                                   dtype=torch.bfloat16)
                       for h, n in ((s.H, s.Nq), (s.kv_heads, s.Nk), (s.kv_heads, s.Nk)))
            auto, slow = (np.median(device_samples(
                lambda a=(q, k, v, causal), c=cfg: triton_fwd.forward(*a, config=c)))
                for cfg in (None, SLOW))
            rows.append({"shape": spec, "causal": causal, "autotuned_s": float(auto),
                         "slow_config_s": float(slow), "ratio": float(slow / auto)})
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder for findings.json")
    p.add_argument("--dry-run", action="store_true",
                   help="no GPU: run each part on the CPU (interpreter, small shapes)")
    args = p.parse_args(argv)
    gpu = torch.cuda.is_available()
    if not gpu and not args.dry_run:
        print("gpu_findings: no CUDA GPU here (--dry-run runs the parts on the CPU)",
              file=sys.stderr)
        return 3
    device = "cuda" if gpu else "cpu"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    record: dict = {"device": torch.cuda.get_device_name(0) if gpu else "cpu (dry run)",
                    "triton": triton.__version__, "torch": torch.__version__}
    t0 = time.time()
    record["exp2"] = exp2_part(device, 1 << 22 if gpu else 1 << 12)
    e = record["exp2"]
    print(f"exp2 ({device}): max {e['max_ulp']:.2f} ulp, p99 {e['p99_ulp']:.2f} ulp, "
          f"{100 * e['share_exact']:.1f}% correctly rounded ({e['points']} fp32 points)")
    shape = Shape(2, 2, 777, 1500, 128) if gpu else Shape(1, 1, 77, 150, 32)
    record["fp32_case"] = c = fp32_case_part(device, shape)
    print(f"fp32 {c['case']}: max abs {c['max_abs']:.3g}, standard model "
          f"{c['standard_max_abs']:.3g}, ratio {c['ratio']:.2f} (rule 2); worst row {c['worst']}, "
          f"{c['rows_over_2x']} rows over 2x their own standard error")
    if gpu:
        from benchmarks.bench_gpu import SHAPES

        record["slow_config"] = rows = slow_config_part(SHAPES)
        for r in rows:
            print(f"slowed head's config {SLOW.label()} at {r['shape']} causal={r['causal']}: "
                  f"{r['ratio']:.2f}x the autotuned forward ({1e3 * r['autotuned_s']:.2f} ms)")
    else:
        print("slowed head's config: needs a GPU (not timed in a dry run)")
    record["wall_s"] = time.time() - t0
    (out / "findings.json").write_text(json.dumps(record, indent=1))
    print(f"gpu_findings: wrote {out / 'findings.json'} in {record['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
