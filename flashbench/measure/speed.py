"""``flashbench speed``'s measurement: every timed call on fresh inputs, every output judged.

:func:`time_backend` times one backend on one :class:`SpeedCase` with the guarded timer
(:mod:`flashbench.timed`): flashbench's and torch's kernels in this process, a user's kernel
in its worker process (:func:`flashbench.measure.speedworker.time_in_worker`: the calls
run there, timed by this process's clock per request; the outputs are judged here).
:class:`Judge` checks each timed output outside the clock: shape, dtype, finiteness (the
LSE's too: :func:`lse_fault`), a checksum against the first call on the same input, and
random query rows against the float64 reference (inside the shipped band's tolerance, or by
the baseline rule). :func:`~flashbench.measure.roofline.measure_roofline` (re-exported): the
run's matmul peak and copy bandwidth; a call under FLOOR_MARGIN x the roofline floor FAILs.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field, replace

import numpy as np

from flashbench.inputs.lengths import lengths_text
from flashbench.inputs.problem import Shape
from flashbench.measure.checkrows import CHECK_ROWS, checked_rows, lse_fault
from flashbench.measure.roofline import Roofline, fp8_peak_tflops, measure_roofline
from flashbench.timed.guard import FLOOR, STALE, WRONG

__all__ = ["SpeedCase", "SpeedRow", "Judge", "Roofline", "measure_roofline", "roofline_floor",
           "fp8_peak_tflops", "row_from", "lse_fault", "FLOOR_MARGIN", "CHECK_ROWS",
           "checked_rows", "MIN_SAMPLES", "CLOCK_CPU", "CLOCK_GPU", "CLOCK_WORKER", "worker_row"]

FLOOR_MARGIN = 0.5  # a call under half the roofline floor fails (noise in the peak: docs)
MIN_SAMPLES = 10
# the clock a row's times were read from, as the row says it (forward, backward and decode)
CLOCK_CPU = "host clock (time.perf_counter captured at import) per call"
CLOCK_GPU = "CUDA events, L2 flushed, torch.cuda.synchronize() before the end event"
CLOCK_WORKER = ("the harness's host clock: each request's round trip to the kernel's worker less "
                "the empty request's median ({null_s:.3g} s), over its calls (up to {k}){warm}")
WARMED = "; its worker's threads kept busy {:g} ms before each, outside the clock (awake)"


@dataclass(frozen=True)
class SpeedCase:
    """One timed problem: shape, precision name, causal mask and pass: "fwd", "bwd" (the
    backward alone, its forward built outside the clock) or "fwdbwd" (both)."""

    shape: Shape
    dtype: str
    causal: bool = False
    direction: str = "fwd"
    variant: object = None  # a flashbench.inputs.variant.Variant (window, softcap, sinks)
    varlen: tuple | None = None  # a packed batch's lengths (shape: B = count, N = longest)
    varlen_k: tuple | None = None  # its key lengths, where they differ (``Q:K`` items)

    def flops(self) -> float:
        """The pass's FLOPs (backward 2.5x the forward's, both 3.5x: PASS_FLOPS), of the
        pairs a window leaves visible; a packed batch, its sequences'."""
        if self.varlen is not None:  # each sequence's, as a batch of one (empty: none)
            return sum(replace(self, varlen=None, varlen_k=None, shape=replace(
                self.shape, B=1, Nq=n, Nk=m)).flops() for n, m in zip(
                    self.varlen, self.varlen_k or self.varlen, strict=True) if n and m)
        direction = {"fwdbwd": "fwd+bwd"}.get(self.direction, self.direction)
        full = self.shape.flops(self.causal, direction)
        if self.variant is None:
            return full
        from flashbench.inputs.problem import visible_pairs

        s = self.shape
        return full * self.variant.visible_pairs(s.Nq, s.Nk) / max(
            1, visible_pairs(s.Nq, s.Nk, self.causal))

    @property
    def softcap(self) -> float | None:
        """The variant's softcap (None: none), which scales q and k as check's case does."""
        return None if self.variant is None else self.variant.softcap

    def kwargs(self) -> dict:
        """The variant's keywords for a backend (empty without one)."""
        from flashbench.inputs.variant import variant_kwargs

        return variant_kwargs(self.variant)

    def bytes(self) -> int:
        """Bytes the pass must move at least: a forward reads q, k, v and writes o once; a
        backward reads q, k, v, o, dO and writes dq, dk, dv; fwdbwd, both (a packed
        batch: its rows, B = 1 and N the total; keys of a sequence with no query unread)."""
        from flashbench.timed.attention import packed_shape, torch_dtype
        read = self.varlen_k and [k * (q > 0) for q, k in zip(self.varlen, self.varlen_k,
                                                              strict=True)]
        s = packed_shape(self.varlen, self.shape, read) if self.varlen else self.shape
        from flashbench.inputs.precision import get_precision

        size = torch_dtype(self.dtype).itemsize  # o in its own precision (fp8's: bf16)
        out = torch_dtype(get_precision(self.dtype).out.name).itemsize
        q, o = s.H * s.Nq * s.d * size, s.H * s.Nq * s.head_dim_v
        kv = s.kv_heads * s.Nk * (s.d + s.head_dim_v) * size
        # fwd reads q, k, v, writes o; bwd reads q, k, v, o, dO, writes dq, dk, dv
        per = {"fwd": q + o * out + kv, "bwd": 2 * (q + kv + o * out)}
        per["fwdbwd"] = per["fwd"] + per["bwd"]
        return s.B * per[self.direction]

    def label(self) -> str:
        mask = f" {self.variant.label()}" if self.variant else " causal" * self.causal
        s = self.shape  # a packed batch: its lengths and heads, never the padded shape
        what = s.spec() if self.varlen is None else (
            f"varlen {lengths_text(self.varlen, self.varlen_k)} H={s.H}"
            f"{'' if s.kv_heads == s.H else f'/{s.kv_heads}'} d={s.d}"
            f"{'' if s.head_dim_v == s.d else f'/{s.head_dim_v}'}")
        return f"{what} {self.dtype}{mask} {self.direction}"


