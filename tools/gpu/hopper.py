"""The Hopper variants beside cuDNN and FlashAttention, first thing in a GPU window.

    python -m tools.gpu.bench --quick --variants-only [--out gpu-results]   # on a GPU
    python -m tools.gpu.hopper [--compile]   # no GPU: this phase's compilations (sm_90)

For each case of :data:`CASES` (bf16, d = 128, 16 heads, full and causal): today's kernel
and each variant of ``triton_hopper.VARIANTS`` (autotuned), sdpa-cudnn and sdpa-flash; device
time per call by the guarded timer (``tools.gpu.guarded.guarded_call`` / ``guarded_backward``: every
call on fresh pool inputs, the whole device synchronised, L2 flushed, every output judged
against float64 outside the clock; any failed check: no time). TFLOP/s of unmasked pairs,
% of the run's bf16 matmul peak, speed against sdpa-cudnn. gpu_bench.py calls :func:`replay`
(its plan) and :func:`run`; how and why: docs/gpu.md ("Hopper variants of the forward").
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys
import time

import torch

from flashbench.inputs import Shape  # noqa: E402
from flashbench.kernels import triton_backward as triton_bwd  # noqa: E402
from flashbench.kernels import triton_forward as triton_fwd  # noqa: E402
from flashbench.kernels import triton_hopper  # noqa: E402
from flashbench.kernels.launch import planning  # noqa: E402

CASES = [(Shape(16384 // n, 16, n, n, 128), causal) for n in (4096, 8192)
         for causal in (False, True)]
BWD_CASES = [(Shape(4, 16, 4096, 4096, 128), causal) for causal in (False, True)]
PEERS = ("sdpa-cudnn", "sdpa-flash")


def _inputs(shape: Shape, device, seed: int):
    s = shape
    sizes = [(s.B, h, n, s.d) for h, n in ((s.H, s.Nq), (s.kv_heads, s.Nk), (s.kv_heads, s.Nk))]
    if device == "meta":  # planning: no values (randn on meta would import torch._dynamo)
        return tuple(torch.empty(s, device="meta", dtype=torch.bfloat16) for s in sizes)
    g = torch.Generator(device=device).manual_seed(seed)
    return tuple(torch.randn(s, device=device, dtype=torch.bfloat16, generator=g) for s in sizes)


def _calls():
    """(backend label, fn(q, k, v, causal) -> o) for today's kernel and every variant."""
    calls = [("triton", lambda q, k, v, causal: triton_fwd.forward(q, k, v, causal=causal)[0])]
    for name in triton_hopper.VARIANTS:
        calls.append((f"triton-{name}", lambda q, k, v, causal, name=name:
                      triton_hopper.forward(q, k, v, causal=causal, kernel=name)[0]))
    return calls


def _backward(kernel):
    """make(q, k, v, causal) -> call() giving (dq, dk, dv) of triton_bwd.backward with the dK/dV
    ``kernel`` (None: today's), o and lse from today's forward, dO seeded as pass_fn's."""
    def make(q, k, v, causal):
        o, lse, _ = triton_fwd.forward(q, k, v, causal=causal)
        if o.device.type == "meta":
            do = torch.empty_like(o)
        else:  # the dO every backend of this case gets (flashbench.measure.timing.pass_fn)
            g = torch.Generator(device=o.device).manual_seed(0)
            do = torch.randn(o.shape, generator=g, device=o.device).to(o.dtype)

        def call():
            return triton_bwd.backward(q, k, v, o, lse, do, causal=causal, kernel=kernel)
        call.do = do
        return call
    return make


BACKWARDS = (("triton", _backward(None)), ("triton-dkdv-tma", _backward("tma")))


def replay() -> None:
    """Every Triton launch of :func:`run`, on meta tensors (inside planning() or warming())."""
    for shape, causal in CASES:
        q, k, v = _inputs(shape, "meta", 0)
        for _, fn in _calls():
            fn(q, k, v, causal)
    for shape, causal in BWD_CASES:
        for _, make in BACKWARDS:
            make(*_inputs(shape, "meta", 0), causal)()


