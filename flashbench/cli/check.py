"""``flashbench check``: exactness of the streaming and accuracy per dtype and backend."""

from __future__ import annotations

import sys
from dataclasses import replace

from flashbench.cli.common import (
    block,
    chosen_backends,
    count_named_peers,
    distinct,
    emit,
    finite,
    lengths,
    mark_unjudged,
    parse_shape,
    positive_int,
    progress_printer,
    seed,
    softcap,
    strays_fail,
    window,
)
from flashbench.inputs.precision import CHECK_DTYPES, DTYPES, get_precision
from flashbench.inputs.problem import DISTRIBUTIONS
from flashbench.inputs.validation import DEFAULT_TIME_LIMIT

# what --decode does not read: forward options (a decode case is --decode-case's)
FORWARD_ONLY = ("--shape", "--kv-heads", "--window", "--softcap", "--sinks", "--varlen",
                "--variants", "--block", "--pass")


def add_parser(sub) -> None:
    c = sub.add_parser("check", help="exactness of the streaming and accuracy per dtype",
                       description="Exactness (fp64 streamed vs one-shot, PASS iff <= 1e-12) "
                       "and per-dtype accuracy with the baseline rule, for the flash model and "
                       "every backend. Exit 1 on any FAIL, 2 on bad input.")
    c.add_argument("--shape", type=parse_shape, action="append",
                   help="BxHxNxd or BxHxNqxNkxd, H may be H/Hkv (grouped-query: 1x32/8x1024x128),"
                   " d may be d/dv (v's head dim: 1x8x1024x192/128); repeat for several "
                   "(default: realistic set)")
    c.add_argument("--kv-heads", type=positive_int, metavar="N",
                   help="key/value heads (grouped-query attention) for every shape, given or "
                   "default; N must divide each shape's H")
    c.add_argument("--dtype", nargs="+", default=list(CHECK_DTYPES), choices=list(DTYPES),
                   help=f"precisions judged (default: {' '.join(CHECK_DTYPES)})")
    c.add_argument("--dist", nargs="+", default=None, choices=list(DISTRIBUTIONS),
                   help="input distributions (default: normal for the cases --shape, "
                   "--varlen or --decode-case give; normal and outliers for the default set)")
    c.add_argument("--causal", choices=["both", "on", "off"], default="both",
                   help="causal masking, bottom-right aligned (default: both: each case twice)")
    c.add_argument("--seed", type=seed, default=0, help="input seed, >= 0 (default 0)")
    c.add_argument("--block", type=block, default=None,
                   help="streaming block (keys) of the flash model, >= 1 (default 64)")
    c.add_argument("--window", type=window, metavar="L,R",
                   help="sliding window (FlashAttention's window_size): query i sees keys "
                   "i + Nk - Nq - L .. i + Nk - Nq + R; -1 unbounded (e.g. 128,0; write "
                   "--window=-1,0 when L is -1)")
    c.add_argument("--softcap", type=softcap, metavar="C",
                   help="logit softcap C > 0: scores become C tanh(s / C) (Gemma 2: 50)")
    c.add_argument("--sinks", action="store_true",
                   help="attention sinks: one seeded logit per query head, N(0, 1) + log(Nk) - 2 "
                   "(about 8%% of a row, where it weighs), in each row's softmax "
                   "denominator (gpt-oss)")
    c.add_argument("--varlen", type=lengths, metavar="SPEC",
                   help="a packed variable-length batch (FlashAttention's varlen layout), "
                   "with each shape's H, Hkv and d (--shape BxHxNxd, its N unused; default "
                   "H=2, d=64), forward and backward. SPEC: N1,N2,... the lengths, queries "
                   "and keys alike (0 allowed; an item Q:K: Q queries on K keys, causal "
                   "bottom-right); uniform:LO-HI:COUNT, COUNT lengths uniform in LO..HI; "
                   "lognormal:MEDIAN:SIGMA:COUNT, round(exp(N(ln MEDIAN, SIGMA^2))); "
                   "distributions draw with --seed (numpy default_rng(seed + 3)) and the "
                   "header prints the lengths drawn")
    c.add_argument("--variants", action="store_true",
                   help="judge each shape with every variant of flashbench.measure.varlen."
                   "VARIANT_SET (causal window=(128,0), softcap=30, sinks, varlen 512,1000,77) "
                   "in one report, the sinks causal (where a row's sink weighs); at N <= 129 "
                   "keys the window is (N // 4, 0), one that hides keys")
    c.add_argument("--backend", action="extend", nargs="+", default=[],
                   metavar="NAME|MODULE:FUNCTION",
                   help="a backend name (a flashbench.backends registry name: an unknown name "
                   "lists them; or an installed flashbench.backends entry point) selects it; "
                   "package.module:function adds your own attention function, judged like "
                   "flashbench's kernel. One or more, repeatable. Default: flashbench's "
                   "kernels, torch-naive, torch-sdpa and every entry point; on a GPU machine "
                   "every backend")
    c.add_argument("--only", nargs="+", metavar="NAME|MODULE:FUNCTION",
                   help="just these backends (names or module:function, as --backend takes "
                   "them), none of the defaults; the flash model and the float64 reference "
                   "still run as the yardsticks")
    c.add_argument("--pass", dest="pass_", choices=["fwd", "bwd"], default=None,
                   help="judge only the forward (fwd) or only the backward (bwd: the "
                   "backends' gradients; their forward is not judged); default both")
    c.add_argument("--no-backends", action="store_true",
                   help="models only: no torch, Triton or user backends")
    c.add_argument("--timeout", type=finite(0.0, 86400.0, lo_open=True), default=None,
                   metavar="SECONDS",
                   help="per-call time limit of a user's kernel (its import, each forward, "
                   "each backward, each decode), after which it FAILs and its later calls "
                   f"are not run (default {DEFAULT_TIME_LIMIT:g})")
    c.add_argument("--json", action="store_true", help="machine-readable report on stdout")
    c.add_argument("--tables", action="store_true",
                   help="print the five full tables instead of the compact view (one line "
                   "per kernel and case; --decode prints its tables either way)")
    c.add_argument("--save", metavar="PATH", default=None,
                   help="where the five tables are written, every run: a file, or a folder "
                   "(then flashbench-check.txt in it); rewritten each run (default: "
                   "flashbench-check.txt in the working folder; with --decode, its tables "
                   "and only where --save is given)")
    c.add_argument("--quiet", action="store_true", help="no progress on stderr")
    c.add_argument("--decode", action="store_true", help="decode over a KV cache instead: "
                   "split-KV exactness, paged vs contiguous, accuracy of the split model and "
                   "the decode backends (docs/decode.md)")
    c.add_argument("--decode-case", action="append",
                   metavar="BxH[/Hkv]xNqxd[/dv]:L1,L2,..[:pP][:mla]",
                   help="with --decode: a case, cache lengths per sequence, pages of P keys "
                   "(contiguous without :pP), :mla the absorbed form (V = K[..., :dv], "
                   "1x4/1x1x576/512:32:p16:mla); repeatable (default: a small set)")
    c.set_defaults(func=run)


