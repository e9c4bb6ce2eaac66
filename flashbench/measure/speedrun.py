"""Runs ``flashbench speed``: each backend timed on each case by the guarded timer, judged.

A registry backend (flashbench's kernels, torch's) is timed in this process; a user's kernel
in its worker process, timed by this process's clock (:mod:`.speedworker`), its outputs
judged here. Passes fwd, bwd, fwdbwd (:func:`flashbench.timed.attention.pass_call`;
gradients judged by :mod:`.speedgrad`), variants where a backend declares them, decode
(:mod:`.speeddecode`). A backend running under the Triton interpreter is never timed (its
row says so).
"""

from __future__ import annotations

import os
import sys
import time

from flashbench.backends.strays import escaped, limits, limits_said, priority, sweep
from flashbench.backends.worker import worker_of, worker_pids
from flashbench.infra.cpuload import Load, cpus_watched, outside_cpu
from flashbench.infra.freeze import continued, counting_continues, resume
from flashbench.measure.speed import (
    CLOCK_CPU,
    CLOCK_GPU,
    Judge,
    Roofline,
    SpeedCase,
    SpeedRow,
    interpreted,
    measure_roofline,
    row_from,
    worker_row,
)
from flashbench.measure.speedfaults import others_kept, rescheduled, stopped_outside, timed_alone
from flashbench.timed.attention import (
    NoBackward,
    attention_maker,
    do_maker,
    grad_maker,
    packed_shape,
    pass_call,
    pool_size,
    varlen_maker,
)
from flashbench.timed.commit import frozen
from flashbench.timed.guard import Pool, l2_flusher, structural, timed_calls
from flashbench.timed.pool import names_for

# each speedup's interval (speedup_interval): its level, the bootstrap's resamples
SPEEDUP_LEVEL, SPEEDUP_RESAMPLES = 0.95, 1999
# processes outside the run: a row timed while they kept more than this many CPUs busy on
# average is marked busy (information: its times, and a speedup it takes part in, are not
# the kernels' own; an identical kernel read 0.70-1.45x its twin under a bursty load)
OUTSIDE_CPUS = 0.1
OUTSIDE_WALL = 0.5  # s: a row's outside reading spans this at least (/proc/stat: 10 ms ticks)

__all__ = ["time_backend", "run_speed", "OUTSIDE_CPUS", "speedup_interval"]


def _judged(case: SpeedCase, seed: int, outputs, seeds, faults: dict,
            out_dtype: str | None, drawn_on: str = "cpu") -> tuple[dict, int]:
    """Faults plus the first value fault of the outputs (None: judged elsewhere as faulty).
    ``drawn_on``: where the inputs were drawn (the harness's own rows: their device; a
    worker's: the CPU), so that they are rebuilt bit for bit."""
    from flashbench.measure.speedgrad import GradJudge

    if case.varlen is not None:  # a packed batch: its forward alone (cli.speed refuses more)
        from flashbench.measure.speedvarlen import PackedJudge

        judge = PackedJudge(case, varlen_maker(case.varlen, case.shape, case.dtype,
                                               keys=case.varlen_k, softcap=case.softcap),
                            seed,
                            out_dtype)
    else:
        judge = Judge(case, attention_maker(case.shape, case.dtype, drawn_on, "device",
                                              case.softcap), seed,
                      out_dtype)
    grads = GradJudge(case, grad_maker(case.shape, case.dtype, drawn_on, "device",
                                          case.softcap), seed)
    judge.contents = grads.contents = len({c for o, c in zip(outputs, seeds, strict=True)
                                           if o is not None})  # their rows cover every row
    faults = dict(faults)
    for out, content in zip(outputs, seeds, strict=True):
        if out is None:
            continue
        if case.direction == "fwd":
            bad = judge.judge(content, out)
        elif case.direction == "bwd":
            bad = grads.judge(content, tuple(out))
        else:  # fwdbwd: (o, dq, dk, dv)
            bad = judge.judge(content, out[0]) or grads.judge(content, tuple(out[1:]))
        if bad is not None:
            faults.setdefault(*bad)
    if case.direction != "fwd":  # the gradients' rule, over every input judged
        bad = grads.finish()
        if bad is not None:
            faults.setdefault(*bad)
    return faults, len(outputs)


