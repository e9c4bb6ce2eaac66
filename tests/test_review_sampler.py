"""The adaptive ABBA sampler of same-run reviews, driven by a simulated machine."""

import threading
import time

import numpy as np
import pytest

from flashbench.review.ab import Lane, Point, Sampler
from flashbench.review.model import Review
from flashbench.review.options import select
from flashbench.review.paired import look_level, paired_rows
from flashbench.review.stats import LOOKS, MIN_ROUNDS


class Machine:
    """Timings with a true head/base ratio per benchmark, shared load noise per round
    (which pairing cancels) and a little independent noise; a clock that advances by
    what the blocks cost."""

    def __init__(self, truth, seconds=0.05, status=None, seed=0, load=0.3, noise=0.02,
                 costs=None):
        self.truth, self.seconds, self.status = truth, seconds, status or {}
        self.costs = costs or {}  # per-benchmark seconds per call (default ``seconds``)
        self.rng = np.random.default_rng(seed)
        self.load, self.noise = load, noise
        self.now = 0.0
        self.calls = []  # (benchmark, side, number)
        self._load = 1.0
        self._round = None

    def clock(self):
        return self.now

    def measure(self, point, side, plan):
        self.calls.append((point.name, side, plan.number))
        status = self.status.get((point.name, side))
        if status:
            return {"status": status, "reason": f"{status} on purpose"}
        key = (point.name, len(plan.pair.base))  # a new round (or calibration) of a point
        if key != self._round:  # its first block: the load moved since the last round
            self._round = key
            self._load = float(np.exp(self.rng.normal(0, self.load)))
        seconds = self.costs.get(point.name, self.seconds)
        t = seconds * (self.truth[point.name] if side == "head" else 1.0) * self._load
        number = plan.number or 1
        samples = [t * float(np.exp(self.rng.normal(0, self.noise)))
                   for _ in range(plan.per_block)]
        self.now += sum(samples) * number + 0.01
        return {"status": "ok", "number": number, "samples": samples}


