"""GPU check of the Triton kernels: correctness first, then checked timings against torch's.

    python -m tools.gpu.bench --quick [--out gpu-results]   # ~2-3 min on a cold H200
    python -m tools.gpu.bench                               # the full grid
    python -m tools.gpu.bench --quick --plan [--compile]    # no GPU needed

Precompiles the plan (``--jobs`` processes), checks triton, triton-fp8 and the pinned SDPA
peers against the float64 reference by the baseline rule (a triton failure stops before
timing), then times each backend, counting a time only when its timed output passed the
same check on a sub-problem; decode (tools/gpu/decode.py) and the variants
(tools/gpu/variants.py) follow. Writes <out>/<date>-<gpu>.md and .json
(tools/gpu/report.py). ``--plan`` prints every compilation the run will trigger, last line
``compiles: N``. What each phase measures and how: docs/gpu.md, "The GPU script".
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass

import torch

from flashbench.inputs import Shape  # noqa: E402
from flashbench.kernels import attention, triton_fp8  # noqa: E402
from flashbench.kernels import triton_forward as triton_fwd  # noqa: E402
from flashbench.kernels.launch import planning  # noqa: E402
from tools.gpu import decode as gpu_decode
from tools.gpu import headdims as gpu_headdims
from tools.gpu import hopper as gpu_hopper
from tools.gpu import variants as gpu_variants
from tools.gpu.checks import (  # noqa: F401
    CHECK_DTYPES,
    CHECK_PEERS,
    FP8_MODEL_AGREEMENT,
    SLICE_ROWS,
    check_cases,
    check_grads,
    check_slice,
    fp8_check_cases,
    fp8_check_rows,
    guarded_backward,
    guarded_forward,
    run_checks,
)
from tools.gpu.guarded import device_maker, guarded_call, roofline  # noqa: F401
from tools.gpu.report import TARGETS, fp8_speedups, targets, write_results  # noqa: F401


@dataclass(frozen=True)
class Timed:
    shape: Shape
    dtype: str
    causal: bool
    direction: str = "fwd"

    def label(self) -> str:
        return (f"{self.shape.spec()} {self.dtype} {'causal' if self.causal else 'full'}"
                f" {self.direction}")


def timed_cases(quick: bool) -> list[Timed]:
    """FlashAttention's benchmark sizes: B * N = 16k tokens, H * d = 2048; GQA H=32/8."""
    def shapes(d, ns):
        return [Shape(16384 // n, 2048 // d, n, n, d) for n in ns]

    if quick:
        grid = [(s, "bf16") for s in shapes(128, (4096, 8192))]
        grid += [(Shape(2, 32, 8192, 8192, 128, Hkv=8), "bf16")]
        cases = [Timed(s, dt, c) for s, dt in grid for c in (False, True)]
        cases += [Timed(s, "fp8", c) for s in shapes(128, (4096, 8192)) for c in (False, True)]
        return cases + [Timed(grid[0][0], "bf16", c, "bwd") for c in (False, True)]
    else:
        ns = (1024, 2048, 4096, 8192, 16384)
        grid = [(s, dt) for dt in ("bf16", "fp16") for d in (64, 128) for s in shapes(d, ns)]
        grid += [(Shape(16384 // n, 32, n, n, 128, Hkv=8), "bf16") for n in (4096, 16384)]
        directions = ("fwd", "bwd", "fwd+bwd")
    fp8 = [Timed(s, "fp8", c) for d in (64, 128) for s in shapes(d, ns) for c in (False, True)]
    return [Timed(s, dt, c, dr) for s, dt in grid for c in (False, True)
            for dr in directions] + fp8


def backends_for(quick: bool, dtype: str = "bf16") -> tuple[str, ...]:
    if dtype == "fp8":
        return ("triton-fp8",)  # torch's SDPA takes no fp8
    base = ("triton", "sdpa-flash", "sdpa-cudnn")
    return base if quick else base + ("sdpa-efficient", "flex")


def fp8_inputs(shape: Shape, device, dtype=torch.bfloat16, seed: int = 0):
    """Random (q, k, v) in ``dtype`` and their per-tensor e4m3 quantisation with V
    key-major: ``((q, k, v), (q8, k8, v8, qd, kd, vd))``."""
    s = shape
    sizes = ((s.H, s.Nq), (s.kv_heads, s.Nk), (s.kv_heads, s.Nk))
    if device == "meta":  # planning: no values
        hi = tuple(torch.empty(s.B, h, n, s.d, device="meta", dtype=dtype) for h, n in sizes)
    else:
        g = torch.Generator(device=device).manual_seed(seed)
        hi = tuple(torch.randn(s.B, h, n, s.d, device=device, generator=g, dtype=dtype)
                   for h, n in sizes)
    (q8, qd), (k8, kd), (v8, vd) = (triton_fp8.quantize(t) for t in hi)
    return hi, (q8, k8, triton_fp8.key_major(v8), qd, kd, vd)


# ------------------------------------------------------------------ the plan

def _replay(quick: bool, variants_only: bool = False) -> None:
    """Every triton launch of the run, on meta tensors (inside planning() or warming())."""
    gpu_hopper.replay()  # the Hopper variants' phase, timed first (tools/gpu/hopper.py)
    if variants_only:
        return
    from flashbench.kernels.validate import torch_dtype
    from flashbench.measure.timing import NotDifferentiable, pass_fn

    def meta(shape, dtype):
        t = torch_dtype(dtype)
        return (torch.empty(shape.B, shape.H, shape.Nq, shape.d, device="meta", dtype=t),
                torch.empty(shape.B, shape.kv_heads, shape.Nk, shape.d, device="meta", dtype=t),
                torch.empty(shape.B, shape.kv_heads, shape.Nk, shape.head_dim_v, device="meta",
                            dtype=t))

    with triton_fwd.default_config("fixed"):
        for case in check_cases(quick):
            for dtype in CHECK_DTYPES:
                triton_fwd.forward(*meta(case.shape, dtype), causal=case.causal)
        for case in fp8_check_cases(quick):  # the triton-fp8 backend's call
            triton_fp8.triton_attention_fp8(*meta(case.shape, "fp32"), causal=case.causal)
    for t in timed_cases(quick):
        if t.dtype == "fp8":
            triton_fp8.forward_fp8(*fp8_inputs(t.shape, "meta")[1], causal=t.causal)
            continue
        q, k, v = meta(t.shape, t.dtype)
        try:
            pass_fn(attention.triton_attention, q, k, v, t.causal, t.direction,
                    name="triton")()
        except NotDifferentiable:
            pass  # the run skips these too
    gpu_decode.replay(quick)  # the decode kernels' checks and timings (tools/gpu/decode.py)
    gpu_variants.replay()  # window, softcap, sinks, varlen: fixed config, bf16
    gpu_headdims.replay()  # d = 80, 96, 192/128 beside 128: fixed config, bf16


def record_plan(quick: bool, variants_only: bool = False):
    """The run's compilations, recorded by the launch code itself."""
    with planning() as plan:
        _replay(quick, variants_only)
    return plan


def _precompile_share(quick: bool, jobs: int, me: int, variants_only: bool = False) -> str | None:
    from flashbench.kernels.launch import warming

    try:
        with warming(lambda i: i % jobs == me):
            _replay(quick, variants_only)
    except Exception as exc:  # the run proper compiles whatever is missing
        return f"{type(exc).__name__}: {exc}"[:300]
    return None


def precompile(quick: bool, jobs: int, variants_only: bool = False) -> list[str]:
    """Compile the plan in ``jobs`` processes into Triton's disk cache (errors returned)."""
    import multiprocessing as mp

    with mp.get_context("spawn").Pool(jobs) as pool:
        errors = pool.starmap(_precompile_share,
                              [(quick, jobs, i, variants_only) for i in range(jobs)])
    return [e for e in errors if e]


# ------------------------------------------------------------------ the run

def run_timings(quick: bool, peak: float, say, fp8_ok: bool = True,
                failed_dtypes: frozenset = frozenset()) -> tuple[list[dict], dict]:
    """Time every case of :func:`timed_cases`; a dtype whose Triton checks failed
    (``failed_dtypes``; triton-fp8's: ``fp8_ok`` False) is not timed: its row says why."""
    from flashbench.backends import get_backend
    from flashbench.kernels.validate import torch_dtype
    from flashbench.measure.speed import Roofline
    from flashbench.measure.timing import NotDifferentiable, copy_bandwidth_gbs, tflops

    rows, chosen = [], {}
    seed = int.from_bytes(os.urandom(8), "little") % 2**62  # this run's pools (recorded per row)
    roof = Roofline({d: peak for d in ("fp16", "bf16")}, copy_bandwidth_gbs(),
                    "bf16 matmul peak (8192^3, median), 2 GiB device copy")
    for t in timed_cases(quick):
        if t.dtype == "fp8":
            if not fp8_ok:
                rows.append({"case": t.label(), "backend": "triton-fp8", "shape": t.shape.spec(),
                             "dtype": "fp8", "causal": t.causal, "direction": t.direction,
                             "skipped": "triton-fp8 failed its correctness checks"})
                continue
            rows.append(time_fp8(t, peak, chosen))
            r = rows[-1]
            say(f"  {t.label()}: triton-fp8 " + (f"{r['tflops']:.0f} TFLOP/s" if "tflops" in r
                                                else r.get("skipped", "-")))
            continue
        if t.dtype in failed_dtypes:
            rows.append({"case": t.label(), "backend": "triton", "shape": t.shape.spec(),
                         "dtype": t.dtype, "causal": t.causal, "direction": t.direction,
                         "skipped": f"triton failed its {t.dtype} correctness checks"})
            continue
        s, dt = t.shape, torch_dtype(t.dtype)
        if t.direction == "fwd":
            g = torch.Generator(device="cuda").manual_seed(0)
            q, k, v = (torch.randn(s.B, h, n, s.d, device="cuda", dtype=dt, generator=g)
                       for h, n in ((s.H, s.Nq), (s.kv_heads, s.Nk), (s.kv_heads, s.Nk)))
            _, _, used = triton_fwd.forward(q, k, v, causal=t.causal)  # autotunes this key
            chosen[t.label()] = used.label() if used is not None else None
        for name in backends_for(quick):
            row = {"case": t.label(), "backend": name, "shape": s.spec(), "dtype": t.dtype,
                   "causal": t.causal, "direction": t.direction, "seed": seed}
            rows.append(row)
            try:
                backend = get_backend(name)
                reason = backend.unavailable_for(s, t.dtype)
                if reason is not None:
                    row["skipped"] = reason
                    continue
                if t.direction == "fwd":  # fresh inputs, every output judged (issue 35)
                    row.update(guarded_forward(backend, s, t.dtype, t.causal, roof, seed))
                    if "skipped" in row:
                        continue
                    samples = row.pop("samples_s")
                else:
                    samples, row["check"] = guarded_backward(backend, s, t.dtype, t.causal, seed)
                    if not row["check"]["passed"]:
                        row["skipped"] = "timed gradients failed their checks: time not counted"
                        continue
            except NotDifferentiable as exc:
                row["skipped"] = str(exc)
                continue
            except Exception as exc:  # one backend's failure must not stop the others
                row["skipped"] = f"failed: {type(exc).__name__}: {str(exc)[:300]}"
                continue
            med = statistics.median(samples)
            q1, _, q3 = statistics.quantiles(samples, n=4)
            row.update(ms=med * 1e3, ms_q1=q1 * 1e3, ms_q3=q3 * 1e3,
                       tflops=tflops(s, t.causal, med, t.direction), samples_s=samples)
            row["pct_peak"] = 100 * row["tflops"] / peak
        got = {r["backend"]: r.get("tflops") for r in rows if r["case"] == t.label()}
        say(f"  {t.label()}: " + ", ".join(f"{b} {v:.0f}" if v else f"{b} -"
                                           for b, v in got.items()) + " TFLOP/s")
    return rows, chosen


def time_fp8(t: Timed, peak: float, chosen: dict) -> dict:
    """One fp8 row: the FP8 kernel alone on per-tensor quantised e4m3 inputs (V key-major),
    timed by :func:`guarded_call`: each call on a pool slot quantised from fresh bf16 draws,
    every output judged outside the clock against the float64 reference of the bf16 inputs it
    was quantised from (fp8 baseline rule, or inside the fp8 band)."""
    from flashbench.measure.speed import SpeedCase
    from flashbench.measure.timing import tflops

    s = t.shape
    row = {"case": t.label(), "backend": "triton-fp8", "shape": s.spec(), "dtype": "fp8",
           "causal": t.causal, "direction": t.direction, "quant": "tensor"}
    bf16 = device_maker(s, "bf16", "cuda")

    def make(seed):
        (q8, qd), (k8, kd), (v8, vd) = (triton_fp8.quantize(x) for x in bf16(seed))
        return q8, k8, triton_fp8.key_major(v8), qd, kd, vd

    try:
        o, _, used = triton_fp8.forward_fp8(*make(0), causal=t.causal)  # autotunes this key
        chosen[t.label()] = used.label() if used is not None else None
        row.update(guarded_call(lambda *a: triton_fp8.forward_fp8(*a, causal=t.causal)[0],
                                SpeedCase(s, "fp8", t.causal), roofline(peak),
                                int.from_bytes(os.urandom(8), "little") % 2**62, make=make,
                                judge_make=bf16, out_dtype="bf16"))
        if "skipped" in row:
            return row
        samples = row.pop("samples_s")
    except Exception as exc:  # report it, keep the other rows
        row["skipped"] = f"failed: {type(exc).__name__}: {str(exc)[:300]}"
        return row
    med = statistics.median(samples)
    q1, _, q3 = statistics.quantiles(samples, n=4)
    row.update(ms=med * 1e3, ms_q1=q1 * 1e3, ms_q3=q3 * 1e3,
               tflops=tflops(s, t.causal, med, t.direction), samples_s=samples)
    row["pct_peak"] = 100 * row["tflops"] / peak  # of the bf16 matmul peak (fp8's is ~2x)
    return row


def _print_summary(done) -> None:
    failed = [r for r in done if r.error]
    print(f"compiled {len(done) - len(failed)} of {len(done)} for sm_90 in "
          f"{sum(r.seconds for r in done):.0f} s on this CPU; {len(failed)} failed")


def _variants_only(out: str, state: dict, start: float, say) -> int:
    """--variants-only: the Hopper variants' rows and files (tools/gpu/hopper.py)."""
    from flashbench.measure.timing import matmul_peak_tflops

    peak = matmul_peak_tflops("bf16")
    say(f"bf16 matmul peak: {peak:.0f} TFLOP/s (8192^3 torch.matmul, median device time)")
    rows = gpu_hopper.run(peak, say) + gpu_hopper.run_backward(peak, say)
    stem = gpu_hopper.write(out, state, peak, rows, time.time() - start)
    say(gpu_hopper.table(rows) + f"\nwrote {stem}.md and .json")
    return 1 if any(r.get("check", {}).get("passed") is False for r in rows) else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="the window-sized run (see docstring)")
    p.add_argument("--plan", action="store_true",
                   help="print the kernel compilations the run triggers; no GPU needed")
    p.add_argument("--compile", action="store_true",
                   help="with --plan: compile each for sm_90 here (Triton's ptxas)")
    p.add_argument("--out", default="gpu-results", help="folder for the .md and .json")
    p.add_argument("--jobs", type=int, default=8,
                   help="processes that precompile the plan first (0: compile as the run goes)")
    p.add_argument("--variants-only", action="store_true",
                   help="only the Hopper variants beside cuDNN and sdpa-flash (gpu_hopper.py)")
    args = p.parse_args(argv)
    if args.compile and not args.plan:
        p.error("--compile goes with --plan")
    if args.plan:
        gpu_decode.show_plan(record_plan(args.quick, args.variants_only), args.compile,
                             _print_summary)
        return 0
    if not torch.cuda.is_available():
        print("gpu_bench: no CUDA GPU visible to torch; this script only runs on a GPU "
              "(--plan works anywhere)", file=sys.stderr)
        return 2
    from flashbench.measure.timing import gpu_state, matmul_peak_tflops

    def say(msg):
        print(msg, flush=True)

    start = time.time()
    planned = len(record_plan(args.quick, args.variants_only))
    before = gpu_state()
    say(f"{before['gpu']}: torch {before['torch']}, Triton {before['triton']}, CUDA "
        f"{before['cuda']}, driver {before.get('driver')}; {planned} compilations planned")
    if args.jobs > 1:
        t0 = time.time()
        errors = precompile(args.quick, args.jobs, args.variants_only)
        say(f"precompiled the plan in {time.time() - t0:.0f} s with {args.jobs} processes"
            + (f"; errors: {errors}" if errors else ""))
    if args.variants_only:
        return _variants_only(args.out, before, start, say)
    checks = run_checks(args.quick, say)
    bad = [r for r in checks if r.get("kernel") in ("triton", "triton-fp8")
           and r.get("passed") is False]
    peak = matmul_peak_tflops("bf16")
    say(f"bf16 matmul peak: {peak:.0f} TFLOP/s (8192^3 torch.matmul, median device time)")
    hopper = gpu_hopper.run(peak, say) + gpu_hopper.run_backward(peak, say)  # variants first
    # a failed check stops the timings of its own dtype only (fp32 is checked, not timed)
    speed, chosen = run_timings(
        args.quick, peak, say, fp8_ok=not any(r.get("kernel") == "triton-fp8" for r in bad),
        failed_dtypes=frozenset(r["dtype"] for r in bad if r.get("kernel") == "triton"))
    record = {"date": time.strftime("%Y-%m-%d"), "quick": args.quick, "gpu_before": before,
              "gpu_after": gpu_state(), "matmul_peak_tflops": peak, "checks": checks,
              "speed": speed, "autotune_configs": chosen, "targets": targets(speed),
              "fp8_speedups": fp8_speedups(speed),
              "variant_speed": gpu_variants.timing_rows(peak, say), "hopper_speed": hopper,
              "headdim_speed": gpu_headdims.timing_rows(peak, say),
              "compiles_planned": planned,
              "compiles_observed": triton_fwd.FORWARD.compiled_count(),
              "wall_s": time.time() - start}
    stem = write_results(args.out, record)
    say(stem.with_suffix(".md").read_text().split("## Speed")[-1])
    say(f"wrote {stem}.md and .json; {len(bad)} triton check(s) failed")
    decode_bad = gpu_decode.run(args.quick, args.out, say)  # writes its own -decode.md
    return 1 if bad or decode_bad else 0


if __name__ == "__main__":
    sys.exit(main())
