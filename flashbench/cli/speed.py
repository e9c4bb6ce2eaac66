"""``flashbench speed``: how fast each backend is on a case, every timed call checked."""

from __future__ import annotations

import secrets
import sys
from dataclasses import asdict

from flashbench.cli.common import (
    chosen_backends,
    distinct,
    emit,
    finite,
    lengths,
    parse_shape,
    seed,
)
from flashbench.cli.common import softcap as _softcap
from flashbench.cli.common import window as _window
from flashbench.cli.speed_view import render_text, untimed
from flashbench.infra.args import int_at_least
from flashbench.inputs.precision import CHECK_DTYPES, DTYPES, FP8_DTYPES, get_precision
from flashbench.inputs.validation import DEFAULT_TIME_LIMIT
from flashbench.timed.attention import PASSES  # fwd, bwd, fwdbwd (docs/speed.md)

MAX_SAMPLES = 10_000  # --samples' bound (below, where the option is defined)
CHECKED = "the float64 reference that checks the timed outputs"  # a memory refusal's words


def add_parser(sub) -> None:
    s = sub.add_parser(
        "speed", help="time every backend on a case: every timed call on fresh inputs, checked",
        description="Time each backend that takes the case (flashbench's kernels, torch's, "
        "yours with --backend module:function, in its own worker process) with the guarded "
        "timer: a pool of inputs drawn from a per-run seed, refilled in place, every timed "
        "output checked outside the clock (stale, wrong, lazy type, aliases an input, thread "
        "left running, clock tampered, below the roofline floor). Per row: median, p10, p90 "
        "of >= 10 calls, TFLOP/s, GB/s, % of the best matmul peak measured here, speedup "
        "against --baseline. Exit 0 all PASS, 1 a timed output failed or a trick was caught, "
        "2 bad input, 3 flashbench failed. docs/speed.md.")
    s.add_argument("--shape", type=parse_shape, action="append",
                   help="BxHxNxd or BxHxNqxNkxd, H may be H/Hkv (1x32/8x1024x128), d may "
                   "be d/dv (1x8x1024x192/128); repeat for several (default 1x8x1024x64)")
    s.add_argument("--dtype", nargs="+", choices=list(DTYPES), default=None,
                   help="precisions (default: bf16 on a GPU, fp32 on a CPU)")
    s.add_argument("--causal", choices=["both", "on", "off"], default=None,
                   help="default: off; --decode's default cases each their own (3 causal)")
    s.add_argument("--window", type=_window, metavar="L,R",
                   help="sliding window, as check takes it (query i sees keys "
                   "i + Nk - Nq - L .. i + Nk - Nq + R: bottom-right aligned)")
    s.add_argument("--softcap", type=_softcap, metavar="C",
                   help="logit softcap C > 0: scores become C tanh(s / C)")
    s.add_argument("--sinks", action="store_true",
                   help="attention sinks: one logit per query head, N(0, 1) from the run's "
                        "seed + log(Nk) - 2 (about 8%% of a row, where they weigh)")
    s.add_argument("--varlen", type=lengths, metavar="SPEC",
                   help="a packed batch (FlashAttention's varlen layout) of these lengths, as "
                   "check --varlen takes them (a list, or uniform:LO-HI:COUNT, "
                   "lognormal:MEDIAN:SIGMA:COUNT drawn from the run's seed); --shape gives H "
                   "and d (default 1x8x1024x64's); the forward pass, no variant")
    s.add_argument("--decode", action="store_true",
                   help="decode over a KV cache instead, as check --decode: GB/s of the cache "
                   "read and %% of the copy bandwidth (the best this machine has measured, this "
                   "run's included: measure.peaks) (the decode backends)")
    s.add_argument("--decode-case", action="append",
                   metavar="BxH[/Hkv]xNqxd[/dv]:L1,L2,..[:pP][:mla]", help="with --decode: a "
                   "case, cache lengths, pages of P keys, :mla (as check --decode-case's)")
    s.add_argument("--pass", dest="direction", choices=PASSES, default="fwd",
                   help="the pass timed: fwd, bwd (the backward alone; its forward is built "
                   "outside the clock) or fwdbwd (default fwd)")
    s.add_argument("--backend", action="extend", nargs="+", default=[],
                   metavar="NAME|MODULE:FUNCTION",
                   help="a registry backend or entry point, or package.module:function (your "
                   "kernel, timed in its worker process); one or more, repeatable. "
                   "Default: as check's")
    s.add_argument("--only", nargs="+", metavar="NAME|MODULE:FUNCTION",
                   help="time just these backends (as --backend takes them), none of the "
                   "defaults: your kernel alone, or beside the one peer you name")
    s.add_argument("--baseline", metavar="NAME",
                   help="the backend speedups are against (default: the fastest torch peer)")
    # at most 10,000: the speedup's bootstrap holds 1,999 resamples of every call (a probe's
    # 1e11 ran on unbounded; at 1e6 the resamples alone would take 16 GB)
    s.add_argument("--samples", type=int_at_least(10, "samples", MAX_SAMPLES),
                   default=10,  # MIN_SAMPLES
                   help=f"timed calls per row, 10 to {MAX_SAMPLES:,} (default 10)")
    s.add_argument("--warmup", type=int_at_least(1, "warmup", MAX_SAMPLES), default=2,
                   help=f"untimed calls first, 1 to {MAX_SAMPLES:,} (default 2)")  # a
    # probe's 1e9 ran on unbounded
    s.add_argument("--seed", type=seed, default=None,
                   help="the run's seed, >= 0 (default: drawn at random, printed)")
    s.add_argument("--timeout", type=finite(0.0, 86400.0, lo_open=True), default=None,
                   metavar="SECONDS", help="per-call time limit of a user's kernel "
                   f"(default {DEFAULT_TIME_LIMIT:g})")
    s.add_argument("--json", action="store_true", help="machine-readable report on stdout")
    s.add_argument("--quiet", action="store_true", help="no progress on stderr")
    s.set_defaults(func=run)


