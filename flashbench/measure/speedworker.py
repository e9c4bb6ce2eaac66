"""A user's kernel timed by the harness's own clock: prepare / stage / run / fetch.

This process makes the pool (:func:`~flashbench.measure.workerpool.harness_pool`); the
worker (:class:`flashbench.backends.timedserver.TimedServer`) maps it for its warm-up
(``prepare``, :mod:`flashbench.timed.shared`), readies the calls (``stage``, outside the
clock) and runs them (``run``). On a CPU this process posts each call's inputs once the
run request's clock has started, before it is sent (:mod:`flashbench.timed.placed`; a
backward's q, k, v before its stage); on a GPU the worker copies them in from the pages
before the stage (``fill``). The clock that counts is this process's:
a request's round trip, less the median empty round trip (``null``), over its calls; the
worker's own figure is a cross-check (less: **clock tampered**). Read from /proc here: a
thread newer than the warm-up that works after a reply (**thread left running**), the
worker's CPU while it should idle, filling beyond the copies' cost or readying more than
running, a process that left its tree (**work outside the timed call**: :mod:`.workerjudge`,
backends.strays). ``fetch`` returns the outputs, judged here. Limits: docs/speed.md.
"""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import statistics
import time

import numpy as np

from flashbench.backends.strays import escaped
from flashbench.infra.cpuload import descendants
from flashbench.measure import workerpool
from flashbench.measure.clocked import WARM_S, Clocked, cpu_s
from flashbench.measure.workerjudge import COPY_FACTOR, clock_fault, judge_cpu, memo_fault
from flashbench.measure.workerpool import copy_s_per_byte, harness_pool, nbytes, one_thread
from flashbench.timed import commit
from flashbench.timed.guard import CLOCK, MEMO, MODIFIED, OUTSIDE, THREAD, Pool
from flashbench.timed.placed import Places, PlacesRefused, post
from flashbench.timed.threads import ThreadWatch

__all__ = ["time_in_worker", "REQUEST_S", "MAX_K", "SETTLES", "NEW_TRIES", "cpu_s",
           "REPLY_BYTES", "WARM_S"]

REQUEST_S = 1e-3  # a run request holds k calls, k chosen so that it lasts at least this
NULLS_UNDER = 10  # ... and this many empty requests' round trips (their noise is then small)
MAX_K = 64
SETTLES = 3  # idle pauses after random run requests (and one after the last)
CONFIRM = 20  # requests more, at most, before a suspected clock is called tampered
NULL_CAP, NULL_SLACK = 3.0, 1e-3  # an empty request's cost: at most 3x its first + 1 ms
# the row's times are its requests on new contents alone (a content memo padded to 0.6x the
# roofline floor read as its hits' time on returning contents: PASS, 2x over sdpa, a probe,
# 2026-12-05); those on returning contents are judged against the floor and against their
# neighbours on new contents (workerjudge.memo_fault); at most NEW_TRIES x samples requests
NEW_TRIES = 4
REPLY_BYTES = 2**20  # a run's reply (where its outputs lie, or their sums) is read up to this


