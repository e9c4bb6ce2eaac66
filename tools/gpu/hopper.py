"""The Hopper variants beside cuDNN and FlashAttention, first thing in a GPU window.

    python -m tools.gpu.bench --quick --variants-only [--out gpu-results]   # on a GPU
    python -m tools.gpu.hopper [--compile]   # no GPU: this phase's compilations (sm_90)

For each case of :data:`CASES` (bf16, d = 128, 16 heads, full and causal): today's kernel
and each variant of ``triton_hopper.VARIANTS`` (autotuned), sdpa-cudnn and sdpa-flash; device
time per call (``flashbench.measure.timing.device_samples``: CUDA events, L2 flushed), calls
rotating over :data:`POOL` input sets made before the clock, each set's output checked against
float64 first (``gpu_checks.check_slice``; a failed check: no time). TFLOP/s of unmasked pairs,
% of the run's bf16 matmul peak, speed against sdpa-cudnn. gpu_bench.py calls :func:`replay`
(its plan) and :func:`run`; how and why: docs/gpu.md ("Hopper variants of the forward").
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import time

import torch

from flashbench.inputs import Shape  # noqa: E402
from flashbench.kernels import triton_bwd, triton_fwd, triton_hopper  # noqa: E402
from flashbench.kernels.launch import planning  # noqa: E402

CASES = [(Shape(16384 // n, 16, n, n, 128), causal) for n in (4096, 8192)
         for causal in (False, True)]
BWD_CASES = [(Shape(4, 16, 4096, 4096, 128), causal) for causal in (False, True)]
PEERS = ("sdpa-cudnn", "sdpa-flash")
POOL = 3  # input sets per case; consecutive timed calls never share one


def _inputs(shape: Shape, device, seed: int):
    g = None if device == "meta" else torch.Generator(device=device).manual_seed(seed)
    return tuple(torch.randn(shape.B, h, n, shape.d, device=device, dtype=torch.bfloat16,
                             generator=g)
                 for h, n in ((shape.H, shape.Nq), (shape.kv_heads, shape.Nk),
                              (shape.kv_heads, shape.Nk)))


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


def _time(fn, pool, causal, shape, dtype, peak) -> dict:
    from flashbench.measure.timing import device_samples, tflops
    from tools.gpu.checks import check_slice

    row = {}
    with torch.no_grad():
        for q, k, v in pool:  # each pool entry's output checked, outside the clock
            out = fn(q, k, v, causal)
            check = check_slice(out[0] if isinstance(out, tuple) else out, q, k, v, causal,
                                dtype)
            if not check["passed"]:
                row.update(check=check, skipped="timed output failed its check: time not counted")
                return row
        turn = iter(range(10**9))

        def call():
            q, k, v = pool[next(turn) % len(pool)]
            return fn(q, k, v, causal)

        samples = device_samples(call)
    med = statistics.median(samples)
    q1, _, q3 = statistics.quantiles(samples, n=4)
    row.update(check=check, ms=med * 1e3, ms_q1=q1 * 1e3, ms_q3=q3 * 1e3, samples_s=samples,
               tflops=tflops(shape, causal, med))
    row["pct_peak"] = 100 * row["tflops"] / peak
    return row


def run(peak: float, say) -> list[dict]:
    """One row per (case, backend): median ms (q1, q3), TFLOP/s, % of ``peak``, the check,
    the config the autotuner chose for flashbench's kernels; failures become rows."""
    from flashbench.backends import get_backend

    rows = []
    for shape, causal in CASES:
        label = f"{shape.spec()} bf16 {'causal' if causal else 'full'} fwd"
        pool = [_inputs(shape, "cuda", seed) for seed in range(POOL)]
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
                row.update(_time(fn, pool, causal, shape, "bf16", peak))
                if name.startswith("triton"):
                    row["config"] = _chosen(name, pool[0], causal)
            except Exception as exc:  # one backend's failure must not stop the others
                row["skipped"] = f"failed: {type(exc).__name__}: {str(exc)[:300]}"
            rows.append(row)
            say(f"  {label} {name}: " + (f"{row['ms']:.3f} ms, {row['tflops']:.0f} TFLOP/s"
                                         if "tflops" in row else row["skipped"]))
    return rows


def _time_backward(make, pool, causal, shape, peak, caches) -> dict:
    """One backward row: each pool entry's gradients checked (gradient rule, sub-problem)
    outside the clock, then device time of calls rotating over the pool."""
    from flashbench.measure.timing import device_samples, tflops
    from tools.gpu.checks import check_grads

    calls = [make(q, k, v, causal) for q, k, v in pool]
    for (q, k, v), call, cache in zip(pool, calls, caches, strict=True):
        check = check_grads(call(), q, k, v, call.do, causal, "bf16", cache)
        if not check["passed"]:
            return {"check": check,
                    "skipped": "timed gradients failed their check: time not counted"}
    turn = iter(range(10**9))
    samples = device_samples(lambda: calls[next(turn) % len(calls)]())
    med = statistics.median(samples)
    q1, _, q3 = statistics.quantiles(samples, n=4)
    return {"check": check, "ms": med * 1e3, "ms_q1": q1 * 1e3, "ms_q3": q3 * 1e3,
            "samples_s": samples, "tflops": tflops(shape, causal, med, "bwd"),
            "pct_peak": 100 * tflops(shape, causal, med, "bwd") / peak}


def run_backward(peak: float, say) -> list[dict]:
    """Backward rows of :data:`BWD_CASES`: today's dK/dV kernel and attn_bwd_dkdv_tma (kernel
    time of triton_bwd.backward), sdpa-cudnn and sdpa-flash (torch.autograd.grad)."""
    from flashbench.backends import get_backend
    from flashbench.measure.timing import pass_fn

    rows = []
    for shape, causal in BWD_CASES:
        label = f"{shape.spec()} bf16 {'causal' if causal else 'full'} bwd"
        pool = [_inputs(shape, "cuda", seed) for seed in range(POOL)]
        caches = [{} for _ in pool]  # one float64 reference per input set, every backend
        makers = list(BACKWARDS)
        for name in PEERS:
            b = get_backend(name)
            makers.append((name, lambda q, k, v, causal, b=b, name=name: pass_fn(
                b.timed_fn, *b.prepare(q, k, v), causal, "bwd", name)))
        for name, make in makers:
            row = {"case": label, "backend": name, "shape": shape.spec(), "causal": causal}
            try:
                row.update(_time_backward(make, pool, causal, shape, peak, caches))
            except Exception as exc:  # one backend's failure must not stop the others
                row["skipped"] = f"failed: {type(exc).__name__}: {str(exc)[:300]}"
            rows.append(row)
            say(f"  {label} {name}: " + (f"{row['ms']:.3f} ms, {row['tflops']:.0f} TFLOP/s"
                                         if "tflops" in row else row["skipped"]))
    return rows


def _chosen(name: str, qkv, causal) -> str | None:
    q, k, v = qkv
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