def _variant(args, shape, causal: bool, run_seed: int):
    """The Variant of --window, --softcap, --sinks for one shape (None without them); the
    sinks one per query head beside Nk keys, as check draws them (inputs.sink_logits)."""
    from flashbench.inputs.problem import sink_logits
    from flashbench.inputs.variant import no_variant, variant_of

    window = args.window if args.window is not None else (-1, -1)
    sinks = (tuple(float(x) for x in sink_logits(shape.H, run_seed, shape.Nk, args.softcap))
             if args.sinks else None)
    if no_variant(window, args.softcap, sinks):
        return None
    return variant_of(causal, window=window, softcap=args.softcap, sinks=sinks)


def _decode(args, dtypes, causals, run_seed: int) -> int:
    """--decode: check --decode's cases (or --decode-case's) on the decode backends."""
    from flashbench.backends.decode import get_decode_backend, resolve_decode_backends
    from flashbench.measure.decode import DecodeCase, default_decode_cases
    from flashbench.measure.footprint import decode_too_big
    from flashbench.measure.speeddecode import DecodeSpeedCase

    given = [o for o, on in (("--shape", args.shape), ("--window", args.window),
                             ("--softcap", args.softcap), ("--sinks", args.sinks),
                             ("--pass", args.direction != "fwd")) if on]
    if given:
        raise ValueError(f"speed --decode does not read {', '.join(given)}: a decode step is "
                         "a forward over a KV cache (no backward, no variant), its case "
                         "given with --decode-case")
    cases = ([DecodeCase.parse(spec, causal=c) for spec in args.decode_case for c in causals]
             if args.decode_case else
             [c for c in default_decode_cases() if args.causal is None or c.causal in causals])
    refusal = decode_too_big(cases, purpose=CHECKED)  # 1e11 keys: a MemoryError (a probe)
    if refusal is not None:
        raise ValueError(refusal)
    empty = [c for c in cases if not any(c.lens)]  # every call's output 0: "stale" (a probe)
    if empty:
        raise ValueError(f"speed --decode: a case whose every cache is empty "
                         f"({', '.join(map(str, empty[0].lens))} keys) gives every call the "
                         "same output, zeros: nothing to time (check --decode judges it)")
    return _timed(args, [DecodeSpeedCase(c, d) for c in cases for d in dtypes],
                  chosen_backends(args, resolve_decode_backends), get_decode_backend, run_seed)