def _late_do(case: SpeedCase, device: str, draw: str):
    """A backward pool's late argument, dO (:meth:`flashbench.timed.pool.Pool.arm`): drawn
    after the call's forward ran; None for the other passes (their calls get it whole)."""
    return do_maker(case.shape, case.dtype, device, draw) if case.direction == "bwd" else None


def _pool(case: SpeedCase, samples: int) -> int:
    """Slots of the case's pool (a packed batch: sized by its rows, not the padded shape)."""
    shape = case.shape if case.varlen is None else packed_shape(case.varlen, case.shape,
                                                                 case.varlen_k)
    return pool_size(shape, case.dtype, samples)


def _in_process(case: SpeedCase, backend, seed: int, samples: int, warmup: int, device: str):
    from flashbench.backends.tensors import expand_kv

    dev = backend.device(device)
    size = _pool(case, samples)
    if case.varlen is not None:  # a packed batch: q, k, v, cu_seqlens as FlashAttention's
        from flashbench.measure.speedvarlen import packed_call

        pool = Pool(varlen_maker(case.varlen, case.shape, case.dtype, dev.type,
                                 case.varlen_k, case.softcap), size, seed,
                    names_for("fwd", varlen=True))
        setup, call = None, packed_call(backend, case)
    elif case.direction == "fwd":
        make = attention_maker(case.shape, case.dtype, dev.type, "device",  # _judged's too
                               case.softcap)
        pool = Pool(lambda s: backend.prepare(*make(s), device=dev), size, seed)
        setup, call = None, lambda q, k, v: backend.timed_fn(q, k, v, causal=case.causal,
                                                             **case.kwargs())
    else:  # gradients of the Hkv-head k, v: a backend without GQA gets them expanded in
        pool = Pool(grad_maker(case.shape, case.dtype, dev.type, "device", case.softcap),
                    size, seed,
                    names_for(case.direction), late=_late_do(case, dev.type, "device"))
        setup, call = pass_call(lambda q, k, v: backend.timed_fn(
            q, *(expand_kv(q, k, v) if not backend.gqa else (k, v)), causal=case.causal,
            **case.kwargs()), case.direction)
    batch = timed_calls(call, pool, samples, warmup, device=dev.type,
                        flush=l2_flusher(dev.type), setup=setup)
    faults = dict(batch.faults)
    outputs = []
    for j, (out, slot) in enumerate(zip(batch.outputs, batch.slots, strict=True)):
        bad = structural(out, pool.slots[slot], batch.outputs[:j])
        if bad is not None:
            faults.setdefault(*bad)
        outputs.append(None if bad is not None else out)
    return batch.samples_s, batch.seeds, outputs, faults, dev.type


def time_backend(case: SpeedCase, backend, roof: Roofline, seed: int, samples: int = 10,
                 warmup: int = 2, device: str = "cpu") -> SpeedRow:
    """The row of ``backend`` on ``case`` (module docstring)."""
    from flashbench.backends.tensors import BackendFailed, BackendUnavailable
    from flashbench.backends.worker import worker_of
    from flashbench.measure.speedworker import time_in_worker

    def untimed(status, reason):
        return SpeedRow(case.label(), case.shape.spec(), case.dtype, case.causal,
                        case.direction, backend.name, status, reason=reason,
                        variant=None if case.variant is None else case.variant.label())

    reason = backend.unavailable_for(case.shape, case.dtype) or backend.not_applicable(
        case.variant, grad=case.direction != "fwd", packed=case.varlen is not None)
    if reason is not None:
        return untimed("not timed", reason)
    if backend.interpreted():
        return untimed("not timed", "runs under the Triton interpreter here: its speed means "
                       "nothing, so it is never timed")
    worker = worker_of(backend)
    if case.direction != "fwd" and not backend.differentiable:  # a user's: as check says
        from flashbench.measure.backward import NOT_DIFFERENTIABLE
        from flashbench.measure.records import users

        return untimed("not timed", NOT_DIFFERENTIABLE.removeprefix("not applicable: ")
                       .replace("to judge its gradients", "to time its backward")
                       if users(backend) else
                       "no backward: autograd does not flow through it here")
    try:
        reply = None
        if worker is None:
            times, seeds, outputs, faults, where = _in_process(case, backend, seed, samples,
                                                               warmup, device)
        else:
            reply = time_in_worker(worker, case.shape.spec(), case.dtype, case.causal, seed,
                                   samples, warmup, _pool(case, samples), case.direction,
                                   case.kwargs(), varlen=case.varlen, gqa=backend.gqa,
                                   varlen_k=case.varlen_k)
            times, seeds, outputs, where = (reply["samples_s"], reply["seeds"],
                                            reply["outputs"], reply["device"])
            faults = dict(reply["faults"])
    except BackendUnavailable as exc:
        return untimed("not timed", str(exc))
    except NoBackward as exc:
        return untimed("not timed", str(exc))
    except BackendFailed as exc:
        return untimed("FAIL", str(exc))
    except Exception as exc:  # noqa: BLE001 - a kernel's failure on this case is its row's
        from flashbench.backends.outputs import raised

        return untimed("FAIL", raised(exc))
    faults, checked = _judged(case, seed, outputs, seeds, faults, backend.out_dtype,
                              where if reply is None else "cpu")
    if reply is not None and reply.get("interpreted"):  # its outputs are judged all the same:
        row = untimed("FAIL" if faults else "not timed", interpreted(faults))  # (a claim
        row.failures, row.checked = dict(faults), checked  # of its worker's, untrusted)
        return row
    return worker_row(row_from(case, backend.name, times, faults, roof,
                               CLOCK_GPU if where == "cuda" else CLOCK_CPU, checked,
                               None if reply is None else reply["floor_samples_s"]), reply)


