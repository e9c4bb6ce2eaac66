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

import math
import platform
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from tabulate import tabulate

from flashbench import numerics, reference
from flashbench.accuracy import error_stats, judge
from flashbench.inputs import Shape, make_qkv
from flashbench.streaming import causal_mask

EXACT_TOL = 1e-12
CHECK_DTYPES = ("fp32", "tf32", "fp16", "bf16")
# The Triton interpreter takes ~1 s per 2M score elements (B*H*Nq*Nk): larger cases skip it.
INTERPRETER_LIMIT = 2 * 1024 * 1024


@dataclass(frozen=True)
class Case:
    """One accuracy problem: a shape, an input distribution, causal or not."""

    shape: Shape
    dist: str = "normal"
    causal: bool = False

    def label(self) -> str:
        return f"{self.dist} {self.shape.label()}{' causal' if self.causal else ''}"


def default_cases() -> list[Case]:
    """Realistic shapes (H 2..8, N 1024..4096, d 64 and 128), normal and FA3-outlier inputs."""
    return [
        Case(Shape(1, 2, 1024, 1024, 64), "normal", False),
        Case(Shape(1, 2, 1024, 1024, 64), "normal", True),
        Case(Shape(1, 4, 2048, 2048, 128), "normal", False),
        Case(Shape(1, 4, 2048, 2048, 128), "normal", True),
        Case(Shape(1, 2, 4096, 4096, 64), "normal", False),
        Case(Shape(1, 8, 2048, 2048, 64), "outliers", False),
    ]


def _progress_printer(enabled: bool) -> Callable[[str], None]:
    start = time.perf_counter()

    def say(msg: str) -> None:
        if enabled:
            print(f"[{time.perf_counter() - start:6.1f} s] {msg}", file=sys.stderr, flush=True)

    return say


def _exactness(case: Case, q, k, v, ref, block: int) -> list[dict]:
    """Streamed vs one-shot in float64: softmax of head 0's masked scores, attention O and LSE."""
    o_s, lse_s = reference.online_attention(q, k, v, block=block, causal=case.causal)
    s = q[0, 0] @ k[0, 0].T / math.sqrt(case.shape.d)
    hidden = causal_mask(*s.shape) if case.causal else None
    if hidden is not None:
        s[hidden] = -np.inf
    diffs = {
        "softmax": error_stats(reference.online_softmax(s, block), reference.softmax(s)),
        "attention O": error_stats(o_s, ref[0]),
        "attention LSE": error_stats(lse_s, ref[1]),
    }
    return [{"case": case.label(), "what": what, "max_abs": st["max_abs"],
             "passed": st["max_abs"] <= EXACT_TOL} for what, st in diffs.items()]


def _interpreter_too_slow(backend, shape: Shape) -> bool:
    return backend.interpreted() and shape.B * shape.H * shape.Nq * shape.Nk > INTERPRETER_LIMIT


