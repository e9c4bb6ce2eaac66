"""``flashbench bands``: the lecture's error bands per dtype x N x distribution."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from flashbench.cli.common import distinct, positive_int, progress_printer
from flashbench.cli.output import output_file, write_atomically
from flashbench.inputs.problem import DISTRIBUTIONS


def add_parser(sub) -> None:
    from flashbench.bands.measure import BAND_N, SEEDS

    b = sub.add_parser(
        "bands", help="error bands per dtype x N x distribution (p50 / p99 / max)",
        description="Error of the flash model (and of other kernels) against the float64 "
        "reference of the same inputs, per dtype x N (keys per query row) x input "
        "distribution x causal, over several seeds: p50 / p99 / max of the absolute and "
        "relative error, in eps too, and the baseline ratio. Measured afresh (default: "
        f"{SEEDS} seeds, N {' '.join(map(str, BAND_N))}, under a minute here) or read "
        "from asv results (--from-results).")
    b.add_argument("--dtype", nargs="+", default=None,
                   help="dtypes (default: every registry dtype but fp64 that the models take)")
    b.add_argument("--n", nargs="+", type=positive_int, default=list(BAND_N),
                   help=f"keys per query row (default: {' '.join(map(str, BAND_N))})")
    b.add_argument("--dist", nargs="+", default=list(DISTRIBUTIONS), choices=list(DISTRIBUTIONS),
                   help="input distributions (default: all three)")
    b.add_argument("--causal", choices=["both", "on", "off"], default="off",
                   help="causal cells too (default off: the lecture's table; causal rows "
                   "near full length differ little: docs/bands.md)")
    b.add_argument("--seeds", type=positive_int, default=SEEDS,
                   help=f"seeds per cell (default {SEEDS}; seeds 0..S-1)")
    b.add_argument("--kernels", nargs="+", default=["flash_model"],
                   help="flash_model and/or backend names, e.g. triton (the interpreter "
                   "here: about 1 s per seed and cell), torch-naive (default: flash_model)")
    b.add_argument("--unrounded", action="store_true",
                   help="also the error against the reference of the unrounded draws "
                   "(input rounding included, the lecture's script)")
    b.add_argument("--tensor", choices=["o", "lse"], default="o",
                   help="which output to table (default o)")
    b.add_argument("--from-results", metavar="DIR", default=None,
                   help="print the latest commit's bands from these asv results instead")
    b.add_argument("--json", metavar="FILE", default=None,
                   help="also write every band (O and LSE, per-seed maxima) as JSON")
    b.add_argument("--force", action="store_true", help="let --json overwrite FILE")
    b.add_argument("--quiet", action="store_true", help="no progress on stderr")
    b.add_argument("--head-dim", type=head_dims, default=None, metavar="D[/DV]",
                   help="head dims of the drawn problems (default 64; 80, 192/128: a band "
                   "measured at d = 80 is not d = 64's)")
    b.set_defaults(func=run)
    MEASURE_DEFAULTS.update({a.dest: a.default for a in b._actions if a.dest in (
        "dtype", "n", "dist", "causal", "seeds", "kernels", "unrounded", "head_dim")})


MEASURE_DEFAULTS: dict = {}  # the measurement options' defaults (--from-results refuses others)


def head_dims(text: str) -> tuple[int, int | None]:
    """``D`` or ``D/DV`` (the last field of a shape, DESIGN: ``192/128``) -> (d, dv)."""
    d, slash, dv = text.partition("/")
    try:
        dims = int(d), (int(dv) if slash else None)  # "64/" is no D/DV
    except ValueError:
        raise argparse.ArgumentTypeError(f"head dim must be D or D/DV, integers, got {text!r}"
                                         ) from None
    if any(x is not None and x < 1 for x in dims):
        raise argparse.ArgumentTypeError(f"head dims must be >= 1, got {text!r}")
    return dims


def _refuse_big(args) -> None:
    """Refuse, before measuring, an N whose cell would not fit in memory (the figure as
    ``flashbench check`` gives it: one seed's draws per cell, the seeds stacked)."""
    from dataclasses import replace

    from flashbench.bands.measure import cell_shape
    from flashbench.measure.footprint import too_big

    causal = {"both": (False, True), "on": (True,), "off": (False,)}[args.causal]
    shapes = [replace(s, B=s.B * args.seeds) for s in
              (cell_shape(n, causal=c) for n in args.n for c in causal)]
    refusal = too_big(shapes)
    if refusal is not None:
        raise ValueError(f"--n {max(args.n)} with --seeds {args.seeds}: {refusal}")


def run(args) -> int:
    from flashbench.cli.bands_tables import legend, render_table, to_json

    target = output_file(args.json, "--json", args.force)
    for option in ("dtype", "n", "dist", "kernels"):
        setattr(args, option, distinct(getattr(args, option), f"--{option}", "bands"))
    if args.from_results is None:
        _refuse_big(args)
    elif not Path(args.from_results).is_dir():
        raise ValueError(f"--from-results {args.from_results}: not a folder of asv results")
    else:  # what is read is the suite's grid: options that choose a measurement are refused
        given = [f"--{o.replace('_', '-')}" for o in ("dtype", "n", "dist", "causal", "seeds",
                                                     "kernels", "unrounded", "head_dim")
                 if getattr(args, o) != MEASURE_DEFAULTS[o]]
        if given:
            raise ValueError(f"{', '.join(given)} choose(s) a measurement; --from-results "
                             "prints the bands suite's own grid as recorded")
    if "standard_model" in args.kernels:
        raise ValueError("--kernels standard_model: its band is measured beside every "
                         "kernel's (the ratios' denominator); name flash_model or a backend")
    printer, skipped, failed = progress_printer(not args.quiet), [], []

    def say(text: str) -> None:  # a kernel skipped or failed is said after the tables too,
        if ": skipped: " in text:  # --quiet or not (a probe read a raising kernel's "inf"
            skipped.append(text.strip())  # with no reason)
        elif ": failed (" in text:
            failed.append(text.strip())
        printer(text)

    if args.from_results is not None:
        bands, meta = _from_results(args.from_results)
        head = (f"Bands of commit {meta['commit'][:8]} on {meta['machine']} from the asv "
                f"results in {args.from_results} (the bands suite's tracks).")
    else:
        bands, meta = _measure(args, say)
        head = (f"Measured in {meta['seconds']:.1f} s (wall clock, this machine): "
                f"{meta['seeds']} seeds x {meta['rows_per_seed']} query rows x d="
                f"{meta['head_dim']} per cell.")
    print(head)
    print(legend(meta.get("seeds"), meta.get("rows_per_seed"), args.tensor))
    print()
    print(render_table(bands, tensor=args.tensor))
    for kernel in sorted({b["kernel"] if isinstance(b, dict) else b.kernel for b in bands}
                         - {"flash_model", "standard_model"}):
        print(f"\n{kernel}:\n")
        print(render_table(bands, tensor=args.tensor, kernel=kernel))
    if skipped:
        print("\nNot measured: " + "; ".join(dict.fromkeys(skipped)))
    if failed:
        print("\nFailed: "
              + "; ".join(dict.fromkeys(failed)))
    if target is not None:
        meta = {**meta, "failed": list(dict.fromkeys(failed))}
        write_atomically(target, json.dumps(to_json(bands, meta), indent=1) + "\n", args.force)
        print(f"\nwrote {target}")
    return 1 if failed else 0  # a kernel named that could not run: its bands are no answer


def _rows_drawn(ns, causal) -> int | str:
    """The query rows a seed draws per cell (whole heads of a cell's rows: 225 at N = 300,
    :func:`~flashbench.bands.measure.cell_shape`), one number or their range."""
    from flashbench.bands.measure import cell_shape

    rows = {s.H * s.Nq for n in ns for c in causal for s in [cell_shape(n, causal=c)]}
    return rows.pop() if len(rows) == 1 else f"{min(rows)}-{max(rows)}"


def _measure(args, say):
    from flashbench.bands.measure import HEAD_DIM, measure_bands
    from flashbench.inputs.precision import get_precision

    # the door: each --dtype name becomes its Precision here, once (None: the default set)
    dtypes = None if args.dtype is None else [get_precision(d) for d in args.dtype]
    causal = {"both": (False, True), "on": (True,), "off": (False,)}[args.causal]
    versus = ("fp64", "standard_model") + (("fp64-unrounded",) if args.unrounded else ())
    t0 = time.perf_counter()
    d, dv = args.head_dim or (HEAD_DIM, None)
    bands = measure_bands(dtypes=dtypes, ns=args.n, dists=args.dist, causal=causal,
                          seeds=args.seeds, kernels=args.kernels, versus=versus, say=say,
                          d=d, dv=dv)
    meta = {"seconds": time.perf_counter() - t0, "seeds": args.seeds,
            "rows_per_seed": _rows_drawn(args.n, causal),
            "head_dim": d if dv is None else f"{d}/{dv}",
            "dtypes": sorted({b.dtype for b in bands}), "n": list(args.n), "dists": args.dist,
            "causal": list(causal), "kernels": args.kernels, "versus": list(versus)}
    return bands, meta


def _from_results(path):
    import warnings

    from flashbench.history import load_results
    from flashbench.history.bands import band_history, latest_bands
    from flashbench.history.files import ResultsWarning

    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        df = load_results(path)
    for w in said:  # a file skipped may hold the newest commit's bands (a probe: the table
        if issubclass(w.category, ResultsWarning) and "skipped" in str(w.message):
            print(f"flashbench bands: {w.message}", file=sys.stderr)  # read an older one)
    records = latest_bands(band_history(df))
    if not records:
        raise ValueError(f"--from-results {path}: no bands tracks recorded there")
    return records, {"commit": str(records[0]["commit"]), "machine": str(records[0]["machine"]),
                     "seeds": None, "rows_per_seed": None, "source": str(path)}