def speedup_interval(base: list, mine: list, level: float = SPEEDUP_LEVEL) -> list | None:
    """[low, high]: the speedup's interval at ``level``, scipy.stats.bootstrap's percentile
    interval of the baseline's median time a call over this row's, each row's timed calls
    resampled on their own (:data:`SPEEDUP_RESAMPLES`; a fixed generator: the same times
    give the same interval). None with fewer than 2 times a row or a bound not finite (a
    median of 0 s). The times of one row move together on a machine's slow stretch, which
    no resampling sees: the interval is the calls' scatter, not the run-to-run one."""
    import inspect

    import numpy as np
    from scipy import stats

    if min(len(base), len(mine)) < 2:
        return None
    seed = {"rng" if "rng" in inspect.signature(stats.bootstrap).parameters
            else "random_state": np.random.default_rng(0)}
    with np.errstate(divide="ignore", invalid="ignore"):
        got = stats.bootstrap((np.asarray(base, float), np.asarray(mine, float)),
                              lambda a, b, axis: np.median(a, axis=axis)
                              / np.median(b, axis=axis), vectorized=True, paired=False,
                              n_resamples=SPEEDUP_RESAMPLES, confidence_level=level,
                              method="percentile", **seed).confidence_interval
    low, high = float(got.low), float(got.high)
    return [low, high] if np.isfinite(low) and np.isfinite(high) else None


def _baseline(rows: list[SpeedRow], backends: dict, name: str | None) -> SpeedRow | None:
    timed = [r for r in rows if r.status == "PASS"]
    if name is not None:
        return next((r for r in timed if r.backend == name), None)
    peers = [r for r in timed if backends[r.backend].origin == "torch"]
    return min(peers, key=lambda r: r.median_s) if peers else None


def run_speed(*args, **kwargs) -> dict:
    """:func:`_run_speed`, this process's SIGCONTs counted (each a stop from outside)."""
    with counting_continues():
        return _run_speed(*args, **kwargs)