def measure_accuracy(case: Case, dtypes: Sequence[str], kernels: Sequence[str], seed: int = 0,
                     block: int = 64, say: Callable[[str], None] = lambda msg: None,
                     inputs=None, ref=None) -> dict:
    """Judge each kernel in each dtype against the float64 reference and standard_model.

    ``kernels``: "flash_model" and/or backend names (:mod:`flashbench.backends`).
    Returns ``{(kernel, dtype): record}`` where a record is the dict of
    :func:`_judged` (errors of O and LSE, baseline ratios, passed) or, for a kernel
    that cannot run that case here, a string saying why. Backends get no record
    for dtypes they do not take. flash_model records also
    hold ``streamed_vs_oneshot_o`` / ``_lse``: flash_model against standard_model.
    """
    from flashbench.backends import get_backend

    q, k, v = make_qkv(case.shape, case.dist, seed) if inputs is None else inputs
    ref = reference.attention(q, k, v, causal=case.causal) if ref is None else ref
    records = {}
    for dtype in dtypes:
        std = numerics.standard_model(q, k, v, dtype, causal=case.causal)
        tensors = None
        for name in kernels:
            if name == "flash_model":
                say(f"  flash_model {dtype}")
                flash = numerics.flash_model(q, k, v, dtype, block=block, causal=case.causal)
                records[(name, dtype)] = {
                    "streamed_vs_oneshot_o": error_stats(flash[0], std[0], dtype),
                    "streamed_vs_oneshot_lse": error_stats(flash[1], std[1], dtype),
                    **_judged(judge(flash, std, ref, dtype))}
                continue
            backend = get_backend(name)
            if dtype not in backend.dtypes:
                continue  # not applicable: no record
            reason = backend.unavailable()
            if reason is None and _interpreter_too_slow(backend, case.shape):
                reason = "Triton interpreter: too slow at this shape (needs a GPU)"
            if reason is not None:
                records[(name, dtype)] = reason
                continue
            say(f"  {name} {dtype}")
            if tensors is None:
                import torch

                from flashbench.kernels.checks import TORCH_DTYPES

                tensors = [torch.from_numpy(x).to(TORCH_DTYPES[dtype]) for x in (q, k, v)]
            out = backend(*tensors, causal=case.causal)
            records[(name, dtype)] = _judged(judge(out, std, ref, dtype)) | {"peer": backend.peer}
    return records


def _judged(j: dict) -> dict:
    return {
        "o": j["o"]["kernel"], "lse": j["lse"]["kernel"],
        "o_standard": j["o"]["standard"], "lse_standard": j["lse"]["standard"],
        "o_ratio": j["o"]["verdict"].ratio, "lse_ratio": j["lse"]["verdict"].ratio,
        "passed": j["o"]["verdict"].passed and j["lse"]["verdict"].passed,
    }


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
        report["exactness"] += _exactness(case, q, k, v, ref, block)
        records = measure_accuracy(case, dtypes, ["flash_model", *backends], seed, block, say,
                                   inputs=(q, k, v), ref=ref)
        for (kernel, dtype), rec in records.items():
            row = {"case": case.label(), "dtype": dtype}
            if kernel == "flash_model":
                report["dtypes"].append(row | rec)
            elif isinstance(rec, str):
                report["backends"].append(row | {"backend": kernel, "skipped": rec})
            else:
                report["backends"].append(row | {"backend": kernel} | rec)
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
    rows, skipped = [], {}
    for r in report["dtypes"]:
        rows.append([r["case"], "flash_model", r["dtype"], *_judge_cells(r)])
        for b in report["backends"]:
            if (b["case"], b["dtype"]) != (r["case"], r["dtype"]):
                continue
            if "skipped" in b:
                skipped.setdefault((b["backend"], b["skipped"]), []).append(b["case"])
            else:
                rows.append(["", b["backend"], "", *_judge_cells(b)])
    out.append(tabulate(rows, headers=["case", "kernel", "dtype", "O RMSE", "std O RMSE",
                                       "O max", "std O max", "O ratio", "LSE ratio",
                                       "verdict"]))
    out.append("   (peer): torch's own attention, judged for information; the RESULT counts "
               "the exactness, the flash model and flashbench's Triton kernel")
    for (backend, why), where in skipped.items():
        out.append(f"   {backend} skipped ({why}): {', '.join(dict.fromkeys(where))}")
    out += ["", "RESULT: " + ("PASS" if report["passed"] else "FAIL")]
    return "\n".join(out)


def _judge_cells(r: dict) -> list[str]:
    verdict = "PASS" if r["passed"] else "FAIL"
    return [_g(r["o"]["rmse"]), _g(r["o_standard"]["rmse"]), _g(r["o"]["max_abs"]),
            _g(r["o_standard"]["max_abs"]), f"{r['o_ratio']:.2f}", f"{r['lse_ratio']:.2f}",
            f"{verdict} (peer)" if r.get("peer") else verdict]
