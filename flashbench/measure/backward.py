"""Gradient measurement: the backward pass judged like the forward, one record per measurement.

Beside :mod:`flashbench.measure.forward`, on the cases and records of :mod:`.records`, with
the same habits: this module computes and returns dataclass records; ``flashbench check``
renders them, the asv gradient suite (benchmarks/bench_grad.py) tracks their numbers.

- :func:`default_backward_cases`: the small cases ``flashbench check`` judges gradients on by
  default (the interpreted Triton backward must fit the check's budget);
- :func:`grad_output`: the seeded output gradient dO every gradient record uses;
- :func:`backward_exactness`: streamed vs one-shot backward in float64 ->
  :class:`BackwardExactness`;
- :func:`measure_gradients`: dq, dk, dv of the flash model's backward and of every
  differentiable backend against the float64 gradients, by the gradient rule
  (:func:`flashbench.accuracy.judge_gradient`) -> :class:`GradAccuracy` records, or the
  forward's ``Unavailable`` / ``Failed``. The rules and units: docs/backward.md.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from flashbench import numerics, reference
from flashbench.accuracy import GRAD_FACTOR, error_stats, judge_gradient, to_numpy
from flashbench.accuracy.rules import sinks_limit
from flashbench.bands.measure import caller_inputs
from flashbench.inputs.precision import Precision, get_precision
from flashbench.inputs.problem import Shape
from flashbench.measure.bandjudge import CaseBands, combine
from flashbench.measure.records import (
    EXACT_TOL,
    Case,
    Failed,
    Unavailable,
    attempt,
    handed,
    not_taken,
    private,
    unavailable_reason,
    users,
)

__all__ = ["GRADS", "DSINKS", "default_backward_cases", "grad_output", "BackwardExactness",
           "GradAccuracy", "backward_exactness", "exactness_records", "measure_gradients",
           "judge_gradients"]

GRADS = ("dq", "dk", "dv")
DSINKS = "dsinks"  # judged against its own limit where the case has sinks and a kernel gives it
NOT_DIFFERENTIABLE = ("not applicable: its forward is not declared differentiable (set "
                      "fn.flashbench_differentiable = True to judge its gradients)")


def default_backward_cases() -> list[Case]:
    """Where ``flashbench check`` judges gradients by default: N = 256, d = 64, causal and
    not, and a grouped-query causal case with Nq != Nk (H = 4, Hkv = 2, Nq = 128,
    Nk = 192). Small because the Triton backward runs interpreted here (about 3x its
    forward's time, which is ~1 s per 2M scores): the gradient part of the check then
    takes seconds. ``flashbench check --shape`` judges gradients on the shapes given."""
    return [Case(Shape(1, 2, 256, 256, 64), "normal", False),
            Case(Shape(1, 2, 256, 256, 64), "normal", True),
            Case(Shape(1, 4, 128, 192, 64, Hkv=2), "normal", True)]


def grad_output(shape: Shape, seed: int = 0) -> np.ndarray:
    """dO [B, H, Nq, dv], float64 N(0, 1), from ``numpy.random.default_rng(seed + 1)`` (the
    inputs use ``seed``): the output gradient of every gradient record."""
    return np.random.default_rng(seed + 1).standard_normal(
        (shape.B, shape.H, shape.Nq, shape.head_dim_v))


@dataclass(frozen=True)
class BackwardExactness:
    """Streamed vs one-shot backward in float64 for one gradient ("dq", "dk" or "dv").

    ``max_abs``: max |streamed - one-shot|; ``scale``: the gradients' scale (largest
    magnitude among the one-shot dq, dk, dv); ``rel`` = max_abs / scale; passed iff
    ``rel <= EXACT_TOL``.
    """

    case: Case
    what: str
    max_abs: float
    scale: float
    rel: float
    passed: bool

    def as_dict(self) -> dict:
        return {"case": self.case.label(), **{k: v for k, v in asdict(self).items()
                                              if k != "case"}}


@dataclass(frozen=True)
class GradAccuracy:
    """One kernel's gradients in one dtype on one case, against the float64 gradients.

    ``dq`` / ``dk`` / ``dv``: :func:`flashbench.accuracy.error_stats` of the kernel's
    gradient; ``*_standard``: the same for the same-dtype standard backward
    (:func:`flashbench.numerics.standard_model_grad`); ``*_ratio``: kernel max abs
    error / standard's; ``*_floor``: the rule's absolute floor
    (:func:`flashbench.accuracy.gradient_floor`); ``passed``: both rules hold for all
    three: the gradient rule (``baseline_passed``; :func:`flashbench.accuracy.judge_gradient`:
    3x + floor) and the band rule (``band_passed``; ``*_band_ratio`` <= 1, ``band``: its
    verdicts); ``disagreement``: where the two disagree, which failed and why.
    ``peer``: a backend flashbench does not own (informative only). ``yardsticks``:
    None when every ratio is against the standard backward; else {"dq" / "dk" / "dv":
    what that ratio is against}: "flash_model" (the same-dtype flash model backward)
    where the standard backward overflowed (:func:`flashbench.accuracy.baseline_rule`).
    ``dsinks*``: with sinks, where the kernel gives dsinks (the flash model does): its error,
    the limit a correct kernel's stays within (:func:`flashbench.accuracy.sinks_limit`; no
    band and no standard-backward ratio judges it), ``dsinks_passed``, counted in ``passed``;
    None otherwise.
    """

    case: Case
    kernel: str
    dtype: str
    dq: dict
    dk: dict
    dv: dict
    dq_standard: dict
    dk_standard: dict
    dv_standard: dict
    dq_ratio: float
    dk_ratio: float
    dv_ratio: float
    dq_floor: float
    dk_floor: float
    dv_floor: float
    passed: bool
    peer: bool = False
    yardsticks: dict | None = None
    dq_band_ratio: float | None = None
    dk_band_ratio: float | None = None
    dv_band_ratio: float | None = None
    baseline_passed: bool | None = None
    band_passed: bool | None = None
    band: dict | None = None
    disagreement: str | None = None
    baseline_draw: bool | None = None  # its gradient-rule FAIL not counted (bandjudge.combine)
    worst_at: str | None = None  # a packed batch's FAIL: the sequence its worst error is in
    # a case with sinks, a kernel that gives dsinks [H]: its error stats, the standard
    # backward's (information), the limit (accuracy.sinks_limit), error / limit, the verdict
    dsinks: dict | None = None
    dsinks_standard: dict | None = None
    dsinks_limit: float | None = None  # the limit of its worst head (error / limit)
    dsinks_ratio: float | None = None
    dsinks_head: int | None = None
    dsinks_passed: bool | None = None

    def as_dict(self) -> dict:
        return {"case": self.case.label(), **{k: v for k, v in asdict(self).items()
                                              if k != "case" and v is not None}}


def backward_exactness(case: Case, q, k, v, do, ref, block: int, seed: int = 0
                       ) -> list[BackwardExactness]:
    """Streamed (:func:`flashbench.reference.online_attention_grad`) vs one-shot ``ref``
    (dq, dk, dv, and dsinks with sinks)."""
    kw = case.kwargs(seed)
    o, lse = reference.online_attention(q, k, v, block=block, **kw)
    streamed = reference.online_attention_grad(q, k, v, o, lse, do, block=block, **kw)
    return exactness_records(case, streamed, ref)


def exactness_records(case: Case, streamed, ref) -> list[BackwardExactness]:
    """:class:`BackwardExactness` of streamed against one-shot (dq, dk, dv, relative to the
    gradients' scale, the largest |dq|, |dk|, |dv|; and dsinks where both give it, a case
    with sinks, relative to its own largest; also for packed batches,
    :mod:`flashbench.measure.varlen`)."""
    grads = max(float(np.abs(r).max(initial=0.0)) for r in ref[:3])
    both = len(streamed) > 3 and len(ref) > 3
    out = []
    for what, a, b in zip(GRADS + (DSINKS,) * both, streamed, ref, strict=False):
        scale = float(np.abs(b).max(initial=0.0)) if what == DSINKS else grads
        diff = float(np.abs(a - b).max(initial=0.0))
        rel = diff / scale if scale > 0 else (0.0 if diff == 0 else float("inf"))
        out.append(BackwardExactness(case, what, diff, scale, rel, rel <= EXACT_TOL))
    return out


def _grad_accuracy(case, kernel, prec: Precision, grads, std, ref, fallback, peer=False, *,
                   bands: CaseBands, dsinks_limit=None) -> GradAccuracy:
    """``fallback``: a callable giving the same-dtype flash model's (dq, dk, dv), the
    yardstick where the standard backward overflowed; ``bands``: the case's band side
    (:class:`~flashbench.measure.bandjudge.CaseBands`, ``grad=True``); ``dsinks_limit(prec)``:
    dsinks' limit (with sinks), judged where the kernel gives dsinks (:func:`_dsinks`)."""
    fields, baseline, yardsticks = {}, {}, {}
    for i, (name, g, s, r) in enumerate(zip(GRADS, grads[:3], std[:3], ref[:3], strict=True)):
        j = judge_gradient(g, s, r, prec, fallback=lambda i=i: fallback()[i],
                           model=kernel == "flash_model")
        fields.update({name: j["kernel"], f"{name}_standard": j["standard"],
                       f"{name}_ratio": j["verdict"].ratio, f"{name}_floor": j["verdict"].floor})
        baseline[name] = (j["verdict"].ratio, j["verdict"].passed)
        if j["verdict"].yardstick != "standard":
            yardsticks[name] = j["verdict"].yardstick
    rules = combine(baseline, bands.judge(prec, grads[:3], GRADS), GRAD_FACTOR, prec.name,
                    model=kernel == "flash_model")  # its draw alone is forgiven (records.py)
    if len(grads) > 3 and len(ref) > 3 and dsinks_limit is not None:
        rules = _dsinks(fields, rules, prec, grads[3], std[3], *dsinks_limit(prec))
    return GradAccuracy(case, kernel, prec.name, peer=peer, yardsticks=yardsticks or None,
                        **fields, **rules)


