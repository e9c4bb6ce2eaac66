"""``flashbench review BASE HEAD``: did a change make the kernel slower or less accurate?

Same-run A/B (the default). Base and head are checked out in git worktrees under
``.asv/review/``; one worker process imports today's suites (``benchmarks/``, as asv
does) against each commit's flashbench, keeping the two sets of modules apart. The two
commits take turns, never at once (ABBA...), so both see the same process, machine, load
and clocks:

- timings (``time_``, GPU timings whose call synchronises included) are compared on
  paired rounds (calibration discarded, equal blocks on both sides): the
  interval of the head/base ratio says "slower" above the factor (default 1.10),
  "faster" below 1/factor, "same" inside; comparisons still open are sampled further
  until they are settled or the budget (``--budget`` seconds, 280 by default, 60 with
  ``--quick``) is spent, then "not slower" (interval below the factor) or "ambiguous".
  False alarms are controlled across the review (Benjamini-Hochberg at 5%, header);
  :mod:`flashbench.review.stats` has the statistics.
- peak memory (``peakmem_``, a fresh process per measurement, and tracks in bytes):
  one value per commit, "more memory" (a regression) when head/base exceeds the factor;
- accuracy tracks: worse than base beyond ``--acc-tol`` (and "above band" when beyond
  the stored results of base's git ancestors of the same benchmark version), a rule
  ratio above its rule's factor or not finite (2 forward, 3 gradients), or a
  non-finite head: each a regression, faster or not.
- coverage: failed in head is a regression ("still failing", undecided, when base
  failed too); measured in base but skipped or gone in head is "coverage lost", never
  silence.

``--reuse``: stored asv results (results/ and earlier review runs), labelled as weaker
evidence (:mod:`flashbench.review.stored`).

Every row carries a reason code and its sample count (Markdown and JSON).

Exit status (:mod:`flashbench.review.model`): 0 nothing regressed; 1 something
regressed or failed in head; 2 could not decide (an ambiguous row, coverage lost, still
failing, no results), and bad
arguments; 3 the review itself failed (git, asv, a worker, an unwritable output).

Modules, one job each: ``gitops`` (revisions, ancestry, dirty trees, worktree
sessions), ``worker`` (the standalone script in each tree), ``workers`` (its driver
side), ``ab`` (the adaptive ABBA schedule), ``stats`` (paired intervals, the family
correction), ``rules`` (verdicts: pure functions of numbers), ``tracks`` (track values
and accuracy bands), ``stored``, ``envs`` and ``asvrun`` (the ``--reuse`` path),
``model`` (rows, reasons, status), ``render`` (Markdown, JSON), ``run`` (options and
orchestration).
"""

from flashbench.review.model import ERROR, OK, REASONS, REGRESSED, UNDECIDED, Review, Row
from flashbench.review.render import render_markdown, to_json
from flashbench.review.run import DEFAULT_BUDGET, QUICK_BUDGET, Interrupted, Options, run_review

__all__ = ["run_review", "Options", "Review", "Row", "Interrupted", "render_markdown",
           "to_json", "REASONS", "OK", "REGRESSED", "UNDECIDED", "ERROR", "DEFAULT_BUDGET",
           "QUICK_BUDGET"]