def _time(fn, causal, shape, dtype, peak, seed) -> dict:
    """One forward row: every timed call on fresh inputs, every output judged outside the
    clock (tools.gpu.guarded.guarded_call); TFLOP/s of unmasked pairs."""
    from flashbench.measure.speed import SpeedCase
    from flashbench.measure.timing import tflops
    from tools.gpu.guarded import guarded_call, roofline

    row = guarded_call(lambda q, k, v: fn(q, k, v, causal), SpeedCase(shape, dtype, causal),
                       roofline(peak), seed)
    if "skipped" in row:
        return row
    samples = row["samples_s"]
    med = statistics.median(samples)
    q1, _, q3 = statistics.quantiles(samples, n=4)
    row.update(ms=med * 1e3, ms_q1=q1 * 1e3, ms_q3=q3 * 1e3, tflops=tflops(shape, causal, med))
    row["pct_peak"] = 100 * row["tflops"] / peak
    return row


def run(peak: float, say) -> list[dict]:
    """One row per (case, backend): median ms (q1, q3), TFLOP/s, % of ``peak``, the check,
    the config the autotuner chose for flashbench's kernels; failures become rows."""
    from flashbench.backends import get_backend

    seed = int.from_bytes(os.urandom(8), "little") % 2**62  # this run's pools
    rows = []
    for shape, causal in CASES:
        label = f"{shape.spec()} bf16 {'causal' if causal else 'full'} fwd"
        backends = [(name, fn, None) for name, fn in _calls()]
        backends += [(name, None, get_backend(name)) for name in PEERS]
        for name, fn, backend in backends:
            row = {"case": label, "backend": name, "shape": shape.spec(), "causal": causal}
            try:
                if backend is not None:
                    reason = backend.unavailable_for(shape, "bf16")
                    if reason is not None:
                        rows.append({**row, "skipped": reason})
                        continue
                    fn = (lambda q, k, v, causal, b=backend:  # noqa: E731
                          b.timed_fn(*b.prepare(q, k, v), causal=causal))
                row.update(_time(fn, causal, shape, "bf16", peak, seed))
                if name.startswith("triton"):
                    row["config"] = _chosen(name, shape, causal)
            except Exception as exc:  # one backend's failure must not stop the others
                row["skipped"] = f"failed: {type(exc).__name__}: {str(exc)[:300]}"
            rows.append(row)
            say(f"  {label} {name}: " + (f"{row['ms']:.3f} ms, {row['tflops']:.0f} TFLOP/s"
                                         if "tflops" in row else row["skipped"]))
    return rows


def _time_backward(backend, grad_call, causal, shape, peak, seed) -> dict:
    """One backward row: each timed call on a fresh dO, every call's gradients checked
    outside the clock (tools.gpu.checks.guarded_backward: structure, checksums, each dO's first
    gradients by the gradient rule on a sub-problem)."""
    from flashbench.measure.timing import tflops
    from tools.gpu.checks import guarded_backward

    samples, check = guarded_backward(backend, shape, "bf16", causal, seed, grad_call=grad_call)
    if not check["passed"]:
        return {"check": check, "seed": seed,
                "skipped": "timed gradients failed their checks: time not counted"}
    med = statistics.median(samples)
    q1, _, q3 = statistics.quantiles(samples, n=4)
    return {"check": check, "seed": seed, "ms": med * 1e3, "ms_q1": q1 * 1e3,
            "ms_q3": q3 * 1e3, "samples_s": samples, "tflops": tflops(shape, causal, med, "bwd"),
            "pct_peak": 100 * tflops(shape, causal, med, "bwd") / peak}


def _grad_call(kernel, causal):
    """grad_call(q, k, v) -> (o, call(dO) -> (dq, dk, dv)) of triton_bwd.backward with the
    dK/dV ``kernel`` (None: today's), o and lse from today's forward."""
    def grad_call(q, k, v):
        o, lse, _ = triton_fwd.forward(q, k, v, causal=causal)
        return o, lambda do: triton_bwd.backward(q, k, v, o, lse, do, causal=causal,
                                                 kernel=kernel)
    return grad_call