def _dsinks(fields: dict, rules: dict, prec: Precision, got, std, limits, ref) -> dict:
    """dsinks' fields (into ``fields``) and ``rules`` with its verdict: each head's error
    against ``ref`` (the float64 dsinks of the dtype-rounded inputs) within its limit
    (:func:`flashbench.accuracy.sinks_limit`), or FAIL saying which head."""
    err, std_err = error_stats(got, ref, prec), error_stats(std, ref, prec)
    heads = np.abs(to_numpy(got).astype(np.float64) - ref) / limits
    head = int(np.nanargmax(heads)) if np.isfinite(heads).any() else 0
    ratio = float(heads[head]) if np.isfinite(heads).all() else math.inf
    ok = bool(ratio <= 1.0)
    fields.update(dsinks=err, dsinks_standard=std_err, dsinks_limit=float(limits[head]),
                  dsinks_ratio=ratio, dsinks_head=head, dsinks_passed=ok)
    if ok:
        return rules
    line = (f"dsinks of head {head} off by {abs(float(to_numpy(got)[head]) - ref[head]):.3g}, "
            f"{ratio:.3g}x its limit {limits[head]:.3g} (what the rounding of O, dO and the "
            "LSE and an fp32 sum over the rows leave a correct kernel; docs/variants.md)")
    return {**rules, "passed": False, "disagreement": "; ".join(
        x for x in (rules.get("disagreement"), line) if x)}


