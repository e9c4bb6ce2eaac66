"""Accuracy of packed variable-length batches (``flashbench check --varlen 512,1000,77``).

A :class:`~flashbench.measure.records.Case` with ``varlen`` lengths is a packed batch in
FlashAttention's layout (q, k, v [total, heads, d], the same lengths for queries and keys,
drawn as one sequence of ``total`` rows by :func:`flashbench.inputs.make_qkv` and cut at
``cu_seqlens``). The reference, the exactness (streamed vs one-shot) and the two precision
models run per sequence (:func:`flashbench.reference.varlen.per_sequence`); backends run
their ``varlen`` callable, and one without it is "not applicable". The records are those
of :mod:`flashbench.measure.records`, judged by the same two rules. Gradients
(:func:`measure_varlen_gradients`): the float64 varlen backward, streamed vs one-shot, and
the two backward models per sequence (:func:`flashbench.reference.varlen.per_sequence_grad`)
judge the flash model and every backend whose packed path is differentiable
(``Backend.varlen_grad``: torch.autograd through it), by the gradient rule and the band rule
(the flash model's backward per sequence on the same lengths).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial

import numpy as np

from flashbench import numerics, reference
from flashbench.accuracy import error_stats
from flashbench.accuracy.rules import sinks_limit
from flashbench.bands.measure import caller_inputs
from flashbench.inputs.precision import Precision, get_precision
from flashbench.inputs.problem import make_varlen_qkv
from flashbench.measure.bandjudge import CaseBands
from flashbench.measure.diagnose import diagnose
from flashbench.measure.records import (
    INTERPRETER_LIMIT,
    INTERPRETER_TOO_SLOW,
    Case,
    Failed,
    Unavailable,
    accuracy_record,
    attempt,
    exact,
    handed,
    not_taken,
)
from flashbench.measure.seqdiagnose import varlen_candidates
from flashbench.reference.varlen import per_sequence, per_sequence_grad

__all__ = ["VARIANT_SET", "varlen_inputs", "varlen_exactness", "measure_varlen",
           "varlen_grad_output", "varlen_backward_exactness", "measure_varlen_gradients",
           "worst_sequence"]

# ``flashbench check --variants`` and the asv variant suite: the Case fields of each variant
# (the models' sliding window, Gemma 2's softcap, gpt-oss's sinks, a packed batch)
VARIANT_SET = {"causal window=(128,0)": {"causal": True, "window": (128, 0)},
               "softcap=30": {"softcap": 30.0}, "sinks": {"sinks": True},
               "varlen 512,1000,77": {"varlen": (512, 1000, 77)}}


def varlen_inputs(case: Case, seed: int = 0):
    """(q, k, v, cu_seqlens_q, cu_seqlens_k) of a varlen case: float64 [total, heads, d],
    int64 [B + 1] (:func:`flashbench.inputs.problem.make_varlen_qkv`; the key lengths
    ``case.varlen_k`` where they differ from the query lengths)."""
    return make_varlen_qkv(case.varlen, case.shape, case.dist, seed, case.varlen_k,
                           softcap=case.softcap)


def varlen_exactness(case: Case, q, k, v, cu, cu_k, ref, block: int, seed: int = 0):
    """Streamed vs one-shot in float64, per sequence: O and LSE."""
    o, lse = reference.online_varlen_attention(q, k, v, cu, cu_k, block=block,
                                               **case.kwargs(seed))
    return [exact(case, what, error_stats(got, want, max_only=True)["max_abs"], want)
            for what, got, want in (("attention O", o, ref[0]), ("attention LSE", lse, ref[1]))]


def _why_not(backend, case: Case, dtype: str, seed: int, grad: bool = False) -> str | None:
    """None when ``backend`` (``grad``: its backward) runs this packed case in ``dtype``
    here, else why: its own reason, the variant, no packed path, or the interpreter's
    limit (on the scores of the sequences, H * sum n^2)."""
    reason = (backend.unavailable_for(case.shape, dtype)
              or backend.not_applicable(case.variant(seed), grad=grad, packed=True))
    scores = case.shape.H * sum(n * m for n, m in zip(case.varlen, case.key_lengths,
                                                       strict=True))
    if reason is None and backend.interpreted() and scores > INTERPRETER_LIMIT:
        reason = INTERPRETER_TOO_SLOW
    return reason


def measure_varlen(case: Case, dtypes: Sequence[str | Precision], kernels: Sequence[str],
                   seed: int = 0, block: int = 64,
                   say: Callable[[str], None] = lambda msg: None, inputs=None, ref=None,
                   band_rule: bool = True):
    """:func:`flashbench.measure.forward.measure_accuracy` for a packed batch (``dtypes``:
    names or their Precisions, resolved once, here): both rules, the band that of the flash
    model per sequence on the same lengths (:mod:`flashbench.bands.case`)."""
    from flashbench.backends import get_backend

    q, k, v, cu, cu_k = varlen_inputs(case, seed) if inputs is None else inputs
    kw = case.kwargs(seed)
    ref = reference.varlen_attention(q, k, v, cu, cu_k, **kw) if ref is None else ref
    records = []
    bands = CaseBands(case, (q, k, v), apply=band_rule, seed=seed)
    tried = functools.cache(partial(varlen_candidates, q, k, v, cu, cu_k, kw))  # FAILs'
    for prec in (get_precision(d) for d in dtypes):  # the door: names become Precisions
        dtype = prec.name  # what records and backends (their declared dtypes) speak
        std = per_sequence(numerics.standard_model, q, k, v, cu, cu_k, dtype=prec, **kw)
        flash = per_sequence(numerics.flash_model, q, k, v, cu, cu_k, dtype=prec,
                             block=block, **kw)
        for name in kernels:
            if name == "flash_model":
                records.append(accuracy_record(
                    case, name, prec, flash, std, ref, fallback=flash, bands=bands,
                    streamed_vs_oneshot_o=error_stats(flash[0], std[0], prec),
                    streamed_vs_oneshot_lse=error_stats(flash[1], std[1], prec)))
                continue
            backend = get_backend(name)
            if dtype not in backend.dtypes:  # not applicable: a user's kernel says so
                records += not_taken(case, name, dtype, backend)
                continue
            reason = _why_not(backend, case, dtype, seed)
            if reason is not None:
                records.append(Unavailable(case, name, dtype, reason, backend.peer))
                continue
            say(f"  {name} {dtype} varlen")
            # rounded by NumPy first (torch rounds float64 to fp16 / bf16 through fp32)
            given = handed(prec, *(caller_inputs(prec, x) for x in (q, k, v)))
            given = [t.to(backend.device(t.device)) for t in given]
            out, failed = attempt(case, name, dtype, backend, backend.varlen, *given, cu,
                                  cu_k, what="raised", **kw)
            if failed is not None:
                records.append(failed)
                continue
            o, lse = out
            own_lse = getattr(out, "own_lse", backend.own_lse)  # False: a stand-in (unjudged)
            out = (o.detach().cpu().double().numpy(), lse.detach().cpu().double().numpy())
            if out[0].shape != ref[0].shape or out[1].shape != ref[1].shape:
                records.append(Failed(case, name, dtype, f"returned o {out[0].shape}, lse "
                                      f"{out[1].shape}; expected {ref[0].shape}, "
                                      f"{ref[1].shape}", peer=backend.peer))
                continue
            rec = accuracy_record(case, name, prec, out, std, ref, fallback=flash,
                                  own_lse=own_lse, peer=backend.peer, bands=bands)
            if not rec.passed:  # where, and a plausible wrong semantics tried
                rec = replace(rec, worst_at=worst_sequence(out[0], ref[0], cu, cu, cu_k),
                              diagnosis=None if rec.peer else diagnose(
                                  tried(), out, ref, rec.o_standard["max_abs"],
                                  rec.lse_standard["max_abs"] if rec.lse is not None
                                  else None))
            records.append(rec)
    return records


def worst_sequence(o, ref_o, cu, cu_q=None, cu_k=None) -> str:
    """Where a packed output's largest |error| against the float64 reference lies: the
    sequence (its index, its queries and keys where ``cu_q`` and ``cu_k`` are given, else
    its length, and packed rows, ``cu`` being the rows' offsets) and its max |err|, beside
    the other sequences' largest (a kernel that lets rows see past their sequence's end, or
    drops one, is wrong in some sequences only)."""
    cu = [int(x) for x in cu]
    worst = [float(np.abs(o[a:b] - ref_o[a:b]).max()) if b > a else 0.0
             for a, b in zip(cu, cu[1:], strict=False)]
    s = int(np.argmax(worst))
    others = max((w for i, w in enumerate(worst) if i != s), default=0.0)
    size = (f"{int(cu_q[s + 1]) - int(cu_q[s])} queries, {int(cu_k[s + 1]) - int(cu_k[s])} "
            "keys" if cu_q is not None and cu_k is not None else f"length {cu[s + 1] - cu[s]}")
    return (f"worst in sequence {s + 1} of {len(worst)} (index {s}, {size}, packed rows "
            f"{cu[s]}-{cu[s + 1] - 1}): max |err| {worst[s]:.3g}; the other sequences' "
            f"largest {others:.3g}")


def varlen_grad_output(case: Case, seed: int = 0) -> np.ndarray:
    """dO [total, H, dv], float64 N(0, 1) from ``default_rng(seed + 1)`` (as the dense
    cases' :func:`flashbench.measure.backward.grad_output`)."""
    return np.random.default_rng(seed + 1).standard_normal(
        (sum(case.varlen), case.shape.H, case.shape.head_dim_v))


def varlen_backward_exactness(case: Case, q, k, v, do, cu, cu_k, ref, block: int,
                              seed: int = 0):
    """Streamed (FlashAttention-2's recurrence per sequence) vs one-shot float64 gradients
    ``ref`` of a packed batch: :class:`~flashbench.measure.backward.BackwardExactness`
    records."""
    from flashbench.measure.backward import exactness_records

    streamed = reference.online_varlen_attention_grad(q, k, v, do, cu, cu_k, block=block,
                                                      **case.kwargs(seed))
    return exactness_records(case, streamed, ref)


def _varlen_autograd(backend, q, k, v, do, cu, cu_k, prec: Precision, kw):
    """dq, dk, dv of a backend's packed path: torch.autograd through ``backend.varlen`` on
    fresh copies of the inputs rounded to ``prec``; and dsinks (summed over the sequences)
    where the case has sinks and the backend gives it (``Backend.dsinks``)."""
    import torch

    given = handed(prec, *(caller_inputs(prec, x) for x in (q, k, v, do)))
    dev = backend.device(given[0].device)
    leaves = [t.to(dev).requires_grad_(True) for t in given[:3]]
    if backend.dsinks and kw.get("sinks") is not None:
        kw = {**kw, "sinks": torch.tensor(kw["sinks"], dtype=torch.float32, device=dev,
                                          requires_grad=True)}
        leaves.append(kw["sinks"])
    o = backend.varlen(*leaves[:3], cu, cu_k, **kw)[0]
    return torch.autograd.grad(o, leaves, given[3].to(o.dtype).to(o.device))


def measure_varlen_gradients(case: Case, dtypes: Sequence[str | Precision],
                             kernels: Sequence[str],
                             seed: int = 0, block: int = 64,
                             say: Callable[[str], None] = lambda msg: None, inputs=None,
                             ref=None, band_rule: bool = True):
    """:func:`flashbench.measure.backward.measure_gradients` for a packed batch (module
    docstring): ``dtypes`` names or their Precisions, resolved once, here; ``inputs`` (q, k,
    v, do, cu_seqlens_q, cu_seqlens_k), ``ref`` their float64 (dq, dk, dv[, dsinks])."""
    from flashbench.measure.backward import GRADS, judge_gradients
    from flashbench.measure.bandjudge import CaseBands

    if inputs is None:
        q, k, v, cu, cu_k = varlen_inputs(case, seed)
        inputs = (q, k, v, varlen_grad_output(case, seed), cu, cu_k)
    q, k, v, do, cu, cu_k = inputs
    kw = case.kwargs(seed)
    if ref is None:  # (dq, dk, dv[, dsinks])
        ref = reference.varlen_attention_grad(q, k, v, do, cu, cu_k, **kw)
    bands = CaseBands(case, (q, k, v, do), grad=True, apply=band_rule, seed=seed)

    def models(prec):  # the two backward models per sequence; the flash one when asked
        return (per_sequence_grad(numerics.standard_model_grad, q, k, v, do, cu, cu_k,
                                  dtype=prec, **kw),
                functools.cache(lambda: per_sequence_grad(
                    numerics.flash_model_grad, q, k, v, do, cu, cu_k, dtype=prec,
                    block=block, **kw)))

    got: dict = {}  # (kernel, dtype) -> its gradients, float64: where a FAIL's error is

    def run(backend, prec):
        grads = _varlen_autograd(backend, q, k, v, do, cu, cu_k, prec, kw)
        got[backend.name, prec.name] = [g.detach().cpu().double().numpy() for g in grads]
        return grads

    def limit(prec):  # dsinks', over every packed row: [H, total] as the dense [..., H, N]
        given = [caller_inputs(prec, x) for x in (q, k, v, do)]
        truth = reference.varlen_attention_grad(*given, cu, cu_k, **kw)[3]
        ref, model = (per_sequence(fn, *given[:3], cu, cu_k, **kw, **extra) for fn, extra in (
            (reference.attention, {}), (numerics.flash_model, {"dtype": prec, "block": block})))
        return sinks_limit(*((o.transpose(1, 0, 2), lse) for o, lse in (ref, model)),
                           given[3].transpose(1, 0, 2), kw["sinks"], truth, prec), truth

    records = judge_gradients(
        case, dtypes, kernels, models,
        lambda backend, dtype: _why_not(backend, case, dtype, seed, grad=True), run,
        bands, ref, say, where=" varlen",
        dsinks_limit=functools.cache(limit) if kw.get("sinks") is not None else None)
    for i, r in enumerate(records):  # the worst gradient's sequence, as the forward's O
        grads = got.get((getattr(r, "kernel", None), r.dtype))
        if grads is not None and getattr(r, "passed", True) is False and (
                r.baseline_passed is False or r.band_passed is False):  # not dsinks' alone
            t = max(range(3), key=lambda j: getattr(r, f"{GRADS[j]}_ratio"))
            where = worst_sequence(grads[t], ref[t], cu if t == 0 else cu_k, cu, cu_k)
            records[i] = replace(r, worst_at=f"{GRADS[t]}: {where}")
    return records
