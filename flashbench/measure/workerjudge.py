"""What a user's kernel's worker did where it should not work, judged from the harness's
readings (:mod:`flashbench.measure.speedworker`): its CPU over idle pauses, over the copies
of its calls' inputs and over readying its calls (**work outside the timed call**), and its
own clock against the harness's (**clock tampered**), its requests on contents it had been
given before against those on new ones (**faster on inputs seen before**). Limits:
docs/speed.md.
"""

from __future__ import annotations

import math

import numpy as np

from flashbench.infra.cpuload import TICK as _TICK
from flashbench.timed.guard import OUTSIDE

__all__ = ["clock_fault", "memo_fault", "reading_noise", "staging_allowance", "judge_cpu",
           "COPY_FACTOR", "CLOCK_RATIO", "MEMO_RATIO", "MEMO_P", "MEMO_PAIRS", "MEMO_CLEAR"]

CLOCK_RATIO = 0.5  # the worker's own time under this x the harness's in every request: tampered
# a worker's copies of its calls' inputs may cost this many times the harness's own copies
# of as many bytes (read from another core's cache they cost ~2x: the decode case
# 4x8/2x1x128:4096 fp32 copied at 7 GB/s): more is work hidden in the copies
COPY_FACTOR = 4.0
# a request on returning contents under this x both its neighbours on new contents, in most
# of at least MEMO_PAIRS, at this p of a sign test: a memo's hits (memo_fault)
MEMO_RATIO, MEMO_P, MEMO_PAIRS = 0.5, 0.05, 6
# ... where (one reading) the new requests' calls take over 2x an empty round trip or 4x IQR
MEMO_CLEAR = (2.0, 4.0)


def clock_fault(runs: list, own: list, nulls: list) -> str | None:
    """Why the worker's clock is tampered, or None: in every timed request its own time
    for the request's calls (``own``: per call, x the calls) under :data:`CLOCK_RATIO` x
    the harness's round trip less the fastest empty one (``runs``: (round trip, calls)),
    and in every request by more than the empty requests' low-end noise explains (2 x (p10
    - fastest) + 0.1 ms). A slowed clock reads low in every request, however busy the
    machine; an honest worker reads about 1 in its least disturbed request (the caller
    times more requests before it believes a suspicion). Before, fastest against fastest
    by more than the empty requests' p10-p90: on a busy machine that spread, 3-15 ms, hid
    a worker whose clock ran at 0.3x in 7 runs of 8."""
    fastest = min(nulls)
    noise = 2 * (float(np.percentile(nulls, 10)) - fastest) + 1e-4
    spans = [max(rt - fastest, 1e-9) for rt, _ in runs]
    claims = [o * n for o, (_, n) in zip(own, runs, strict=True)]
    best = max(range(len(runs)), key=lambda i: claims[i] / spans[i])
    if (claims[best] < CLOCK_RATIO * spans[best]
            and min(s - c for s, c in zip(spans, claims, strict=True)) > noise):
        n = runs[best][1]
        return (f"the worker's own clock says {own[best]:.4g} s a call, the harness's "
                f"{spans[best] / n:.4g} s (its round trip less the fastest empty request's, "
                f"over {n} call(s)) in the request where they agree best; under "
                f"{CLOCK_RATIO:g}x in all {len(runs)} timed requests")
    return None


def memo_fault(runs: list, new: list, nulls: list) -> str | None:
    """Why the kernel memoises, or None. Each request on contents it had been given before
    (``new`` False; ``runs``: (round trip, calls)) against its neighbours on new contents,
    the last before it and the first after it (a round hands out its returning contents,
    then its new ones): **below** where it took under :data:`MEMO_RATIO` x both, **above**
    where over 1 / MEMO_RATIO x both. Named where, over at least :data:`MEMO_PAIRS` such
    requests, more than half are below and they outnumber those above by a one-sided sign
    test at p < :data:`MEMO_P` (scipy.stats.binomtest), by either of two readings:
    - per call, less the median empty round trip of ``nulls``, judged only where the new
      requests' calls take over the lesser of :data:`MEMO_CLEAR` = (a, b): a x that median
      or b x their IQR (clipped at 0, calls lost in the pipe's noise read "below" by
      chance);
    - less the FASTEST empty round trip, no gate, a request against a neighbour with fewer
      calls whole (a pool of 3 puts 2 returning calls against 1 new one: per call, half
      the pipe's remainder read "below"): a busy machine inflates the median and the IQR,
      and the first reading's gate hid a paged decode's content memo in 4 runs of 4 beside
      2 or 5 spinning processes, and the trick gallery's beside 4 test workers (2026-12-07).
    One step in the machine's load falls between a request and one neighbour at most, and a
    lone slow neighbour is not both, so an honest request is below only where both ran
    twice as slow (pairing each new request with the oldest unpaired returning one, a 2.2x
    step named an honest kernel). The row's time is its requests on new contents alone: a
    memo never makes it faster; this names it, wherever its hits land against the floor."""
    null, least = float(np.median(nulls)), min(nulls)
    noise = float(np.percentile(nulls, 75) - np.percentile(nulls, 25))
    misses = [rt - null for (rt, _), fresh in zip(runs, new, strict=True) if fresh]
    clear = bool(misses) and np.median(misses) > max(min(MEMO_CLEAR[0] * null,
                                                        MEMO_CLEAR[1] * noise), 0.0)
    for base, whole in ((null, False), (least, True))[0 if clear else 1:]:
        named = _signs(runs, new, base, whole)
        if named is not None:
            below, above, judged, p = named
            hit, miss = (float(np.median([max(rt - base, 0.0) / n for (rt, n), f in zip(
                runs, new, strict=True) if bool(f) == kind])) for kind in (False, True))
            return (f"its requests on contents it had been given before took a median "
                    f"{hit:.3g} s a call, those on new contents {miss:.3g} s: under "
                    f"{MEMO_RATIO:g}x both neighbours on new contents in {below} of {judged}, "
                    f"over {1 / MEMO_RATIO:g}x in {above} (the harness's clock, less the "
                    f"{'fastest' if whole else 'median'} empty request's; sign test p = "
                    f"{p:.2g}): its outputs come from a memo")
    return None


