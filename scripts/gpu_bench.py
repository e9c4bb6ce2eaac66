"""GPU check of the Triton kernel: correctness first, then checked timings against torch's.

    python scripts/gpu_bench.py --quick [--out gpu-results]   # ~2-3 min on a cold H200
    python scripts/gpu_bench.py                               # the full grid
    python scripts/gpu_bench.py --quick --plan [--compile]    # no GPU needed

1. Correctness (flashbench.measure.measure_accuracy, one fixed kernel config so the
   check does not depend on the autotuner): triton and the pinned SDPA peers against
   the float64 reference in fp32 (IEEE dots), fp16 and bf16, causal and not, Nq != Nk,
   grouped-query; the baseline rule against the same-dtype standard model. The FP8
   forward (triton-fp8, fixed config, block quantisation on its tiles, incoherent
   processing) in fp8 on the cases with d >= 32, beside the fp8 flash model with the
   same blocks: baseline rule against the fp8 standard model, and its O RMSE within
   10% of the model's. A failure of triton stops the script before timing, one of
   triton-fp8 skips the fp8 timings (exit status 1 either way).
2. Speed: each backend (triton autotuned over pruned Hopper configs, sdpa-flash,
   sdpa-cudnn; the full run adds sdpa-efficient and flex) on each shape: the timed
   output is first checked against the float64 reference (last 256 query rows of
   batch 0, heads 0 and H-1, all keys: the same bottom-right causal sub-problem) with
   the baseline rule (bwd: the gradients of batch 0, kv head 0 and its query heads by
   the 3x gradient rule); a time counts only if that check passed. fp8 rows time the
   FP8 kernel alone (flashbench.kernels.triton_fp8.forward_fp8, autotuned) on e4m3
   inputs quantised per tensor beforehand (as FlashAttention-3 is called), V key-major;
   their output is checked the same way against the float64 reference of the
   unquantised inputs, by the baseline rule against the fp8 standard model. Times: 20 runs after 3
   warm-ups, L2 flushed, CUDA events (flashbench.measure.timing.device_samples); the median
   is reported with the quartiles. TFLOP/s = Shape.flops / median (per query head
   under GQA; about half for causal); "% peak" divides by the same run's measured
   8192^3 bf16 matmul.
3. Decode (scripts/gpu_decode.py, run after the forward, its own -decode.md/.json): the
   split-KV kernel's checks, then GB/s and % of the measured copy bandwidth.
4. Records: the chosen autotune config per shape, nvidia-smi's SM clock, power and
   temperature before and after, torch / Triton / CUDA / driver versions, the
   compilations planned and observed. Writes <out>/<date>-<gpu>.md and .json.

Before the run, ``--jobs`` processes (default 8) compile the plan into Triton's disk
cache (flashbench.kernels.launch.warming: the same launch code, Triton's own
``warmup``), so a cold machine compiles in parallel.

``--plan`` prints, without a GPU, every compilation of flashbench's kernels the run
will trigger (configs x signatures, recorded by the launch code itself on meta
tensors), last line ``compiles: N``; ``--compile`` also compiles each for sm_90 here
(Triton's bundled ptxas) and reports time, shared memory, registers and local memory.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import time
from dataclasses import dataclass

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # run from any folder
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # gpu_decode, gpu_variants

import gpu_decode  # noqa: E402
import gpu_variants  # noqa: E402

from flashbench.inputs import Shape  # noqa: E402
from flashbench.kernels import triton_fp8, triton_fwd  # noqa: E402
from flashbench.kernels.launch import planning  # noqa: E402
from flashbench.measure.forward import Case  # noqa: E402

CHECK_DTYPES = ("fp32", "fp16", "bf16")
CHECK_PEERS = ("sdpa-flash", "sdpa-cudnn")
FP8_MODEL_AGREEMENT = 0.10  # |triton-fp8 O RMSE / fp8 flash model's - 1| at most this
SLICE_ROWS = 256  # query rows of the timed-output check
TARGETS = {"noncausal_tflops": 450.0, "causal_tflops": 400.0, "vs_sdpa_flash": 1.1,
           "bwd_vs_sdpa_flash": 1.0}


@dataclass(frozen=True)
class Timed:
    shape: Shape
    dtype: str
    causal: bool
    direction: str = "fwd"

    def label(self) -> str:
        return (f"{self.shape.spec()} {self.dtype} {'causal' if self.causal else 'full'}"
                f" {self.direction}")


def check_cases(quick: bool) -> list[Case]:
    cases = [Case(Shape(1, 2, 1024, 1024, 64)), Case(Shape(1, 2, 1024, 1024, 64), causal=True),
             Case(Shape(2, 2, 777, 1500, 128), causal=True), Case(Shape(1, 4, 1500, 600, 128)),
             Case(Shape(1, 8, 1000, 1000, 128, Hkv=2), causal=True)]
    if not quick:
        cases += [Case(Shape(1, 2, 129, 129, 16), causal=True), Case(Shape(1, 2, 333, 400, 32)),
                  Case(Shape(1, 2, 1024, 1024, 256), causal=True),
                  Case(Shape(1, 8, 2048, 2048, 64), "outliers")]
    return cases


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


def fp8_check_cases(quick: bool) -> list[Case]:
    return [c for c in check_cases(quick) if c.shape.d in triton_fp8.HEAD_DIMS]


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

def _replay(quick: bool) -> None:
    """Every triton launch of the run, on meta tensors (inside planning() or warming())."""
    from flashbench.kernels.checks import torch_dtype
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
            pass_fn(triton_fwd.triton_attention, q, k, v, t.causal, t.direction,
                    name="triton")()
        except NotDifferentiable:
            pass  # the run skips these too
    gpu_decode.replay(quick)  # the decode kernels' checks and timings (scripts/gpu_decode.py)
    gpu_variants.replay()  # window, softcap, sinks, varlen: fixed config, bf16


def record_plan(quick: bool):
    """The run's compilations, recorded by the launch code itself."""
    with planning() as plan:
        _replay(quick)
    return plan


