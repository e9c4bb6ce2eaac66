"""``flashbench history``: asv results as tables, CSVs and plots."""

from __future__ import annotations


def add_parser(sub) -> None:
    h = sub.add_parser("history", help="asv results as tables, CSVs and plots",
                       description="Load every asv results file into one tidy table; report "
                       "accuracy bands, TFLOP/s trends and steps (Markdown), write CSVs and "
                       "PNG plots.")
    h.add_argument("results_dir", nargs="?", default="results", help="asv results folder")
    h.add_argument("--out", default="history-report", help="folder for CSVs, plots, report.md")
    h.set_defaults(func=run)


def run(args) -> int:
    from flashbench.history_report import build_report

    print(build_report(args.results_dir, args.out))
    return 0