def run(args) -> int:
    from flashbench.backends.strays import adopt, limits, priority
    from flashbench.infra.sealed import sealed
    from flashbench.measure.peaks import remember
    from flashbench.measure.planted import ImportGuard, import_judges, snapshot
    from flashbench.timed.threads import without_spinning

    args.environment = without_spinning()  # before torch's OpenMP reads them (timed.threads)
    remember()  # the roofline's remembered peaks, read before any kernel's worker starts
    import_judges()  # ... and what judges, whose files are then watched (measure.planted)
    args.files = snapshot()
    adopt()  # a process a kernel leaves behind is re-parented here (backends.strays)
    args.scheduling = priority()  # before any kernel's worker: one may change it (speedrun)
    args.limits = limits()
    args.guard = ImportGuard.install()  # and no file written since is imported here
    try:
        with sealed():  # no worker may read or write this process's memory (infra.sealed)
            return _run(args)
    finally:
        args.guard.remove()
        adopt(False)


def _run(args) -> int:
    from flashbench.backends import get_backend, resolve_backends
    from flashbench.measure.footprint import too_big
    from flashbench.measure.speed import MIN_SAMPLES, SpeedCase

    if args.samples < MIN_SAMPLES:
        raise ValueError(f"--samples must be >= {MIN_SAMPLES} (a spread needs them), "
                         f"got {args.samples}")
    import torch

    default = ["bf16" if torch.cuda.is_available() else "fp32"]
    dtypes = [get_precision(d).name
              for d in distinct(args.dtype or default, "--dtype", "speed")]
    shapes = distinct(args.shape, "--shape", "speed") or [parse_shape("1x8x1024x64")]
    decode = bool(args.decode or args.decode_case)
    refusal = None if decode else too_big(shapes, purpose=CHECKED)
    if refusal is not None:
        raise ValueError(refusal)
    causals = {"both": (False, True), "on": (True,), "off": (False,)}[args.causal or "off"]
    run_seed = secrets.randbelow(2**31) if args.seed is None else args.seed
    if decode:
        if args.varlen is not None:
            raise ValueError("speed --decode does not read --varlen: a decode case's "
                             "lengths are given with --decode-case")
        return _decode(args, dtypes, causals, run_seed)
    fp8 = [d for d in dtypes if d in FP8_DTYPES]
    if fp8 and (args.window is not None or args.softcap is not None or args.sinks):
        # as check says it; it was "causal must be True or False ..., got Variant" mid-run
        raise ValueError(f"the fp8 models take causal only; --window, --softcap and --sinks "
                         f"are not modelled for {', '.join(fp8)}: time those without fp8")
    if args.varlen is not None:
        cases = _packed(args, shapes, dtypes, causals, run_seed)
    else:
        cases = [SpeedCase(s, d, c, args.direction, _variant(args, s, c, run_seed))
                 for s in shapes for d in dtypes for c in causals]
    return _timed(args, cases, chosen_backends(args, resolve_backends), get_backend, run_seed)


