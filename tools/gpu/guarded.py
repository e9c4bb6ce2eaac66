"""Timed calls that no registry backend wraps (a fixed config, a Hopper variant, the FP8
kernel on e4m3 tensors), guarded as ``flashbench speed`` guards a backend (issue 35): fresh
pool inputs per call, every output judged outside the clock. docs/gpu.md, "The GPU script"."""

from __future__ import annotations

import torch


def device_maker(shape, dtype: str, device: str):
    """``make(seed) -> (q, k, v)``: N(0, 1) in ``dtype`` drawn on ``device`` by a generator
    seeded with ``seed`` (a GPU draws an 8192^2-token pool slot in milliseconds, a CPU
    generator in about a second): flashbench speed's own rows' maker
    (``attention_maker(..., draw="device")``); the same seed gives the same tensors, so the
    judge rebuilds any call's inputs (``.cpu()``)."""
    from flashbench.timed.attention import attention_maker

    drawn = attention_maker(shape, dtype, device, "device")  # flashbench speed's own rows'
    return lambda seed: drawn(int(seed) % 2**63)


def _rows_judge():
    """flashbench speed's Judge whose variant check reads a block of CHECK_ROWS rows (a
    random start) against the float64 reference of those rows only: its own check builds the
    whole problem's (8192^2 scores per head on the GPU run's shapes). Exact by the bottom-right
    alignment: rows [r0, r1) with keys [0, r1 + Nk - Nq) keep every causal row's keys; an
    unmasked variant takes all keys; any other window reads the last rows."""
    import numpy as np

    from flashbench import numerics, reference
    from flashbench.accuracy import baseline_rule
    from flashbench.measure.speed import CHECK_ROWS, Judge
    from flashbench.timed.guard import WRONG

    class RowsJudge(Judge):
        def _variant_check(self, q, k, v, o, lse=None):
            var = self.case.variant
            nq, nk = q.shape[-2], k.shape[-2]
            n, keys = min(nq, CHECK_ROWS), nk
            if not var.masked:
                r0 = int(self.rng.integers(0, nq - n + 1))
            elif var.right == 0 and nk >= nq:
                r0 = int(self.rng.integers(0, nq - n + 1))
                keys = r0 + n + nk - nq
            else:
                r0 = nq - n
            qs, ks, vs = q[..., r0:r0 + n, :], k[..., :keys, :], v[..., :keys, :]
            ref, ref_lse = reference.attention(qs, ks, vs, causal=var)
            sm, sm_lse = (np.asarray(x, np.float64) for x in numerics.standard_model(
                qs, ks, vs, self.case.dtype, causal=var))
            got = o.detach().cpu().double().numpy()[..., r0:r0 + n, :]
            err = float(np.abs(got - ref).max())
            verdict = baseline_rule(err, float(np.abs(sm - ref).max()), self.case.dtype)
            if verdict.passed and lse is not None:  # the rows' LSE too, where one sees a key
                seen = np.isfinite(ref_lse)
                gap = np.nan_to_num(np.where(seen, np.abs(
                    lse.detach().cpu().double().numpy()[..., r0:r0 + n] - ref_lse), 0.0),
                    nan=np.inf)
                verdict = baseline_rule(float(gap.max()), float(np.where(
                    seen, np.abs(sm_lse - ref_lse), 0.0).max()), self.case.dtype)
                err = float(gap.max())
            if verdict.passed:
                return None
            return WRONG, (f"rows {r0}..{r0 + n - 1} off the float64 reference of "
                           f"{var.label()}: max abs error {err:.3g}, {verdict.ratio:.3g}x the "
                           "baseline rule's limit")

    return RowsJudge


def guarded_call(fn, case, roof, seed: int, make=None, judge_make=None,
                 out_dtype: str | None = None, device: str = "cuda", samples: int = 20,
                 warmup: int = 3) -> dict:
    """``fn(*args) -> o`` (a call no registry backend wraps: a fixed config, a Hopper variant,
    the FP8 kernel on e4m3 tensors) timed and judged as :func:`guarded_forward` times a
    backend: a pool of ``make(seed)`` arguments (default :func:`device_maker` of ``case``),
    flashbench.timed.timed_calls (the whole device synchronised before the end event, L2
    flushed), every output judged outside the clock by flashbench speed's Judge against
    ``judge_make(seed)``'s q, k, v (default: ``make``'s, on the CPU): a plain dense tensor
    aliasing no input, shape, ``out_dtype`` (default the case's), finite, the checksum of the
    first call on the same contents, 8 rows against float64; a time under half ``roof``'s floor
    fails. The row in gpu_bench's fields (``samples_s`` only when every check passed)."""
    from flashbench.measure.speed import CLOCK_CPU, CLOCK_GPU, row_from
    from flashbench.timed import Pool, structural, timed_calls
    from flashbench.timed.attention import pool_size
    from flashbench.timed.guard import l2_flusher

    make = make or device_maker(case.shape, case.dtype, device)
    judge_make = judge_make or make
    pool = Pool(make, pool_size(case.shape, case.dtype, samples), seed)
    with torch.no_grad():
        batch = timed_calls(fn, pool, samples, warmup, device=device, flush=l2_flusher(device))
    judge = _rows_judge()(case, lambda s: tuple(t.cpu() for t in judge_make(s)), seed,
                          out_dtype)
    faults = dict(batch.faults)
    for j, (out, content, slot) in enumerate(zip(batch.outputs, batch.seeds, batch.slots,
                                                 strict=True)):
        bad = structural(out, pool.slots[slot], batch.outputs[:j]) or judge.judge(content, out)
        if bad is not None:
            faults.setdefault(*bad)
    r = row_from(case, "call", batch.samples_s, faults, roof,
                 CLOCK_GPU if device == "cuda" else CLOCK_CPU, len(batch.outputs))
    row = {"clock": r.clock, "seed": seed, "check": {"passed": r.status == "PASS",
                                                     "failures": r.failures,
                                                     "checked": r.checked}}
    if r.status != "PASS":
        row["skipped"] = ("timed outputs failed their checks: time not counted ("
                          + "; ".join(f"{k}: {v}" for k, v in r.failures.items()) + ")")
        return row
    row["samples_s"] = r.samples_s
    return row


_ROOFS: dict = {}


def roofline(peak: float):
    """This run's Roofline for the guarded rows: ``peak`` (the bf16 matmul's TFLOP/s, also
    fp8's: its floor then halves at FLOOR_MARGIN, no looser than fp8's own peak) and the
    device copy bandwidth, measured once per process."""
    from flashbench.measure.speed import Roofline
    from flashbench.measure.timing import copy_bandwidth_gbs

    if peak not in _ROOFS:
        _ROOFS[peak] = Roofline({"bf16": peak, "fp16": peak}, copy_bandwidth_gbs(),
                                "bf16 matmul peak (8192^3, median), 2 GiB device copy")
    return _ROOFS[peak]
