"""Same-run A/B sampling: base and head measured alternately, adaptively, within a budget.

:class:`Sampler` is the schedule and knows nothing of processes: per timing grid point a
calibration block of each side (discarded), then paired rounds in ABBA order, judged at
the looks of :data:`flashbench.review.stats.LOOKS` until settled or out of budget. Why each
step is as it is: docs/review.md ("How it measures").
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from flashbench.infra.cpuload import Load
from flashbench.review.model import Row
from flashbench.review.paired import Paired, settle
from flashbench.review.rules import coverage_row, row_kind
from flashbench.review.stats import LOOKS
from flashbench.review.worker_process import WARMUP_BELOW

VERY_SHORT, SHORT_SAMPLE = 0.02, 0.1  # samples shorter (s) come five / three to a block


@dataclass(frozen=True)
class Point:
    """One grid point of one benchmark."""

    name: str
    index: int
    params: str
    type: str  # "time", "track", "peakmemory" (asv_runner's types)
    unit: str
    timeout: float = 60.0
    version: str | None = None  # asv's code hash of today's benchmark (both sides run it)

    @property
    def kind(self) -> str:
        return row_kind(self.name, self.type, self.unit)

    def coverage_row(self, base: dict, head: dict) -> Row | None:
        """The row of two workers' replies that are not both "ok" (else None)."""
        return coverage_row(self.kind, self.name, self.params, self.unit,
                            base.get("status", "failed"), head.get("status", "failed"),
                            base.get("reason", ""), head.get("reason", ""))


@dataclass
class Plan:
    """How one comparison is sampled, and its paired rounds so far."""

    point: Point
    pair: Paired
    number: int = 0  # calls per sample (0: calibrate at the first block)
    per_block: int = 1
    warmup: bool = False
    round_cost: float = 0.0  # wall seconds of its last round
    spent: float = 0.0  # wall seconds of all its blocks so far (calibration included)
    lane: int = 0  # the lane (process) that calibrated it and runs its rounds
    order: int = 0  # its point's place in the points sampled


Measure = Callable[[Point, str, Plan], dict]
# a pair of blocks, interleaved sample by sample: (point, (first side, second side), plan)
# -> {"status": "ok", "base": [per-call seconds], "head": [...]} or a failure that names
# its "side" (none: the worker died or overran, and the blocks are asked one by one)
MeasurePair = Callable[[Point, tuple[str, str], Plan], dict]


@dataclass(frozen=True)
class Lane:
    """One measuring process: its ``measure`` (a block) and ``measure_pair`` (a short
    call's interleaved round; None: blocks only), and a comparison's rounds taken there."""

    measure: Measure
    measure_pair: MeasurePair | None = None

    def block(self, plan: Plan, side: str) -> dict:
        """One block of ``side``; the first (``number`` 0) calibrates the plan."""
        reply = self.measure(plan.point, side, plan)
        if reply.get("status") != "ok":
            return reply
        if not plan.number:
            plan.number = int(reply["number"])
            sample = statistics.median(reply["samples"]) * plan.number
            plan.per_block = 5 if sample < VERY_SHORT else 3 if sample < SHORT_SAMPLE else 1
            plan.warmup = sample / plan.number < WARMUP_BELOW
        return {"status": "ok", "value": float(min(reply["samples"]))}

    def calibrated(self, plan: Plan, side: str) -> dict:
        """One discarded sample of the calibrated ``number`` (warm-up and status)."""
        per_block, plan.per_block = plan.per_block, 1
        try:
            return self.block(plan, side)
        finally:
            plan.per_block = per_block

    def timed(self, plan: Plan, side: str) -> float:
        """A block's value; :class:`_Broken` where it fails (it worked at calibration)."""
        reply = self.block(plan, side)
        if reply.get("status") != "ok":
            raise _Broken(side, reply)
        return reply["value"]

    def round(self, plan: Plan, clock: Callable[[], float], first_of_step: bool = False
              ) -> None:
        """One paired round of ``plan``, its wall time its ``round_cost``."""
        long = not plan.warmup  # a call of 0.2 s or more: rounds go BA, AB, BA, ...
        sides = ("base", "head") if (plan.pair.rounds + long) % 2 == 0 else ("head", "base")
        values = None
        if not long and self.measure_pair is not None:
            t0 = clock()
            reply = self.measure_pair(plan.point, sides, plan)
            if reply.get("status") == "ok":
                values = {side: min(reply[side]) for side in sides}
            elif "side" in reply:
                raise _Broken(reply["side"], reply)
            # else the worker died or overran: one block per side tells which side it was
        if values is None:
            if first_of_step and long:  # the step's first block must not follow another
                self.timed(plan, sides[0])  # point's: one block first, discarded
            t0 = clock()  # a round's cost: its two timed blocks
            values = {side: self.timed(plan, side) for side in sides}
        plan.pair.base.append(float(values["base"]))
        plan.pair.head.append(float(values["head"]))
        plan.round_cost = clock() - t0


