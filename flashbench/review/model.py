"""What a review found: one :class:`Row` per compared result, the :class:`Review` around
them, the reason codes, and the exit status they add up to."""

from __future__ import annotations

from dataclasses import dataclass, field

from flashbench.accuracy import BASELINE_FACTOR, GRAD_FACTOR

# Exit statuses of ``flashbench review`` (and of the CLI as a whole).
OK, REGRESSED, UNDECIDED, ERROR = 0, 1, 2, 3
IMPROVED = ("faster", "better", "less memory")  # verdicts the summary counts

# Reason codes: why a row got its verdict (the Markdown and the JSON carry them).
REASONS = {
    # timings (same-run A/B: paired rounds)
    "significant": "the ratio's interval lies beyond the factor (false alarms controlled "
                   "across the review)",
    "below-factor": "the ratio's interval lies inside [1/factor, factor]",
    "not-above-factor": "the ratio's interval lies below the factor (maybe faster, not "
                        "decided)",
    "budget-exhausted": "the interval still straddles the factor when the time budget or "
                        "the sampling schedule ran out",
    "too-few-samples": "fewer paired rounds than a decision needs",
    "machine-busy": "not measured: its samples fell short of the worker's clock only by "
                    "their waits for a busy CPU (time it on a quieter machine)",
    "machine-loaded": "not judged: processes outside the review kept more CPUs busy than "
                      "--outside-limit while it was sampled (time it on a quieter machine)",
    "budget-unmeasured": "not measured: the sampling budget was spent before its calibration "
                         "(measure it with --bench PATTERN, or a larger --budget SECONDS)",
    # timings (stored results, --reuse)
    "within-factor": "the ratio lies inside [1/factor, factor]",
    "significant-asv": "the ratio passes the factor and asv's test (Mann-Whitney U on the "
                       "samples, else 99% intervals) finds a difference",
    "ratio-only": "one sample per commit, no statistics: the ratio alone cannot call a "
                  "change",
    "not-significant": "the ratio passes the factor but asv's test finds no difference",
    "no-run-to-run-range": "slower or faster by asv's test, but fewer than 2 earlier runs of "
                           "base's ancestors show how far separate runs scatter: undecided",
    "inside-run-to-run-range": "the head lies inside the range of earlier runs of base's "
                               "ancestors",
    "benchmark-changed": "the benchmark's code differs between base's and head's (asv "
                         "version): not compared (same run: head's does not run on base, "
                         "whose own benchmark measures the point)",
    # accuracy tracks
    "within-tolerance": "head within the tolerance of base and the band",
    "worse": "head's error exceeds base's by more than the tolerance",
    "above-band": "head's error is worse than base's and exceeds every earlier result of "
                  "base's ancestors (same benchmark version)",
    "rule-fails": "a rule ratio (kernel error / same-dtype standard error; the reference's /"
                  " the exactness tolerance) above its factor, or not finite: "
                  f"{BASELINE_FACTOR:g}x for the forward, {GRAD_FACTOR:g}x for the gradients",
    "outside-band": "a band ratio (kernel error / the band edge of a correct kernel of that "
                    "dtype at that size) above its limit (the row names it), or not finite",
    "not-finite": "head's value is NaN or infinite where base's is finite",
    "both-not-finite": "NaN or infinite in base and head alike (no rule applies): nothing "
                       "changed that can be judged",
    "better": "head's error is below base's by more than the tolerance",
    "yardstick-moved": "a rule's or band's ratio moved while the kernel's own error did not "
                       "(its max |error| the same in base and head; a band ratio: another "
                       "kernel's, its max the same, moved the same way): the yardstick moved "
                       "(the flash model that measures the band, or the standard model), not "
                       "the kernel",
    "yardstick-looser": "a rule's or band's ratio fell while the kernel's own error did not: "
                        "its yardstick (the same-dtype standard model, or the flash model "
                        "that measures the band) got worse and lets more error pass: a "
                        "regression of that model",
    "failing-at-base": "base broke the rule too, head is no worse: a standing failure (apart)",
    "not-comparable": "NaN in base and head alike (no value, or a ratio its rule does not judge)",
    "peer": "torch's own attention, for information (as in check): never fails the gate",
    "study": "a study's track (one question answered once): never fails the gate",
    # peak memory (peakmem_, and tracks in bytes): one value per commit
    "more-memory": "head/base peak memory above the factor",
    "less-memory": "head/base peak memory below 1/factor",
    "not-a-size": "a peak memory that is not a positive, finite number of bytes",
    # coverage
    "failed": "failed in head (it raised, or returned a wrong or non-numeric result), "
              "whatever base did",
    "still-failing": "failed in base and in head: already failing at base (not compared)",
    "coverage-lost": "measured in base, skipped or gone in head (or in base's own benchmarks/ "
                     "and not in the suites that ran, or in those and not in head's own: "
                     "renamed or removed)",
    "coverage-gained": "measured in head, not in base",
    "base-refused": "the worker refused base (its code replaced a function both sides share, "
                    "or an import left a process or thread in the worker): nothing compared",
    "base-failed-beside-head": "base failed beside head and ran ok alone, in a worker that "
                               "never imported head: head's code may have broken it",
    "not-measured": "measured in neither commit (skipped, not applicable or gone; never "
                    "failed in head)",
}


