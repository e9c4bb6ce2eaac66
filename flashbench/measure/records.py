"""What ``flashbench check`` measures, as records: :class:`Case` (a shape, an input
distribution, causal or not, a variant) and one frozen record per measurement
(:class:`Exactness`, :class:`Accuracy`, :class:`Unavailable`, :class:`Failed`), with the
helpers that build them: :func:`accuracy_record` (a kernel's outputs judged by the baseline
rule and the band rule), :func:`attempt` (a backend call's failure as its record),
:func:`unavailable_reason`, :func:`with_note`; and the two kinds of input copies every
measurement takes (:func:`private` for the harness, :func:`handed` for one backend call).
The forward (:mod:`.forward`), the gradients (:mod:`.backward`), packed batches
(:mod:`.varlen`) and decode (:mod:`.decode`) all build these records; the CLI renders them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

from flashbench.accuracy import BASELINE_FACTOR, judge
from flashbench.accuracy.rules import EXACT_TOL
from flashbench.inputs.lengths import lengths_text
from flashbench.inputs.precision import Precision
from flashbench.inputs.problem import Shape, make_qkv, sink_logits
from flashbench.inputs.variant import Variant
from flashbench.measure.bandjudge import CaseBands, combine

__all__ = ["EXACT_TOL", "INTERPRETER_LIMIT", "INTERPRETER_TOO_SLOW", "INTERPRETER_NOTE",
           "LSE_NOT_RETURNED", "LSE_STAND_IN", "Case", "Exactness", "exact", "Accuracy",
           "Unavailable", "Failed", "interpreter_too_slow", "unavailable_reason", "with_note",
           "attempt", "not_taken", "users", "accuracy_record", "private", "handed"]

# The Triton interpreter takes ~1 s per 2M score elements (B*H*Nq*Nk): larger cases skip it.
INTERPRETER_LIMIT = 2 * 1024 * 1024
INTERPRETER_TOO_SLOW = "Triton interpreter: too slow at this shape (needs a GPU)"
# Accuracy.lse_note: why an LSE is not judged (None: the kernel's own LSE, judged)
LSE_NOT_RETURNED = "not returned by the kernel (not judged)"
# a user's Triton kernel under the interpreter: flashbench fixes its bf16 dots and its fp32 ->
# bf16 / e4m3 casts (flashbench.kernels.interpreter.patch_interpreter), not the rest
INTERPRETED_WRONG = ("bf16", "fp8")
INTERPRETER_NOTE = ("ran under Triton's interpreter (TRITON_INTERPRET=1), whose bf16 and fp8 "
                    "arithmetic beyond dots and casts runs on raw bits: the interpreter is the "
                    "likely cause; check on a GPU")
LSE_STAND_IN = ("not returned by the op: flashbench's stand-in (float64 logsumexp of the "
                "inputs, rounded to fp32), shown for information (not judged)")


@dataclass(frozen=True)
class Case:
    """One accuracy problem: a shape, an input distribution, causal or not, and a variant
    (:mod:`flashbench.inputs.variant`): a window, a softcap, sinks (``sinks=True``: one
    seeded logit per query head, :meth:`kwargs`). ``varlen``: a packed batch of
    sequences of these lengths (:mod:`flashbench.measure.varlen`; ``shape`` gives H, Hkv, d).
    """

    shape: Shape
    dist: str = "normal"
    causal: bool = False
    window: tuple[int, int] = (-1, -1)
    softcap: float | None = None
    sinks: bool = False
    varlen: tuple[int, ...] | None = None  # a packed batch: these sequence lengths (q and k)
    varlen_k: tuple[int, ...] | None = None  # its key lengths, where they differ (``Q:K``)

    @property
    def key_lengths(self) -> tuple[int, ...] | None:
        """A packed batch's key lengths (its query lengths unless ``varlen_k``)."""
        return self.varlen if self.varlen_k is None else self.varlen_k


    def kwargs(self, seed: int = 0) -> dict:
        """The keywords every path takes for this case: causal, and the variant's where set
        (the sinks: :func:`~flashbench.inputs.problem.sink_logits` beside the most keys a
        row sees; the inputs use seed, dO seed + 1)."""
        kw = {"causal": self.causal}
        if self.window != (-1, -1):
            kw["window"] = self.window
        if self.softcap is not None:
            kw["softcap"] = self.softcap
        if self.sinks:
            keys = self.shape.Nk if self.varlen is None else max(self.key_lengths, default=1)
            kw["sinks"] = sink_logits(self.shape.H, seed, keys, self.softcap)
        return kw

    def qkv(self, seed: int = 0) -> tuple:
        """The case's (q, k, v), float64: :func:`~flashbench.inputs.make_qkv` of its shape
        and distribution, q and k scaled under a softcap (where it bends the scores)."""
        return make_qkv(self.shape, self.dist, seed, softcap=self.softcap)

    def variant(self, seed: int = 0) -> Variant | None:
        """The case's :class:`Variant` for backends (None: plain attention, causal or not)."""
        kw = self.kwargs(seed)
        return None if len(kw) == 1 else Variant(**kw)

    def label(self) -> str:
        extra = Variant(window=self.window, softcap=self.softcap,  # a causal window's
                        sinks=(0.0,) if self.sinks else None, causal=self.causal).label()
        extra = extra.removeprefix("causal").strip() or "full"  # right side reads 0
        s = self.shape  # a packed batch's label names its heads and dims as a shape's does
        shape = s.label() if self.varlen is None else (  # (1x4x1x192 and its /128 were one)
            f"varlen {lengths_text(self.varlen, self.varlen_k)} H={s.H}"
            f"{'' if s.Hkv is None else f' Hkv={s.Hkv}'} d={s.d}"
            f"{'' if s.dv is None else f' dv={s.dv}'}")
        return (f"{self.dist} {shape}{' causal' if self.causal else ''}"
                f"{'' if extra == 'full' else ' ' + extra}")


