"""``flashbench check``'s five tables: the report of :func:`flashbench.measure.run.run_check` as
terminal text, each table headed by what it measures and how (docs/check.md tells what each
one is). Written to a file every run and printed with ``--tables``
(:mod:`flashbench.cli.check`); the compact view is :mod:`flashbench.cli.check_view`. The
cells and notes shared with ``check --decode``'s tables (:mod:`flashbench.cli.decode`):
:func:`band_cell`, :func:`verdict_cell`, :func:`band_notes`.
"""

from __future__ import annotations

from tabulate import tabulate

from flashbench.bands.case import BAND_TOTAL_ROWS, CASE_SEEDS, MAX_SEEDS
from flashbench.cli.common import result_line
from flashbench.measure.backward import DSINKS, GRADS
from flashbench.measure.records import EXACT_TOL
from flashbench.numerics.backward import GRAD_DTYPES

__all__ = ["render_tables", "judge_cells", "band_cell", "verdict_cell", "band_notes"]


def _g(x: float) -> str:
    return f"{x:.2e}"


def render_tables(report: dict) -> str:
    """The report as terminal tables, each headed by what it measures and how."""
    out = [f"flashbench check   seed={report['meta']['seed']} block={report['meta']['block']}"
           f"   {report['meta']['date']}"]
    drawn = report["meta"].get("varlen")
    if drawn:  # a seeded length distribution: the lengths it drew, to reproduce the run
        out.append(f"varlen {drawn['spec']} with seed {drawn['seed']} drew "
                   f"{len(drawn['lengths'])} lengths: {','.join(map(str, drawn['lengths']))}")
    out.append("")
    out.append(f"1. Exactness in float64: streamed vs one-shot, max |diff|; PASS iff <= "
               f"{EXACT_TOL:g} x scale, scale = max(1, the quantity's largest |value|)")
    out.append(tabulate([[r["case"], r["what"], _g(r["max_abs"]), _g(r["scale"]),
                          "PASS" if r["passed"] else "FAIL"] for r in report["exactness"]],
                        headers=["case", "quantity", "max |diff|", "scale", "verdict"]))
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
            f"flash model over {CASE_SEEDS} seeds of the same case, more for a small one "
            f"({BAND_TOTAL_ROWS:,} query rows in all, at most {MAX_SEEDS} seeds; PASS at <= 1)",
            "   (peer): torch's own attention, judged for information; the RESULT counts "
            "the exactness, the flash model, flashbench's Triton kernel, users' kernels and "
            "the peers --only named (no \"(peer)\" then)"]
    rows, skipped, failed = [], {}, {}
    for r in report["dtypes"]:
        rows.append([r["case"], "flash_model", r["dtype"], *judge_cells(r)])
        for b in report["backends"]:
            if (b["case"], b["dtype"]) != (r["case"], r["dtype"]):
                continue
            if "skipped" in b:
                skipped.setdefault((b["backend"], b["skipped"]), []).append(b["case"])
            elif "failed" in b:
                failed.setdefault((b["backend"], b["failed"], b.get("peer")), []).append(
                    f"{b['case']} {b['dtype']}")
            else:
                rows.append(["", b["backend"], "", *judge_cells(b)])
    out.append(tabulate(rows, headers=["case", "kernel", "dtype", "O RMSE", "std O RMSE",
                                       "O max", "std O max", "O ratio", "LSE ratio",
                                       "O band", "LSE band", "verdict"]))
    out += band_notes([*report["dtypes"], *report["backends"]])
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
        out += ["", *_gradient_tables(report)]
    out += ["", result_line(report)]
    return "\n".join(out)


