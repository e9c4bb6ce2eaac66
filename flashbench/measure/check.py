"""``flashbench check``: is the streaming exact, and is each dtype as accurate as it can be?

:func:`run_check` answers two questions, kept apart, forward and backward
(:func:`render_text` prints the tables; docs/check.md tells what each one is):

1. Exactness (float64): streamed vs one-shot softmax, O and LSE (causal and not), and
   dq, dk, dv relative to the gradients' scale; PASS iff <= 1e-12.
2. Dtype cost, per case and precision: flash vs standard model in the same dtype; the
   flash model and every available backend against the float64 reference, by the baseline
   rule (2x the same-dtype standard attention's max abs error plus eps/4) or for
   gradients the gradient rule (:func:`flashbench.accuracy.gradient_floor`), and by the
   band rule (:mod:`flashbench.accuracy.bandrule`); PASS needs both. Gradient cases:
   :func:`flashbench.measure.backward.default_grad_cases` or the ``--shape`` shapes;
   packed batches per sequence (:mod:`flashbench.measure.varlen`).
"""

from __future__ import annotations

import platform
import sys
import time
from collections.abc import Callable, Sequence

import numpy as np
from tabulate import tabulate

from flashbench import reference
from flashbench.inputs.precision import CHECK_DTYPES, Precision, get_precision
from flashbench.inputs.problem import make_qkv
from flashbench.measure.backward import (
    GRADS,
    default_grad_cases,
    grad_exactness,
    grad_output,
    measure_gradients,
)
from flashbench.measure.forward import default_cases, exactness, measure_accuracy
from flashbench.measure.records import EXACT_TOL, Case, private
from flashbench.measure.varlen import (
    measure_varlen,
    measure_varlen_gradients,
    varlen_exactness,
    varlen_grad_exactness,
    varlen_grad_output,
    varlen_inputs,
)
from flashbench.numerics.backward import GRAD_DTYPES

__all__ = ["run_check", "overall_passed", "render_text", "Case", "default_cases"]


def _progress_printer(enabled: bool) -> Callable[[str], None]:
    start = time.perf_counter()

    def say(msg: str) -> None:
        if enabled:
            print(f"[{time.perf_counter() - start:6.1f} s] {msg}", file=sys.stderr, flush=True)

    return say


def run_check(cases: Sequence[Case] | None = None,
              dtypes: Sequence[str | Precision] = CHECK_DTYPES,
              seed: int = 0, block: int = 64, backends: Sequence[str] = (),
              progress: bool = True, grad_cases: Sequence[Case] | None = None,
              time_limit: float | None = None, forward: bool = True) -> dict:
    """Run the whole check and return the report as a JSON-ready dict.

    ``dtypes``: precision names or their Precisions, resolved once, here (every layer
    below takes the Precision). ``backends``: backend names to judge beside the flash
    model (``flashbench check`` passes every available one but the float64 reference).
    ``grad_cases``: where gradients are judged; None means
    :func:`flashbench.measure.backward.default_grad_cases` (those whose causal setting
    appears among ``cases``), ``()`` none. ``time_limit``: seconds a user's kernel may
    take per call (its worker's limit; None: :data:`flashbench.backends.worker.
    DEFAULT_TIME_LIMIT`); the workers stop when the check ends. ``forward`` False: the
    backends' forward is not judged (``check --pass bwd``; the exactness and the flash
    model still are, as yardsticks).
    """
    from flashbench.backends import user

    precs = [get_precision(d) for d in dtypes]  # the door: names become Precisions, once
    with user.session(time_limit):
        return _run(cases, precs, seed, block, backends, progress, grad_cases, forward)


def _run(cases, dtypes: list[Precision], seed, block, backends, progress, grad_cases,
         forward: bool = True) -> dict:
    cases = default_cases() if cases is None else list(cases)
    say = _progress_printer(progress)
    report = {"meta": _meta(seed, block, dtypes), "exactness": [], "dtypes": [],
              "backends": []}
    for i, case in enumerate(cases, 1):
        say(f"[{i}/{len(cases)}] {case.label()}: fp64 reference")
        if case.varlen is not None:  # a packed batch: per-sequence reference and models
            _run_varlen(report, case, dtypes, seed, block, backends if forward else (), say)
            continue
        q, k, v = private(*make_qkv(case.shape, case.dist, seed))
        ref = reference.attention(q, k, v, **case.kwargs(seed))
        report["exactness"] += [r.as_dict() for r in exactness(case, q, k, v, ref, block, seed)]
        judged = ["flash_model", *(backends if forward else ())]
        _add_records(report, measure_accuracy(case, dtypes, judged, seed, block, say,
                                              inputs=(q, k, v), ref=ref))
    _run_gradients(report, cases, grad_cases, dtypes, seed, block, backends, say)
    report["passed"] = overall_passed(report)
    say("done")
    return report