def _signs(runs: list, new: list, base: float, whole: bool) -> tuple | None:
    """(below, above, judged, p) where :func:`memo_fault`'s sign test names a memo, else
    None; each request's time less ``base``, over its calls (``whole``: a request against
    a neighbour with fewer calls over as many as the neighbour's)."""
    spans = [max(rt - base, 0.0) for rt, _ in runs]
    calls = [n for _, n in runs]
    before, last = [], None  # each request's last new neighbour before it, then after it
    for i, f in enumerate(new):
        before.append(last)
        last = i if f else last
    after, last = [None] * len(new), None
    for i in reversed(range(len(new))):
        after[i] = last
        last = i if new[i] else last
    below = above = judged = 0
    for i, f in enumerate(new):
        if f or before[i] is None or after[i] is None:
            continue
        judged += 1
        pair = (before[i], after[i])
        below += all(spans[i] / (min(calls[i], calls[j]) if whole else calls[i])
                     < MEMO_RATIO * spans[j] / calls[j] for j in pair)
        above += all(spans[i] / calls[i] * MEMO_RATIO
                     > spans[j] / (max(calls[i], calls[j]) if whole else calls[j]) for j in pair)
    if judged < MEMO_PAIRS or not 2 * below > judged:
        return None
    from scipy.stats import binomtest

    p = float(binomtest(below, below + above, 0.5, alternative="greater").pvalue)
    return (below, above, judged, p) if p < MEMO_P else None


def reading_noise(pairs: int) -> float:
    """Seconds of CPU the stage-minus-run sum over ``pairs`` stage/run pairs may show from
    the readings alone: /proc/<pid>/stat counts whole clock ticks, each reading short by up
    to one, so each pair's difference (2 c1 - c0 - c2) errs with sd sqrt(1/2) tick, the sum
    with sd sqrt(pairs / 2): 2 ticks + 4 of those sd."""
    return _TICK * (2 + 4 * math.sqrt(max(pairs, 1) / 2))


def staging_allowance(cpu: dict, requests: str = "pairs") -> float:
    """CPU the stage requests may take beyond the runs with no kernel work in them: the
    empty requests' own CPU per request (unpickling, replying: the harness's code) times
    the stage requests, plus :func:`reading_noise` of the stage/run pairs and the empty
    requests. (A 2-tick margin flagged a correct decode under load: 0.02 s readying,
    0 s running, 13 pairs; a tiny kernel's staging costs more than its calls.)"""
    pairs, nulls = cpu.get(requests, 1), cpu.get("nulls", 0)  # or the fill requests
    # at most the empty requests' median round trip: a probe's forked helper spun while they
    # ran, raising the allowance of the stage whose work it did (/proc counts its CPU)
    per_request = min(cpu.get("null", 0.0) / nulls, cpu.get("null_wall", math.inf)) \
        if nulls else 0.0
    return per_request * pairs + reading_noise(pairs + nulls)


def judge_cpu(cpu: dict, idle_wall: float, faults: dict, direction: str,
               device: str = "cpu") -> None:
    """CPU while the worker should be idle over 2 ticks + 10 % of the idle time; more CPU
    from the moment a request's inputs were written to their copies' end (``load``: a
    forward's inputs, a backward's dO alone) than :data:`COPY_FACTOR` x what copying them
    costs this process; or more CPU readying the calls (``stage``; not "bwd", whose stage
    runs the forward) than running them (beyond :func:`staging_allowance`). Not the last
    two on a GPU, where a call's CPU time is its launches and a synchronisation's wait, not
    its work (on an H200 an honest Triton forward ran 0.14 s of CPU against 0.4 s readying
    its inputs): work outside the timed call."""
    if cpu["idle"] > 2 * _TICK + 0.1 * idle_wall:
        faults.setdefault(OUTSIDE, f"the worker used {cpu['idle']:.3g} s of CPU during "
                          f"{idle_wall:.3g} s of idle pauses after its replies "
                          "(/proc/<pid>/stat, read by the harness)")
        return
    if device == "cuda":
        return
    copying = COPY_FACTOR * cpu.get("copied", 0) * cpu.get("copy_s_per_byte", 0.0)
    if cpu.get("load", 0.0) > copying + staging_allowance(cpu, "fills"):
        faults.setdefault(OUTSIDE, f"the worker used {cpu['load']:.3g} s of CPU copying its "
                          f"calls' inputs in, more than {COPY_FACTOR:g}x what copying their "
                          f"{cpu['copied'] / 2**20:.3g} MiB costs the harness "
                          f"({copying / COPY_FACTOR:.3g} s)")
    elif direction != "bwd" and cpu["stage"] > staging_allowance(cpu):
        faults.setdefault(OUTSIDE, f"the worker used {cpu['stage']:.3g} s of CPU readying "
                          f"its calls (the timed calls {cpu['run']:.3g} s), more than its "
                          f"empty requests' cost and the readings' noise "
                          f"({staging_allowance(cpu):.3g} s): nothing is computed there")