def _autograd(backend, q, k, v, do, prec: Precision, causal, variant=None):
    """dq, dk, dv of a differentiable backend: torch.autograd through its timed callable
    (here, on copies of the inputs; with the variant's keywords), or its own ``grads`` (a
    user's function: in its worker, with them too); and dsinks where the case has sinks and
    the backend gives it (:attr:`~flashbench.backends.Backend.dsinks`: its sinks a float32
    tensor that requires grad). BackendFailed when the call changed its q, k, v or dO."""
    import torch

    from flashbench.backends import BackendFailed, variant_kwargs
    from flashbench.backends.outputs import modified_inputs, snapshot

    # rounded by NumPy first (torch rounds float64 to fp16 / bf16 through fp32, twice)
    given = handed(prec, *(caller_inputs(prec, x) for x in (q, k, v)))
    grad_o = handed(prec, caller_inputs(prec, do))[0]
    saved = snapshot(*given, grad_o)
    kw = variant_kwargs(variant)
    dsinks = backend.dsinks and kw.get("sinks") is not None
    if backend.grads is not None:
        grads = backend.grads(*given, grad_o, causal=causal, **kw,
                              **({"dsinks": True} if dsinks else {}))
    else:
        leaves = [t.requires_grad_(True) for t in given]
        prepared = backend.prepare(*leaves)
        if dsinks:
            kw["sinks"] = torch.tensor(kw["sinks"], dtype=torch.float32,
                                       device=prepared[0].device, requires_grad=True)
        # a pinned SDPA kernel that cannot take the case warns its reason, then raises
        # BackendUnavailable carrying it: its warnings are said once, in the skip (a probe:
        # torch's UserWarnings on stderr under --quiet); a call that returns keeps them
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = backend.timed_fn(*prepared, causal=causal, **kw)
        for w in caught:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        o = out[0] if isinstance(out, tuple) else out
        grads = torch.autograd.grad(o, [*leaves, kw["sinks"]] if dsinks else leaves,
                                    grad_o.to(o.dtype).to(o.device))
    changed = modified_inputs((*given, grad_o), saved)
    if changed is not None:
        raise BackendFailed(changed)
    return grads