def _timed(args, cases, names, get, run_seed: int) -> int:
    """The speed run of ``cases`` on the backends ``names`` (``get`` makes each), the report
    emitted; --baseline must be one of them."""
    from flashbench.backends import user
    from flashbench.backends.strays import sweep
    from flashbench.measure.planted import planted
    from flashbench.measure.speedrun import run_speed

    if args.baseline is not None and args.baseline not in names:
        raise ValueError(f"--baseline {args.baseline!r} is not one of the backends timed: "
                         f"{names}")
    built = [get(n) for n in names]
    named = {*args.backend, *(args.only or ()), args.baseline}
    asked = {c.dtype for c in cases}  # the defaults: none that takes no dtype asked for
    backends = [b for b in built if b.name in named or getattr(b, "dtypes", None) is None
                or asked & set(b.dtypes)]
    if not backends:  # an empty run read "verdict: PASS", exit 0 (a red team, 2026-12-06)
        takes = sorted({d for b in built for d in (getattr(b, "dtypes", None) or ())})
        raise ValueError(f"nothing to time: no backend of this run takes "
                         f"{', '.join(sorted(asked))} ({', '.join(names)} take "
                         f"{', '.join(takes)}; --backend NAME or --only NAME keeps one, "
                         "with the reason it is not timed)")
    with user.session(args.timeout):
        report = run_speed(cases, backends, run_seed, args.samples, args.warmup,
                           args.baseline, progress=not args.quiet,
                           first=getattr(args, "scheduling", None),
                           first_limits=getattr(args, "limits", None), counted=args.only)
    left = [f"{s} (found after the workers ended)" for s in sweep()]  # before the report
    report["meta"]["environment"] = list(getattr(args, "environment", ()))
    report["meta"]["planted"] = (planted(args.files) if hasattr(args, "files") else []) + \
        (args.guard.refused if hasattr(args, "guard") else [])
    if left:
        report["meta"]["strays"] += left
    report["passed"] = report["passed"] and not left and not report["meta"]["planted"]
    return _emit(args, report)


def _packed(args, shapes, dtypes, causals, run_seed: int) -> list:
    """--varlen's cases: each shape's H, Hkv, d, dv over the lengths (drawn from the run's
    seed when a distribution), B = their count and N = the longest, as check sets them."""
    from dataclasses import replace

    from flashbench.measure.footprint import packed_too_big
    from flashbench.measure.speed import SpeedCase

    given = [o for o, on in (("--window", args.window), ("--softcap", args.softcap),
                             ("--sinks", args.sinks), ("--pass", args.direction != "fwd")) if on]
    if given:
        raise ValueError(f"speed --varlen does not read {', '.join(given)}: a packed batch is "
                         "timed forward, without a variant (check --varlen judges them)")
    lens = tuple(args.varlen.draw(run_seed))
    keys = args.varlen.keys  # Q:K items: the key lengths (a list's alone), else None
    # each sequence's scores, not the totals'
    refusal = packed_too_big(shapes, lens, keys, purpose=CHECKED)
    if refusal is not None:
        raise ValueError(refusal)
    return [SpeedCase(replace(s, B=len(lens), Nq=max(lens), Nk=max(keys or lens)), d, c, "fwd",
                      None, lens, keys)
            for s in dict.fromkeys(shapes) for d in dtypes for c in causals]


def _emit(args, report: dict) -> int:
    """The report (text, or --json), the exit status: 2, one line on stderr, ``passed``
    None, where no row was timed or none of the kernels --backend / --only named, yours
    where you named any (a user's that took no case read PASS on torch's rows, exit 0: a
    probe, 2026-12-07)."""
    rows = report["rows"]
    named = list(dict.fromkeys([*args.backend, *(args.only or ())]))
    # yours, where you named any: a torch peer named beside an untimed kernel of yours read
    # "verdict: PASS", exit 0 (`--only mine:fn torch-sdpa`, mine bf16 alone: a probe)
    named = [n for n in named if ":" in n] or named
    nothing = all(r.status == "not timed" for r in rows)  # none at all, too
    if named and not {r.backend for r in rows if r.status != "not timed"} & set(named):
        report["untimed"] = {n: "; ".join(dict.fromkeys(str(r.reason) for r in rows if r.backend
                                                        == n)) or "no case took it" for n in named}
    if nothing or report.get("untimed"):
        report["passed"] = None  # no verdict: --json said true beside exit 2
    status = (emit({**report, "rows": [asdict(r) for r in rows]}, render_text, True)
              if args.json else emit(report, render_text, False))
    if nothing:
        why = "; ".join(dict.fromkeys(f"{r.backend}: {r.reason}" for r in rows)) or "no rows"
        print(f"flashbench speed: nothing was timed: {why}", file=sys.stderr)
        return 2
    if report.get("untimed"):
        print(f"flashbench speed: none of the kernels named was timed: {untimed(report)}",
              file=sys.stderr)
        return 2
    return status


__all__ = ["add_parser", "run", "render_text", "CHECK_DTYPES"]