def _add_records(report, records) -> None:
    for rec in records:
        row = rec.as_dict()
        if rec.kernel == "flash_model":
            del row["kernel"], row["peer"]
            report["dtypes"].append(row)
        else:
            row["backend"] = row.pop("kernel")
            report["backends"].append(row)


def _run_varlen(report, case, dtypes, seed, block, backends, say) -> None:
    q, k, v, cu = varlen_inputs(case, seed)
    ref = reference.varlen_attention(q, k, v, cu, cu, **case.kwargs(seed))
    report["exactness"] += [r.as_dict() for r in
                            varlen_exactness(case, q, k, v, cu, ref, block, seed)]
    _add_records(report, measure_varlen(case, dtypes, ["flash_model", *backends], seed, block,
                                        say, inputs=(q, k, v, cu), ref=ref))


def _run_gradients(report, cases, grad_cases, dtypes, seed, block, backends, say) -> None:
    if grad_cases is None:
        causals = {c.causal for c in cases}
        grad_cases = [c for c in default_grad_cases() if c.causal in causals]
        report["grad_cases_why"] = ("default gradient cases, small so that the interpreted "
                                    "Triton backward keeps the check near a minute; judge "
                                    "others with --shape")
    report["grad_cases"] = [c.label() for c in grad_cases]
    report["grad_exactness"], report["gradients"] = [], []
    for i, case in enumerate(grad_cases, 1):
        say(f"[grad {i}/{len(grad_cases)}] {case.label()}: fp64 gradients")
        if case.varlen is not None:  # a packed batch: per-sequence gradients and models
            _run_varlen_gradients(report, case, dtypes, seed, block, backends, say)
            continue
        q, k, v, do = private(*make_qkv(case.shape, case.dist, seed),
                              grad_output(case.shape, seed))
        ref = reference.attention_grad(q, k, v, do, **case.kwargs(seed))
        report["grad_exactness"] += [r.as_dict() for r in
                                     grad_exactness(case, q, k, v, do, ref, block, seed)]
        for rec in measure_gradients(case, dtypes, ["flash_model", *backends], seed, block,
                                     say, inputs=(q, k, v, do), ref=ref):
            report["gradients"].append(rec.as_dict())


def _run_varlen_gradients(report, case, dtypes, seed, block, backends, say) -> None:
    q, k, v, cu = varlen_inputs(case, seed)
    q, k, v, do = private(q, k, v, varlen_grad_output(case, seed))
    ref = reference.varlen_attention_grad(q, k, v, do, cu, cu, **case.kwargs(seed))
    report["grad_exactness"] += [r.as_dict() for r in
                                 varlen_grad_exactness(case, q, k, v, do, cu, ref, block, seed)]
    report["gradients"] += [r.as_dict() for r in measure_varlen_gradients(
        case, dtypes, ["flash_model", *backends], seed, block, say,
        inputs=(q, k, v, do, cu), ref=ref)]


def overall_passed(report: dict) -> bool:
    """PASS iff exactness, the flash model and every non-peer backend pass (skips pass),
    forward and backward."""
    return (all(r["passed"] for r in report["exactness"])
            and all(r["passed"] for r in report["dtypes"])
            and all(r.get("passed", True) or r.get("peer") for r in report["backends"])
            and all(r["passed"] for r in report.get("grad_exactness", ()))
            and all(r.get("passed", True) or r.get("peer")
                    for r in report.get("gradients", ())))