def measure_gradients(case: Case, dtypes: Sequence[str | Precision], kernels: Sequence[str],
                      seed: int = 0, block: int = 64,
                      say: Callable[[str], None] = lambda msg: None, inputs=None,
                      ref=None,
                      band_rule: bool = True) -> list[GradAccuracy | Unavailable | Failed]:
    """Judge each kernel's gradients in each dtype (module docstring).

    ``kernels``: "flash_model" and/or backend names; backends that are not
    differentiable, or do not take a dtype, get no record. ``dtypes``: names or their
    Precisions (resolved once, here). ``inputs``: (q, k, v, do)
    when the caller has them (else from ``case``, ``seed`` and :func:`grad_output`);
    ``ref``: their float64 (dq, dk, dv). dtypes without a backward model (fp64, fp8)
    are left out. ``band_rule`` False: hand-made ``inputs``, judged by the gradient rule
    alone (:func:`flashbench.measure.forward.measure_accuracy`).
    """

    if inputs is None:
        inputs = (*case.qkv(seed), grad_output(case.shape, seed))
    q, k, v, do = private(*inputs)
    kw, variant = case.kwargs(seed), case.variant(seed)
    if ref is None:
        ref = reference.attention_grad(q, k, v, do, **kw)
    bands = CaseBands(case, (q, k, v, do), grad=True, apply=band_rule, seed=seed)

    def models(prec):
        # the flash model backward in this dtype: its own record, and the yardstick of the
        # ratios where the standard backward overflowed (computed once, when first asked)
        return (numerics.standard_model_grad(q, k, v, do, prec, **kw), functools.cache(
            lambda: numerics.flash_model_grad(q, k, v, do, prec, block=block, **kw)))

    def why_not(backend, dtype):
        return (unavailable_reason(backend, case.shape, dtype)
                or backend.not_applicable(variant, grad=True))

    def run(backend, prec):  # BackendFailed: its inputs modified, its worker's verdict
        return _autograd(backend, q, k, v, do, prec, case.causal, variant)

    def limit(prec):  # dsinks' per head, and its float64 of the inputs rounded as a kernel's
        given = [caller_inputs(prec, x) for x in (q, k, v, do)]
        truth = reference.attention_grad(*given, **kw)[3]
        return sinks_limit(reference.attention(*given[:3], **kw), numerics.flash_model(
            *given[:3], prec, block=block, **kw), given[3], kw["sinks"], truth, prec), truth

    return judge_gradients(case, dtypes, kernels, models, why_not, run, bands, ref, say,
                           dsinks_limit=functools.cache(limit) if kw.get("sinks") is not None
                           else None)