@dataclass(frozen=True)
class Exactness:
    """Streamed vs one-shot in float64 for one quantity ("softmax", "attention O", ...).
    ``scale``: max(1, the largest |value| of the quantity): the 1e-12 is absolute up to
    magnitude 1 and relative beyond (an LSE of 5838, large logits, differed by 2 ulp,
    1.8e-12: FAIL for an exact streaming, a probe of 2026-12-07). :func:`exact`."""

    case: Case
    what: str
    max_abs: float
    passed: bool
    scale: float = 1.0

    def as_dict(self) -> dict:
        return {"case": self.case.label(), "what": self.what, "max_abs": self.max_abs,
                "scale": self.scale, "rel": self.max_abs / self.scale, "passed": self.passed}


def exact(case: Case, what: str, diff: float, *values) -> Exactness:
    """The :class:`Exactness` of ``diff`` (max |diff| of a quantity), scaled by max(1, the
    largest finite |value| of ``values``, the one-shot's arrays; a row that sees no key has
    an LSE of -inf): PASS iff <= EXACT_TOL x that."""
    finite = [np.abs(a[np.isfinite(a)]) for a in (np.asarray(v, dtype=float) for v in values)]
    scale = max([1.0, *(float(a.max(initial=0.0)) for a in finite)])
    return Exactness(case, what, diff, bool(diff <= EXACT_TOL * scale), scale)


@dataclass(frozen=True)
class Accuracy:
    """One kernel in one dtype on one case, against the float64 reference.

    ``o`` / ``lse``: :func:`flashbench.accuracy.error_stats` of the kernel's output;
    ``o_standard`` / ``lse_standard``: the same for the same-dtype standard model;
    ``o_ratio`` / ``lse_ratio``: kernel max abs error / standard's (the baseline
    rule as one number); ``passed``: both rules hold for O and, where it is judged,
    LSE: the baseline rule (``baseline_passed``) and the band rule (``band_passed``;
    ``o_band_ratio`` / ``lse_band_ratio``: <= 1 passes; ``band``: its verdicts,
    :mod:`flashbench.accuracy.bandrule`); ``disagreement``: where the rules disagree, which
    failed and why (one line). ``peer``: a backend flashbench does not own (informative only).
    ``streamed_vs_oneshot_o`` / ``_lse`` (flash_model only): flash_model against
    standard_model in the same dtype.

    ``lse_note``: None when the LSE is the kernel's own (judged); else why it is not
    judged: :data:`LSE_NOT_RETURNED` (a kernel that returns only o: ``lse`` and
    ``lse_ratio`` are None, it is judged on O alone) or :data:`LSE_STAND_IN` (a peer
    whose op returns none: the stand-in's numbers, for information).
    ``yardsticks``: None when every ratio is against the same-dtype standard model;
    else {"o" or "lse": what that ratio is against}: "flash_model" where the standard
    model overflowed (:func:`flashbench.accuracy.baseline_rule`).
    ``note``: a FAIL's likely cause flashbench knows of (:data:`INTERPRETER_NOTE`).
    ``worst_at``: a packed batch's FAIL, where its worst O error is (the sequence, its length
    and packed rows).
    """

    case: Case
    kernel: str
    dtype: str
    o: dict
    lse: dict | None
    o_standard: dict
    lse_standard: dict
    o_ratio: float
    lse_ratio: float | None
    passed: bool
    peer: bool = False
    streamed_vs_oneshot_o: dict | None = None
    streamed_vs_oneshot_lse: dict | None = None
    lse_note: str | None = None
    yardsticks: dict | None = None
    note: str | None = None
    o_band_ratio: float | None = None
    lse_band_ratio: float | None = None
    baseline_passed: bool | None = None
    band_passed: bool | None = None
    band: dict | None = None
    disagreement: str | None = None
    worst_at: str | None = None  # a packed batch's FAIL: the sequence its worst error is in
    baseline_draw: bool | None = None  # its baseline FAIL not counted (bandjudge.combine)
    diagnosis: str | None = None  # a FAIL matching a plausible wrong semantics (.diagnose)

    def as_dict(self) -> dict:
        """JSON-ready row (the case as its label; absent comparisons left out)."""
        row = {k: v for k, v in asdict(self).items() if v is not None and k != "case"}
        return {"case": self.case.label(), **row}