def _meta(seed: int, block: int, dtypes: list[Precision]) -> dict:
    import torch

    return {"seed": seed, "block": block, "dtypes": [p.name for p in dtypes],
            "exact_tol": EXACT_TOL,
            "python": platform.python_version(), "numpy": np.__version__,
            "torch": torch.__version__, "machine": platform.node(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}


def _g(x: float) -> str:
    return f"{x:.2e}"


def render_text(report: dict) -> str:
    """The report as terminal tables, each headed by what it measures and how."""
    out = [f"flashbench check   seed={report['meta']['seed']} block={report['meta']['block']}"
           f"   {report['meta']['date']}"]
    drawn = report["meta"].get("varlen")
    if drawn:  # a seeded length distribution: the lengths it drew, to reproduce the run
        out.append(f"varlen {drawn['spec']} with seed {drawn['seed']} drew "
                   f"{len(drawn['lengths'])} lengths: {','.join(map(str, drawn['lengths']))}")
    out.append("")
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
    out += ["", "3. Against the float64 reference, the baseline rule (kernel max |err| <= "
            "2 x standard's + eps/4, O and LSE) and the band rule:",
            "   ratio = kernel max |err| / standard max |err|; band = the largest over RMSE and "
            "p99 of kernel |err| / (multiplier x the band's edge),",
            "   |err| against the float64 reference of the dtype-rounded inputs, the band: the "
            "flash model over 8 seeds of the same case (PASS at <= 1)",
            "   (peer): torch's own attention, judged for information; the RESULT counts "
            "the exactness, the flash model, flashbench's Triton kernel and users' kernels"]
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
                                       "O band", "LSE band", "verdict"]))
    out += _band_notes([*report["dtypes"], *report["backends"]])
    if any(b.get("lse_note") and b.get("lse_ratio") is not None for b in report["backends"]):
        out.append("   LSE (stand-in): the op returns no LSE; flashbench's float64 logsumexp of "
                   "the inputs, rounded to fp32, shown for information (not judged)")
    if any(r.get("yardsticks") for r in (*report["dtypes"], *report["backends"])):
        out.append("   (vs flash_model): the same-dtype standard model overflowed (error inf), "
                   "or drew an unusually small max (tiny shapes) and the kernel is within the "
                   "factor of the same-dtype flash model's own error: the ratio is against "
                   "that (docs/check.md)")
    for (backend, why), where in skipped.items():
        out.append(f"   {backend} skipped ({why}): {', '.join(dict.fromkeys(where))}")
    for (backend, why, peer), where in failed.items():
        out.append(f"   {backend} FAIL{' (peer)' if peer else ''} ({why}): "
                   f"{', '.join(dict.fromkeys(where))}")
    noted = {}
    for b in report["backends"]:
        if b.get("note"):
            noted.setdefault((b["backend"], b["note"]), []).append(f"{b['case']} {b['dtype']}")
    for (backend, note), where in noted.items():
        out.append(f"   {backend} FAIL ({note}): {', '.join(where)}")
    if report.get("grad_cases"):
        out += ["", *_render_gradients(report)]
    out += ["", "RESULT: " + ("PASS" if report["passed"] else "FAIL")]
    return "\n".join(out)


def _render_gradients(report: dict) -> list[str]:
    out = [f"4. Backward exactness in float64: streamed (FlashAttention-2's recurrence) vs "
           f"one-shot; max |diff| / the gradients' scale (largest |dq|, |dk|, |dv|); PASS iff "
           f"<= {EXACT_TOL:g}"]
    if report.get("grad_cases_why"):
        out.append(f"   gradients judged on: {'; '.join(report['grad_cases'])} "
                   f"({report['grad_cases_why']})")
    out.append(tabulate([[r["case"], r["what"], _g(r["max_abs"]), _g(r["scale"]), _g(r["rel"]),
                          "PASS" if r["passed"] else "FAIL"] for r in report["grad_exactness"]],
                        headers=["case", "gradient", "max |diff|", "scale", "relative",
                                 "verdict"]))
    out += ["", "5. Gradients against the float64 ones, and the gradient rule (each of dq, dk, "
            "dv: kernel max |err| <= 3 x the same-dtype standard backward's + floor):",
            "   err = max |grad - grad_fp64| (dO ~ N(0, 1), seeded); std = the standard "
            "backward's (autograd of plain attention in the dtype); ratio = err / std;",
            "   floor = FlashAttention's gradient atol, 2 max |(g + 0.3) - 0.3 - g| in the "
            "dtype (about an ulp of the largest |g|), for dq/dk/dv"]
    rows, skipped, failed, last = [], {}, {}, None
    for r in report["gradients"]:
        where = (r["case"], r["dtype"])
        if "skipped" in r:
            skipped.setdefault((r["kernel"], r["skipped"]), []).append(r["case"])
            continue
        if "failed" in r:
            failed.setdefault((r["kernel"], r["failed"], r.get("peer")), []).append(
                f"{r['case']} {r['dtype']}")
            continue
        cells = [c for g in GRADS for c in (_g(r[g]["max_abs"]), _g(r[f"{g}_standard"]["max_abs"]),
                                            _ratio(r, g))]
        floors = "/".join(f"{r[f'{g}_floor']:.0e}" for g in GRADS)
        bands = "/".join(_band(r, g) for g in GRADS)
        rows.append([*(("", "") if where == last else where), r["kernel"], *cells, floors,
                     bands, _verdict(r)])
        last = where
    if rows:
        out.append(tabulate(rows, headers=["case", "dtype", "kernel", *(
            h for g in GRADS for h in (f"{g} err", f"{g} std", f"{g} ratio")), "floor",
            "band dq/dk/dv", "verdict"]))
        out += _band_notes(report["gradients"])
    elif not skipped and not failed:  # every dtype asked is forward-only (fp8)
        out.append(f"   none: no dtype asked ({', '.join(report['meta']['dtypes'])}) has a "
                   f"backward (the backward is modelled in {', '.join(GRAD_DTYPES)})")
    for (kernel, why), where in skipped.items():
        out.append(f"   {kernel} skipped ({why}): {', '.join(dict.fromkeys(where))}")
    for (kernel, why, peer), where in failed.items():
        out.append(f"   {kernel} FAIL{' (peer)' if peer else ''} ({why}): "
                   f"{', '.join(dict.fromkeys(where))}")
    return out