def _gradient_tables(report: dict) -> list[str]:
    out = [f"4. Backward exactness in float64: streamed (FlashAttention-2's recurrence) vs "
           f"one-shot; max |diff| / the gradients' scale (largest |dq|, |dk|, |dv|; dsinks: "
           f"its largest); PASS iff <= {EXACT_TOL:g}"]
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
    sinks = any(DSINKS in r for r in report["gradients"])
    if sinks:
        out.append("   dsinks [H] (a case with sinks; kernels that give it: flashbench's Triton, "
                   "torch-naive, a function declaring flashbench_dsinks): each head's |err| within "
                   "its limit, 8x the spread O's and the LSE's errors give it (the dtype's "
                   "rounding, or the flash model's own) + 2x an fp32 sum's over the rows "
                   "(flashbench.accuracy.sinks_limit); limit and ratio = err / limit (PASS <= 1) "
                   "of the worst head; '-' where a kernel gives none")
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
        if sinks:
            cells += ([_g(r[DSINKS]["max_abs"]), _g(r["dsinks_limit"]),
                       f"{r['dsinks_ratio']:.2g}"] if DSINKS in r else ["-"] * 3)
        floors = "/".join(f"{r[f'{g}_floor']:.0e}" for g in GRADS)
        bands = "/".join(band_cell(r, g) for g in GRADS)
        rows.append([*(("", "") if where == last else where), r["kernel"], *cells, floors,
                     bands, verdict_cell(r)])
        last = where
    if rows:
        out.append(tabulate(rows, headers=["case", "dtype", "kernel", *(
            h for g in GRADS for h in (f"{g} err", f"{g} std", f"{g} ratio")),
            *(("dsinks err", "dsinks limit", "dsinks ratio") if sinks else ()), "floor",
            "band dq/dk/dv", "verdict"]))
        out += band_notes(report["gradients"])
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


def band_cell(r: dict, name: str) -> str:
    """A band-rule ratio ("-" where the tensor is not judged by it)."""
    ratio = r.get(f"{name}_band_ratio")
    return "-" if ratio is None else f"{ratio:.2f}"


def verdict_cell(r: dict) -> str:
    """PASS, or FAIL naming the rule that failed (reports without the band rule: FAIL)."""
    if r["passed"]:
        verdict = "PASS (band)" if r.get("baseline_draw") else "PASS"
    elif r.get("baseline_passed") is None or r.get("band_passed") is None:
        verdict = "FAIL"  # one rule only (older reports; hand-made inputs)
    else:
        verdict = {(True, False): "FAIL (band)", (False, True): "FAIL (2x)",
                   (True, True): "FAIL (dsinks)"}.get(
            (r["baseline_passed"], r["band_passed"]), "FAIL (both)")
    return f"{verdict} (peer)" if r.get("peer") else verdict


def band_notes(rows, sources: bool = True) -> list[str]:
    """The band rule's legend and one line per record where the two rules disagree;
    ``sources``: and where the forward's bands came from."""
    dsinks = " / (dsinks): its own limit" if any(r.get("dsinks_passed") is False
                                                  for r in rows) else ""
    out = ["   band: the band rule's ratio (<= 1 passes); FAIL (2x) / (band) / (both): the "
           f"rule(s) that failed{dsinks}"]
    from flashbench.cli.check_view import band_cause

    for r in rows:
        label = r.get("backend") or r.get("kernel") or "flash_model"
        if r.get("worst_at") and r.get("passed") is False and not r.get("peer"):
            out.append(f"   {label} {r['dtype']} {r['case']}: {r['worst_at']}")
        if r.get("diagnosis"):  # found by trying it (measure.diagnose)
            out.append(f"   {label} {r['dtype']} {r['case']}: {r['diagnosis']}")
        elif r.get("disagreement"):
            out.append(f"   {label} {r['dtype']} {r['case']}: {r['disagreement']}")
        elif r.get("band_passed") is False and not r.get("peer"):  # both rules failed
            verdicts = r.get("band") if isinstance(r.get("band"), dict) else r.get("band_rule")
            failed = [t for t, b in (verdicts or {}).items()
                      if isinstance(b, dict) and b.get("passed") is False]
            out += [f"   {label} {r['dtype']} {r['case']}: band rule FAIL on "
                    f"{t.upper() if t in ('o', 'lse') else t}: "
                    f"{band_cause(r, t, verdicts)}" for t in failed]
    if not sources:
        return out
    sources = {b["source"] for r in rows for b in (r.get("band") or {}).values()}
    if "measured" in sources:
        out.append("   bands measured on the fly for cases outside the shipped table, a "
                   "variant's with the flash model run with it (flashbench.bands.case; cached)")
    return out


def judge_cells(r: dict) -> list[str]:
    lse = r["lse_note"] if r.get("lse_ratio") is None else (
        _ratio(r, "lse") + (" (stand-in)" if r.get("lse_note") else ""))
    return [_g(r["o"]["rmse"]), _g(r["o_standard"]["rmse"]), _g(r["o"]["max_abs"]),
            _g(r["o_standard"]["max_abs"]), _ratio(r, "o"), lse, band_cell(r, "o"),
            band_cell(r, "lse"), verdict_cell(r)]