class PairMachine(Machine):
    """A worker that also answers op "pair" (both sides' samples, interleaved): each
    pair request is recorded, and ``pair_status`` makes pairs fail from then on."""

    def __init__(self, *args, pair_status=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.pairs = []  # (benchmark, order, number, per_block)
        self.pair_status = pair_status  # (first failing pair, reply)

    def measure_pair(self, point, order, plan):
        self.pairs.append((point.name, order, plan.number, plan.per_block))
        if self.pair_status and len(self.pairs) >= self.pair_status[0]:
            return dict(self.pair_status[1])
        replies = {side: self.measure(point, side, plan) for side in order}
        return {"status": "ok", "number": plan.number,
                **{side: r["samples"] for side, r in replies.items()}}


def points(names):
    return [Point(n, 0, "", "time", "seconds") for n in names]


def run(machine, names, budget=1e9, factor=1.1):
    sampler = Sampler([Lane(machine.measure)], budget, factor, look_level(), clock=machine.clock)
    pairs, rows = sampler.run(points(names))
    return {r.benchmark: r for r in paired_rows(pairs, factor, look_level()) + rows}, sampler


def test_rounds_alternate_and_head_uses_base_calibration():
    m = Machine({"b.time_a": 1.0})
    run(m, ["b.time_a"])
    sides = [side for _, side, _ in m.calls]
    # calibration (base, then head's discarded block), then rounds AB BA AB
    assert sides[:8] == ["base", "head", "base", "head", "head", "base", "base", "head"]
    assert m.calls[0][2] == 0 and all(n == 1 for _, _, n in m.calls[1:])  # calibrated once


class Recorder:
    """A worker stand-in that keeps the worker's contract (``number`` 0 calibrates) and
    tags every block: its value (the minimum sample) identifies the call, so that each
    paired round can be traced back to the two blocks it compares."""

    def __init__(self, seconds=0.001, noise=0.1, seed=0):
        self.seconds, self.noise = seconds, noise
        self.rng = np.random.default_rng(seed)
        self.calls = []  # (side, number, samples per block)
        self.value = {}  # block value -> index into calls
        self.now = 0.0

    def clock(self):
        return self.now

    def measure(self, point, side, plan):
        number = plan.number or max(1, int(0.012 / self.seconds))
        samples = [self.seconds * float(np.exp(self.rng.normal(0, self.noise)))
                   for _ in range(plan.per_block)]
        self.calls.append((side, plan.number, plan.per_block))
        self.value[min(samples)] = len(self.calls) - 1
        self.now += sum(samples) * number + 0.01
        return {"status": "ok", "number": number, "samples": samples}


def test_both_sides_get_identical_block_sizes_in_every_paired_round():
    """Finding 3: base's calibration block (1 sample) must not be paired with a head
    block of 5 samples: every round compares blocks of one size and one ``number``."""
    m = Recorder()
    sampler = Sampler([Lane(m.measure)], 1e9, 1.1, look_level(), clock=m.clock)
    (pair,), _ = sampler.run(points(["b.time_a"]))
    assert pair.rounds >= MIN_ROUNDS
    for i in range(pair.rounds):
        base, head = m.calls[m.value[pair.base[i]]], m.calls[m.value[pair.head[i]]]
        assert (base[0], head[0]) == ("base", "head")
        assert base[1:] == head[1:], (i, base, head)  # same number, same samples per block
        assert base[1] > 0 and base[2] == 5  # calibrated number; a 12 ms sample: 5 a block
    assert m.calls[0] == ("base", 0, 1)  # the calibration block is not part of any round
    assert m.value[pair.base[0]] > 0


class ColdMachine(Machine):
    """One process for both sides, as the review runs them: the first call of a grid
    point in the process pays one-time costs (``first``: 1.5x), each side's first call
    its own copy's (1.5x again), and a block right after another grid point's block
    runs ``cold`` (1.3x). Seen in one-process no-op reviews
    here: round 1 made of the two calibrating calls had TimeModels' fp32 call at
    N = 4096 at 0.55-0.66x in head (base's call first), and steps that began with
    head's block after another point's put rounds at 1.6-2.6x."""

    def __init__(self, *args, first=1.5, cold=1.3, **kwargs):
        super().__init__(*args, **kwargs)
        self.first_factor, self.cold_factor = first, cold
        self.seen, self.last, self.warm = set(), None, []

    def measure(self, point, side, plan):
        reply = super().measure(point, side, plan)
        if plan.warmup:
            self.warm.append((point.name, side))
        factor = 1.0
        if point.name not in self.seen:  # the point's one-time costs in the process
            factor *= self.first_factor
        if (point.name, side) not in self.seen:  # and in this side's copy of the modules
            factor *= self.first_factor
        elif self.last != point.name:
            factor *= self.cold_factor
        self.seen |= {point.name, (point.name, side)}
        self.last = point.name
        if "samples" in reply:
            reply["samples"] = [x * factor for x in reply["samples"]]
        return reply


def test_long_calls_discard_first_calls_and_time_blocks_after_their_point():
    """Calls of 0.2 s or more (a block is the setup and one call): each side's first call
    is discarded (base's pays the grid point's one-time costs in the process, and each
    its own copy's); round 1 is BA, head's block right after head's first call; each
    later step of rounds begins with one discarded block of the side that opens it.
    Every timed block thus follows a block of the same grid point. No-op comparisons
    centre on 1 and none is called slower or faster."""
    truth = {f"b.time_long{i}": 1.0 for i in range(8)} | {"b.time_edge": 1.1}
    m = ColdMachine(truth, seconds=0.5, load=0.1, noise=0.01, seed=9)
    rows, _ = run(m, list(truth))
    assert not m.warm  # no untimed call inside a long call's block
    names = [c[0] for c in m.calls]
    for name in truth:
        calls = [c[1] for c in m.calls if c[0] == name]
        # calibration (base, head), round 1 (BA), then a step: a discarded base block
        # and rounds 2 and 3 (AB, BA)
        assert calls[:9] == ["base", "head", "head", "base",
                             "base", "base", "head", "head", "base"]
        first = names.index(name)
        assert names[first:first + 4] == [name] * 4
        steps = sum(1 for look in LOOKS if look <= rows[name].samples)
        assert len(calls) == 2 * rows[name].samples + 2 + steps
        if name != "b.time_edge":
            assert rows[name].verdict == "same", rows[name]
            assert abs(np.log(rows[name].ratio)) < 0.03, rows[name]
    assert rows["b.time_edge"].samples > 5  # later steps were exercised
    short = Machine({"b.time_short": 1.0}, seconds=0.05, seed=9)
    rows, _ = run(short, ["b.time_short"])
    assert len(short.calls) == 2 * rows["b.time_short"].samples + 2  # calibration discarded


def test_long_calls_steps_keep_the_budget():
    """A long call's step costs a discarded block and its rounds: the schedule counts
    both, so no round starts that the budget cannot pay for (the round cost is the two
    timed blocks; a step's estimate adds half a round for the discarded block)."""
    truth = {f"b.time_edge{i}": 1.1 for i in range(3)}
    for budget in (20.0, 30.0, 45.0):
        m = Machine(truth, seconds=1.0, load=0.0, noise=0.01)
        rows, sampler = run(m, list(truth), budget=budget)
        assert sampler.out_of_budget
        assert m.now <= budget + 0.1, (budget, m.now)
        assert m.now >= budget - 2 * 2.2 - 1.1  # no more left unspent than a step needs
        assert all(r.samples >= 3 for r in rows.values()) or budget < 25


def test_a_a_reviews_have_no_systematic_bias():
    """300 simulated A/A reviews (same code on both sides, independent 10% noise per
    sample): round 1 and the rounds overall centre on head/base = 1. Pairing a 1-sample
    block with the minimum of 5 samples gave a mean round-1 log-ratio of about -0.12."""
    first, overall = [], []
    for seed in range(300):
        m = Recorder(seed=seed)
        sampler = Sampler([Lane(m.measure)], 1e9, 1.1, look_level(), clock=m.clock)
        (pair,), _ = sampler.run(points(["b.time_a"]))
        ratios = pair.log_ratios()
        first.append(ratios[0])
        overall.extend(ratios)
    first, overall = np.array(first), np.array(overall)
    se = first.std(ddof=1) / np.sqrt(len(first))
    assert abs(first.mean()) < 4 * se and abs(first.mean()) < 0.03, (first.mean(), se)
    assert abs(overall.mean()) < 0.02, overall.mean()


def test_slowdowns_caught_untouched_settled_same_noise_cancelled():
    truth = {f"b.time_slow{i}": 1.3 for i in range(4)} | {
        f"b.time_same{i}": 1.0 for i in range(8)} | {"b.time_fast": 0.7}
    rows, _ = run(Machine(truth, load=0.4, seed=3), list(truth))
    for name, r in rows.items():
        want = {"slow": "slower", "same": "same", "fast": "faster"}[name[7:11]]
        assert r.verdict == want, (name, r)
        assert r.samples >= MIN_ROUNDS and r.samples in LOOKS
    assert rows["b.time_slow0"].regression and not rows["b.time_same0"].regression


def test_a_slowdown_at_the_factor_stays_open_until_the_budget_ends():
    truth = {"b.time_edge": 1.1, "b.time_same": 1.0}
    rows, sampler = run(Machine(truth, noise=0.05, seed=5), list(truth), budget=5.0)
    assert sampler.out_of_budget
    assert rows["b.time_edge"].verdict == "ambiguous"
    assert rows["b.time_edge"].reason in ("budget-exhausted", "too-few-samples")
    assert rows["b.time_edge"].undecided


def test_budget_is_kept_and_covers_calibration():
    """A comparison's calibration and first round run together; once the budget is
    spent no further comparison is started, and each one not reached is a "not measured"
    row that says how to measure it (--quick over costly suites ends on time)."""
    truth = {f"b.time_{i}": 1.0 for i in range(5)}
    m = Machine(truth, seconds=1.0, load=0.0, noise=0.01)
    rows, sampler = run(m, list(truth), budget=6.0)
    measured = [r for r in rows.values() if r.samples >= 1]
    unseen = [r for r in rows.values() if r.samples == 0]
    assert len(measured) == 2 and len(unseen) == 3 and sampler.out_of_budget
    assert all(r.verdict == "not measured" and r.reason == "budget-unmeasured"
               and r.undecided and "not measured" in r.detail for r in unseen)
    review = Review("b", "h", "m", "c", "same-run A/B", 1.1, 0.02, rows=list(rows.values()))
    assert ("NOT MEASURED: 3 timing(s), the sampling budget ran out or the machine was too "
            "busy (their rows say which; --bench PATTERN, --budget SECONDS, or a quieter "
            "machine)") in review.summary()  # issue 36 (A)
    # two comparisons' calibration (2 calls of 1 s, discarded) and round 1 (2 more):
    # the budget is spent after the second, nothing after
    assert m.now <= 2 * 4 * 1.1 + 0.5
    assert all(r.verdict == "ambiguous" for r in measured if r.samples < MIN_ROUNDS)


def test_a_costly_comparison_does_not_starve_the_cheap_ones():
    """The next rounds go to the open comparison with the least sampling time so far:
    taking every comparison to each look in turn let one 5 s timing spend the budget
    before the cheap slowdowns reached the look that settles them."""
    truth = {f"b.time_slow{i}": 1.3 for i in range(6)} | {"b.time_costly": 1.0}
    m = Machine(truth, seconds=0.05, costs={"b.time_costly": 5.0}, load=0.3, noise=0.03,
                seed=11)
    rows, sampler = run(m, list(truth), budget=45.0)
    assert m.now <= 45.0 + 4 * 5.0 * 1.5  # calibration + round 1 of the costly one run anyway
    for i in range(6):
        slow = rows[f"b.time_slow{i}"]
        assert slow.verdict == "slower", slow
    costly = rows["b.time_costly"]
    assert costly.samples <= min(rows[f"b.time_slow{i}"].samples for i in range(6))


def test_a_costly_comparison_still_gets_its_first_look():
    """Fair shares in time: once the cheap comparisons have spent as long as the costly
    one's calibration, the costly one reaches its first look (3 rounds) and can settle."""
    truth = {f"b.time_edge{i}": 1.1 for i in range(4)} | {"b.time_costly": 1.0}
    m = Machine(truth, seconds=0.05, costs={"b.time_costly": 1.0}, load=0.3, noise=0.02,
                seed=2)
    rows, _ = run(m, list(truth), budget=80.0)
    costly = rows["b.time_costly"]
    assert costly.samples >= MIN_ROUNDS and costly.verdict == "same", costly
    assert all(rows[f"b.time_edge{i}"].samples > costly.samples for i in range(4))


def test_first_looks_come_before_later_looks():
    """Every comparison gets its first look (3 rounds) before any goes on to a later one:
    with fair shares alone, twenty noisy cheap comparisons climbing to 13 and 21 rounds
    left two 1 s timings at one round each (ambiguous) when the budget ended."""
    truth = {f"b.time_noisy{i}": 1.0 for i in range(20)} | {"b.time_costly0": 1.0,
                                                            "b.time_costly1": 1.0}
    costs = {"b.time_costly0": 1.0, "b.time_costly1": 1.0}
    m = Machine(truth, seconds=0.05, costs=costs, load=0.3, noise=0.12, seed=4)
    # about 35 s to take all 22 to their first look (the 1 s ones: 2 discarded first
    # calls, round 1, a discarded block and 2 rounds: 9 calls each), then beyond
    rows, _ = run(m, list(truth), budget=50.0)
    for name in costs:
        assert rows[name].samples >= MIN_ROUNDS, rows[name]
    assert max(rows[n].samples for n in truth if "noisy" in n) > MIN_ROUNDS  # then onwards


def test_looks_come_in_turn_so_open_comparisons_end_within_one_look():
    """Open comparisons take their looks in turn (cheapest first within a look): when the
    budget ends, no open comparison is more than one look behind another. With fair
    shares in time a 1.2x change left a 2 s timing at 3 rounds while cheap ones reached
    8 or 13."""
    truth = {f"b.time_edge{i}": 1.1 for i in range(6)} | {"b.time_costly": 1.1}
    m = Machine(truth, seconds=0.05, costs={"b.time_costly": 1.0}, load=0.3, noise=0.03,
                seed=6)
    rows, sampler = run(m, list(truth), budget=40.0)
    assert sampler.out_of_budget
    level = {n: max(i for i, look in enumerate((1,) + LOOKS) if r.samples >= look)
             for n, r in rows.items() if r.verdict == "ambiguous"}
    assert "b.time_costly" in level and len(level) >= 3
    cheap = [v for n, v in level.items() if "edge" in n]
    assert max(cheap) - min(cheap) <= 1, {n: rows[n].samples for n in level}
    # the costly one goes to each look in turn too, until its next step (rounds to the
    # next look, plus a warm-up call) no longer fits in what is left; then it gives way
    assert rows["b.time_costly"].samples >= 5, rows["b.time_costly"]


def test_a_head_that_skips_is_coverage_lost_and_one_that_fails_a_regression():
    truth = {"b.time_ok": 1.0, "b.time_gone": 1.0, "b.time_new": 1.0, "b.time_broken": 1.0,
             "b.time_new_broken": 1.0, "b.time_still": 1.0}
    status = {("b.time_gone", "head"): "skipped", ("b.time_new", "base"): "skipped",
              ("b.time_broken", "head"): "failed", ("b.time_new_broken", "base"): "skipped",
              ("b.time_new_broken", "head"): "failed", ("b.time_still", "base"): "failed",
              ("b.time_still", "head"): "failed"}
    rows, _ = run(Machine(truth, status=status), list(truth))
    assert rows["b.time_gone"].verdict == "coverage lost" and rows["b.time_gone"].undecided
    assert "skipped on purpose" in rows["b.time_gone"].detail
    broken = rows["b.time_broken"]
    assert (broken.reason, broken.regression) == ("failed", True)
    assert "failed on purpose" in broken.detail
    assert rows["b.time_new_broken"].reason == "failed" and rows["b.time_new_broken"].regression
    still = rows["b.time_still"]
    assert (still.verdict, still.undecided, still.regression) == (
        "already failing at base", False, False)  # issue 36: apart, not exit 2
    assert rows["b.time_new"].verdict == "coverage gained"
    assert not rows["b.time_new"].undecided
    assert rows["b.time_ok"].verdict == "same"


def test_a_head_that_fails_after_calibration_is_a_regression():
    m = Machine({"b.time_a": 1.0})
    measure = m.measure

    def flaky(point, side, plan):
        if side == "head" and len(m.calls) >= 6:
            m.calls.append((point.name, side, plan.number))
            return {"status": "failed", "reason": "NaN output"}
        return measure(point, side, plan)

    sampler = Sampler([Lane(flaky)], 1e9, 1.1, look_level(), clock=m.clock)
    pairs, rows = sampler.run(points(["b.time_a"]))
    assert not pairs and len(rows) == 1
    assert (rows[0].reason, rows[0].regression, rows[0].detail) == (
        "failed", True, "base ok, head failed: NaN output")


def _pair_run(m, names):
    sampler = Sampler([Lane(m.measure, m.measure_pair)], 1e9, 1.1, look_level(),
                      clock=m.clock)
    pairs, rows = sampler.run(points(names))
    return {r.benchmark: r for r in paired_rows(pairs, 1.1, look_level()) + rows}


def test_short_calls_pair_their_rounds_long_calls_keep_blocks():
    """Calls under 0.2 s: after calibration, each round is one pair request (both sides'
    samples interleaved in the worker), its order alternating; longer calls keep their
    blocks (one call each, a block of their own point first)."""
    m = PairMachine({"b.time_short": 1.0, "b.time_long": 1.0},
                    costs={"b.time_short": 0.004, "b.time_long": 0.5})
    rows = _pair_run(m, ["b.time_short", "b.time_long"])
    short = [p for p in m.pairs if p[0] == "b.time_short"]
    assert rows["b.time_short"].samples == len(short) >= MIN_ROUNDS
    assert [order for _, order, _, _ in short[:4]] == [("base", "head"), ("head", "base")] * 2
    # calibrated once, on base (this machine's calibration answers one call a sample)
    assert all(number == 1 and per == 5 for _, _, number, per in short)
    assert not any(p[0] == "b.time_long" for p in m.pairs)
    assert rows["b.time_long"].samples >= MIN_ROUNDS
    assert {r.verdict for r in rows.values()} == {"same"}


def test_a_pair_that_fails_names_its_side_and_one_that_dies_falls_back_to_blocks():
    failing = PairMachine({"b.time_a": 1.0}, pair_status=(
        2, {"status": "failed", "side": "head", "reason": "NaN output"}))
    (row,) = _pair_run(failing, ["b.time_a"]).values()
    assert (row.reason, row.regression, row.detail) == (
        "failed", True, "base ok, head failed: NaN output")
    died = PairMachine({"b.time_a": 1.0}, pair_status=(
        2, {"status": "failed", "reason": "worker died"}))
    (row,) = _pair_run(died, ["b.time_a"]).values()
    assert row.verdict == "same" and row.samples >= MIN_ROUNDS  # its rounds as blocks
    assert len(died.pairs) >= row.samples - 1


def _lanes(truth, n, fail_in=None, slow=None):
    """``n`` simulated processes (a Machine each) answering in real time (1 ms a call,
    ``slow``: lane -> seconds a call); ``calls`` records (lane, benchmark, rounds the
    comparison had, time) of every request."""
    calls, lock = [], threading.Lock()

    def lane(i):
        m = PairMachine(truth, seed=i)

        def record(point, plan):
            with lock:
                calls.append((i, point.name, plan.pair.rounds, time.monotonic()))
            time.sleep((slow or {}).get(i, 0.001))
            if fail_in == i and len(calls) > 30:
                raise RuntimeError("the worker is gone")

        def measure(point, side, plan):
            record(point, plan)
            return m.measure(point, side, plan)

        def measure_pair(point, order, plan):
            record(point, plan)
            return m.measure_pair(point, order, plan)

        return Lane(measure, measure_pair)

    return [lane(i) for i in range(n)], calls


def test_lanes_sample_at_once_each_comparison_in_the_process_that_calibrated_it():
    truth = {f"b.time_{n}": 1.5 if n < 3 else 1.0 for n in range(8)}
    lanes, calls = _lanes(truth, 2)
    sampler = Sampler(lanes, 1e9, 1.1, look_level())
    pairs, rows = sampler.run(points(list(truth)))
    assert not rows and [p.benchmark for p in pairs] == list(truth)  # the points' order
    verdicts = {r.benchmark: r.verdict for r in paired_rows(pairs, 1.1, look_level())}
    assert verdicts == {n: "slower" if t > 1 else "same" for n, t in truth.items()}
    owners = {}
    for lane, name, _, _ in calls:
        owners.setdefault(name, set()).add(lane)
    assert all(len(o) == 1 for o in owners.values()), owners  # one process per comparison
    assert {next(iter(o)) for o in owners.values()} == {0, 1}  # both processes worked


def test_no_lane_looks_before_every_grid_point_is_calibrated():
    """A lane whose calibrations are done waits for the others' (Benjamini-Hochberg's
    family at the first look is every comparison)."""
    truth = {f"b.time_{n}": 1.0 for n in range(6)}
    lanes, calls = _lanes(truth, 2, slow={1: 0.03})
    pairs, _ = Sampler(lanes, 1e9, 1.1, look_level()).run(points(list(truth)))
    assert len(pairs) == 6
    calibrating = [t for _, _, rounds, t in calls if rounds == 0]
    stepping = [t for _, _, rounds, t in calls if rounds >= 1]
    assert stepping and min(stepping) > max(calibrating)


def test_an_interrupt_stops_every_lane():
    """The review turns SIGTERM into an exception in the main thread, which is joining
    the lanes: it propagates, and the lanes make no request after their current one."""
    import signal

    truth = {f"b.time_{n}": 1.0 for n in range(40)}
    lanes, calls = _lanes(truth, 2, slow={0: 0.005, 1: 0.005})

    def interrupt(signum, frame):
        raise KeyboardInterrupt("stop")

    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        with pytest.raises(KeyboardInterrupt):
            Sampler(lanes, 1e9, 1.1, look_level()).run(points(list(truth)))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    made = len(calls)
    time.sleep(0.1)
    # at most what each lane has under way: a calibration is up to 3 requests (base's
    # block, head's, round 1) before the lane looks at the stop again
    after = len(calls)
    assert 0 < made and after <= made + 2 * 3
    time.sleep(0.1)
    assert len(calls) == after  # and then none: 40 points would have taken hundreds


def test_a_lane_that_fails_stops_the_review_with_its_error():
    lanes, _ = _lanes({f"b.time_{n}": 1.0 for n in range(8)}, 2, fail_in=1)
    sampler = Sampler(lanes, 1e9, 1.1, look_level())
    with pytest.raises(RuntimeError, match="the worker is gone"):
        sampler.run(points([f"b.time_{n}" for n in range(8)]))
    with pytest.raises(ValueError, match="at least one lane"):
        Sampler([], 1.0, 1.1, 0.01)


def test_select_matches_names_and_grid_points():
    listing = [{"name": "bench_reference.TimeAttention.time_attention", "type": "time",
                "unit": "seconds", "labels": ["shape='1x1x1024x1024x64', impl='one-shot'",
                                              "shape='1x1x4096x4096x64', impl='one-shot'"]},
               {"name": "bench_memory.PeakmemAttention.peakmem_attention",
                "type": "peakmemory", "unit": "bytes", "labels": ["impl='streamed'"]}]
    assert len(select(listing, None)) == 3
    assert [p.index for p in select(listing, "TimeAttention")] == [0, 1]
    assert [p.index for p in select(listing, "TimeAttention.*1024x1024")] == [0]
    assert select(listing, "Peakmem")[0].kind == "memory"
    with pytest.raises(ValueError, match="matches no benchmark"):
        select(listing, "nomatch")


def test_no_false_alarm_in_noisy_no_op_reviews():
    """Ten no-op reviews of 20 timings, 30% noise per block that pairing cannot cancel:
    not one "slower"."""
    truth = {f"b.time_{i}": 1.0 for i in range(20)}
    for seed in range(10):
        rows, _ = run(Machine(truth, load=0.0, noise=0.3, seed=seed), list(truth), budget=60)
        assert not [r for r in rows.values() if r.verdict == "slower"], seed


@pytest.mark.parametrize("lanes", [1, 2])
def test_the_first_look_judges_every_comparison_with_the_familys_prior(lanes):
    """Issue 23: the first comparisons to reach the first look were judged with no prior
    (a plain t on 2 degrees of freedom: a 1.2x change at little noise stayed open and
    took more rounds). Now the first look waits for every comparison's rounds and
    judges them all with the family's prior."""
    names = [f"b.time_{i:02d}" for i in range(16)]
    m = Machine({n: 1.2 for n in names}, noise=0.01, seed=3)
    lock = threading.Lock()

    def measure(point, side, plan):
        with lock:
            return m.measure(point, side, plan)

    sampler = Sampler([Lane(measure) for _ in range(lanes)], 1e9, 1.1, look_level(),
                      clock=m.clock)
    pairs, rows = sampler.run(points(names))
    assert not rows and len(pairs) == 16
    assert all(p.decided == ("slower", "significant") for p in pairs), [
        (p.rounds, p.decided) for p in pairs]
    assert all(p.rounds == LOOKS[0] and p.decided_prior is not None for p in pairs)
    assert len({id(p.decided_prior) for p in pairs}) == 1  # one look, one prior
