"""asv results as one tidy pandas DataFrame, and the summaries kernel engineers read.

:func:`load_results` reads every ``<machine>/*.json`` results file (asv results schema
version 2) of one or several results folders, with each folder's ``benchmarks.json``, into
one frame: one row per benchmark x parameter combination x results file, columns
:data:`FIXED_COLUMNS` then one per parameter. A measurement machine is (machine, cpu);
``params`` is asv's label of a combination, its one key (:func:`parse_params` reads it
back); ``status`` is one of :data:`STATUSES`. A file or entry that cannot be read is
reported by a :class:`ResultsWarning` and skipped, never fatal. Summaries, each a
DataFrame: :func:`error_bands` (accuracy p50 / p99 / max per machine x metric x
combination over history, and whether the latest lies in the earlier band),
:func:`throughput` / :func:`throughput_points` (TFLOP/s from the shapes results record),
:func:`steps` (level changes beyond noise, asv's step detection). Every column, the
modules (one job each) and the report: docs/history.md.
"""

from flashbench.history.files import ResultsWarning
from flashbench.history.frame import FIXED_COLUMNS, STATUSES
from flashbench.history.load import load_results
from flashbench.history.steps import steps
from flashbench.history.suites import ACCURACY
from flashbench.history.summaries import error_bands, parse_params, throughput, throughput_points

__all__ = ["ResultsWarning", "load_results", "error_bands", "throughput", "throughput_points",
           "steps", "parse_params", "FIXED_COLUMNS", "STATUSES", "ACCURACY"]