def _precompile_share(quick: bool, jobs: int, me: int) -> str | None:
    from flashbench.kernels.launch import warming

    try:
        with warming(lambda i: i % jobs == me):
            _replay(quick)
    except Exception as exc:  # the run proper compiles whatever is missing
        return f"{type(exc).__name__}: {exc}"[:300]
    return None


def precompile(quick: bool, jobs: int) -> list[str]:
    """Compile the plan in ``jobs`` processes into Triton's disk cache (errors returned)."""
    import multiprocessing as mp

    with mp.get_context("spawn").Pool(jobs) as pool:
        errors = pool.starmap(_precompile_share, [(quick, jobs, i) for i in range(jobs)])
    return [e for e in errors if e]


# ------------------------------------------------------------------ the run

def run_checks(quick: bool, say) -> list[dict]:
    from flashbench.measure.forward import measure_accuracy

    rows = []
    with triton_fwd.default_config("fixed"):
        for case in check_cases(quick):
            say(f"check {case.label()}")
            for rec in measure_accuracy(case, CHECK_DTYPES, ("triton", *CHECK_PEERS)):
                row = rec.as_dict()
                if row.get("kernel") == "triton" and row.get("dtype") == "fp32" and "o" in row:
                    row["passed"] = row["passed"] and row["o"]["max_abs"] <= 1e-5
                rows.append(row)
        for case in fp8_check_cases(quick):
            say(f"check fp8 {case.label()}")
            rows += fp8_check_rows(case)
    return rows + gpu_variants.check_rows(say)