def _calls(w: Clocked, k: int, cpu: dict, pool: Pool, seeds: list, said: list,
           new: list | None = None, watch: ThreadWatch | None = None) -> tuple[float, list]:
    """Up to k calls (never past a refill, nor from returning contents into new ones):
    their new contents made here, staged, a backward's dO drawn after the stage
    (:meth:`Pool.arm`), run: (the run's round trip, the worker's own time of each call).
    On a CPU (``w.mail``) the calls' inputs are posted once the run request's clock has
    started, before it is sent (:mod:`flashbench.timed.placed`; a backward's q, k, v
    before its stage, which runs the forward); elsewhere written into the pages (the worker
    stopped) and copied in by the worker's fills. The worker's CPU over the fills, the
    stage and the run, into ``cpu``; whether the contents were new, onto ``new``; each
    call's content seed onto ``seeds``, its output's sums at the reply onto ``said``."""
    if watch is not None:
        watch.check()
    w.family = descendants(w.pid)  # a process it started before this request: read, stopped
    if w.reader is not None:
        w.reader.family = w.family
    mail, late = w.mail, pool.late_n
    # the request's new contents, unknown till now: made in this process's own memory where
    # they are posted, else written into the pages the worker maps, the worker stopped
    with one_thread(), commit.frozen(w.pid) if mail is None else contextlib.nullcontext():
        pool.refill(secrets.randbits(62), k)
    if new is not None:
        new.append(pool.next_is_new())
    slots = [pool.next()[0] for _ in range(min(k, pool.left_in_group()))]
    early = len(pool.slots[0]) - late
    c0 = cpu_s(w.pid, w.family)
    if mail is None or late:  # copied into the worker's own buffers (posting: q, k, v)
        if mail is not None:
            with commit.frozen(w.pid):
                post(mail, slots, pool.slots, 0)
        w.ask(len(slots), op="fill", slots=slots)
    c1 = cpu_s(w.pid, w.family)
    w.ask(len(slots), op="stage", slots=slots)
    c2 = c3 = c4 = cpu_s(w.pid, w.family)
    if late:  # dO exists from here: after the forwards the stage ran
        with one_thread(), commit.frozen(w.pid) if mail is None else contextlib.nullcontext():
            pool.arm(secrets.randbits(62), slots)
        c3 = cpu_s(w.pid, w.family)
        if mail is None:
            w.ask(len(slots), op="fill", slots=slots, late=True)
        c4 = cpu_s(w.pid, w.family)
    w.warm()  # its CPU in no reading: a run's CPU counted it, and hid a stage's work under it
    c5 = cpu_s(w.pid, w.family)
    # on a GPU k L2 flushes and k outputs summed, as an empty request's; on a CPU read at once
    try:  # a CPU worker stopped as its reply's last byte arrives, before it is parsed
        rt, reply = w.ask(len(slots), None if w.reader is None else w.reader.stop, REPLY_BYTES,
                          op="run", flushes=k, sums=w.pad, where=bool(w.reader),
                          **w.posting(slots, pool, w.start, k))
    except BaseException:
        if w.reader is not None and w.reader.held:
            w.reader.resume()
        raise
    places = w.places
    sums = reply.get("sums") if w.reader is None else w.reader.read(
        reply.get("where"), len(slots), 4 * nbytes(pool.slots[0]) + 2**20,
        None if places is None else lambda: places.read_back(pool, slots))
    said += sums if isinstance(sums, list) and len(sums) == len(slots) else [None] * len(slots)
    c6 = cpu_s(w.pid, w.family)
    if watch is not None:
        watch.after_run()
    w.ask(len(slots), op="collect", placed=places is not None)  # outside the clock
    if None not in (c0, c1, c2, c3, c4, c5, c6):
        # a backward's dO fill alone (none where it is posted, inside the clock): what its q,
        # k, v allow, its stage (their forward, untimed and unweighed) may compute as well,
        # and the threads' spin after the last warm-up fell in their fill (an honest sdpa
        # backward failed 5 runs in 5 at --samples 200, 1x2x64x32, a quiet machine)
        fills = int(mail is None)  # a posted forward's inputs come with the run
        cpu["load"] = cpu.get("load", 0.0) + ((c4 - c3) if late else (c1 - c0))
        cpu["fills"] = cpu.get("fills", 0) + fills
        cpu["copied"] = cpu.get("copied", 0) + (fills and sum(nbytes(pool.slots[i][
            early if late else 0:]) for i in slots))
        cpu["stage"] += c2 - c1
        cpu["run"] += c6 - c5
        cpu["pairs"] = cpu.get("pairs", 0) + 1
    seeds += [pool.seeds[i] for i in slots]  # after arm: a backward's (contents, dO)
    return rt, reply["own_s"]


