"""``flashbench history``: asv results as tables, CSVs and plots."""

from __future__ import annotations

import os
import sys


def add_parser(sub) -> None:
    h = sub.add_parser("history", help="asv results as tables, CSVs and plots",
                       description="Load every asv results file of one or several results "
                       "folders into one tidy table; write report.md, which opens with the "
                       "answer (tracks outside their band, steps found, failed results), "
                       "then accuracy bands, TFLOP/s trends and steps per machine; CSVs and "
                       "PNG plots beside it.")
    h.add_argument("results_dir", nargs="*", default=["results"],
                   help="asv results folder(s), each with its benchmarks.json "
                        "(default: results)")
    h.add_argument("--out", default="history-report",
                   help="folder for CSVs, plots and report.md: a new or empty folder, or "
                        "one holding a previous history report (default: history-report)")
    h.add_argument("--force", action="store_true",
                   help="write into --out even if it holds other files (overwrites "
                        "report.md, results.csv, ... there)")
    h.set_defaults(func=run)


def _distinct(dirs: list[str]) -> list[str]:
    """The folders, each once (the same folder given twice would count every row twice):
    a folder met again, by its real path, is dropped with a warning on stderr."""
    seen, kept = {}, []
    for d in dirs:
        real = os.path.realpath(d)
        if real in seen:
            print(f"flashbench history: warning: {d} given more than once (as {seen[real]}); "
                  "read once", file=sys.stderr)
            continue
        seen[real] = d
        kept.append(d)
    return kept


def run(args) -> int:
    import warnings

    from flashbench.history import ResultsWarning
    from flashbench.history.report import build_report

    shown = warnings.showwarning

    def show(message, category, *rest, **kw):  # a skipped file: one line, no source line
        if issubclass(category, ResultsWarning):
            print(f"flashbench history: warning: {message}", file=sys.stderr)
        else:
            shown(message, category, *rest, **kw)

    dirs = _distinct(args.results_dir)
    warnings.showwarning = show
    try:
        print(build_report(dirs[0] if len(dirs) == 1 else dirs, args.out, force=args.force))
    finally:
        warnings.showwarning = shown
    return 0
