"""``flashbench review BASE HEAD``: did a change make the kernel slower or less accurate?

Same-run A/B (the default): base and head in git worktrees, both loaded by one worker
process with today's suites and measured in turns (:mod:`~flashbench.review.ab`);
timings judged on paired rounds (:mod:`~flashbench.review.paired`,
:mod:`~flashbench.review.stats`, :mod:`~flashbench.review.prior`), tracks and peak memory
once per commit (:mod:`~flashbench.review.rules`, the band: :mod:`~flashbench.review.results`).
``--reuse``: stored asv results, weaker evidence (:mod:`~flashbench.review.stored`).
Every row carries a reason code and its sample count; exit status 0 nothing regressed,
1 regressed or failed in head, 2 could not decide, 3 the review itself failed
(:mod:`~flashbench.review.model`); rendered as Markdown and JSON by
:mod:`flashbench.cli.review_markdown`. The whole method: docs/review.md.
"""

from flashbench.infra.interrupts import Interrupted
from flashbench.review.model import ERROR, OK, REASONS, REGRESSED, UNDECIDED, Review, Row
from flashbench.review.options import DEFAULT_BUDGET, QUICK_BUDGET, Options
from flashbench.review.run import run_review

__all__ = ["run_review", "Options", "Review", "Row", "Interrupted", "REASONS", "OK", "REGRESSED",
           "UNDECIDED", "ERROR", "DEFAULT_BUDGET", "QUICK_BUDGET"]