# the reasons of rows that compared nothing (either side without a value)
UNCOMPARED = {"not-measured", "coverage-gained", "coverage-lost", "still-failing",
              "not-comparable", "benchmark-changed", "base-refused", "base-failed-beside-head",
              "budget-unmeasured", "failed", "machine-busy"}


@dataclass
class Row:
    """One compared result (a benchmark grid point)."""

    kind: str  # "time", "memory" (peak memory, bytes), "accuracy" or "track"
    benchmark: str
    params: str  # the parameter combination as asv writes it (history's ``params``)
    unit: str
    verdict: str
    reason: str  # a key of REASONS
    detail: str = ""  # words for a human: statuses, ranges, what failed
    base: float | None = None  # base's value (median per call, or the stored value)
    head: float | None = None
    ratio: float | None = None  # head / base estimate
    ci_low: float | None = None  # interval of the ratio
    ci_high: float | None = None
    ci_level: float | None = None
    samples: int = 0  # paired rounds (same-run A/B) or samples per commit (stored)
    regression: bool = False  # counts towards exit 1
    undecided: bool = False  # counts towards exit 2
    # same-run A/B: each paired round's log(head / base), in the order measured (the
    # JSON's audit trail: a reader can redo the interval, or pool rounds across reviews)
    log_ratios: list[float] = field(default_factory=list)
    # same-run A/B: the variance prior the interval rests on (s0, d0, family, outliers;
    # None: its own variance alone)
    prior: dict | None = None