def run_backward(peak: float, say) -> list[dict]:
    """Backward rows of :data:`BWD_CASES`: today's dK/dV kernel and attn_bwd_dkdv_tma (kernel
    time of triton_bwd.backward), sdpa-cudnn and sdpa-flash (torch.autograd.grad)."""
    from flashbench.backends import get_backend

    seed = int.from_bytes(os.urandom(8), "little") % 2**62  # this run's pools
    rows = []
    for shape, causal in BWD_CASES:
        label = f"{shape.spec()} bf16 {'causal' if causal else 'full'} bwd"
        makers = [(name, None, _grad_call(kernel, causal))
                  for name, kernel in (("triton", None), ("triton-dkdv-tma", "tma"))]
        makers += [(name, get_backend(name), None) for name in PEERS]
        for name, backend, grad_call in makers:
            row = {"case": label, "backend": name, "shape": shape.spec(), "causal": causal}
            try:
                row.update(_time_backward(backend, grad_call, causal, shape, peak, seed))
            except Exception as exc:  # one backend's failure must not stop the others
                row["skipped"] = f"failed: {type(exc).__name__}: {str(exc)[:300]}"
            rows.append(row)
            say(f"  {label} {name}: " + (f"{row['ms']:.3f} ms, {row['tflops']:.0f} TFLOP/s"
                                         if "tflops" in row else row["skipped"]))
    return rows


def _chosen(name: str, shape: Shape, causal) -> str | None:
    q, k, v = _inputs(shape, "cuda", 0)
    if name == "triton":
        used = triton_fwd.forward(q, k, v, causal=causal)[2]
    else:
        used = triton_hopper.forward(q, k, v, causal=causal, kernel=name.split("-", 1)[1])[2]
    return None if used is None else used.label()


def table(rows: list[dict]) -> str:
    """Markdown: one line per (case, backend), speed against sdpa-cudnn in the same run."""
    out = ["| case | backend | median ms (q1-q3) | TFLOP/s | % bf16 peak | vs sdpa-cudnn | "
           "config |", "|---|---|---|---|---|---|---|"]
    cudnn = {r["case"]: r.get("ms") for r in rows if r["backend"] == "sdpa-cudnn"}
    for r in rows:
        if "ms" not in r:
            out.append(f"| {r['case']} | {r['backend']} | {r.get('skipped')} | | | | |")
            continue
        base = cudnn.get(r["case"])
        ratio = f"{base / r['ms']:.2f}x" if base else "-"
        out.append(f"| {r['case']} | {r['backend']} | {r['ms']:.3f} ({r['ms_q1']:.3f}-"
                   f"{r['ms_q3']:.3f}) | {r['tflops']:.0f} | {r['pct_peak']:.0f} | {ratio} | "
                   f"{r.get('config') or ''} |")
    return "\n".join(out)


def write(out: str, state: dict, peak: float, rows: list[dict], wall_s: float) -> pathlib.Path:
    """<out>/<date>-<gpu>-hopper.md and .json; returns the stem."""
    folder = pathlib.Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    gpu = str(state.get("gpu")).replace(" ", "-")
    stem = folder / f"{time.strftime('%Y-%m-%d')}-{gpu}-hopper"
    record = {"gpu": state, "matmul_peak_tflops": peak, "rows": rows, "wall_s": wall_s}
    stem.with_suffix(".json").write_text(json.dumps(record, indent=1, default=str))
    stem.with_suffix(".md").write_text(f"# Hopper variants, {state.get('gpu')}\n\n"
                                       f"{table(rows)}\n")
    return stem


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="The Hopper variants' compilations (the GPU run: "
                                "python -m tools.gpu.bench --quick --variants-only)")
    p.add_argument("--compile", action="store_true",
                   help="compile each for sm_90 here (Triton's ptxas)")
    args = p.parse_args(argv)
    from tools.gpu import decode as gpu_decode

    with planning() as plan:
        replay()
    gpu_decode.show_plan(plan, args.compile, _summary)
    return 0


def _summary(done) -> None:
    failed = [r for r in done if r.error]
    print(f"compiled {len(done) - len(failed)} of {len(done)} for sm_90 in "
          f"{sum(r.seconds for r in done):.0f} s on this CPU; {len(failed)} failed")


if __name__ == "__main__":
    sys.exit(main())
