"""``flashbench check --decode``: split-KV decode over a KV cache, exact and per dtype."""

from __future__ import annotations

import sys

from tabulate import tabulate

from flashbench.cli.common import (
    chosen_backends,
    count_named_peers,
    emit,
    mark_unjudged,
    progress_printer,
    result_line,
    strays_fail,
)

__all__ = ["run", "render_decode", "decode_cases"]


def decode_cases(args):
    """The cases of ``--decode-case`` (with ``--causal`` and ``--dist``), else the defaults
    (filtered by ``--causal``)."""
    from flashbench.measure.decode import DecodeCase, default_decode_cases

    causals = {"both": (False, True), "on": (True,), "off": (False,)}[args.causal]
    if args.decode_case:
        cases = [(spec, DecodeCase.parse(spec, causal=c, dist=dist)) for spec in args.decode_case
                 for dist in args.dist for c in causals]
        if args.causal == "both":  # a causal pass the user did not ask for by name: left out
            for spec in dict.fromkeys(s for s, c in cases  # where a cache is shorter than its
                                      if c.causal and min(c.lens) < c.Nq):  # Nq (exit 2 before)
                c = next(c for s, c in cases if s == spec)
                print(f"check --decode: {spec} runs without causal alone: a cache of "
                      f"{min(c.lens)} keys is shorter than its Nq = {c.Nq} new tokens, which "
                      "a causal mask places at the cache's end", file=sys.stderr)
            cases = [(s, c) for s, c in cases if not c.causal or min(c.lens) >= c.Nq]
        return [c for _, c in cases]
    return [c for c in default_decode_cases() if c.causal in causals]


def _g(x) -> str:
    return "n/a" if x is None else f"{x:.2e}"


def _ratio(r: dict, tensor: str) -> str:
    """A baseline ratio; "(floor)" where it is above 2 and passed (the + eps/4)."""
    x = r[f"{tensor}_ratio"]
    return f"{x:.2f}" + (" (floor)" if x > 2 and r.get("baseline_passed") else "")


def render_decode(report: dict) -> str:
    """The decode report as terminal tables, each headed by what it measures."""
    from flashbench.cli.check_tables import band_cell, band_notes, verdict_cell

    out = [f"flashbench check --decode   seed={report['seed']}", "",
           f"1. Exactness in float64: split-KV merged vs one-shot, vs the forward reference, "
           f"paged vs contiguous; max |diff|; PASS iff <= {report['exact_tol']:g} x scale, "
           f"scale = max(1, the largest |value|) (paged: equal)"]
    out.append(tabulate([[r["case"], r["what"], _g(r["max_abs"]), _g(r.get("scale", 1.0)),
                          "PASS" if r["passed"] else "FAIL"] for r in report["exactness"]],
                        headers=["case", "quantity", "max |diff|", "scale", "verdict"]))
    out += ["", f"2. Against the float64 decode: the baseline rule (kernel max |err| <= 2 x "
            f"the same-dtype standard decode's + eps/4, O and LSE) and the band rule; "
            f"split_model = {report['model_splits']} splits, fp32 partials",
            "   ratio = kernel max |err| / standard max |err| ((floor): above 2, within the "
            "+ eps/4 that tiny errors are allowed); O band / LSE band = the largest "
            "over RMSE and p99 of kernel |err| / (multiplier x the band's edge), |err| against",
            "   the float64 decode of the inputs rounded to the dtype, the band: the split model "
            "over 8-256 seeds of the same case (flashbench.bands.decode; measured, cached)",
            "   band err = O max |err| against that same decode; band = the tolerance band's "
            "edge, the largest over the case's sequences (flashbench.tolerance; n/a past its",
            "   table), both shown for information, not judged"]
    rows, notes = [], []
    for r in report["rows"]:
        if "skipped" in r or "failed" in r:
            why = r.get("skipped") or r.get("failed")
            kind = "skipped" if "skipped" in r else ("FAIL (peer)" if r.get("peer") else "FAIL")
            notes.append(f"   {r['kernel']} {r['dtype']} {kind} ({why}): {r['case']}")
            continue
        lse = "n/a" if r.get("lse_ratio") is None else (
            _ratio(r, "lse") + (" (stand-in)" if r.get("lse_note") else ""))
        rows.append([r["case"], r["kernel"], r["dtype"], _g(r["o"]["max_abs"]),
                     _g(r["o_standard"]["max_abs"]), _ratio(r, "o"), lse,
                     band_cell(r, "o"), band_cell(r, "lse"), _g(r.get("band_err")),
                     _g(r.get("band")), verdict_cell(r)])
    out.append(tabulate(rows, headers=["case", "kernel", "dtype", "O max", "std O max",
                                       "O ratio", "LSE ratio", "O band", "LSE band",
                                       "band err", "band", "verdict"]))
    # the notes read the band rule's verdicts under "band" (here the tolerance edge's key)
    out += band_notes([{**r, "band": r.get("band_rule")} for r in report["rows"] if "o" in r],
                       sources=False)
    peers = any(r.get("peer") and "skipped" not in r for r in report["rows"])  # rows shown
    out += [*(["   (peer): torch's attention on the gathered cache, judged for information"]
              if peers else []), *dict.fromkeys(notes), "", result_line(report)]
    return "\n".join(out)


def run(args) -> int:
    """``check --decode`` (the check subcommand's parsed arguments)."""
    from flashbench.backends.decode import resolve_decode_backends
    from flashbench.cli.check_view import save_target
    from flashbench.cli.output import write_atomically
    from flashbench.measure.decode import decode_passed, run_decode_check
    from flashbench.measure.footprint import decode_too_big

    cases = decode_cases(args)
    refusal = decode_too_big(cases)
    if refusal is not None:
        raise ValueError(refusal)
    backends = chosen_backends(args, resolve_decode_backends)
    # --save: its tables written there, --json runs too (a probe: --save was read by nothing
    # and said nothing); no file without it (flashbench-check.txt is the forward's). Its view
    # is its tables: --tables changes nothing here
    saved = save_target(args.save) if args.save else None  # checked before the work
    report = run_decode_check(cases, args.dtype, backends, seed=args.seed,
                              say=progress_printer(not args.quiet), time_limit=args.timeout)
    if count_named_peers(args, report.get("rows") or []):
        report["passed"] = decode_passed(report)
    mark_unjudged(args, report, report.get("rows") or [])
    strays_fail(report, getattr(args, "children", ()))
    text = render_decode(report)
    if saved is not None:
        write_atomically(saved, text + "\n", force=True)
        if not args.quiet:
            print(f"check --decode: the tables written to {saved}", file=sys.stderr)
    return emit(report, lambda r: text, args.json)