@dataclass
class Review:
    base: str
    head: str
    machine: str
    cpu: str
    mode: str  # "same-run A/B" or "stored results"
    factor: float
    acc_tol: float
    false_alarm_rate: float | None = None
    budget: float | None = None
    notes: list[str] = field(default_factory=list)  # header lines (dirty tree, evidence)
    problems: list[str] = field(default_factory=list)  # a side or the review: why
    rows: list[Row] = field(default_factory=list)
    seconds: float = 0.0  # wall time of the review

    @property
    def status(self) -> int:
        if any(r.regression for r in self.rows):
            return REGRESSED
        if self.problems or any(r.undecided for r in self.rows):
            return UNDECIDED
        return OK

    def apart(self) -> list[str]:
        """What the summary reports apart from the verdict: flashbench's standing failures,
        values not comparable, improvements; then peers' and studies' rows (each once)."""
        codes = [set(r.reason.split(", ")) for r in self.rows]
        own = [(r, c) for r, c in zip(self.rows, codes, strict=True) if not c & {"peer", "study"}]
        at_base = sum(bool(c & {"failing-at-base", "still-failing"}) for _, c in own)
        parts = [f"{at_base} result(s) already failing at base"] if at_base else []
        if n := sum("not-comparable" in c for _, c in own):
            parts.append(f"{n} not comparable (NaN in base and head)")
        if n := sum("yardstick-looser" in c for _, c in own):
            parts.append(f"{n} ratio(s) fell with their yardstick, which got looser (the "
                         "kernel's own error unchanged; counted as regressions)")
        if n := sum("yardstick-moved" in c for _, c in own):
            parts.append(f"{n} ratio(s) moved with their yardstick alone (the kernel's "
                         "own error unchanged)")
        if n := {v: c for v in IMPROVED if (c := sum(r.verdict == v for r, _ in own))}:
            parts.append("improved: " + ", ".join(f"{c} {v}" for v, c in n.items()))
        info = [f"{n} {who}" for who in ("peer", "study") if (n := sum(who in c for c in codes))]
        return parts + [f"{' and '.join(info)} row(s) for information"] * bool(info)

    def summary(self) -> str:
        regressions = [r for r in self.rows if r.regression]
        lost = sum(r.reason == "coverage-lost" for r in self.rows if r.undecided)
        changed = sum(r.reason == "benchmark-changed" for r in self.rows if r.undecided)
        unmeasured = sum(r.reason in ("budget-unmeasured", "machine-busy", "machine-loaded")
                         for r in self.rows if r.undecided)
        loaded_slow = sum(r.reason == "machine-loaded" and "read slower" in r.detail
                          for r in self.rows)
        apart_base = sum(r.reason in ("base-refused", "base-failed-beside-head")
                         for r in self.rows if r.undecided)
        open_rows = sum(r.undecided for r in self.rows) - lost - changed - unmeasured \
            - apart_base
        apart = "".join(f"; {part}" for part in self.apart())
        if regressions:
            failed = sum(r.reason == "failed" for r in regressions)
            looser = sum(r.reason == "yardstick-looser" for r in regressions)
            kinds = sorted({r.kind for r in regressions})
            parts = []
            if len(regressions) > failed + looser:
                parts.append(f"{len(regressions) - failed - looser} result(s) got worse")
            if looser:  # their ratios fell: "got worse" misread them (a fresh-eyes review)
                parts.append(f"{looser} yardstick(s) got looser")
            if failed:
                parts.append(f"{failed} result(s) failed in head")
            text = f"REGRESSION: {' and '.join(parts)} ({' and '.join(kinds)})"
        elif lost or changed or unmeasured or open_rows or apart_base or self.problems:
            parts = [f"BASE NOT COMPARED: {apart_base} result(s) base could not give beside "
                     "head (its rows say why)"] if apart_base else []
            if lost:
                parts.append(f"COVERAGE LOST: {lost} result(s) measured in base but not "
                             "in head")
            if changed:
                parts.append(f"NOT COMPARED: {changed} result(s) whose benchmark's code "
                             "differs between base and head (compare them by hand: asv run "
                             "each commit with its own benchmarks/)")
            if unmeasured:
                parts.append(f"NOT MEASURED: {unmeasured} timing(s)" + (
                             f" ({loaded_slow} read SLOWER beside others' load)" * bool(
                                 loaded_slow)) + ", the sampling budget "
                             "ran out or the machine was too busy (their rows say which; "
                             "--bench PATTERN, --budget SECONDS, or a quieter machine)")
            if open_rows:  # stored results take no more rounds (a red team's --reuse
                # review was told to raise the --budget it ignores)
                parts.append(f"UNDECIDED: {open_rows} result(s) ambiguous " + (
                    "(stored results of separate runs: the same-run review, without "
                    "--reuse, decides them)" if self.mode.startswith("stored") else
                    "(more rounds decide: a larger --budget SECONDS, or --bench PATTERN "
                    "on them alone)"))
            if self.problems:
                parts.append(f"{len(self.problems)} problem(s) below")
            text = "; ".join(parts)
        else:
            # not a standing failure, nor a row measured on one side or none (a review
            # with one still failing at base read "across 6 compared results" for 5)
            compared = sum(not set(r.reason.split(", ")) & UNCOMPARED for r in self.rows)
            gained = sum(r.reason == "coverage-gained" for r in self.rows)
            new = f" ({gained} more measured in head alone)" if gained else ""
            return (f"OK: nothing regressed across {compared} compared results{new}{apart}; "
                    "exit 0")
        return f"{text}{apart}; exit {self.status}"

    def sort(self) -> None:
        """Regressions first, then undecided rows, then the rest by kind and name."""
        self.rows.sort(key=lambda r: (not r.regression, not r.undecided, r.kind, r.benchmark,
                                      r.params))
