"""``flashbench speed --decode``: decode over a KV cache timed by the guarded timer, judged.

A :class:`DecodeSpeedCase` is ``check --decode``'s :class:`flashbench.measure.decode.DecodeCase`
in one precision. Its pool slots are that case's inputs drawn from per-content seeds
(:func:`flashbench.measure.decode.decode_inputs`, rounded as check hands them), refilled in
place like the forward's. Each timed o is checked outside the clock (structure, shape, dtype,
finiteness, a checksum against the first call on the same input) and once per input against
the float64 decode (:func:`flashbench.reference.decode_attention`): inside the tolerance band's
edge (:func:`flashbench.measure.decode.band_edge`) or by the baseline rule (the split model
its fallback yardstick, as check's). GB/s counts the cache's bytes read
(:func:`flashbench.measure.decode.decode_bytes`); % peak is of the copy bandwidth: the best
this machine has measured, this run's included (:mod:`flashbench.measure.peaks`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from flashbench.measure.decode import DecodeCase
from flashbench.timed.guard import STALE, WRONG

__all__ = ["DecodeSpeedCase", "DecodeJudge", "time_decode"]


@dataclass(frozen=True)
class DecodeSpeedCase:
    """One decode case in one precision (the fields a speed row reads, as SpeedCase's)."""

    case: DecodeCase
    dtype: str
    direction: str = "decode"
    variant: object = None

    @property
    def causal(self) -> bool:
        return self.case.causal

    @property
    def shape(self) -> DecodeCase:  # a row's shape column: the case's spec
        return self.case

    def flops(self) -> float:
        """2 x H x (d + dv) FLOPs per visible (query, cached key) pair (q.k over d, p.v over
        dv): every key of a sequence, or with causal those each query row sees (bottom-right,
        as a dense case counts them: the masked ones were counted, 1.46x high at 64 queries
        on 100 keys; a red team, 2026-12-06)."""
        from flashbench.inputs.variant import Variant

        c = self.case
        pairs = (sum(Variant(causal=True).visible_pairs(c.Nq, n) for n in c.lens)
                 if c.causal else c.Nq * sum(c.lens))
        return 2.0 * c.H * (c.d + c.dv) * pairs

    def bytes(self) -> int:
        from flashbench.measure.decode import decode_bytes
        from flashbench.timed.attention import torch_dtype as _torch_dtype

        return decode_bytes(self.case, _torch_dtype(self.dtype).itemsize)

    def label(self) -> str:
        return f"{self.case.label()} {self.dtype} decode"


def _inputs(case: DecodeSpeedCase, device: str):
    """``make(seed)``: the handed (rounded) torch inputs of the case on ``device`` (the same
    maker a user's worker builds its pool with)."""
    from flashbench.timed.decode import decode_maker, decode_params

    return decode_maker(decode_params(case.case), case.dtype, device)


class DecodeJudge:
    """Judges one decode case's timed outputs (module docstring)."""

    def __init__(self, case: DecodeSpeedCase):
        self.case = case
        self.first: dict = {}
        self.verdicts: dict = {}

    def _reference_check(self, content: int, o, lse=None) -> tuple[str, str] | None:
        """o against the float64 decode (inside the band's edge, else by the baseline rule,
        the split model's error its fallback, as check's), then a returned LSE likewise by
        the baseline rule (a constant one PASSed speed --decode before 2026-12-07, checked
        in structure only)."""
        from flashbench import numerics, reference
        from flashbench.accuracy import baseline_rule
        from flashbench.measure.decode import MODEL_SPLITS, band_edge, decode_inputs

        inputs = decode_inputs(self.case.case, content)
        causal, dtype = self.case.causal, self.case.dtype
        ref = reference.decode_attention(*inputs, causal=causal)
        std = numerics.standard_decode_model(*inputs, dtype=dtype, causal=causal)
        model = functools.cache(lambda: numerics.split_decode_model(
            *inputs, dtype=dtype, causal=causal, num_splits=MODEL_SPLITS))
        edge = band_edge(self.case.case, dtype)
        for i, got, what in ((0, o, "o"), (1, lse, "lse")):
            if got is None:
                continue
            err = _max_error(got.detach().cpu().double().numpy(), ref[i])
            if i == 0 and edge is not None and err <= edge:
                continue  # inside the tolerance band's edge (flashbench.tolerance)
            s_err = _max_error(np.asarray(std[i], np.float64), ref[i])
            verdict = baseline_rule(err, s_err, dtype)
            if not verdict.passed:  # check's fallback: the split model's error
                verdict = baseline_rule(err, s_err, dtype, fallback_error=_max_error(
                    np.asarray(model()[i], np.float64), ref[i]))
            if not verdict.passed:
                band = "" if i or edge is None else f"above the band's edge {edge:.3g} and "
                return WRONG, (f"{what} off the float64 decode: max abs error {err:.3g}, "
                               f"{band}{verdict.ratio:.3g}x the same-dtype standard "
                               f"decode's error")
        return None

    def judge(self, content: int, out) -> tuple[str, str] | None:
        import torch

        from flashbench.measure.speed import lse_fault
        from flashbench.timed.attention import torch_dtype as _torch_dtype

        o = out[0] if isinstance(out, tuple | list) and out else out
        c = self.case.case
        want, dtype = (c.B, c.Nq, c.H, c.dv), _torch_dtype(self.case.dtype)
        if not isinstance(o, torch.Tensor):
            return WRONG, f"returned {type(o).__name__} as o, not a tensor"
        if tuple(o.shape) != want or o.dtype != dtype:
            return WRONG, f"o is {o.dtype} {tuple(o.shape)}, expected {dtype} {want}"
        if not bool(torch.isfinite(o.double()).all()):
            return WRONG, "o holds non-finite values for finite inputs"
        x = o.detach().double()
        bad = lse_fault(out, (c.B, c.H, c.Nq), lambda: (x == 0).all(-1).permute(0, 2, 1))
        if bad is not None:  # o is [B, Nq, H, dv]; its LSE [B, H, Nq]
            return bad
        total = (float(x.sum()), float(x.abs().sum()))
        if content in self.first:
            tol = 8 * torch.finfo(dtype).eps * max(self.first[content][1], 1e-30)
            if any(abs(a - b) > tol for a, b in zip(total, self.first[content], strict=True)):
                return WRONG, "its checksum differs from the first checked call on the same input"
            return self.verdicts[content]
        if any(s == total for s in self.first.values()):
            self.first[content] = total
            self.verdicts[content] = (STALE, "returned the output of an earlier, different input")
            return self.verdicts[content]
        self.first[content] = total
        lse = out[1] if isinstance(out, tuple | list) and len(out) == 2 else None
        self.verdicts[content] = self._reference_check(content, o, lse)
        return self.verdicts[content]


def _max_error(got, ref) -> float:
    """max |got - ref|, an infinity where both hold the same one counted 0 (an LSE's -inf
    on a row that sees no key), one where only one does counted inf."""
    same = np.isinf(ref) & (got == ref)
    return float(np.abs(np.where(same, 0.0, got - np.where(same, 0.0, ref))).max(initial=0.0))


def time_decode(case: DecodeSpeedCase, backend, roof, seed: int, samples: int, warmup: int,
                device: str):
    """The row of a decode ``backend`` on ``case``; a user's decode function in its worker,
    timed by the harness's clock (:func:`_in_worker`)."""
    from flashbench.backends.worker import worker_of
    from flashbench.measure.speed import CLOCK_CPU, CLOCK_GPU, SpeedRow, row_from
    from flashbench.timed.attention import MAX_SLOTS, MIN_SLOTS
    from flashbench.timed.guard import Pool, l2_flusher, structural, timed_calls
    from flashbench.timed.pool import names_for

    def untimed(status, reason):
        return SpeedRow(case.label(), case.case.spec(), case.dtype, case.causal, "decode",
                        backend.name, status, reason=reason)

    reason = backend.case_unavailable(case.case, case.dtype)
    if reason is not None:
        return untimed("not timed", reason)
    if backend.interpreted():
        return untimed("not timed", "runs under the Triton interpreter here: its speed means "
                       "nothing, so it is never timed")
    size = max(MIN_SLOTS, min(MAX_SLOTS, samples // 3))
    if worker_of(backend) is not None:
        return _in_worker(case, backend, roof, seed, samples, warmup, size, untimed)
    dev = "cuda" if device == "cuda" and "cuda" in getattr(backend, "devices", ("cuda",)) \
        else "cpu"
    pool = Pool(_inputs(case, dev), size, seed, names_for("decode"))
    try:
        batch = timed_calls(lambda *a: backend.timed_fn(*a, causal=case.causal), pool, samples,
                            warmup, device=dev, flush=l2_flusher(dev))
    except Exception as exc:  # noqa: BLE001 - a kernel's failure on this case is its row's
        from flashbench.backends.outputs import raised
        from flashbench.backends.tensors import BackendFailed, BackendUnavailable

        if isinstance(exc, BackendUnavailable):
            return untimed("not timed", str(exc))
        # flashbench's own verdict on the backend (a user's function of the wrong kind) is
        # said as it is, not as something the kernel raised
        return untimed("FAIL", str(exc) if isinstance(exc, BackendFailed) else raised(exc))
    faults, judge = dict(batch.faults), DecodeJudge(case)
    for j, (out, slot, content) in enumerate(zip(batch.outputs, batch.slots, batch.seeds,
                                                 strict=True)):
        bad = structural(out, pool.slots[slot], batch.outputs[:j]) or judge.judge(content, out)
        if bad is not None:
            faults.setdefault(*bad)
    return row_from(case, backend.name, batch.samples_s, faults, roof,
                    CLOCK_GPU if dev == "cuda" else CLOCK_CPU, len(batch.outputs))


def _in_worker(case: DecodeSpeedCase, backend, roof, seed: int, samples: int, warmup: int,
               size: int, untimed):
    """A user's decode function timed in its worker by the harness's clock
    (:mod:`flashbench.measure.speedworker`), its outputs judged here as the built-ins'."""
    from flashbench.backends.outputs import raised
    from flashbench.backends.tensors import BackendFailed, BackendUnavailable
    from flashbench.backends.worker import worker_of
    from flashbench.measure.speed import CLOCK_CPU, CLOCK_GPU, interpreted, row_from, worker_row
    from flashbench.measure.speedworker import time_in_worker
    from flashbench.timed.decode import decode_params

    try:
        reply = time_in_worker(worker_of(backend), case.case.spec(), case.dtype, case.causal,
                               seed, samples, warmup, size, "decode",
                               decode=decode_params(case.case))
    except BackendUnavailable as exc:
        return untimed("not timed", str(exc))
    except BackendFailed as exc:
        return untimed("FAIL", str(exc))
    except Exception as exc:  # noqa: BLE001 - a kernel's failure on this case is its row's
        return untimed("FAIL", raised(exc))
    faults, judge = dict(reply["faults"]), DecodeJudge(case)
    for out, content in zip(reply["outputs"], reply["seeds"], strict=True):
        bad = None if out is None else judge.judge(content, out)
        if bad is not None:
            faults.setdefault(*bad)
    if reply.get("interpreted"):  # its outputs judged all the same (its worker's claim)
        row = untimed("FAIL" if faults else "not timed", interpreted(faults))
        row.failures, row.checked = dict(faults), len(reply["outputs"])
        return row
    row = row_from(case, backend.name, reply["samples_s"], faults, roof,
                   CLOCK_GPU if reply["device"] == "cuda" else CLOCK_CPU,
                   len(reply["outputs"]), reply["floor_samples_s"])
    return worker_row(row, reply)