@dataclass(frozen=True)
class Unavailable:
    """A kernel that cannot run a case here, and the reason in one sentence."""

    case: Case
    kernel: str
    dtype: str
    reason: str
    peer: bool = False  # torch's: for information, as its judged rows (RESULT counts none)

    def as_dict(self) -> dict:
        return {"case": self.case.label(), "kernel": self.kernel, "dtype": self.dtype,
                "skipped": self.reason, "peer": self.peer}


@dataclass(frozen=True)
class Failed:
    """A backend that ran and gave no valid result (it raised, returned the wrong shape
    or dtype, or non-finite values where the reference is finite): a FAIL, with why."""

    case: Case
    kernel: str
    dtype: str
    reason: str
    peer: bool = False

    def as_dict(self) -> dict:
        return {"case": self.case.label(), "kernel": self.kernel, "dtype": self.dtype,
                "failed": self.reason, "passed": False, "peer": self.peer}


def interpreter_too_slow(backend, shape: Shape) -> bool:
    """True when ``backend`` runs interpreted here and ``shape`` has more than
    :data:`INTERPRETER_LIMIT` score elements (B*H*Nq*Nk)."""
    return backend.interpreted() and shape.B * shape.H * shape.Nq * shape.Nk > INTERPRETER_LIMIT


def unavailable_reason(backend, shape: Shape, dtype: str) -> str | None:
    """None when ``backend`` can run ``shape`` in ``dtype`` here, else why, in one
    sentence: its own reason (``Backend.unavailable_for``) or
    :data:`INTERPRETER_TOO_SLOW`. The forward and the gradients ask this alike."""
    reason = backend.unavailable_for(shape, dtype)
    if reason is None and interpreter_too_slow(backend, shape):
        reason = INTERPRETER_TOO_SLOW
    return reason


def users(backend) -> bool:
    """Whether ``backend`` is a user's (module:function or an installed entry point), not
    flashbench's or torch's: its skips are said, since the user asked for it."""
    return getattr(backend, "origin", None) not in (None, "flashbench", "torch")


def not_taken(case, name: str, dtype: str, backend) -> list:
    """No record where flashbench's or torch's ``backend`` does not take ``dtype`` (not
    applicable), but a user's kernel is said to be skipped there and why, since the user
    asked for it: one that took none of the run's dtypes was dropped silently, and such a
    run ended "RESULT: PASS"; one that took some read "RESULT: PASS" with no word of the
    others (a probe, 2026-12-07: fp16 and bf16 declared, the default fp32 and tf32 never
    judged)."""
    if not users(backend):
        return []
    return [Unavailable(case, name, dtype, backend.dtype_refusal(dtype))]


def with_note(reason: str, backend, dtype: str) -> str:
    """``reason`` with :data:`INTERPRETER_NOTE` appended where a user's kernel ran under
    Triton's interpreter in a dtype whose arithmetic the interpreter gets wrong."""
    if dtype in INTERPRETED_WRONG and backend.ran_interpreted():
        return f"{reason}; {INTERPRETER_NOTE}" if reason else INTERPRETER_NOTE
    return reason