class Sampler:
    """The adaptive ABBA schedule. ``lanes`` (one per process, each holding both commits)
    sample at once, a thread each: calibrations, then every comparison to the first look,
    judged together, then the next steps of each lane's own comparisons. The statistics
    and the budget (wall time) are the whole review's; an error in one lane, or an
    interrupt, stops the others at their next round (docs/review.md, ``--jobs``)."""

    def __init__(self, lanes: list[Lane], budget: float, factor: float, q_look: float,
                 clock: Callable[[], float] = time.monotonic,
                 log: Callable[[str], None] | None = None, load: Callable | None = None):
        if not lanes:
            raise ValueError("a sampler needs at least one lane")
        self.lanes = list(lanes)
        self.budget, self.factor, self.q_look = budget, factor, q_look
        self.clock, self.log = clock, log or (lambda text: None)
        self.load = load  # infra.cpuload.outside_cpu, read around each comparison's blocks
        self.start = 0.0
        self.out_of_budget = False
        self._lock = threading.Lock()
        self._calibrated_all = threading.Condition(self._lock)
        self._calibrating = 0  # grid points some lane is calibrating now
        self._before_first_look = 0  # lanes still taking comparisons to the first look

    def _left(self) -> float:
        return self.budget - (self.clock() - self.start)

    def run(self, points: list[Point]) -> tuple[list[Paired], list[Row]]:
        """Sample every point; returns (paired comparisons, coverage rows)."""
        self.start = self.clock()
        self._todo = list(enumerate(points))  # not yet calibrated, in order
        self._say = every(self.log, clock=self.clock)  # a progress line while calibrating
        self._plans: list[Plan] = []  # every measured comparison, in calibration order
        self._rows: list[Row] = []
        self._failure: BaseException | None = None
        self._before_first_look = len(self.lanes)
        if len(self.lanes) == 1:
            self._lane(0)
        else:
            threads = [threading.Thread(target=self._lane, args=(i,), daemon=True,
                                        name=f"review-lane-{i}")
                       for i in range(len(self.lanes))]
            try:
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
            except BaseException as exc:  # interrupted: the lanes stop at their next request
                self._stop(exc)
                raise
            if self._failure is not None:
                raise self._failure
        return [p.pair for p in sorted(self._plans, key=lambda p: p.order)], self._rows

    def _lane(self, i: int) -> None:
        try:
            while self._calibrate_next(i):
                pass
            while self._step_next(i, first=True):
                pass
            self._first_look()
            while self._step_next(i):
                pass
        except BaseException as exc:  # a worker error: the review reports it
            self._stop(exc)
            if len(self.lanes) == 1:
                raise

    def _stop(self, exc: BaseException) -> None:
        """Every lane stops at its next request (the first failure is the one raised)."""
        with self._lock:
            self._failure = self._failure or exc
            self._todo.clear()
            self._calibrated_all.notify_all()

    def _calibrate_next(self, i: int) -> bool:
        """Calibration and round 1 of the next grid point (False: none left)."""
        with self._lock:
            if not self._todo or self._failure is not None:
                return False
            if self._left() <= 0:  # the budget covers calibration too: the rest is unseen
                self.out_of_budget = True
                self.log(f"budget of {self.budget:.0f} s spent before {len(self._todo)} "
                         "comparison(s) were calibrated")
                self._rows += [_unmeasured(p, self.budget) for _, p in self._todo]
                self._todo.clear()
                return False
            index, point = self._todo.pop(0)
            self._say(lambda: f"calibrating comparison {index + 1} of {index + 1 + len(self._todo)}"
                      f", {max(self._left(), 0):.0f} s of budget left")
            self._calibrating += 1
        try:
            self._calibrate(i, index, point)
        finally:
            with self._lock:
                self._calibrating -= 1
                self._calibrated_all.notify_all()
        return True

    def _calibrate(self, i: int, index: int, point: Point) -> None:
        lane = self.lanes[i]
        t0 = self.clock()
        plan = Plan(point, Paired(point.name, point.params, point.unit), lane=i, order=index)
        base = lane.block(plan, "base")  # number 0: calibrates number and per_block
        head = (lane.calibrated(plan, "head") if base.get("status") == "ok"
                else lane.measure(point, "head", plan))
        row = None
        if base.get("status") == "ok" and head.get("status") == "ok":
            reading = Load.start(self.load)  # the rounds' load, not calibration's (imports)
            try:
                lane.round(plan, self.clock)  # a long call's round 1 is BA: head's block follows
            except _Broken as broken:  # head's discarded first call
                row = broken.row(plan)
            plan.pair.load.add(self.load, reading)
            plan.spent = self.clock() - t0
        else:
            row = point.coverage_row(base, head)
        with self._lock:
            if row is not None:
                self._rows.append(row)
            else:
                self._plans.append(plan)

    def _first_look(self) -> None:
        """The first look, for every comparison at once: the last lane to get its
        comparisons there takes it (each judged with the prior of the whole family at
        that look), the others wait for it."""
        with self._lock:
            self._before_first_look -= 1
            if self._before_first_look == 0:
                pairs = [p.pair for p in self._plans]
                ready = [p for p in pairs if p.rounds >= LOOKS[0]]
                settled = settle(pairs, ready, self.factor, self.q_look)
                self.log(f"first look at {len(ready)} comparison(s): {settled} settled, "
                         f"{max(self._left(), 0):.0f} s of budget left")
                self._calibrated_all.notify_all()
            while self._before_first_look > 0 and self._failure is None:
                self._calibrated_all.wait()

    def _step_next(self, i: int, first: bool = False) -> bool:
        """The next step of one of lane ``i``'s open comparisons (False: the lane is
        done: nothing open, or nothing that fits in the budget left); with ``first``,
        only steps to the first look, which is not taken here (:meth:`_first_look`)."""
        lane = self.lanes[i]
        with self._lock:
            while self._calibrating and self._failure is None:  # every comparison is in
                self._calibrated_all.wait()  # the family before any look
            if self._failure is not None:
                return False
            steps = sorted((target, plan.spent + cost, cost, n, plan)
                           for n, plan in enumerate(self._plans)
                           if plan.lane == i and plan.pair.decided is None
                           for target in [_next_look(plan.pair.rounds)] if target is not None
                           and not (first and target > LOOKS[0])
                           for cost in [(target - plan.pair.rounds + (
                               0.0 if plan.warmup else 0.5)) * plan.round_cost])
            if not steps:
                return False
            step = next((st for st in steps if st[2] <= self._left()), None)
            if step is None:
                self.out_of_budget = True
                self.log(f"budget of {self.budget:.0f} s spent: {len(steps)} comparison(s) "
                         "still open" + (f" in lane {i}" if len(self.lanes) > 1 else ""))
                return False
            target, plan = step[0], step[4]
        t0, reading = self.clock(), Load.start(self.load)
        try:
            opening = True
            while (plan.pair.rounds < target and plan.round_cost <= self._left()
                   and self._failure is None):
                lane.round(plan, self.clock, first_of_step=opening)
                opening = False
        except _Broken as broken:
            with self._lock:
                self._plans.remove(plan)
                self._rows.append(broken.row(plan))
            return True
        finally:
            plan.spent += self.clock() - t0
            plan.pair.load.add(self.load, reading)
        if plan.pair.rounds < target:  # its rounds grew costlier than the budget left
            self.out_of_budget = True
            return False
        if first:
            return True
        with self._lock:
            settle([p.pair for p in self._plans], [plan.pair], self.factor, self.q_look)
        if plan.pair.decided is not None:
            self.log(f"{plan.point.name}({plan.point.params}): {plan.pair.decided[0]} after "
                     f"{plan.pair.rounds} rounds, {max(self._left(), 0):.0f} s of budget left")
        return True


def every(log, seconds: float = 10.0, clock=time.monotonic):
    """``say(text)``: ``log(text())`` if its last line is ``seconds`` old (a progress line)."""
    last = [clock()]

    def say(text) -> None:
        if clock() - last[0] >= seconds:
            last[0] = clock()
            log(text())
    return say


def _unmeasured(point: Point, budget: float) -> Row:
    """The row of a timing the budget ran out before: not measured, not decided."""
    return Row(kind="time", benchmark=point.name, params=point.params, unit=point.unit,
               verdict="not measured", reason="budget-unmeasured",
               detail=f"not measured: the budget of {budget:.0f} s was spent before its "
                      "calibration", undecided=True)


def _next_look(rounds: int) -> int | None:
    """The first look after ``rounds`` rounds (None after the last)."""
    return next((look for look in LOOKS if look > rounds), None)


class _Broken(Exception):
    """A grid point that measured at calibration failed in a paired round."""

    def __init__(self, side: str, reply: dict):
        super().__init__(side)
        self.side, self.reply = side, reply

    def row(self, plan: Plan) -> Row:
        ok = {"status": "ok"}
        base, head = (ok, self.reply) if self.side == "head" else (self.reply, ok)
        return plan.point.coverage_row(base, head)