def _cases(args):
    from flashbench.measure.forward import default_cases
    from flashbench.measure.records import Case

    if args.shape:
        causals = {"both": (False, True), "on": (True,), "off": (False,)}[args.causal]
        cases = [Case(s, dist, c) for s in args.shape for dist in args.dist for c in causals]
    else:
        cases = [c for c in default_cases()
                 if args.causal == "both" or c.causal == (args.causal == "on")]
        if args.dist != list(DISTRIBUTIONS[:2]):
            cases = [Case(c.shape, d, c.causal) for d in args.dist
                     for c in {(c.shape, c.causal): c for c in cases}.values()]
    if args.kv_heads is not None:
        cases = [replace(c, shape=_kv_heads(c.shape, args.kv_heads)) for c in cases]
    cases = [replace(c, **_variant(args)) for c in cases]
    if args.variants:
        return _variant_set(args, cases)
    if args.varlen is None:
        return cases
    from flashbench.inputs.problem import Shape

    keys = getattr(args, "varlen_k", None)  # Q:K items: the key lengths where they differ
    # the shape's B, Nq, Nk: the batch and its longest sequence of queries, of keys
    n, m = max(args.varlen), max(args.varlen if keys is None else keys)
    shapes = [s if args.kv_heads is None else _kv_heads(s, args.kv_heads)
              for s in args.shape or [Shape(1, 2, 64, 64, 64)]]  # it was not read here
    return [replace(c, shape=replace(s, B=len(args.varlen), Nq=n, Nk=m),
                    varlen=args.varlen, varlen_k=keys)
            for s in dict.fromkeys(shapes)
            for c in {(c.dist, c.causal): c for c in cases}.values()]


