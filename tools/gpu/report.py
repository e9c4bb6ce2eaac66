"""gpu_bench's report: the FP8 speed-ups, the H200 targets and the results files
(gpu-results/<date>-<GPU>.json and .md). Figures only; nothing here times anything."""

from __future__ import annotations

import json
import pathlib

from flashbench.inputs import Shape

# The H200 targets on bf16, d=128, N >= 4k (figures, not tests)
TARGETS = {"noncausal_tflops": 450.0, "causal_tflops": 400.0, "vs_sdpa_flash": 1.1,
           "bwd_vs_sdpa_flash": 1.0}


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


def json_stem(out_dir: str, record: dict, suffix: str = "") -> pathlib.Path:
    """``out_dir``/<date>-<GPU><suffix>, with ``record`` written there as .json (the .md is
    the caller's)."""
    gpu = record["gpu_before"]["gpu"]
    stem = pathlib.Path(out_dir) / f"{record['date']}-{gpu.replace(' ', '_')}{suffix}"
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(record, indent=1, default=str))
    return stem


def columns(rows: list[dict], keys: tuple[str, ...]) -> list[dict]:
    """Each row cut to ``keys`` (None where it lacks one), for a table."""
    return [{k: r.get(k) for k in keys} for r in rows]


def write_results(out_dir: str, record: dict) -> pathlib.Path:
    from tabulate import tabulate

    gpu = record["gpu_before"]["gpu"]
    stem = json_stem(out_dir, record)
    speed = columns(record["speed"], ("case", "backend", "ms", "ms_q1", "ms_q3", "tflops",
                                      "pct_peak", "skipped"))
    checks = [{k: (r.get(k) if not isinstance(r.get(k), dict) else r[k].get("max_abs"))
               for k in ("case", "kernel", "dtype", "o", "lse", "o_ratio", "dq_ratio",
                         "dk_ratio", "dv_ratio", "vs_fp8_model", "passed", "skipped", "failed")}
              for r in record["checks"]]
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