def time_in_worker(worker, shape: str, dtype: str, causal: bool, seed: int, samples: int,
                   warmup: int, pool: int, direction: str = "fwd",
                   variant: dict | None = None, decode: dict | None = None, varlen=None,
                   gqa: bool = True, varlen_k=None) -> dict:
    """``samples`` timed requests of the kernel in ``worker`` (module docstring): per call
    times (harness clock, s), the content seed of each call (replayed here from ``seed``, not
    taken from the worker), the outputs, faults, the worker's own median, k, the null round
    trip's median, the device. ``direction`` "decode": ``shape`` is a decode case's spec,
    ``decode`` its parameters (:func:`flashbench.timed.decode.decode_params`), the function a
    decode function. ``varlen``: a packed batch's lengths (its forward; ``shape`` gives
    the heads and head dims), ``varlen_k`` its key lengths where they differ. ``gqa``:
    whether the function takes k, v of fewer heads than q (else they are expanded).
    BackendFailed / BackendUnavailable as the worker raises them."""
    from flashbench.backends.worker import time_limit
    from flashbench.timed.shared import share

    w = Clocked(worker, time_limit())
    pool = harness_pool(shape, dtype, pool, seed, direction, decode, varlen, gqa, varlen_k,
                        (variant or {}).get("softcap"))
    shared = share(pool)
    try:
        return _timed(w, pool, shared, samples, warmup, direction, causal, variant, {} if
                      varlen is None else {"varlen": list(map(int, varlen)),
                                           "varlen_k": list(map(int, varlen_k or varlen))})
    finally:
        shared.unlink()
        if w.places is not None:
            w.places.close()


