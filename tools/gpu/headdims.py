"""The head dims real models use in the GPU session (issue 37; tools/gpu/bench.py calls these).

- :func:`replay`: the launches on meta tensors, so ``--plan`` counts their compilations: the
  fixed config (no autotuning), bf16, causal: one compilation per head dim (d = 128's is the
  one the checks already compile).
- :func:`check_rows`: each head dim judged as the plain checks are (Triton vs the float64
  reference, baseline rule), bf16, fixed config.
- :func:`timing_rows`: the forward's device time at d = 80 (Phi-2), 96 (Phi-3-mini),
  192/128 (DeepSeek's MLA prefill) beside d = 128 in the same run, same B, H, N; TFLOP/s
  count the FLOPs at the true d and dv (``Shape.flops``: 2 B H (d + dv) visible pairs), and
  ``vs_d128`` divides by d = 128's TFLOP/s. Target: >= 0.9x (padded widths compute on the
  padded tile: see docs/gpu.md, "Head dims", for what to expect).
"""

from __future__ import annotations

import statistics

import torch

from flashbench.inputs import Shape
from flashbench.kernels import triton_forward as triton_fwd
from flashbench.measure.forward import measure_accuracy
from flashbench.measure.records import Case

DIMS = ((128, None), (80, None), (96, None), (192, 128))  # (d, dv); d = 128 first: the yardstick
CHECK = (1, 2, 1024, 1024)  # B, H, Nq, Nk of the checks
TIMED = (2, 16, 8192, 8192)  # B, H, Nq, Nk of the timings
TARGET_VS_D128 = 0.9


def shapes(sizes) -> list[Shape]:
    return [Shape(*sizes, d, dv) for d, dv in DIMS]


def _tensors(s: Shape, device, seed: int = 0):
    sizes = [(s.B, h, n, w) for h, n, w in ((s.H, s.Nq, s.d), (s.kv_heads, s.Nk, s.d),
                                             (s.kv_heads, s.Nk, s.head_dim_v))]
    if device == "meta":  # planning: no values (randn on meta would import torch._dynamo)
        return [torch.empty(x, device="meta", dtype=torch.bfloat16) for x in sizes]
    g = torch.Generator(device=device).manual_seed(seed)
    return [torch.randn(x, device=device, dtype=torch.bfloat16, generator=g) for x in sizes]


def replay() -> None:
    """Every launch of :func:`check_rows` and :func:`timing_rows`, on meta tensors."""
    with triton_fwd.default_config("fixed"):
        for s in shapes(CHECK) + shapes(TIMED):
            triton_fwd.forward(*_tensors(s, "meta"), causal=True)


def check_rows(say) -> list[dict]:
    rows = []
    with triton_fwd.default_config("fixed"):
        for s in shapes(CHECK):
            case = Case(s, "normal", causal=True)
            say(f"check {case.label()}")
            rows += [r.as_dict() for r in measure_accuracy(case, ("bf16",), ("triton",))]
    return rows


def timing_rows(peak: float, say) -> list[dict]:
    """Forward TFLOP/s per head dim (module docstring); a row that fails says why. Every
    timed call on fresh inputs, every output judged (tools.gpu.guarded.guarded_call)."""
    import os

    from flashbench.measure.speed import SpeedCase
    from tools.gpu.guarded import guarded_call, roofline

    seed = int.from_bytes(os.urandom(8), "little") % 2**62  # this run's pools
    rows, base = [], None
    for s in shapes(TIMED):
        row = {"case": f"{s.spec()} bf16 causal fwd", "backend": "triton", "shape": s.spec(),
               "dtype": "bf16", "causal": True, "direction": "fwd", "d": s.d,
               "dv": s.head_dim_v}
        rows.append(row)
        try:
            row.update(guarded_call(lambda q, k, v: triton_fwd.forward(
                q, k, v, causal=True, config="fixed")[0], SpeedCase(s, "bf16", True),
                roofline(peak), seed))
        except Exception as exc:  # one head dim's failure must not stop the others
            row["skipped"] = f"failed: {type(exc).__name__}: {str(exc)[:300]}"
            continue
        if "skipped" in row:
            continue
        samples = row["samples_s"]
        med = statistics.median(samples)
        row.update(ms=med * 1e3, tflops=s.flops(causal=True) / med * 1e-12)
        row["pct_peak"] = 100 * row["tflops"] / peak
        if s.d == 128 and s.dv is None:
            base = row["tflops"]
        if base:
            row["vs_d128"] = row["tflops"] / base
            row["met"] = row["vs_d128"] >= TARGET_VS_D128
        say(f"  {row['case']}: {row['ms']:.2f} ms, {row['tflops']:.0f} TFLOP/s at the true "
            f"d" + (f", {row['vs_d128']:.2f}x d=128" if "vs_d128" in row else ""))
    return rows