def _biting(kw: dict, nk: int) -> dict:
    """A variant's fields as --variants judges them, each where it changes the result:
    sinks causal (a row that sees few keys weighs its sink: causal off, an N(0, 1) sink
    beside 1,024 keys weighed under bf16's rounding, and a kernel that ignored the sinks
    PASSed `--variants --shape 1x2x1024x64 --dtype bf16`, a probe, 2026-12-07; they are
    drawn + log(Nk) - 2 since 2026-12-08, and weigh either way); a window
    that hides keys at ``nk`` keys: where the set's covers every key a causal query sees
    (nk <= left + 1), left = max(1, nk // 4) (one that ignored it PASSed at N <= 128)."""
    if kw.get("sinks"):
        return {**kw, "causal": True}
    left, right = kw.get("window") or (None, None)
    if left is None or nk > left + 1:
        return kw
    return {**kw, "window": (max(1, nk // 4), right)}


def _kv_heads(shape, n: int):
    """``shape`` with ``n`` key/value heads (--kv-heads); a shape that says other ones
    (1x4/2x...) contradicts it: ValueError (the flag won without a word)."""
    if shape.Hkv is not None and shape.Hkv != n:
        raise ValueError(f"--kv-heads {n} contradicts the shape {shape.spec()}, whose H/Hkv "
                         f"says {shape.Hkv}: give the heads once")
    return replace(shape, Hkv=n)


def _variant_set(args, cases):
    """--variants: each distinct shape and dist (causal off) with every variant of the set."""
    from flashbench.measure.varlen import VARIANT_SET

    if _variant(args) or args.varlen:
        raise ValueError("--variants runs its own set: without --window, --softcap, --sinks "
                         "or --varlen")
    base = {(c.shape, c.dist): replace(c, causal=False) for c in cases}.values()
    out = []
    for kw in VARIANT_SET.values():
        for c in base:
            kw = _biting(kw, c.shape.Nk)
            if "varlen" in kw:
                n = max(kw["varlen"])
                c = replace(c, shape=replace(c.shape, B=len(kw["varlen"]), Nq=n, Nk=n))
            out.append(replace(c, **kw))
    return list(dict.fromkeys(out))


def _variant(args) -> dict:
    """The Case fields of --window, --softcap, --sinks (empty without them)."""
    fields = {"window": args.window, "softcap": args.softcap, "sinks": args.sinks or None}
    return {k: v for k, v in fields.items() if v is not None}


def _backward_cases(args, cases):
    """Where gradients are judged: the shapes given, a packed batch's, --variants' own, else
    the default gradient cases (with the variant asked for); None: the defaults as run_check
    picks them."""
    if args.shape or args.varlen or args.variants:
        return cases
    if not _variant(args):
        return None
    from flashbench.measure.backward import default_backward_cases

    causals = {c.causal for c in cases}
    return [replace(c, **_variant(args)) for c in default_backward_cases() if c.causal in causals]


def run(args) -> int:
    from flashbench.infra.freeze import adopt, children
    from flashbench.infra.sealed import sealed

    adopt()  # a process a kernel's code leaves is re-parented here (common.strays_fail)
    args.children = children()  # what ran before is not the check's
    try:
        with sealed():  # no kernel's worker may read or write this process's memory
            return _run(args)
    finally:
        adopt(False)


def _run(args) -> int:
    # the door: each --dtype name becomes its Precision here, once; every layer below takes it
    args.dtype = [get_precision(d) for d in distinct(args.dtype, "--dtype", "check")]
    if args.dist is None:  # only the cases asked for: a given case is drawn from N(0, 1)
        asked = args.shape or args.varlen is not None or args.decode_case
        args.dist = ["normal"] if asked else list(DISTRIBUTIONS[:2])
    if args.decode or args.decode_case:
        from flashbench.cli import decode

        given = [flag for flag in FORWARD_ONLY if getattr(
            args, {"--pass": "pass_"}.get(flag, flag[2:].replace("-", "_"))) not in (None, False)]
        if given:
            raise ValueError(f"check --decode does not read {', '.join(given)}: forward "
                             "options (a decode step is a forward alone, no backward pass; "
                             "the decode paths take no window, softcap, sinks, packed batch "
                             "or streaming block; a decode case is given with --decode-case)")
        return decode.run(args)
    from flashbench.cli.check_view import save_target
    from flashbench.measure.footprint import packed_too_big, too_big

    args.dist = distinct(args.dist, "--dist", "check")
    args.shape = distinct(args.shape, "--shape", "check")  # a probe: a repeat ran twice
    spec = args.varlen
    if spec is not None:  # the lengths: a list as given, a distribution drawn with --seed
        args.varlen, args.varlen_k = spec.draw(args.seed), spec.keys
    cases = _cases(args)
    refusal = (too_big([c.shape for c in cases]) if spec is None else
               packed_too_big([c.shape for c in cases], args.varlen, args.varlen_k))
    if refusal is not None:  # refused before torch is imported (2 s of CPU)
        raise ValueError(refusal)
    backward = () if args.pass_ == "fwd" else _backward_cases(args, cases)
    refusal = _band_refusal(args.dtype, cases, backward)
    if refusal is not None:  # refused before a minute's reference and forward bands
        raise ValueError(refusal)
    from flashbench.measure.run import overall_passed, run_check

    backends = chosen_backends(args, _resolve)
    saved = save_target(args.save)  # checked before the work
    report = run_check(cases, dtypes=args.dtype, seed=args.seed, block=args.block or 64,
                       backends=backends, say=progress_printer(not args.quiet),
                       backward_cases=backward,
                       time_limit=args.timeout, forward=args.pass_ != "bwd")
    if spec is not None and spec.seeded:
        report["meta"]["varlen"] = {"spec": spec.text, "seed": args.seed,
                                    "lengths": list(args.varlen)}
    rows = (report.get("backends") or []) + (report.get("gradients") or [])
    if count_named_peers(args, rows):
        report["passed"] = overall_passed(report)
    mark_unjudged(args, report, rows)
    strays_fail(report, args.children)
    text, unsaved = _render(report, saved, args.tables)  # saved with --json too
    status = emit(report, lambda r: text, args.json)
    if unsaved:  # the result printed first: a probe's unwritable --save lost it, exit 3
        print(f"flashbench check: failed: the tables were not saved to {saved}: {unsaved} "
              "(the result above stands)", file=sys.stderr)
        return status or 3  # a FAIL (1) or nothing judged (2) is still the answer
    return status


def _band_refusal(dtypes, cases, backward) -> str | None:
    """Why a band this check needs cannot be measured here (the first case's, in order),
    or None: the flash model's forward band of each case at each dtype but fp64 (judged
    with --pass bwd too, as a yardstick), the gradient band of each backward case
    (``backward``; None: the small default ones) at each dtype with a backward model."""
    from flashbench import numerics
    from flashbench.bands.case import size_refusal

    banded = [p for p in dtypes if p.name != "fp64"]
    graded = [p for p in banded if p.name in numerics.GRAD_DTYPES]
    asks = [(c.shape, False) for c in cases if banded]
    asks += [(c.shape, True) for c in (backward or ()) if graded]
    return next((r for r in (size_refusal(*a) for a in dict.fromkeys(asks)) if r), None)


def _resolve(names):
    """The backend registry's selection (imported here: --no-backends never loads torch)."""
    from flashbench.backends import resolve_backends

    return resolve_backends(names)


def _render(report: dict, saved, tables: bool) -> tuple[str, str | None]:
    """The five tables into ``saved`` (every run, --json too), then the compact view or, with
    --tables, the tables for stdout; and why ``saved`` could not be written (None: it was)."""
    from flashbench.cli.check_tables import render_tables
    from flashbench.cli.check_view import render_compact
    from flashbench.cli.output import write_atomically

    text, unsaved = render_tables(report), None
    try:
        write_atomically(saved, text + "\n", force=True)
    except OSError as exc:
        unsaved = " ".join(str(exc).split())
    where = f"{saved} (NOT saved: {unsaved})" if unsaved else str(saved)
    return (text if tables else render_compact(report, where)), unsaved