def fp8_check_rows(case: Case) -> list[dict]:
    """triton-fp8 and the fp8 flash model on the kernel's fixed tiles (the model's
    block_q = block = BLOCK_N; equal to BLOCK_M for the fixed fp8 configs of d <= 128):
    the baseline rule, and the kernel's O RMSE within FP8_MODEL_AGREEMENT of the model's."""
    from flashbench.measure.forward import measure_accuracy

    bm, bn = triton_fp8.tiles(case.shape.d, "cuda" if torch.cuda.is_available() else "cpu")
    recs = [r.as_dict() for r in measure_accuracy(case, ("fp8",), ("flash_model", "triton-fp8"),
                                                  block=bn)]
    model = next((r for r in recs if r.get("kernel") == "flash_model" and "o" in r), None)
    for r in recs:
        if r.get("kernel") == "triton-fp8" and "o" in r and model is not None:
            r["vs_fp8_model"] = r["o"]["rmse"] / model["o"]["rmse"]
            r["model_blocks"] = f"{bn}x{bn} (kernel tiles {bm}x{bn})"
            r["passed"] = r["passed"] and abs(r["vs_fp8_model"] - 1) <= FP8_MODEL_AGREEMENT
    return recs


def check_slice(o, q, k, v, causal: bool, dtype: str) -> dict:
    """The timed output against the float64 reference on a sub-problem: batch 0, heads 0
    and H-1 (their kv heads under GQA), the last SLICE_ROWS query rows, all keys."""
    from flashbench import numerics, reference
    from flashbench.accuracy import baseline_rule, error_stats

    H, group = q.shape[1], q.shape[1] // k.shape[1]
    heads = sorted({0, H - 1})
    rows = slice(max(0, q.shape[2] - SLICE_ROWS), q.shape[2])

    def np64(t):
        return t.detach().float().cpu().double().numpy()

    qs = np64(q[0, heads, rows])
    ks, vs = (np64(t[0, [h // group for h in heads]]) for t in (k, v))
    ref = reference.attention(qs, ks, vs, causal=causal)
    std = numerics.standard_model(qs, ks, vs, dtype, causal=causal)
    err, err_std = error_stats(o[0, heads, rows], ref[0]), error_stats(std[0], ref[0])
    verdict = baseline_rule(err["max_abs"], err_std["max_abs"], dtype)
    return {"o_max_abs": err["max_abs"], "standard_max_abs": err_std["max_abs"],
            "ratio": verdict.ratio, "passed": bool(verdict.passed)}


def check_grads(grads, q, k, v, do, causal: bool, dtype: str, cache: dict) -> dict:
    """Timed gradients against the float64 reference on a sub-problem: batch 0, kv head 0
    and its query heads, all rows (dk, dv need every query), by the gradient rule (3x the
    same-dtype standard backward plus FlashAttention's floor)."""
    from flashbench import numerics, reference
    from flashbench.accuracy import judge_gradient

    group = q.shape[1] // k.shape[1]

    def np64(t):
        return t.detach().float().cpu().double().numpy()

    if "ref" not in cache:  # the same inputs for every backend of this case
        sub = [np64(q[0, :group]), np64(k[0, :1]), np64(v[0, :1]), np64(do[0, :group])]
        cache["ref"] = reference.attention_grad(*sub, causal=causal)
        cache["std"] = numerics.standard_model_grad(*sub, dtype, causal=causal)
    got = (grads[0][0, :group], grads[1][0, :1], grads[2][0, :1])
    out = {"passed": True}
    for name, g, r, s in zip(("dq", "dk", "dv"), got, cache["ref"], cache["std"], strict=True):
        j = judge_gradient(g, s, r, dtype)
        out[f"{name}_max_abs"] = j["kernel"]["max_abs"]
        out[f"{name}_ratio"] = j["verdict"].ratio
        out["passed"] = out["passed"] and bool(j["verdict"].passed)
    return out


def run_timings(quick: bool, peak: float, say, fp8_ok: bool = True,
                failed_dtypes: frozenset = frozenset()) -> tuple[list[dict], dict]:
    """Time every case of :func:`timed_cases`; a dtype whose Triton checks failed
    (``failed_dtypes``; triton-fp8's: ``fp8_ok`` False) is not timed: its row says why."""
    from flashbench.backends import get_backend
    from flashbench.kernels.checks import torch_dtype
    from flashbench.measure.timing import NotDifferentiable, device_samples, pass_fn, tflops

    rows, chosen = [], {}
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
        g = torch.Generator(device="cuda").manual_seed(0)
        s, dt = t.shape, torch_dtype(t.dtype)
        q, k, v = (torch.randn(s.B, h, n, s.d, device="cuda", dtype=dt, generator=g)
                   for h, n in ((s.H, s.Nq), (s.kv_heads, s.Nk), (s.kv_heads, s.Nk)))
        if t.direction == "fwd":
            _, _, used = triton_fwd.forward(q, k, v, causal=t.causal)  # autotunes this key
            chosen[t.label()] = used.label() if used is not None else None
        shared_grads: dict = {}
        for name in backends_for(quick):
            row = {"case": t.label(), "backend": name, "shape": s.spec(), "dtype": t.dtype,
                   "causal": t.causal, "direction": t.direction}
            rows.append(row)
            try:
                backend = get_backend(name)
                reason = backend.unavailable_for(s, t.dtype)
                if reason is not None:
                    row["skipped"] = reason
                    continue
                bq, bk, bv = backend.prepare(q, k, v)
                if t.direction == "fwd":
                    out = backend.timed_fn(bq, bk, bv, causal=t.causal)
                    row["check"] = check_slice(out[0] if isinstance(out, tuple) else out,
                                               bq, bk, bv, t.causal, t.dtype)
                    if not row["check"]["passed"]:
                        row["skipped"] = "timed output failed its check: time not counted"
                        continue
                fn = pass_fn(backend.timed_fn, bq, bk, bv, t.causal, t.direction, name)
                if t.direction != "fwd":
                    if bk.shape[1] != k.shape[1]:
                        grad_cache = {}  # this backend expanded k, v: its own sub-problem
                    else:
                        grad_cache = shared_grads
                    row["check"] = check_grads(fn(), bq, bk, bv, fn.do, t.causal, t.dtype,
                                               grad_cache)
                    if not row["check"]["passed"]:
                        row["skipped"] = "timed gradients failed their check: time not counted"
                        continue
                samples = device_samples(fn)
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
    """One fp8 row: the FP8 kernel alone on per-tensor quantised e4m3 inputs (V
    key-major), its output checked against the float64 reference of the bf16 inputs
    it was quantised from (check_slice, fp8 baseline rule) before its time counts."""
    from flashbench.measure.timing import device_samples, tflops

    s = t.shape
    row = {"case": t.label(), "backend": "triton-fp8", "shape": s.spec(), "dtype": "fp8",
           "causal": t.causal, "direction": t.direction, "quant": "tensor"}
    try:
        (q, k, v), fp8 = fp8_inputs(s, "cuda")
        o, _, used = triton_fp8.forward_fp8(*fp8, causal=t.causal)  # autotunes this key
        chosen[t.label()] = used.label() if used is not None else None
        row["check"] = check_slice(o, q, k, v, t.causal, "fp8")
        if not row["check"]["passed"]:
            row["skipped"] = "timed output failed its check: time not counted"
            return row
        samples = device_samples(lambda: triton_fp8.forward_fp8(*fp8, causal=t.causal))
    except Exception as exc:  # report it, keep the other rows
        row["skipped"] = f"failed: {type(exc).__name__}: {str(exc)[:300]}"
        return row
    med = statistics.median(samples)
    q1, _, q3 = statistics.quantiles(samples, n=4)
    row.update(ms=med * 1e3, ms_q1=q1 * 1e3, ms_q3=q3 * 1e3,
               tflops=tflops(s, t.causal, med, t.direction), samples_s=samples)
    row["pct_peak"] = 100 * row["tflops"] / peak  # of the bf16 matmul peak (fp8's is ~2x)
    return row


def fp8_speedups(rows: list[dict]) -> list[dict]:
    """triton-fp8 against triton bf16 on the same shape and mask (both timed here)."""
    bf16 = {(r["shape"], r["causal"]): r for r in rows if r.get("backend") == "triton"
            and r.get("dtype") == "bf16" and r.get("direction") == "fwd" and "tflops" in r}
    out = []
    for r in rows:
        if r.get("backend") == "triton-fp8" and "tflops" in r:
            base = bf16.get((r["shape"], r["causal"]))
            out.append({"case": r["case"], "fp8_tflops": r["tflops"],
                        "bf16_tflops": base["tflops"] if base else None,
                        "fp8_vs_bf16": r["tflops"] / base["tflops"] if base else None})
    return out


def targets(rows: list[dict]) -> list[dict]:
    """The H200 targets on bf16, d=128, N >= 4k rows (figures, not tests): forward
    >= 450 TFLOP/s and >= 1.1x sdpa-flash non-causal, >= 400 TFLOP/s causal; backward
    >= 1.0x sdpa-flash's backward."""
    out = []
    by_case = {}
    for r in rows:
        by_case.setdefault(r["case"], {})[r["backend"]] = r
    for case, rs in by_case.items():
        tr, fl = rs.get("triton", {}), rs.get("sdpa-flash", {})
        s = Shape.parse(tr.get("shape", "1x1x1x1x16"))
        if not (tr.get("dtype") == "bf16" and s.d == 128 and s.Nq >= 4096
                and tr.get("direction") in ("fwd", "bwd") and "tflops" in tr):
            continue
        row = {"case": case, "triton_tflops": tr["tflops"]}
        if tr["direction"] == "fwd":
            need = TARGETS["causal_tflops" if tr["causal"] else "noncausal_tflops"]
            row.update(target_tflops=need, met_tflops=tr["tflops"] >= need)
        if "tflops" in fl:
            row["vs_sdpa_flash"] = tr["tflops"] / fl["tflops"]
            if tr["direction"] == "bwd":
                row["met_vs_sdpa_flash"] = row["vs_sdpa_flash"] >= TARGETS["bwd_vs_sdpa_flash"]
            elif not tr["causal"]:
                row["met_vs_sdpa_flash"] = row["vs_sdpa_flash"] >= TARGETS["vs_sdpa_flash"]
        if "tflops" in rs.get("sdpa-cudnn", {}):
            row["sdpa_cudnn_tflops"] = rs["sdpa-cudnn"]["tflops"]
        out.append(row)
    return out


def write_results(out_dir: str, record: dict) -> pathlib.Path:
    from tabulate import tabulate

    gpu = record["gpu_before"]["gpu"]
    stem = pathlib.Path(out_dir) / f"{record['date']}-{gpu.replace(' ', '_')}"
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(record, indent=1, default=str))
    speed = [{k: r.get(k) for k in ("case", "backend", "ms", "ms_q1", "ms_q3", "tflops",
                                     "pct_peak", "skipped")} for r in record["speed"]]
    checks = [{k: (r.get(k) if not isinstance(r.get(k), dict) else r[k].get("max_abs"))
               for k in ("case", "kernel", "dtype", "o", "lse", "o_ratio", "vs_fp8_model",
                         "passed", "skipped", "failed")} for r in record["checks"]]
    b = record["gpu_before"]
    md = [f"# Triton attention forward on {gpu}, {record['date']}", "",
          f"torch {b['torch']}, Triton {b['triton']}, CUDA {b['cuda']}, driver {b.get('driver')}."
          f" SM clock {b.get('sm_clock_mhz')} MHz (max {b.get('sm_clock_max_mhz')}), power "
          f"{b.get('power_w')} W, {b.get('temperature_c')} C before; after: "
          f"{record['gpu_after'].get('sm_clock_mhz')} MHz, {record['gpu_after'].get('power_w')}"
          f" W, {record['gpu_after'].get('temperature_c')} C (nvidia-smi).",
          f"bf16 matmul peak measured in this run: {record['matmul_peak_tflops']:.0f} TFLOP/s "
          "(8192^3 torch.matmul on random data, median device time).",
          f"Compilations of flashbench's kernels: planned {record['compiles_planned']}, "
          f"observed {record['compiles_observed']}. Wall time {record['wall_s']:.0f} s.", "",
          "## Correctness vs the float64 reference (max abs error; ratio = kernel / "
          "same-dtype standard model; vs_fp8_model = triton-fp8's O RMSE / the fp8 flash "
          "model's on the same blocks)", "",
          tabulate(checks, headers="keys", tablefmt="github", floatfmt=".2e"), "",
          "## Speed (ms: median of 20 device-timed runs, L2 flushed; q1/q3 quartiles; "
          "TFLOP/s from Shape.flops; pct_peak: of the bf16 matmul peak, fp8 rows included)", "",
          tabulate(speed, headers="keys", tablefmt="github", floatfmt=".4g"), "",
          "## FP8 forward vs the bf16 forward (TFLOP/s of the same shape and mask)", "",
          tabulate(record.get("fp8_speedups", []), headers="keys", tablefmt="github",
                   floatfmt=".3g"), "",
          "## Autotune configs chosen", "",
          tabulate(sorted(record["autotune_configs"].items()), headers=["case", "config"],
                   tablefmt="github"), "",
          "## Targets (H200, bf16, d=128, N >= 4k; fwd: >= 450 TFLOP/s and >= 1.1x "
          "sdpa-flash non-causal, >= 400 causal; bwd: >= 1.0x sdpa-flash)", "",
          tabulate(record["targets"], headers="keys", tablefmt="github", floatfmt=".3g")]
    stem.with_suffix(".md").write_text("\n".join(md) + "\n")
    return stem


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
    args = p.parse_args(argv)
    if args.compile and not args.plan:
        p.error("--compile goes with --plan")
    if args.plan:
        plan = record_plan(args.quick)
        lines = plan.lines()
        print("\n".join(lines[:-1]))
        if args.compile:
            from flashbench.kernels.offline import compile_plan

            done = compile_plan(plan)
            failed = [r for r in done if r.error]
            print(f"compiled {len(done) - len(failed)} of {len(done)} for sm_90 in "
                  f"{sum(r.seconds for r in done):.0f} s on this CPU; {len(failed)} failed")
        print(lines[-1])
        return 0
    if not torch.cuda.is_available():
        print("gpu_bench: no CUDA GPU visible to torch; this script only runs on a GPU "
              "(--plan works anywhere)", file=sys.stderr)
        return 2
    from flashbench.measure.timing import gpu_state, matmul_peak_tflops

    def say(msg):
        print(msg, flush=True)

    start = time.time()
    planned = len(record_plan(args.quick))
    before = gpu_state()
    say(f"{before['gpu']}: torch {before['torch']}, Triton {before['triton']}, CUDA "
        f"{before['cuda']}, driver {before.get('driver')}; {planned} compilations planned")
    if args.jobs > 1:
        t0 = time.time()
        errors = precompile(args.quick, args.jobs)
        say(f"precompiled the plan in {time.time() - t0:.0f} s with {args.jobs} processes"
            + (f"; errors: {errors}" if errors else ""))
    checks = run_checks(args.quick, say)
    bad = [r for r in checks if r.get("kernel") in ("triton", "triton-fp8")
           and r.get("passed") is False]
    peak = matmul_peak_tflops("bf16")
    say(f"bf16 matmul peak: {peak:.0f} TFLOP/s (8192^3 torch.matmul, median device time)")
    # a failed check stops the timings of its own dtype only (fp32 is checked, not timed)
    speed, chosen = run_timings(
        args.quick, peak, say, fp8_ok=not any(r.get("kernel") == "triton-fp8" for r in bad),
        failed_dtypes=frozenset(r["dtype"] for r in bad if r.get("kernel") == "triton"))
    record = {"date": time.strftime("%Y-%m-%d"), "quick": args.quick, "gpu_before": before,
              "gpu_after": gpu_state(), "matmul_peak_tflops": peak, "checks": checks,
              "speed": speed, "autotune_configs": chosen, "targets": targets(speed),
              "fp8_speedups": fp8_speedups(speed),
              "variant_speed": gpu_variants.timing_rows(peak, say),
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