def _timed(w: Clocked, pool: Pool, shared, samples: int, warmup: int, direction: str,
           causal: bool, variant: dict | None, packed: dict) -> dict:
    """:func:`time_in_worker`'s requests on ``pool``; ``packed``: a packed batch's lengths."""
    seeds: list = []  # each timed call's content seed, in order
    sums: list = []  # each call's output sums at its run's reply
    warm = workerpool.warm_slots(pool, warmup)
    ready = w.ask(warmup + 1, op="prepare", shared=shared.spec(), warmup=warm,
                  late=pool.late_n, names=list(pool.names), causal=causal,
                  direction=direction, variant=variant or {}, **packed)[1]
    shared.unlink()  # mapped by both: nothing else may open it
    device = workerpool.harness_device()  # the harness's own: a worker's word lifted the cap
    gpu = device == "cuda"
    w.warming = not gpu  # a CPU's threads awake at each run and empty request (TimedServer)
    w.warm()  # torch's pool, started by it at a call too small to use it, spun past replies
    watch = ThreadWatch(w.pid)  # the threads after the warm-up: a kept pool's are no fault
    cpu = {"stage": 0.0, "run": 0.0, "idle": 0.0,  # and the copies' cost here, per byte
           "copy_s_per_byte": copy_s_per_byte(nbytes(pool.slots[0]))}
    # on a GPU each call follows an L2 flush (the worker's, as the harness's own timer's):
    # the empty requests make as many, so that a run's round trip less theirs is the calls'
    w.pad = int(gpu)  # k calls' outputs summed a request on a GPU, once k is chosen
    w.reader = None if gpu else commit.MemoryReader.of(w.pid)
    if not gpu or os.environ.get("FLASHBENCH_GPU_POSTING") == "1":  # a GPU's: docs/gpu.md
        _mailbox(w, ready.get("places") if w.reader is not None else None, pool)
    nulls = [w.null(pool, 1, flushes=1) for _ in range(3)]
    tries = []
    for _ in range(3):
        tries.append((_calls(w, 1, cpu, pool, seeds, sums, watch=watch)[0], 1))
        w.over_limit(tries[-1:], min(nulls))
    first = min(rt for rt, _ in tries) - min(nulls)  # load only adds
    span = max(REQUEST_S, NULLS_UNDER * statistics.median(nulls))  # k: <= largest_group (noise)
    k = max(1, min(MAX_K, pool.largest_group(), math.ceil(span / max(first, 1e-7))))
    w.pad = k if gpu else 0
    faults: dict = {}
    if (said := ready["device"]) != device:
        faults[CLOCK] = (f"its worker said its device is {said!r}; this machine's is {device!r}"
                         " (the harness's own torch.cuda.is_available())")
    if gpu or w.mail is not None:
        nulls = []  # the calibration's (one flush, one slot posted) do not match k calls'
    runs, own, new, idle_wall = _requests(w, k, cpu, pool, seeds, sums, watch, samples,
                                          nulls, faults, device)
    # an empty request may cost no more than NULL_CAP x its cost before the kernel's module
    # was imported in the worker (+ NULL_SLACK): a module that slowed the worker's empty
    # requests by 15 ms had them subtracted from every timed one (2.3x faster, PASS)
    # (on a GPU with its k L2 flushes, measured then too, and 2x its k sums at most)
    trusted = w.worker.trusted_null_s
    flushes = k * getattr(w.worker, "trusted_flush_s", 0.0) if gpu else 0.0
    summing = 2 * k * commit.checksum_s(min(commit.said_bytes(sums),
                                            4 * nbytes(pool.slots[0]))) if gpu else 0.0
    # posted inputs: copied twice a request (here, in the worker), each at COPY_FACTOR x ours
    posting = 0.0 if w.mail is None else 2 * COPY_FACTOR * k * nbytes(
        pool.slots[0][w.start:]) * cpu["copy_s_per_byte"]
    cap = math.inf if trusted is None else (NULL_CAP * (trusted + flushes) + NULL_SLACK
                                            + summing + posting)
    nulls = [min(t, cap) for t in nulls]
    null = statistics.median(nulls)
    per_call = [max(rt - null, 0.0) / n for (rt, n), fresh in zip(runs, new, strict=True)
                if fresh] or [max(rt - null, 0.0) / n for rt, n in runs]  # NEW_TRIES spent
    # the floor's judge: less the FASTEST empty round trip, so that a request's own pipe
    # latency never makes an honest call look faster than it ran (a module that slows its
    # empty requests only brings its own calls nearer the floor)
    least = min(nulls)
    fastest = [max(rt - least, 0.0) / n for rt, n in runs]
    clocked, claimed = list(runs), list(own)
    memo = memo_fault(runs, new, nulls)
    if memo is not None:  # named where it stands with as many requests more: a burst of load
        # named an honest sdpa at 1x1x32x32 beside 3 test workers once (5 of 5 below, p 0.03)
        again: list = []
        more, mine, fresh, pauses = _requests(w, k, cpu, pool, seeds, sums, watch, samples,
                                              again, faults, device)
        memo = memo_fault(runs + more, new + fresh, nulls + [min(t, cap) for t in again])
        memo = None if memo is None else (f"{memo} ({len(runs)} requests named it, and it "
                                          f"stood with {len(more)} more)")
        clocked, claimed, idle_wall = clocked + more, claimed + mine, idle_wall + pauses
    # a suspected clock is timed again, up to CONFIRM requests, until one request agrees:
    # an honest worker on a saturated machine read under half in all 10 requests (1 run in
    # 10 with 3 busy loops on 2 CPUs); a slowed clock reads low in every one
    for _ in range(CONFIRM):
        if clock_fault(clocked, claimed, nulls) is None:
            break
        rt, mine = _calls(w, k, cpu, pool, seeds, sums, watch=watch)
        clocked.append((rt, len(mine)))
        claimed.append(sum(mine) / len(mine))
    w.over_limit(clocked, least)  # every timed request, the confirming ones too
    watch.check()  # the last request's threads
    if watch.fault is not None:
        faults.setdefault(THREAD, watch.fault)
    left = escaped(w.since)[0]  # while the worker lives: what its code double-forked
    if left:
        faults.setdefault(OUTSIDE, "a process left its worker's tree (a double fork makes it "
                          "the harness's child, a clone with CLONE_PARENT the zygote's: no "
                          "reading of the worker's CPU counts it): " + "; ".join(left[:3]))
    calls = 3 + sum(n for _, n in clocked)  # every call's output is fetched and judged
    reply = w.ask(calls, op="fetch", placed=w.places is not None)[1]
    said = reply.get("faults")
    faults = {**({str(n): str(why) for n, why in said.items()} if isinstance(said, dict)
                 else {}), **faults}
    outputs = commit.received(reply.get("outputs"), calls, faults)  # None: failed, named
    late = commit.changed_after_reply(sums, outputs, read=w.reader is not None)
    late = late if w.reader is None or w.reader.traced is None else w.reader.traced
    if late is not None:
        faults.setdefault(OUTSIDE, late)
    changed = pool.modified(None if w.places is None else "each call's inputs read back "
                            "from its worker's buffers at its run's reply")
    if changed is not None:
        faults.setdefault(MODIFIED, changed)
    cpu["null_wall"] = null  # what an empty request's own CPU may be, at most
    judge_cpu(cpu, idle_wall, faults, direction, device)
    own_med = statistics.median(own)
    for name, why in ((CLOCK, clock_fault(clocked, claimed, nulls)), (MEMO, memo)):
        if why is not None:
            faults.setdefault(name, why)
    return {"samples_s": per_call, "floor_samples_s": fastest, "seeds": seeds,
            "outputs": outputs, "faults": faults, "device": device,
            "own_median_s": own_med, "k": k, "null_s": null, "null_cap_s": cap,
            "interpreted": w.worker.interpreted(), "warmed": WARM_S * w.warming}