def _ratio(r: dict, name: str) -> str:
    """A rule ratio, with what it is against where that is not the standard model."""
    against = (r.get("yardsticks") or {}).get(name)
    return f"{r[f'{name}_ratio']:.2f}" + (f" (vs {against})" if against else "")


def _band(r: dict, name: str) -> str:
    """A band-rule ratio ("-" where the tensor is not judged by it)."""
    ratio = r.get(f"{name}_band_ratio")
    return "-" if ratio is None else f"{ratio:.2f}"


def _verdict(r: dict) -> str:
    """PASS, or FAIL naming the rule that failed (reports without the band rule: FAIL)."""
    if r["passed"]:
        verdict = "PASS"
    elif r.get("baseline_passed") is None or r.get("band_passed") is None:
        verdict = "FAIL"  # one rule only (older reports; hand-made inputs)
    else:
        verdict = {(True, False): "FAIL (band)", (False, True): "FAIL (2x)"}.get(
            (r["baseline_passed"], r["band_passed"]), "FAIL (both)")
    return f"{verdict} (peer)" if r.get("peer") else verdict


def _band_notes(rows, sources: bool = True) -> list[str]:
    """The band rule's legend and one line per record where the two rules disagree;
    ``sources``: and where the forward's bands came from."""
    out = ["   band: the band rule's ratio (<= 1 passes); FAIL (2x) / (band) / (both): the "
           "rule(s) that failed"]
    from flashbench.accuracy.bandrule import likely_cause

    for r in rows:
        label = r.get("backend") or r.get("kernel") or "flash_model"
        if r.get("disagreement"):
            out.append(f"   {label} {r['dtype']} {r['case']}: {r['disagreement']}")
        elif r.get("band_passed") is False and not r.get("peer"):  # both rules failed
            verdicts = r.get("band") if isinstance(r.get("band"), dict) else r.get("band_rule")
            failed = [t for t, b in (verdicts or {}).items()
                      if isinstance(b, dict) and b.get("passed") is False]
            out += [f"   {label} {r['dtype']} {r['case']}: band rule FAIL on "
                    f"{t.upper() if t in ('o', 'lse') else t}: {likely_cause(t)}"
                    for t in failed]
    if not sources:
        return out
    sources = {b["source"] for r in rows for b in (r.get("band") or {}).values()}
    if "measured" in sources:
        out.append("   bands measured on the fly for cases outside the shipped table, a "
                   "variant's with the flash model run with it (flashbench.bands.case; cached)")
    return out


def _judge_cells(r: dict) -> list[str]:
    lse = r["lse_note"] if r.get("lse_ratio") is None else (
        _ratio(r, "lse") + (" (stand-in)" if r.get("lse_note") else ""))
    return [_g(r["o"]["rmse"]), _g(r["o_standard"]["rmse"]), _g(r["o"]["max_abs"]),
            _g(r["o_standard"]["max_abs"]), _ratio(r, "o"), lse, _band(r, "o"),
            _band(r, "lse"), _verdict(r)]