def judge_gradients(case, dtypes, kernels, models, why_not, run, bands: CaseBands, ref,
                    say: Callable[[str], None], where: str = "", dsinks_limit=None
                    ) -> list[GradAccuracy | Unavailable | Failed]:
    """The gradient records of ``kernels`` in each of ``dtypes`` that has a backward model
    (fp64 and fp8 left out), the loop the dense and the packed checks share:
    ``models(prec)`` -> (the standard backward's dq, dk, dv[, dsinks]; a callable giving the
    flash model's), ``why_not(backend, dtype)`` -> why it does not run here or None,
    ``run(backend, prec)`` -> its (dq, dk, dv[, dsinks]); ``where`` ends the progress lines;
    ``dsinks_limit(prec)``: with sinks, dsinks' limit (:func:`_dsinks`)."""
    records: list[GradAccuracy | Unavailable | Failed] = []
    precs = (get_precision(d) for d in dtypes)  # the door: names become Precisions, once
    for prec in (p for p in precs if p.name in numerics.GRAD_DTYPES and p.name != "fp64"):
        dtype = prec.name  # what records and backends (their declared dtypes) speak
        std, flash = models(prec)
        for name in kernels:
            if name == "flash_model":
                say(f"  flash_model backward {dtype}{where}")
                records.append(_grad_accuracy(case, name, prec, flash(), std, ref, flash,
                                              bands=bands, dsinks_limit=dsinks_limit))
                continue
            from flashbench.backends import get_backend  # torch: the flash model needs none

            backend = get_backend(name)
            if not backend.differentiable:  # not applicable: a user's is told why (before
                if users(backend):  # the dtypes it takes: one reason a record, the first)
                    records.append(Unavailable(case, name, dtype, NOT_DIFFERENTIABLE))
                continue
            if dtype not in backend.dtypes:
                records += not_taken(case, name, dtype, backend)
                continue
            reason = why_not(backend, dtype)
            if reason is not None:
                records.append(Unavailable(case, name, dtype, reason, backend.peer))
                continue
            say(f"  {name} backward {dtype}{where}")
            grads, failed = attempt(case, name, dtype, backend, run, backend, prec,
                                    what="backward raised")
            if failed is None and (why := _non_finite(grads, ref)) is not None:
                failed = Failed(case, name, dtype, why, backend.peer)
            if failed is not None:
                records.append(failed)
                continue
            records.append(_grad_accuracy(case, name, prec, grads, std, ref, flash, bands=bands,
                                          peer=backend.peer, dsinks_limit=dsinks_limit))
    return records


def _non_finite(grads, ref) -> str | None:
    """Why gradients with inf or NaN where the float64 reference's are finite fail, named
    as the forward's are (a probe, 2026-12-07: a NaN in dq read "an infinite error ... a row
    that sees no key", the band's words for a mask); None where there is none."""
    for name, g, r in zip(("dq", "dk", "dv", "dsinks"), grads, ref, strict=False):
        g, r = to_numpy(g), np.asarray(r)
        if g.shape == r.shape and (bad := int((~np.isfinite(g) & np.isfinite(r)).sum())):
            return (f"returned {bad} non-finite value(s) (inf or NaN) in {name}, of {g.size}, "
                    "where the float64 reference is finite")
    return None
