"""Helpers shared by the subcommands: argument types, the one-line parser (written in
:mod:`flashbench.infra.args`, which ``python -m flashbench.site`` shares), JSON output."""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from collections.abc import Callable

import numpy as np

from flashbench.infra.args import Parser, positive_int, seed  # noqa: F401  (the subcommands')
from flashbench.inputs.problem import Shape


def parse_shape(text: str) -> Shape:
    """``BxHxNxd`` or ``BxHxNqxNkxd`` (H may be ``H/Hkv``), e.g. 1x8x4096x64 -> Shape."""
    try:
        return Shape.parse(text.replace(",", "x").replace(":", "x"))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def lengths(text: str):
    """--varlen: a list or a seeded distribution (flashbench.inputs.lengths), drawn later
    with the command's seed (check's --seed, speed's run seed)."""
    from flashbench.inputs.lengths import parse_lengths

    try:
        return parse_lengths(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def finite(lo: float, hi: float, lo_open: bool = False):
    """An argument type: a finite float in [lo, hi] ((lo, hi] with ``lo_open``)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        low_ok = value > lo if lo_open else value >= lo
        if not math.isfinite(value) or not low_ok or value > hi:
            raise argparse.ArgumentTypeError(
                f"must be a finite number {'>' if lo_open else '>='} {lo:g} and <= {hi:g}, "
                f"got {text!r}")
        return value

    parse.__name__ = "number"
    return parse


def block(text: str) -> int:
    """An argument type: a streaming block, an int in 1 .. 2^31 - 1, checked before any work
    starts (the library's own check, :func:`flashbench.inputs.validation.check_block`)."""
    from flashbench.inputs.validation import check_block

    try:
        return check_block(int(text))
    except (TypeError, ValueError) as exc:
        message = str(exc) if text.strip().lstrip("-").isdigit() else (
            f"block must be an int >= 1, got {text!r}")
        raise argparse.ArgumentTypeError(message) from None


def window(text: str) -> tuple[int, int]:
    """An argument type: --window L,R, two ints >= -1 (checked by the Variant, the library's
    own check)."""
    from flashbench.inputs.variant import Variant

    try:
        left, right = (int(x) for x in text.split(","))
        return Variant(window=(left, right)).window
    except ValueError as exc:
        message = str(exc) if text.count(",") == 1 and "window" in str(exc) else (
            f"window must be L,R: two ints >= -1 (-1: unbounded), got {text!r}")
        raise argparse.ArgumentTypeError(message) from None


def softcap(text: str) -> float:
    """An argument type: --softcap C, a number > 0 whose C tanh(s / C) fp32 computes as the
    models and kernels do (:data:`SOFTCAP_RANGE`)."""
    from flashbench.inputs.variant import Variant

    try:
        cap = Variant(softcap=float(text)).softcap
    except ValueError as exc:
        message = str(exc) if "softcap" in str(exc) else (
            f"softcap must be a number > 0, got {text!r}")
        raise argparse.ArgumentTypeError(message) from None
    low, high = SOFTCAP_RANGE
    if not low <= cap <= high:  # c tanh(s / c) is computed in fp32 by the models and kernels
        with np.errstate(over="ignore"):
            fp32 = float(np.float32(cap))
        what = ("rounds to 0 in fp32" if fp32 == 0 else "rounds to inf in fp32"
                if not np.isfinite(fp32) else "makes s / C overflow in fp32" if cap < low
                else "makes s / C fall into fp32's subnormals")
        raise argparse.ArgumentTypeError(
            f"softcap {text} {what}, where the models and kernels compute C tanh(s / C); take "
            f"C in {low:.3g} .. {high:.3g} (Gemma 2: 50)")
    return cap


# --softcap's range: 2^-60 .. 2^60 keeps C, s / C and C tanh(s / C) normal fp32 numbers for
# any score fp32 holds sensibly (|s| in 2^-60 .. 2^60); outside it the cap itself rounds to 0
# or inf in fp32, or s / C falls into subnormals, and the models' rounding is no longer the
# kernels'
SOFTCAP_RANGE = (2.0 ** -60, 2.0 ** 60)


def regex(text: str) -> str:
    """An argument type: a regular expression that compiles (returned as text)."""
    try:
        re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a regular expression: {exc}") \
            from None
    return text


def machine_name(text: str) -> str:
    """An argument type: an asv machine name (a name, never a path)."""
    from flashbench.infra.machine import check_machine_name

    try:
        return check_machine_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def distinct(values, option: str, command: str) -> list | None:
    """``values`` (an nargs list) without repeats, in order; a repeat is dropped with a
    warning on stderr (measured once, it would be tabled twice)."""
    if values is None:
        return None
    kept = list(dict.fromkeys(values))
    if len(kept) < len(values):
        extra = [v for i, v in enumerate(values) if v in values[:i]]
        shown = " ".join(v.spec() if hasattr(v, "spec") else str(v) for v in extra)
        print(f"flashbench {command}: warning: {option} {shown} given more than once; measured "
              "once", file=sys.stderr)
    return kept


def jsonable(x):
    """Floats that JSON cannot hold (inf, nan) become the strings 'inf', '-inf', 'nan'."""
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, dict):
        return {k: jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [jsonable(v) for v in x]
    return x


def chosen_backends(args, resolve) -> list:
    """The backends ``--backend`` names (``resolve(names)``; its default when none), none
    with ``--no-backends``; both given: ValueError."""
    only, none = getattr(args, "only", None), getattr(args, "no_backends", False)
    if none and (args.backend or only):
        raise ValueError(f"{'--only' if only else '--backend'} and --no-backends contradict "
                         "each other")
    if only and args.backend:
        raise ValueError("--only and --backend contradict each other: --only NAME... runs "
                         "just those, counting the peers it names; --backend NAME selects "
                         "(its peers for information) and --backend module:function adds "
                         "yours to the defaults: give one of the two")
    if only:  # exactly these (a user's function alone brings no defaults)
        only = list(dict.fromkeys(only))
        return [n for n in resolve(only) if n in only]
    return [] if none else resolve(args.backend)


def progress_printer(enabled: bool) -> Callable[[str], None]:
    """A ``say`` for the library's progress lines: each on stderr after the seconds since
    this call (``[  12.3 s] ...``); ``enabled`` False: silent (``--quiet``)."""
    start = time.perf_counter()

    def say(msg: str) -> None:
        if enabled:
            print(f"[{time.perf_counter() - start:6.1f} s] {msg}", file=sys.stderr, flush=True)

    return say


def count_named_peers(args, rows: list) -> bool:
    """A peer (torch's kernels: information only) that ``--only`` named is counted toward
    RESULT: its verdict is the question asked (``check --only torch-naive`` read RESULT:
    PASS from the yardsticks while torch-naive FAILed, a probe, 2026-12-07). A name given
    to ``--backend`` selects too, but a peer so selected stays information: beside the
    kernel under test, as ``--backend triton --backend sdpa-math`` asks. Its records lose
    ``peer`` and gain ``named``; returns whether any did."""
    named = set(getattr(args, "only", None) or ())
    changed = False
    for r in rows:
        if r.get("peer") and (r.get("backend") or r.get("kernel")) in named:
            r["peer"], r["named"], changed = False, True, True
    return changed


def mark_unjudged(args, report: dict, rows: list) -> None:
    """``report["unjudged"]``: {name: why} of each kernel ``--only`` or ``--backend`` named
    that no record of ``rows`` judged (each skipped, or none at all), when that is every one
    named: the question asked went unanswered, whatever the yardsticks said (exit 2)."""
    named = list(dict.fromkeys([*(getattr(args, "only", None) or ()), *args.backend]))
    whys: dict[str, list] = {n: [] for n in named}
    for r in rows:
        name = r.get("backend") or r.get("kernel")
        if name in whys:
            whys[name].append(r.get("skipped"))
    if named and all(None not in w for w in whys.values()):
        report["unjudged"] = {n: "; ".join(dict.fromkeys(w)) or "no case took it"
                              for n, w in whys.items()}
        report["passed"] = None  # no verdict: --json said true beside exit 2 (a red team)


def _unjudged(report: dict) -> str:
    return "no case judged the kernels named: " + "; ".join(
        f"{n}: {why}" for n, why in report["unjudged"].items())


MODELS = ("flash_model", "split_model")  # judged by construction: no kernel under test


def result_line(report: dict) -> str:
    """The RESULT line of a check report: PASS, FAIL, or NOTHING JUDGED (exit 2); a PASS
    says which counted kernels went unjudged on some or all records (a probe, 2026-12-07:
    `check --shape 1x8x4096x128` read "RESULT: PASS" on the flash model alone, the Triton
    kernel skipped on every record: the interpreter too slow at that shape)."""
    if report.get("unjudged"):
        return f"RESULT: NOTHING JUDGED (exit 2): {_unjudged(report)}"
    if not report["passed"]:
        left = report.get("meta", {}).get("strays") or []
        return "RESULT: FAIL" + (f": a kernel's code left {len(left)} process(es) running "
                                 f"once the workers ended, killed ({'; '.join(left[:3])})"
                                 if left else "")
    counts: dict[str, list] = {}
    for r in [*report.get("backends", ()), *report.get("gradients", ()),
              *report.get("rows", ())]:
        name = r.get("backend") or r.get("kernel")
        if name and name not in MODELS and not r.get("peer"):
            counts.setdefault(name, []).append(r.get("skipped"))
    unjudged = {n: w for n, w in counts.items() if any(w)}
    if not unjudged:
        return "RESULT: PASS"
    parts = [f"{n} on {sum(map(bool, w))} of {len(w)} record(s) ("
             f"{'; '.join(dict.fromkeys(x for x in w if x))[:160]})" for n, w in unjudged.items()]
    alone = all(all(w) for w in counts.values())
    return ("RESULT: PASS" + (", but no kernel of yours or flashbench's was judged: only the "
                              "exactness and the models" if alone else "")
            + "; not judged: " + "; ".join(parts))


def strays_fail(report: dict, before=()) -> None:
    """What a kernel's code left running once a check's workers ended (a double fork and
    ``setsid``: re-parented to this process, their subreaper) is killed, named in
    ``meta.strays`` and fails the check, exit 1 (such a daemon lived on after check had
    exited, where it could rewrite the --json file: found 2026-12-07). ``before``: this
    process's children at the check's start, not its to judge."""
    if "flashbench.backends.worker" not in sys.modules:  # no kernel of a user's ran
        return
    from flashbench.backends.strays import sweep

    left = sweep(before, grace=0.2)  # the workers were killed just now: they may be ending
    if left:
        report.setdefault("meta", {})["strays"] = left
        report["passed"] = False
        report.pop("unjudged", None)


def emit(report: dict, render, as_json: bool) -> int:
    """Print ``report`` as JSON or as ``render(report)``; the exit status: 2 when none of the
    kernels named was judged (:func:`mark_unjudged`), else 0 when it passed, 1 when not."""
    if as_json:
        json.dump(jsonable(report), sys.stdout, indent=1)
        print()
    else:
        print(render(report))
    if report.get("unjudged"):
        print(f"flashbench check: {_unjudged(report)}", file=sys.stderr)
        return 2
    return 0 if report["passed"] else 1


def speed_pass(report: dict) -> str:
    """A speed run's PASS, and its rows not timed (a PASS beside Triton's rows "not timed"
    read as a verdict on them: a probe, 2026-12-07)."""
    idle = [r for r in report["rows"] if r.status == "not timed"]
    return "PASS" + (f" ({len(idle)} of {len(report['rows'])} row(s) not timed: "
                     f"{', '.join(dict.fromkeys(r.backend for r in idle))})" if idle else "")
