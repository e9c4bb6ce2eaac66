"""asv results as one tidy pandas DataFrame, and the summaries kernel engineers read.

:func:`load_results` reads every ``<machine>/*.json`` results file (asv results
schema version 2) under one or several results folders, with each folder's
``benchmarks.json`` for parameter names, types and units. One row per benchmark x
parameter combination x results file, columns (:data:`FIXED_COLUMNS`, then one
column per parameter):

    machine, cpu, env, commit, date (UTC), file, benchmark, params, type, unit,
    value, status, ci_99_a, ci_99_b, q25, q75, number, repeat, samples, version,
    <one column per parameter, values parsed from their reprs>

A measurement machine is (machine, cpu): ``cpu`` is the processor as asv recorded
it in the results file's ``params.cpu`` (NaN where absent); every summary groups by
both, so one machine name given to two processors is two machines. ``params``
labels the row's parameter combination as asv writes it ("kernel='triton',
dtype='bf16', causal=False"; "" without parameters): the one key of a combination
(:func:`parse_params` reads it back). The label columns (machine, cpu, env,
commit, file, benchmark, params, type, unit, status, version) are pandas
Categoricals with sorted categories (a million rows repeat a few hundred strings),
except ``commit``, whose categories are in history order (date of its first
results file): sorting by commit, or by anything mapped from it, sorts by history.
A label asv did not record is NaN. ``value``, the 99% confidence interval
``ci_99_a`` / ``ci_99_b`` and the quartiles ``q25`` / ``q75`` are float64 in the
benchmark's unit; ``number`` / ``repeat`` are float64 counts. ``samples`` holds a
read-only float64 array of the raw samples where asv recorded them (``asv run
--record-samples``), else None; the arrays are views into one buffer, so a million
of them stay cheap. Parameter columns hold Python objects (str, int, float, bool,
None), None where a benchmark lacks that parameter.

``status`` keeps asv's outcomes apart (:data:`STATUSES`): "ok" (a number),
"skipped" (asv wrote NaN: setup raised NotImplementedError), "failed" (asv wrote
null), "missing" (the file lists fewer results than the parameter grid). A file
that is not valid JSON, is truncated, has another schema version or lacks the keys
of a results file is reported by a :class:`ResultsWarning` (path and reason) and
skipped, as is a malformed entry inside a readable file; ``frame.attrs
["skipped_files"]`` lists them. Unknown keys and result columns are ignored.

Summaries of that frame (each a DataFrame):

- :func:`error_bands`: accuracy tracks per machine x cpu x metric x parameter
  combination over history: p50 / p99 / max, latest, inside the band of earlier
  commits, the baseline-rule ratios.
- :func:`throughput` / :func:`throughput_points`: timings whose parameters name a
  problem shape -> TFLOP/s first / best / latest, change %, % of the same run's
  measured matmul peak where recorded.
- :func:`steps`: commits where a series' level moved beyond its noise (asv's own
  step detection, :func:`asv.step_detect.detect_steps`).

Modules, one job each: ``files`` (reading asv's files), ``grids`` (the parameter-grid
table), ``rows`` (per-row columns, file by file, worker processes), ``frame`` (frame
assembly), ``parts`` and ``cache`` (the incremental Parquet cache of parsed files,
docs/team.md), ``load`` (:func:`load_results`), ``summaries``, ``steps``,
``report`` and ``plots`` (``flashbench history``), and ``suites``: the only module
of flashbench that names flashbench's asv suites. ``scripts/history_corpus.py``
measures loading and summarising a 1,000-file corpus.
"""

from flashbench.history.files import ResultsWarning
from flashbench.history.frame import FIXED_COLUMNS, STATUSES
from flashbench.history.load import load_results
from flashbench.history.steps import steps
from flashbench.history.suites import ACCURACY
from flashbench.history.summaries import error_bands, parse_params, throughput, throughput_points

__all__ = ["ResultsWarning", "load_results", "error_bands", "throughput", "throughput_points",
           "steps", "parse_params", "FIXED_COLUMNS", "STATUSES", "ACCURACY"]