def _requests(w: Clocked, k: int, cpu: dict, pool: Pool, seeds: list, sums: list,
              watch: ThreadWatch, samples: int, nulls: list, faults: dict,
              device: str) -> tuple:
    """Run requests of k calls, each after an empty one (its round trip onto ``nulls``),
    until ``samples`` of them ran on new contents (NEW_TRIES x samples at most), an idle
    pause after a few at random and after the last: (each run's (round trip, calls), the
    worker's own time a call of each, whether each ran on new contents, the pauses, s)."""
    rng = np.random.default_rng()  # OS entropy: the worker cannot know where pauses fall
    settle_at = set(rng.choice(samples, min(SETTLES, samples), replace=False).tolist())
    runs, own, new, idle_wall, i = [], [], [], 0.0, 0
    while sum(new) < samples and i < NEW_TRIES * samples:
        w.warm()  # outside the reading, as a run's
        c0 = cpu_s(w.pid, w.family)
        nulls.append(w.null(pool, k, warmed=True, flushes=k, sums=w.pad))
        c1 = cpu_s(w.pid, w.family)
        if None not in (c0, c1):  # a request's own cost in the worker, with no work
            cpu["null"] = cpu.get("null", 0.0) + c1 - c0
            cpu["nulls"] = cpu.get("nulls", 0) + 1
        rt, mine = _calls(w, k, cpu, pool, seeds, sums, new, watch)
        runs.append((rt, len(mine)))
        own.append(sum(mine) / len(mine))
        if i in settle_at:
            idle_wall += _settle(w, rt, device, cpu, faults)
        i += 1
    return runs, own, new, idle_wall + _settle(w, rt, device, cpu, faults)


def _mailbox(w: Clocked, places, pool: Pool) -> None:
    """Inputs posted from here (a CPU worker): the pool's contents made in this process's
    own memory, its slots in the pages the worker maps kept as the mailbox; the worker's
    buffers read back where this process may (BackendFailed: false buffers)."""
    from flashbench.backends.tensors import BackendFailed
    try:
        w.places = None if places is None else Places.of(w.pid, places, pool.slots)
    except PlacesRefused as exc:
        raise BackendFailed(str(exc)) from None
    w.mail, pool.private = pool.slots, True
    w.start = len(pool.slots[0]) - pool.late_n if pool.late_n else 0  # a backward's dO
    pool.slots = [tuple(None if x is None else x.clone() for x in slot) for slot in pool.slots]


def _settle(w: Clocked, rt: float, device: str, cpu: dict, faults: dict) -> float:
    """An idle pause after a run's reply: the worker's CPU time over it (work finished
    after the reply), and on a GPU an empty request that synchronises the device (work
    left on it); returns the pause's length, s."""
    pause = min(0.5, max(0.1, 2 * rt))
    c0 = cpu_s(w.pid, w.family)
    time.sleep(pause)
    c1 = cpu_s(w.pid, w.family)
    if None not in (c0, c1):
        cpu["idle"] += c1 - c0
    if device != "cuda":
        return pause
    sync, _ = w.ask(op="null", sync=True)
    plain, _ = w.ask(op="null")
    if sync - plain > max(1e-3, 0.5 * rt):
        faults.setdefault(OUTSIDE, f"the device was still busy {sync - plain:.3g} s after "
                          "a timed request's reply")
    return pause