def roofline_floor(case: SpeedCase, roof: Roofline) -> float:
    """Seconds a call cannot beat: FLOPs over the dtype's matmul peak or bytes over copy's."""
    return max(case.flops() / (roof.floor_peak(case.dtype) * 1e12),
               case.bytes() / (roof.copy_gbs * 1e9))


class Judge:
    """Judges the timed outputs of one case, outside the clock (module docstring).

    ``make(seed)``: the pool's input maker, to rebuild any call's inputs; ``seed``: the
    run's (the inputs' contents; the rows checked are drawn from fresh OS entropy, never from
    a seed a kernel's worker is sent, so a kernel cannot compute only the rows checked).
    """

    def __init__(self, case: SpeedCase, make, seed: int, out_dtype: str | None = None):
        self.case, self.make = case, make
        self.out_dtype = case.dtype if out_dtype is None else out_dtype
        self.rng, self.decks = np.random.default_rng(), {}  # not ``seed``: see the docstring
        self.contents = 0  # the run's distinct inputs judged (checked_rows), where known
        self.first: dict = {}  # content seed -> checksum of the first checked output
        self.verdicts: dict = {}  # content seed -> None or (failure, why)

    def _reference_check(self, content: int, o, lse=None) -> tuple[str, str] | None:
        from flashbench import numerics, reference
        from flashbench.accuracy import baseline_rule
        from flashbench.measure.bandjudge import band_tolerance, band_words

        q, k, v = (t.double().cpu().numpy() for t in self.make(content))
        if self.case.variant is not None:
            return self._variant_check(q, k, v, o, lse)
        nq, nk = q.shape[-2], k.shape[-2]
        k, v = (np.repeat(t, q.shape[1] // k.shape[1], axis=1) for t in (k, v))
        rows = checked_rows(self.rng, nq, self.decks, self.contents)
        got, errs, seen = o.detach().cpu().double().numpy(), {}, []
        for i in rows:
            see = i + nk - nq + 1 if self.case.causal else nk
            if see <= 0:  # no key visible: the reference row is zeros, as is the model's
                errs[int(i)] = float(np.abs(got[..., i, :]).max())
                continue
            qi, ki, vi = q[..., i:i + 1, :], k[..., :see, :], v[..., :see, :]
            ref, ref_lse = reference.attention(qi, ki, vi)
            errs[int(i)] = float(np.abs(got[..., i, :] - ref[..., 0, :]).max())
            seen.append((int(i), qi, ki, vi, ref[..., 0, :], ref_lse[..., 0]))
        worst = max(errs, key=errs.get)
        err = errs[worst]
        limit = band_tolerance(self.case, nq, nk)
        if limit is not None and err <= limit:  # inside the flash model's band
            return self._lse_check(lse, seen, nq, nk)
        std = 0.0  # the same-dtype standard attention's error on the same rows
        for _, qi, ki, vi, ref, _ in seen:
            sm = numerics.standard_model(qi, ki, vi, self.case.dtype)[0][..., 0, :]
            std = max(std, float(np.abs(np.asarray(sm, np.float64) - ref).max()))
        verdict = baseline_rule(err, std, self.case.dtype)
        if not verdict.passed:  # the yardsticks as a matrix product rounds them (check's)
            from flashbench.measure.bandjudge import block_baseline

            verdict = block_baseline(q, k, v, rows, err, self.case.dtype, self.case.causal)[0]
        if verdict.passed:  # as accurate as plain same-dtype attention (torch-naive's kind)
            return self._lse_check(lse, seen, nq, nk)
        why = (f"above the band's tolerance {limit:.3g} ({band_words(self.case)}) and "
               if limit is not None else "") + (
            f"by the baseline rule {verdict.words()}")
        return WRONG, (f"off the float64 reference: max abs error {err:.3g} at row {worst} "
                       f"(of rows {list(errs)}, checked), {why}")

    def _lse_check(self, lse, seen: list, nq: int, nk: int) -> tuple[str, str] | None:
        """The returned LSE on the checked rows that see a key (``seen``: (row, its q, k, v,
        reference o, reference LSE)) against the float64 reference's: inside the band's LSE
        tolerance, or by the baseline rule (the same-dtype standard attention's LSE error);
        None where the kernel returned none (o alone)."""
        from flashbench import numerics
        from flashbench.accuracy import baseline_rule
        from flashbench.measure.bandjudge import band_tolerance

        if lse is None or not seen:
            return None
        got = lse.detach().cpu().double().numpy()
        errs = {i: float(np.abs(got[..., i] - ref_lse).max()) for i, *_, ref_lse in seen}
        worst = max(errs, key=errs.get)
        err, limit = errs[worst], band_tolerance(self.case, nq, nk, "lse")
        if limit is not None and err <= limit:
            return None
        std = max(float(np.abs(np.asarray(numerics.standard_model(
            qi, ki, vi, self.case.dtype)[1], np.float64)[..., 0] - ref_lse).max())
            for _, qi, ki, vi, _, ref_lse in seen)
        verdict = baseline_rule(err, std, self.case.dtype)
        return None if verdict.passed else (WRONG, (
            f"lse off the float64 reference: max abs error {err:.3g} at row {worst} (of rows "
            f"{list(errs)}, checked), by the baseline rule {verdict.words()}"))

    def _variant_check(self, q, k, v, o, lse=None) -> tuple[str, str] | None:
        """Rows against the variant's float64 reference by the baseline rule, the yardstick
        the same-dtype standard attention's error over all rows (the band table does not
        cover variants); the LSE too, on the rows that see a key, where one was returned,
        against the same-dtype flash model's (:meth:`_variant_lse`)."""
        from flashbench import numerics, reference
        from flashbench.accuracy import baseline_rule

        ref, ref_lse = reference.attention(q, k, v, causal=self.case.variant)
        sm = np.asarray(numerics.standard_model(q, k, v, self.case.dtype,
                                                causal=self.case.variant)[0], np.float64)
        rows = checked_rows(self.rng, q.shape[-2], self.decks, self.contents)
        diff = np.abs(o.detach().cpu().double().numpy()[..., rows, :] - ref[..., rows, :])
        err, worst = float(diff.max()), int(rows[np.unravel_index(diff.argmax(), diff.shape)[-2]])
        verdict = baseline_rule(err, float(np.abs(sm - ref).max()), self.case.dtype)
        if verdict.passed and lse is not None:
            return self._variant_lse(q, k, v, lse, ref_lse, rows)
        if verdict.passed:
            return None
        return WRONG, (f"off the float64 reference of {self.case.variant.label()}: max abs "
                       f"error {err:.3g} at row {worst} (of rows {list(map(int, rows))}, "
                       f"checked), by the baseline rule {verdict.words()}")

    def _variant_lse(self, q, k, v, lse, ref_lse, rows) -> tuple[str, str] | None:
        """A variant's returned LSE on the checked rows that see a key: within 2x the
        same-dtype flash model's LSE error over all rows + one fp32 ulp of the largest
        |LSE| (:func:`flashbench.accuracy.lse_floor`). Every kernel computes its LSE from
        fp32 scores, as the model does: against the same-dtype standard's (scores stored in
        the dtype, 0.01-0.05 in bf16) a bf16 kernel that skipped its softcap (check: LSE
        7,000x its band) or its sinks passed (a red team, 2026-12-07)."""
        from flashbench import numerics
        from flashbench.accuracy.rules import exact_floor, lse_floor

        seen = np.isfinite(ref_lse)
        got = lse.detach().cpu().double().numpy()
        gap = np.where(seen[..., rows], np.abs(got[..., rows] - ref_lse[..., rows]), 0.0)
        err = float(np.nan_to_num(gap, nan=np.inf).max())
        model = np.asarray(numerics.flash_model(q, k, v, self.case.dtype,
                                                causal=self.case.variant)[1], np.float64)
        yard = float(np.where(seen, np.abs(model - ref_lse), 0.0).max())
        floor = lse_floor(ref_lse)
        if self.case.dtype == "fp64":
            floor = max(floor, exact_floor(ref_lse))
        if err <= 2 * yard + floor:
            return None
        return WRONG, (f"lse off the float64 reference of {self.case.variant.label()}: max "
                       f"abs error {err:.3g} (rows {list(map(int, rows))}, checked), "
                       f"{err / yard if yard else float('inf'):.3g}x the same-dtype flash "
                       f"model's LSE error {yard:.3g} (PASS iff at most 2x it + {floor:.3g}, "
                       "one fp32 ulp: every flash kernel computes its LSE from fp32 scores)")

    def want(self) -> tuple:
        s = self.case.shape
        return s.B, s.H, s.Nq, s.head_dim_v

    def lse_want(self) -> tuple:  # [B, H, Nq]
        return self.want()[:3]

    @staticmethod
    def lse_rows(zeros):
        """o's all-zero rows (``zeros``: o == 0) laid out as the LSE."""
        return zeros.all(-1)

    def judge(self, content: int, out) -> tuple[str, str] | None:
        """None, or (failure name, why) for one timed call's output on input ``content``."""
        import torch

        from flashbench.backends.outputs import fp8_o
        from flashbench.timed.attention import torch_dtype

        o = out[0] if isinstance(out, tuple | list) and out else out
        want, dtype = self.want(), torch_dtype(self.out_dtype)
        if not isinstance(o, torch.Tensor):
            return WRONG, f"returned {type(o).__name__} as o, not a tensor"
        if tuple(o.shape) != want or o.dtype != dtype and not fp8_o(dtype, o.dtype):
            return WRONG, f"o is {o.dtype} {tuple(o.shape)}, expected {dtype} {want}"
        x = o.detach().double()  # once, for both (fp8 has no isfinite of its own)
        if not bool(torch.isfinite(x).all()):
            return WRONG, "o holds non-finite values for finite inputs"
        if (bad := lse_fault(out, self.lse_want(), lambda: self.lse_rows(x == 0))) is not None:
            return bad
        lse = out[1] if isinstance(out, tuple | list) and isinstance(out[1], torch.Tensor) \
            else None
        y = (torch.zeros(1, dtype=torch.float64) if lse is None
             else torch.nan_to_num(lse.detach().double(), neginf=0.0))  # -inf: a row unseen
        total = float(x.sum()), float(x.abs().sum()), float(y.sum()), float(y.abs().sum())
        if content in self.first:
            first = self.first[content]
            tol = 8 * torch.finfo(o.dtype).eps * max(first[1], 1e-30)
            lse_tol = 8 * torch.finfo(torch.float32 if lse is None else lse.dtype).eps * max(
                first[3], 1e-30)  # as o's: a few rounding steps of its whole
            if (abs(total[0] - first[0]) > tol or abs(total[1] - first[1]) > tol
                    or abs(total[2] - first[2]) > lse_tol):
                return WRONG, "its checksum differs from the first checked call on the same input"
            return self.verdicts[content]
        for other, sums in self.first.items():
            if sums == total and other != content:
                self.first[content] = total
                self.verdicts[content] = (STALE, "returned exactly the output of an earlier, "
                                                 "different input (a cache keyed on something "
                                                 "but the contents, or an output that does not "
                                                 "depend on its input)")
                return self.verdicts[content]
        self.first[content] = total
        self.verdicts[content] = self._reference_check(content, o, lse)
        return self.verdicts[content]


@dataclass
class SpeedRow:
    """One (case, pass, backend) row. ``status``: PASS, FAIL (``failures`` names each check
    that failed, with why), or "not timed" (``reason``). Times in seconds."""

    case: str
    shape: str
    dtype: str
    causal: bool
    direction: str
    backend: str
    status: str
    clock: str = ""
    variant: str | None = None  # the Variant's label (window, softcap, sinks), None: none
    reason: str | None = None
    samples_s: list = field(default_factory=list)
    failures: dict = field(default_factory=dict)
    median_s: float | None = None
    p10_s: float | None = None
    p90_s: float | None = None
    tflops: float | None = None
    gbs: float | None = None
    peak_fraction: float | None = None
    speedup: float | None = None
    baseline: str | None = None
    floor_s: float | None = None
    checked: int = 0
    peak: str | None = None  # which measured peak % peak and the floor are of
    worker_median_s: float | None = None  # a user kernel: its worker's own clock (cross-check)
    calls_per_request: int | None = None  # a user kernel: calls per timed request (k)
    null_s: float | None = None  # a user kernel: its empty request's median round trip
    speedup_ci: list | None = None  # the speedup's 95% interval (speedrun.speedup_interval)
    peer: bool = False  # torch's own attention: its FAIL is information, not the run's verdict
    outside_cpus: float | None = None  # CPUs kept busy outside the run while it was timed


def interpreted(faults: dict) -> str:
    """The reason of a row whose calls ran a Triton kernel interpreted (its worker says so)."""
    return ("its calls ran a Triton kernel under the interpreter: its speed means nothing"
            + ("; its outputs, judged all the same, failed" if faults else
               " (its outputs were judged: right)"))


def row_from(case: SpeedCase, backend: str, samples, failures: dict, roof: Roofline,
             clock: str, checked: int, floor_samples=None) -> SpeedRow:
    """The row of a timed batch: statistics, throughput and the roofline floor's verdict
    (on ``floor_samples`` where given: a worker's calls timed through a pipe, each the
    least it can have taken)."""
    judged = samples if floor_samples is None else floor_samples
    floor = roofline_floor(case, roof)
    if any(t < FLOOR_MARGIN * floor for t in judged) and roof.again():
        floor = roofline_floor(case, roof)  # confirmed against the peaks measured now
    fast = [t for t in judged if t < FLOOR_MARGIN * floor]
    if fast and FLOOR not in failures:
        failures = {**failures, FLOOR: f"{len(fast)} of {len(judged)} calls took under "
                    f"{FLOOR_MARGIN:g} x {floor:.3g} s, the least this machine can do "
                    f"(fastest {min(fast):.3g} s)"}
    med = statistics.median(samples)
    p10, p90 = np.percentile(samples, [10, 90]) if len(samples) > 1 else (med, med)
    # a median of 0 s (a worker's request no slower than the empty one): no rate to print
    tf = case.flops() / med * 1e-12 if med > 0 else None
    gbs = case.bytes() / med * 1e-9 if med > 0 else None
    return SpeedRow(case.label(), case.shape.spec(), case.dtype, case.causal, case.direction,
                    backend, variant=None if case.variant is None else case.variant.label(),
                    status="FAIL" if failures else "PASS", clock=clock, samples_s=list(samples),
                    failures=dict(failures), median_s=med, p10_s=float(p10), p90_s=float(p90),
                    tflops=tf, gbs=gbs, floor_s=floor, checked=checked,
                    peak="copy bandwidth" if case.direction == "decode"
                    else roof.peak_used(case.dtype),
                    peak_fraction=None if med <= 0 else (
                        gbs / roof.copy_gbs if case.direction == "decode"
                        else tf / roof.peak(case.dtype)))


def worker_row(row: SpeedRow, reply: dict | None) -> SpeedRow:
    """A user kernel's row names the harness's clock, k, and the worker's own figure."""
    if reply is not None:
        warm = WARMED.format(reply["warmed"] * 1e3) if reply["warmed"] else ""
        row.clock = CLOCK_WORKER.format_map({**reply, "warm": warm}) + (
            f"; an empty request counted at most {reply['null_cap_s']:.3g} s (3x its cost "
            "before the kernel's module was imported, + 1 ms; on a GPU + its k L2 flushes, 2x "
            "the harness's time to sum k outputs; on a CPU + 2 copies of k posted inputs at 4x "
            "the harness's copy rate)" if math.isfinite(reply.get("null_cap_s", math.inf)) else "")
        row.worker_median_s, row.calls_per_request, row.null_s = (
            reply["own_median_s"], reply["k"], reply["null_s"])
    return row
