"""The attention variants in the GPU session (tools/gpu/bench.py calls these three hooks).

- :func:`replay`: the variants' launches on meta tensors, so ``--plan`` counts their
  compilations: the fixed config (no autotuning), bf16 only: one compilation per variant
  signature (checks at d = 64: window, softcap, sinks, varlen and its backward; timings at d = 128:
  window, softcap, sinks, and the window's backward: dK/dV and dQ).
- :func:`check_rows`: each variant of :data:`flashbench.measure.varlen.VARIANT_SET`
  judged like the plain checks (Triton vs the float64 reference, baseline rule), bf16; the
  packed batch's gradients too (the gradient rule).
- :func:`timing_rows`: the forward's device time with a causal sliding window (and the
  plain causal forward beside it, same run), a softcap, sinks; effective TFLOP/s count the
  visible (query, key) pairs only (``Variant.visible_pairs``), so a window's row says how
  much of the visible work's rate survives the block skipping; the window's backward
  too (2.5x the forward's visible FLOPs).
"""

from __future__ import annotations

import statistics

import torch

from flashbench.inputs import Shape
from flashbench.inputs.variant import Variant
from flashbench.kernels import triton_backward as triton_bwd
from flashbench.kernels import triton_forward as triton_fwd
from flashbench.kernels.triton_variants import (
    packed_batch,
    triton_varlen_attention,
    triton_varlen_backward,
    variant_forward,
)
from flashbench.measure.forward import measure_accuracy
from flashbench.measure.records import Case
from flashbench.measure.varlen import VARIANT_SET, measure_varlen, measure_varlen_gradients

CHECK_SHAPE = Shape(1, 2, 1024, 1024, 64)
TIMED_SHAPE = Shape(2, 16, 8192, 8192, 128)
TIMED = {"causal": {"causal": True}, "causal window=(1024,0)": {"causal": True,
                                                               "window": (1024, 0)},
         "softcap=30": {"softcap": 30.0}, "sinks": {"sinks": True}}
WINDOW_BWD = (1024, 0)  # the backward timed with a causal window


def check_cases() -> list[Case]:
    out = []
    for kw in VARIANT_SET.values():
        shape = CHECK_SHAPE
        if "varlen" in kw:
            n = max(kw["varlen"])
            shape = Shape(len(kw["varlen"]), CHECK_SHAPE.H, n, n, CHECK_SHAPE.d)
        out.append(Case(shape, "normal", **kw))
    return out


def _tensors(shape: Shape, device, packed: bool = False, seed: int = 0):
    sizes = [(n, h, shape.d) if packed else (shape.B, h, n, shape.d)
             for h, n in ((shape.H, shape.Nq), (shape.kv_heads, shape.Nk),
                          (shape.kv_heads, shape.Nk))]
    if device == "meta":  # planning: no values (randn on meta would import torch._dynamo)
        return [torch.empty(x, device="meta", dtype=torch.bfloat16) for x in sizes]
    g = torch.Generator(device=device).manual_seed(seed)
    return [torch.randn(x, device=device, dtype=torch.bfloat16, generator=g) for x in sizes]


def replay() -> None:
    """Every variant launch of the run, on meta tensors (inside planning() or warming())."""
    import numpy as np

    with triton_fwd.default_config("fixed"):
        for case in check_cases():
            kw = case.kwargs()
            if case.varlen is not None:
                cu = np.concatenate([[0], np.cumsum(case.varlen)])
                total = Shape(1, case.shape.H, int(cu[-1]), int(cu[-1]), case.shape.d)
                q, k, v = _tensors(total, "meta", packed=True)
                triton_varlen_attention(q, k, v, cu, cu, **kw)
                lse = torch.empty(q.shape[1], q.shape[0], device="meta", dtype=torch.float32)
                triton_varlen_backward(q, k, v, q, lse, q, packed_batch(q, k, cu, cu), **kw)
            else:
                variant_forward(*_tensors(case.shape, "meta"), **kw)
        for name, kw in TIMED.items():
            if name == "causal":  # the plain forward, fixed config: the window's yardstick
                triton_fwd.forward(*_tensors(TIMED_SHAPE, "meta"), causal=True)
            else:
                variant_forward(*_tensors(TIMED_SHAPE, "meta"), **_keywords(kw))
        q, k, v = _tensors(TIMED_SHAPE, "meta")  # the window's backward (fixed configs)
        lse = torch.empty(q.shape[:3], device="meta", dtype=torch.float32)
        triton_bwd.backward(q, k, v, q, lse, q, True, window=WINDOW_BWD)


