"""``flashbench check``'s compact view: one line per kernel and case, peers apart, then RESULT.

The five tables (:func:`flashbench.cli.check_tables.render_tables`) go to a file every run
(``--save``) and to stdout with ``--tables``; docs/check.md, "The compact view".
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from flashbench.accuracy import BASELINE_FACTOR, GRAD_FACTOR
from flashbench.accuracy.bandrule import DEFECT_TABLE, GROSS, likely_cause, times_edge
from flashbench.cli.common import result_line
from flashbench.measure.records import EXACT_TOL

__all__ = ["render_compact", "save_target", "SAVE_NAME", "WIDTH"]

SAVE_NAME = "flashbench-check.txt"  # the tables' file when --save names none or a folder
WIDTH = 120  # no line of the compact view is longer: longer ones are folded
_TENSORS = {"o": "O", "lse": "LSE", "dq": "dq", "dk": "dk", "dv": "dv", "dsinks": "dsinks"}


def save_target(path: str | None) -> Path:
    """Where the five tables go: ``path``, a file in the folder ``path`` names, or
    :data:`SAVE_NAME` in the working folder; ValueError for a folder that is missing or not
    writable (checked before the work)."""
    from flashbench.cli.output import output_file

    target = Path(path or ".")
    if path is None or target.is_dir():
        target = target / SAVE_NAME
    if target.is_dir():
        raise ValueError(f"--save {path}: {target} is a folder")
    first = b""  # a check's tables are written over; any other file is a user's (a probe:
    try:  # a .py); a device or a FIFO is not opened here (a FIFO's open would wait)
        if target.is_file():
            with open(target, "rb") as f:
                first = f.read(64)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise ValueError(f"--save {path}: {target} cannot be read ({exc.strerror})") from None
    if first and not first.startswith(b"flashbench check"):
        raise ValueError(f"--save {path}: {target} exists and holds no flashbench check "
                         "tables; name a new file, or remove it (check overwrites only its "
                         "own tables)")
    return output_file(str(target), "--save", force=True)


def _fold(line: str, indent: int = 6) -> list[str]:
    if len(line) <= WIDTH:
        return [line]
    return textwrap.wrap(line, WIDTH, subsequent_indent=" " * indent, break_on_hyphens=False)


def _ratio(x: float) -> str:
    return f"{x:.2f}" if x < 100 else f"{x:.3g}"


def _scores(r: dict, tensors: tuple[str, ...], limit: float) -> list[tuple[float, str]]:
    """(share of the rule's limit, "rule tensor ratio") for every judged ratio of a record;
    of a FAIL, the failed rules' alone (a band FAIL showed a passing "3x dq 3.58 of 3")."""
    failed = not r.get("passed", True)
    baseline = not r.get("baseline_draw") and not (failed and r.get("baseline_passed"))
    band_shown = not (failed and r.get("band_passed"))
    out = []
    for t in tensors:
        name, against = _TENSORS[t], (r.get("yardsticks") or {}).get(t)
        ratio = r.get(f"{t}_ratio")
        if t == "dsinks":  # its own limit, not the standard's (accuracy.sinks_limit)
            if ratio is not None and not (failed and r.get("dsinks_passed")):
                out.append((ratio, f"dsinks {r['dtype']} {_ratio(ratio)} of its limit"))
            continue
        if ratio is not None and not (t == "lse" and r.get("lse_note")) and baseline:
            vs = f" vs {against}" if against else ""
            floor = " (floor)" if ratio > limit and r.get("baseline_passed") and not vs else ""
            text = (f"{limit:g}x {name} {r['dtype']} {_ratio(ratio)} of {limit:g}{vs}{floor}"
                    if ratio < float("inf") or not floor else  # "inf of 2" read as over it
                    f"{limit:g}x {name} {r['dtype']} under the floor")
            out.append((ratio / limit, text))
        band = r.get(f"{t}_band_ratio")
        if band is not None and band_shown:
            out.append((band, f"band {name} {r['dtype']} {_ratio(band)} of 1"))
    return out


def band_cause(r: dict, t: str, band: dict) -> str:
    """The likely cause of record ``r``'s band FAIL on tensor ``t`` (``band``: its band
    verdicts by tensor): :func:`~flashbench.accuracy.bandrule.likely_cause` with the
    same-dtype standard's ratio, a variant the reference may apply otherwise, and another
    tensor of the record grossly off. Shared by the compact view and the tables (the
    decode table read "likely the O accumulator" at 100x the standard's error: a probe)."""
    variant = [v for v in ("window", "softcap", "sinks") if v in r["case"]]
    gross = {u: b["ratio"] for u, b in band.items() if isinstance(b, dict)
             and isinstance(b.get("ratio"), float | int) and b["ratio"] > GROSS}
    also = (f"; or the case's {' and '.join(variant)} not applied as the reference "
            "applies it (docs/variants.md)") if variant else ""
    other = next((u for u in gross if u != t), None) if t not in gross else None
    also += (f"; but its {_TENSORS[other]} in the same record is "
             f"{times_edge(gross[other]).replace('the band', 'its band')}, a wrong result, and "
             f"so likely is this {_TENSORS[t]} "
             "(the scale, the mask, the softmax)") if other else ""
    standard = r.get(f"{t}_ratio")
    standard = standard if isinstance(standard, float | int) else None
    return f"{likely_cause(t, band[t].get('ratio'), r['dtype'], standard)}{also}"


def _causes(r: dict, tensors: tuple[str, ...]) -> list[str]:
    """Why a counted record FAILed: a band FAIL's likely cause, a baseline FAIL's ratio."""
    if r.get("note"):
        return [f"{r['dtype']}: {r['note']}"]
    if r.get("diagnosis"):  # found by trying it (measure.diagnose): no guess beside it
        return [f"{r['dtype']}: {r['diagnosis']}",
                *([f"{r['dtype']}: {r['worst_at']}"] if r.get("worst_at") else [])]
    out = []
    band = r.get("band") if isinstance(r.get("band"), dict) else {}
    for t in tensors:
        b = band.get(t)
        if isinstance(b, dict) and b.get("passed") is False:
            out.append(f"{r['dtype']} band rule FAIL on {_TENSORS[t]}: {band_cause(r, t, band)}")
    if r.get("baseline_passed") is False or r.get("dsinks_passed") is False or not out:
        out.append(f"{r['dtype']}: {r.get('disagreement') or 'the baseline rule FAILed'} "
                   f"(the defects each rule sees: {DEFECT_TABLE})")
    if r.get("worst_at"):
        out.append(f"{r['dtype']}: {r['worst_at']}")
    return out


def _lines(rows: list[dict], key: str, tensors: tuple[str, ...], limit: float,
           peers: bool, width: int = 47, named: int = 16) -> list[str]:
    """One line per kernel and case (worst over dtypes), and the counted FAILs' causes."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        if bool(r.get("peer")) == peers and "skipped" not in r:
            groups.setdefault((r["case"], r.get(key) or "flash_model"), []).append(r)
    out = []
    for (case, kernel), recs in groups.items():
        failed = [r for r in recs if "failed" in r]
        judged = [r for r in recs if "failed" not in r]
        bad = [r for r in judged if not r["passed"]]
        scores = [s for r in (bad or judged) for s in _scores(r, tensors, limit)]
        worst = max(scores)[1] if scores else "-"
        drawn = [r for r in judged if r["passed"] and r.get("baseline_draw")]
        verdict = "PASS" if not failed and not bad else "FAIL"
        if bad and not failed:
            verdict = _rule(bad)
        elif verdict == "PASS" and drawn:
            verdict = "PASS (band)"
        out += _fold(f"  {kernel:<{named}} {case:<{width}} {verdict:<11} {worst}")
        why = [f"{r['dtype']}: {r['failed']}" for r in failed]
        if verdict == "PASS (band)" and not peers:
            why += [f"{r['dtype']}: {r['disagreement']}" for r in drawn]
        if not peers:
            why += [c for r in bad for c in _causes(r, tensors)]
        out += [x for w in dict.fromkeys(why) for x in _fold(f"      {w}", 8)]
    return out


def _rule(bad: list[dict]) -> str:
    rules = {(r.get("baseline_passed"), r.get("band_passed")) for r in bad}
    names = {(True, False): "band", (False, True): "2x", (True, True): "dsinks"}
    named = {names.get(x, "both") for x in rules}
    return f"FAIL ({'both' if len(named) > 1 else named.pop()})"


def _skips(rows: list[dict], key: str, what: str = "") -> list[str]:
    """One line per kernel and reason it was skipped for; ``what``: the pass named (the
    gradients' line read the same as the forward's, twice, a probe)."""
    skipped: dict[tuple[str, str], int] = {}
    for r in rows:
        if "skipped" in r:
            k = (r.get(key), r["skipped"])
            skipped[k] = skipped.get(k, 0) + 1
    return [x for (kernel, why), n in skipped.items()
            for x in _fold(f"  {kernel}{what} skipped on {n} case(s) x dtype(s): {why}")]


def _exact(rows: list[dict], what: str, value: str) -> list[str]:
    if not rows:
        return []
    worst = max(r[value] for r in rows)
    bad = [r for r in rows if not r["passed"]]
    out = _fold(f"  {what}: worst {worst:.1e} over {len(rows)} quantities, "
                f"{len({r['case'] for r in rows})} case(s) (PASS iff <= {EXACT_TOL:g})   "
                f"{'FAIL' if bad else 'PASS'}")
    return out + [x for r in bad for x in _fold(
        f"      {r['case']} {r['what']}: {r[value]:.2e}", 8)]


def _block(fwd: list[dict], grads: list[dict], peers: bool) -> list[str]:
    """The forward lines and the gradient lines, each under its header (none if empty)."""
    out = []
    for rows, key, tensors, limit, what in (
            (fwd, "backend", ("o", "lse"), BASELINE_FACTOR, "case (forward)"),
            (grads, "kernel", ("dq", "dk", "dv", "dsinks"), GRAD_FACTOR, "case (gradients)")):
        # the case column as wide as its longest case, to what a line of WIDTH leaves for
        # the worst ratio (a variant's case, 60-70 characters, pushed it to a line of its own)
        # and the kernel column as wide as its longest name, up to 44 (a user's
        # "mod:function" pushed the columns out of line, a probe)
        named = min(max([16, *(len(r.get(key) or "flash_model") for r in rows)]), 44)
        width = min(max([47, *(len(r["case"]) for r in rows)]), WIDTH - 39 - named)
        lines = _lines(rows, key, tensors, limit, peers, width, named)
        if lines:
            out += ["", f"  {'kernel':<{named}} {what:<{width}} {'verdict':<11} worst ratio",
                    *lines]
    return out


def render_compact(report: dict, saved: str | None = None) -> str:
    """The check in a screen: exactness, then one line per counted kernel and case with its
    worst ratio over the dtypes and its verdict (a FAIL's likely cause below it), the peers
    for information, the skips, where the tables are, and RESULT last."""
    meta = report["meta"]
    out = [f"flashbench check   seed={meta['seed']} block={meta['block']}   dtypes "
           f"{' '.join(meta['dtypes'])}   {meta['date']}"]
    drawn = meta.get("varlen")
    if drawn:
        out += _fold(f"varlen {drawn['spec']} with seed {drawn['seed']} drew "
                     f"{len(drawn['lengths'])} lengths: {','.join(map(str, drawn['lengths']))}")
    named = any(r.get("named") for r in report["backends"] + (report.get("gradients") or []))
    out += ["", "Counted toward RESULT: the float64 exactness, the flash model, flashbench's "
            f"kernels{', the peers --only named' if named else ''} and yours.",
            "worst ratio: the rule nearest its limit over the dtypes (rule tensor dtype ratio "
            "of limit; PASS iff ratio <= limit,",
            "or the error is within the rule's floor: (floor)); "
            f"{BASELINE_FACTOR:g}x / {GRAD_FACTOR:g}x: max |err| vs float64 over the",
            "same-dtype standard model's (forward / gradients); band: PASS <= 1."]
    fwd, grads = report["dtypes"] + report["backends"], report.get("gradients") or []
    if any(r.get("passed") and r.get("baseline_draw") for r in fwd + grads):  # only where
        out[-1] = out[-1][:-1] + ";"  # a row reads it (a probe: the legend of no row)
        out += [f"PASS (band): the flash model failed the {BASELINE_FACTOR:g}x / "
                f"{GRAD_FACTOR:g}x rule, a draw on that case (it is correct by",
                "construction): its band rule judged it."]
    out += _exact(report["exactness"], "exactness, forward, max |diff| / max(1, |value|)",
                  "rel")
    out += _exact(report.get("grad_exactness") or [], "exactness, backward, max |diff| / scale",
                  "rel")
    out += _block(fwd, grads, peers=False)
    peers = _block(fwd, grads, peers=True)
    if peers:
        out += ["", "Peers, for information: torch's own attention, judged by the same rules; "
                "their FAILs do not count toward RESULT.", *peers[1:]]
    skips = _skips(report["backends"], "backend") + _skips(grads, "kernel", " (gradients)")
    if skips:
        out += ["", "Not run (not applicable, or not available here):", *skips]
    if saved:
        out += ["", f"The five tables (every number, every rule's ratio): {saved} "
                "(--tables prints them here)"]
    out += ["", *_fold(result_line(report))]
    return "\n".join(out)
