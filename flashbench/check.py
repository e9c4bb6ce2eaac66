"""``flashbench check``: is the streaming exact, and is each dtype as accurate as it can be?

Two questions, kept apart:

1. Exactness (float64): streamed vs one-shot softmax and attention, O and LSE,
   causal and not. Max abs difference; PASS iff <= 1e-12.
2. Dtype cost, per case and precision (fp32, tf32, fp16, bf16):
   - streamed vs one-shot *in the same dtype*: flash_model vs standard_model;
   - each against the float64 reference, and the baseline rule: the flash model's
     (and every available backend's) max abs error is at most 2x the same-dtype
     standard attention's plus eps/4, for O and for LSE.

Errors are unitless (inputs and outputs are plain numbers); "eps" columns divide by
the dtype's machine epsilon. Percentiles run over every element of O (or LSE).
"""

from __future__ import annotations

import platform
import sys
import time
from collections.abc import Callable, Sequence

import numpy as np
from tabulate import tabulate

from flashbench import reference
from flashbench.inputs import make_qkv
from flashbench.measure import (
    EXACT_TOL,
    Case,
    default_cases,
    exactness,
    measure_accuracy,
)
from flashbench.precision import CHECK_DTYPES

__all__ = ["run_check", "overall_passed", "render_text", "Case", "default_cases"]


def _progress_printer(enabled: bool) -> Callable[[str], None]:
    start = time.perf_counter()

    def say(msg: str) -> None:
        if enabled:
            print(f"[{time.perf_counter() - start:6.1f} s] {msg}", file=sys.stderr, flush=True)

    return say


def run_check(cases: Sequence[Case] | None = None, dtypes: Sequence[str] = CHECK_DTYPES,
              seed: int = 0, block: int = 64, backends: Sequence[str] = (),
              progress: bool = True) -> dict:
    """Run the whole check and return the report as a JSON-ready dict.

    ``backends``: backend names to judge beside the flash model (``flashbench check``
    passes every available one but the float64 reference itself).
    """
    cases = default_cases() if cases is None else list(cases)
    say = _progress_printer(progress)
    report = {"meta": _meta(seed, block, dtypes), "exactness": [], "dtypes": [],
              "backends": []}
    for i, case in enumerate(cases, 1):
        say(f"[{i}/{len(cases)}] {case.label()}: fp64 reference")
        q, k, v = make_qkv(case.shape, case.dist, seed)
        ref = reference.attention(q, k, v, causal=case.causal)
        report["exactness"] += [r.as_dict() for r in exactness(case, q, k, v, ref, block)]
        for rec in measure_accuracy(case, dtypes, ["flash_model", *backends], seed, block, say,
                                    inputs=(q, k, v), ref=ref):
            row = rec.as_dict()
            if rec.kernel == "flash_model":
                del row["kernel"], row["peer"]
                report["dtypes"].append(row)
            else:
                row["backend"] = row.pop("kernel")
                report["backends"].append(row)
    report["passed"] = overall_passed(report)
    say("done")
    return report


def overall_passed(report: dict) -> bool:
    """PASS iff exactness, the flash model and every non-peer backend pass (skips pass)."""
    return (all(r["passed"] for r in report["exactness"])
            and all(r["passed"] for r in report["dtypes"])
            and all(r.get("passed", True) or r.get("peer") for r in report["backends"]))


def _meta(seed: int, block: int, dtypes) -> dict:
    import torch

    return {"seed": seed, "block": block, "dtypes": list(dtypes), "exact_tol": EXACT_TOL,
            "python": platform.python_version(), "numpy": np.__version__,
            "torch": torch.__version__, "machine": platform.node(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}


def _g(x: float) -> str:
    return f"{x:.2e}"


def render_text(report: dict) -> str:
    """The report as terminal tables, each headed by what it measures and how."""
    out = [f"flashbench check   seed={report['meta']['seed']} block={report['meta']['block']}"
           f"   {report['meta']['date']}", ""]
    out.append(f"1. Exactness in float64: streamed vs one-shot, max |diff|; PASS iff <= "
               f"{EXACT_TOL:g}")
    out.append(tabulate([[r["case"], r["what"], _g(r["max_abs"]),
                          "PASS" if r["passed"] else "FAIL"] for r in report["exactness"]],
                        headers=["case", "quantity", "max |diff|", "verdict"]))
    out += ["", "2. Streamed vs one-shot in the same dtype (flash_model vs standard_model), O:",
            "   abs = |streamed - one-shot|; rel = abs / max(|one-shot|, 0.1 RMS); "
            "eps = the dtype's machine epsilon"]
    out.append(tabulate([[r["case"], r["dtype"]] + [_g(r["streamed_vs_oneshot_o"][m]) for m in
                         ("abs_p50", "abs_p99", "max_abs", "rel_p50", "rel_p99", "rel_max",
                          "rmse")] + [f"{r['streamed_vs_oneshot_o']['max_abs_eps']:.1f}"]
                         for r in report["dtypes"]],
                        headers=["case", "dtype", "abs p50", "abs p99", "abs max", "rel p50",
                                 "rel p99", "rel max", "RMSE", "max (eps)"]))
    out += ["", "3. Against the float64 reference, and the baseline rule (kernel max |err| <= "
            "2 x standard's + eps/4, O and LSE):",
            "   ratio = kernel max |err| / standard max |err|"]
    rows, skipped, failed = [], {}, {}
    for r in report["dtypes"]:
        rows.append([r["case"], "flash_model", r["dtype"], *_judge_cells(r)])
        for b in report["backends"]:
            if (b["case"], b["dtype"]) != (r["case"], r["dtype"]):
                continue
            if "skipped" in b:
                skipped.setdefault((b["backend"], b["skipped"]), []).append(b["case"])
            elif "failed" in b:
                failed.setdefault((b["backend"], b["failed"], b.get("peer")), []).append(
                    f"{b['case']} {b['dtype']}")
            else:
                rows.append(["", b["backend"], "", *_judge_cells(b)])
    out.append(tabulate(rows, headers=["case", "kernel", "dtype", "O RMSE", "std O RMSE",
                                       "O max", "std O max", "O ratio", "LSE ratio",
                                       "verdict"]))
    out.append("   (peer): torch's own attention, judged for information; the RESULT counts "
               "the exactness, the flash model, flashbench's Triton kernel and users' kernels")
    for (backend, why), where in skipped.items():
        out.append(f"   {backend} skipped ({why}): {', '.join(dict.fromkeys(where))}")
    for (backend, why, peer), where in failed.items():
        out.append(f"   {backend} FAIL{' (peer)' if peer else ''} ({why}): "
                   f"{', '.join(dict.fromkeys(where))}")
    out += ["", "RESULT: " + ("PASS" if report["passed"] else "FAIL")]
    return "\n".join(out)


def _judge_cells(r: dict) -> list[str]:
    verdict = "PASS" if r["passed"] else "FAIL"
    return [_g(r["o"]["rmse"]), _g(r["o_standard"]["rmse"]), _g(r["o"]["max_abs"]),
            _g(r["o_standard"]["max_abs"]), f"{r['o_ratio']:.2f}", f"{r['lse_ratio']:.2f}",
            f"{verdict} (peer)" if r.get("peer") else verdict]