def _run_speed(cases, backends, seed: int, samples: int = 10, warmup: int = 2,
               baseline: str | None = None, progress: bool = True,
               first: tuple | None = None, first_limits: tuple | None = None,
               counted=None) -> dict:
    """The report of ``flashbench speed``: meta (seed, roofline, clocks), rows, passed.
    ``first``, ``first_limits``: this process's scheduling and resource limits before any
    kernel's worker started (strays.priority, strays.limits); ``counted``: names whose rows
    count toward ``passed`` though peers (--only's: the question asked, as check's)."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    interference: list[str] = []
    first = priority() if first is None else first
    mine_limits = limits() if first_limits is None else first_limits
    rescheduled(interference, first, "before the first timing (by a kernel's import)")
    if limits() != mine_limits:  # lowered from a kernel's worker (they bind from here)
        interference.append(f"this process's resource limits were changed by a kernel's "
                            f"import ({limits_said(limits(), mine_limits)})")
    host = {"cpus": len(cpus_watched()), "torch_threads": torch.get_num_threads(),
            "load": _load()}
    stops = continued()
    with frozen(*worker_pids()):  # the kernels' workers (their imports ran) held still
        roof = measure_roofline(device, [c.dtype for c in cases])
    stopped_outside(interference, stops, "while the peaks were measured")
    by_name = {b.name: b for b in backends}
    rows, strays = [], [f"{s} (left by a kernel's import)" for s in sweep()]
    for case in cases:
        case_rows = []
        for b in backends:
            before = f"(found before timing {b.name} on {case.label()})"
            strays += [f"{s} {before}" for s in sweep()]
            if progress:
                print(f"speed: {case.label()}: timing {b.name} ...", file=sys.stderr, flush=True)
            if case.direction == "decode":
                from flashbench.measure.speeddecode import time_decode as time_row
            else:
                time_row = time_backend
            load, reading, stops = Load(), Load.start(outside_cpu), continued()
            mine = worker_of(b)
            # every other kernel's worker stopped meanwhile: none can work, load the
            # machine or leave a process that this row would be blamed for; its own
            # running (one stopped between two rows by another kernel's process, continued)
            with frozen(*(p for p in worker_pids() if mine is None or mine.proc is None
                          or p != mine.proc.pid)):
                if mine is not None and mine.proc is not None:
                    resume(mine.proc.pid)
                strays += [f"{s} {before}" for s in escaped()[0]]  # none of this row's
                others_kept(interference, first, mine_limits, mine, before)
                if mine is not None:  # a user's: timed by the harness's clock
                    row = time_row(case, b, roof, seed, samples, warmup, device)
                else:  # timed here: no other process of the run may run meanwhile
                    row = timed_alone(interference, first, time_row, case, b, roof, seed,
                                 samples, warmup, device)
            if row.status != "not timed":  # a short row's reading spans OUTSIDE_WALL: it
                time.sleep(max(0.0, OUTSIDE_WALL - (time.monotonic() - reading[1])))  # and
                # the pause after it (unread before: a probe's 29x apart, never "busy")
            load.add(outside_cpu, reading)  # less 2 of /proc's ticks, its rounding
            stopped_outside(interference, stops, f"while {b.name} was timed on {case.label()}")
            if row.status != "not timed" and load.wall >= OUTSIDE_WALL:
                row.outside_cpus = load.cpus
            case_rows.append(row)
        for r, b in zip(case_rows, backends, strict=True):
            r.peer = bool(getattr(b, "peer", False)) and b.name not in (counted or ())
        base = _baseline(case_rows, by_name, baseline)
        for r in case_rows:
            if base is not None and r.median_s and r.status == "PASS":  # a FAIL's: none
                r.speedup, r.baseline = base.median_s / r.median_s, base.backend
                if r is not base:
                    r.speedup_ci = speedup_interval(base.samples_s, r.samples_s)
        rows += case_rows
    for r in rows:  # of the run's last peaks: a floor verdict may raise them mid-run (rows
        if r.peak_fraction is not None:  # judged before kept the older: two in one table)
            r.peak = "copy bandwidth" if r.direction == "decode" else roof.peak_used(r.dtype)
            r.peak_fraction = (r.gbs / roof.copy_gbs if r.direction == "decode"
                               else r.tflops / roof.peak(r.dtype))
    strays += [f"{s} (found after the last timing)" for s in sweep() + escaped()[0]]
    rescheduled(interference, first, "by the last timing")
    passed = all(r.status != "FAIL" or r.peer for r in rows) and not strays \
        and not interference
    meta = {"seed": seed, "device": device, "samples": samples, "warmup": warmup,
            "strays": strays,  # processes a kernel left running, killed: the run FAILs
            "interference": interference,  # CPU of others while the harness timed: FAILs
            # a row's outside_cpus above it: "busy" (information, never FAIL); none on a GPU,
            # whose clock reads the device (another process's kernels there: not in /proc)
            "outside_cpus": OUTSIDE_CPUS if device == "cpu" else None,
            "host": {**host, "load_end": _load()},
            "roofline": {"matmul_tflops": roof.tflops, "copy_gbs": roof.copy_gbs,
                         "how": roof.how},
            "baseline": baseline or "the fastest torch peer that passed"}
    return {"meta": meta, "rows": rows, "passed": passed}


def _load() -> float | None:
    """The 1-minute load average (runnable processes), None where the OS has none."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None