def attempt(case, name: str, dtype: str, backend, fn: Callable, /, *args,
            what: str | None = None, **kwargs):
    """``(fn(*args, **kwargs), None)``, or ``(None, record)`` where the call found the
    backend cannot run this case (Unavailable) or it failed (Failed, its reason with
    :func:`with_note`). ``what`` (e.g. "backward raised"): any other exception is that
    backend's Failed record too, named so (a call outside the backends' guard, as
    torch.autograd through one)."""
    from flashbench.backends import BackendFailed, BackendUnavailable

    try:
        return fn(*args, **kwargs), None
    except BackendUnavailable as exc:  # this shape or dtype, found out by running
        return None, Unavailable(case, name, dtype, str(exc), backend.peer)
    except BackendFailed as exc:  # raised, wrong shape/dtype, non-finite output, a time-out
        return None, Failed(case, name, dtype, with_note(str(exc), backend, dtype),
                            peer=backend.peer)
    except Exception as exc:
        if what is None:
            raise  # flashbench's own error: not the backend's verdict
        return None, Failed(case, name, dtype, f"{what} {type(exc).__name__}: {exc}",
                            peer=backend.peer)


def _yardsticks(verdicts: dict) -> dict | None:
    """{name: yardstick} of the verdicts whose ratio is not against the standard model."""
    odd = {name: v.yardstick for name, v in verdicts.items() if v.yardstick != "standard"}
    return odd or None


def accuracy_record(case: Case, kernel: str, prec: Precision, out, std, ref, fallback=None,
                    own_lse: bool = True, peer: bool = False, *,
                    bands: CaseBands | None = None, **extra) -> Accuracy:
    """The record of one kernel's (o, lse) in ``prec``; ``own_lse`` False: its op returned
    no LSE (a stand-in fills ``out[1]``): judged on O only (the LSE note says why).
    ``bands``: the case's :class:`~flashbench.measure.bandjudge.CaseBands` (the band rule's
    side)."""
    j = judge(out, std, ref, prec, fallback=fallback, model=kernel == "flash_model")
    verdicts = {"o": j["o"]["verdict"], "lse": j["lse"]["verdict"]}
    note = None if own_lse else (LSE_STAND_IN if peer else LSE_NOT_RETURNED)
    shown = note is None or peer  # a non-peer's stand-in is not shown: it is not its LSE
    if not shown:
        del verdicts["lse"]
    judged = ("o",) if note is not None else ("o", "lse")
    # the flash model's own baseline FAIL with its band passing is the rule's draw, not a
    # defect (bandjudge.combine); a kernel keeps the fallback alone (within the factor of
    # the model's own error): forgiving it more let one element 100x off through where
    # zeros dilute the band's statistics (a review, 2026-12-06)
    rules = combine({t: (verdicts[t].ratio, verdicts[t].passed) for t in judged},
                    None if bands is None else bands.judge(prec, out, judged), BASELINE_FACTOR,
                    prec.name, model=kernel == "flash_model")
    return Accuracy(case, kernel, prec.name, o=j["o"]["kernel"],
                    lse=j["lse"]["kernel"] if shown else None,
                    o_standard=j["o"]["standard"], lse_standard=j["lse"]["standard"],
                    o_ratio=j["o"]["verdict"].ratio,
                    lse_ratio=j["lse"]["verdict"].ratio if shown else None,
                    peer=peer, lse_note=note, yardsticks=_yardsticks(verdicts), **rules,
                    **extra)



def private(*arrays) -> tuple:
    """The harness's own copies of the inputs, read-only: the reference, the models and
    every yardstick are computed from them, and no backend is ever given them
    (:func:`handed`). Arrays already read-only are taken as they are."""
    out = []
    for x in arrays:
        if x.flags.writeable or x.base is not None:
            x = np.array(x)
            x.flags.writeable = False
        out.append(x)
    return tuple(out)


def handed(precision: str | Precision, *arrays) -> list:
    """Fresh torch copies of ``arrays`` in ``precision`` for one backend call: whatever a
    backend does to them reaches no other backend and none of the harness's arrays."""
    import torch

    from flashbench.backends.tensors import torch_dtype

    return [torch.tensor(x, dtype=torch_dtype(precision)) for x in arrays]