def _keywords(kw: dict) -> dict:
    out = dict(kw)
    if out.pop("sinks", False):
        out["sinks"] = torch.linspace(-1, 1, TIMED_SHAPE.H).tolist()
    return out


def check_rows(say) -> list[dict]:
    rows = []
    with triton_fwd.default_config("fixed"):
        for case in check_cases():
            say(f"check {case.label()}")
            run = measure_varlen if case.varlen is not None else measure_accuracy
            rows += [r.as_dict() for r in run(case, ("bf16",), ("triton",))]
            if case.varlen is not None:  # the packed backward (its band is judged on CPUs)
                rows += [r.as_dict() for r in measure_varlen_gradients(
                    case, ("bf16",), ("triton",), band_rule=False)]
    return rows


def timing_rows(peak: float, say) -> list[dict]:
    """The rows of the module docstring; every timed call on fresh inputs and every output
    judged against the variant's float64 reference (tools.gpu.guarded.guarded_call)."""
    import os

    from flashbench.measure.speed import SpeedCase
    from tools.gpu.guarded import guarded_call, roofline

    s = TIMED_SHAPE
    seed = int.from_bytes(os.urandom(8), "little") % 2**62  # this run's pools
    rows = []
    for name, kw in TIMED.items():
        kw = _keywords(kw)
        variant = Variant(**kw)
        row = {"case": f"{s.spec()} bf16 {name} fwd", "backend": "triton", "shape": s.spec(),
               "dtype": "bf16", "variant": name, "direction": "fwd"}
        if name == "causal":
            case = SpeedCase(s, "bf16", True)

            def fn(q, k, v):
                return triton_fwd.forward(q, k, v, causal=True, config="fixed")[0]
        else:
            case = SpeedCase(s, "bf16", variant.causal, variant=variant)

            def fn(q, k, v, kw=kw):
                return variant_forward(q, k, v, config="fixed", **kw)[0]
        try:
            row.update(guarded_call(fn, case, roofline(peak), seed))
        except Exception as exc:  # one variant's failure must not stop the others
            row["skipped"] = f"failed: {type(exc).__name__}: {str(exc)[:300]}"
        if "skipped" in row:
            rows.append(row)
            continue
        med = statistics.median(row["samples_s"])
        flops = 4 * s.B * s.H * s.d * variant.visible_pairs(s.Nq, s.Nk)
        row.update(ms=med * 1e3, tflops=flops / med * 1e-12,
                   visible_pairs=variant.visible_pairs(s.Nq, s.Nk))
        row["pct_peak"] = 100 * row["tflops"] / peak
        say(f"  {row['case']}: {row['ms']:.2f} ms, {row['tflops']:.0f} TFLOP/s (visible work)")
        rows.append(row)
    rows.append(_time_backward(peak, say, seed))
    return rows


def _time_backward(peak: float, say, seed: int) -> dict:
    """The backward with a causal (1024, 0) window: 2.5x the forward's visible FLOPs; each
    timed call on a fresh dO, every call's gradients checked (tools.gpu.checks.guarded_backward)."""
    from tools.gpu.checks import guarded_backward

    s = TIMED_SHAPE
    row = {"case": f"{s.spec()} bf16 causal window=(1024,0) bwd", "backend": "triton",
           "shape": s.spec(), "dtype": "bf16", "variant": "causal window=(1024,0)",
           "direction": "bwd", "seed": seed}

    def grad_call(q, k, v):
        o, lse, _ = variant_forward(q, k, v, True, window=WINDOW_BWD, config="fixed")
        return o, lambda do: triton_bwd.backward(q, k, v, o, lse, do, True, window=WINDOW_BWD)

    try:
        samples, row["check"] = guarded_backward(None, s, "bf16", True, seed,
                                                 grad_call=grad_call, window=WINDOW_BWD)
    except Exception as exc:
        row["skipped"] = f"failed: {type(exc).__name__}: {str(exc)[:300]}"
        return row
    if not row["check"]["passed"]:
        row["skipped"] = "timed gradients failed their checks: time not counted"
        return row
    med = statistics.median(samples)
    visible = Variant(causal=True, window=WINDOW_BWD).visible_pairs(s.Nq, s.Nk)
    row.update(ms=med * 1e3, tflops=2.5 * 4 * s.B * s.H * s.d * visible / med * 1e-12,
               samples_s=samples, visible_pairs=visible)
    row["pct_peak"] = 100 * row["tflops"] / peak
    say(f"  {row['case']}: {row['ms']:.2f} ms, {row['tflops']:.0f} TFLOP/s (visible work)")
    return row
