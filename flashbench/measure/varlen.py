"""Accuracy of packed variable-length batches (``flashbench check --varlen 512,1000,77``).

A :class:`~flashbench.measure.forward.Case` with ``varlen`` lengths is a packed batch in
FlashAttention's layout (q, k, v [total, heads, d], the same lengths for queries and keys,
drawn as one sequence of ``total`` rows by :func:`flashbench.inputs.make_qkv` and cut at
``cu_seqlens``). The reference, the exactness (streamed vs one-shot) and the two precision
models run per sequence (:func:`flashbench.reference.varlen.per_sequence`); backends run
their ``varlen`` callable, and one without it is "not applicable". The records are those
of :mod:`flashbench.measure.forward`, judged by the same two rules.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from flashbench import numerics, reference
from flashbench.accuracy import error_stats
from flashbench.inputs.precision import Precision, get_precision
from flashbench.inputs.problem import make_varlen_qkv
from flashbench.measure.bandjudge import CaseBands
from flashbench.measure.forward import (
    EXACT_TOL,
    INTERPRETER_LIMIT,
    INTERPRETER_TOO_SLOW,
    Case,
    Exactness,
    Failed,
    Unavailable,
    _accuracy,
)
from flashbench.reference.varlen import per_sequence

__all__ = ["VARIANT_SET", "varlen_inputs", "varlen_exactness", "measure_varlen"]

# ``flashbench check --variants`` and the asv variant suite: the Case fields of each variant
# (the models' sliding window, Gemma 2's softcap, gpt-oss's sinks, a packed batch)
VARIANT_SET = {"causal window=(128,0)": {"causal": True, "window": (128, 0)},
               "softcap=30": {"softcap": 30.0}, "sinks": {"sinks": True},
               "varlen 512,1000,77": {"varlen": (512, 1000, 77)}}


def varlen_inputs(case: Case, seed: int = 0):
    """(q, k, v, cu_seqlens) of a varlen case: float64 [total, heads, d], int64 [B + 1]
    (:func:`flashbench.inputs.problem.make_varlen_qkv`)."""
    return make_varlen_qkv(case.varlen, case.shape, case.dist, seed)


def varlen_exactness(case: Case, q, k, v, cu, ref, block: int, seed: int = 0):
    """Streamed vs one-shot in float64, per sequence: O and LSE."""
    o, lse = reference.online_varlen_attention(q, k, v, cu, cu, block=block,
                                               **case.kwargs(seed))
    diffs = {"attention O": error_stats(o, ref[0]), "attention LSE": error_stats(lse, ref[1])}
    return [Exactness(case, what, st["max_abs"], st["max_abs"] <= EXACT_TOL)
            for what, st in diffs.items()]


def measure_varlen(case: Case, dtypes: Sequence[str | Precision], kernels: Sequence[str],
                   seed: int = 0, block: int = 64,
                   say: Callable[[str], None] = lambda msg: None, inputs=None, ref=None,
                   band_rule: bool = True):
    """:func:`flashbench.measure.forward.measure_accuracy` for a packed batch (``dtypes``:
    names or their Precisions, resolved once, here): both rules, the band that of the flash
    model per sequence on the same lengths (:mod:`flashbench.bands.case`)."""
    import torch

    from flashbench.backends import BackendUnavailable, get_backend
    from flashbench.kernels.checks import torch_dtype

    q, k, v, cu = varlen_inputs(case, seed) if inputs is None else inputs
    kw = case.kwargs(seed)
    ref = reference.varlen_attention(q, k, v, cu, cu, **kw) if ref is None else ref
    records = []
    bands = CaseBands(case, (q, k, v), apply=band_rule, seed=seed)
    for prec in (get_precision(d) for d in dtypes):  # the door: names become Precisions
        dtype = prec.name  # what records and backends (their declared dtypes) speak
        std = per_sequence(numerics.standard_model, q, k, v, cu, cu, dtype=prec, **kw)
        flash = per_sequence(numerics.flash_model, q, k, v, cu, cu, dtype=prec, block=block,
                             **kw)
        for name in kernels:
            if name == "flash_model":
                records.append(_accuracy(
                    case, name, prec, flash, std, ref, fallback=flash, bands=bands,
                    streamed_vs_oneshot_o=error_stats(flash[0], std[0], prec),
                    streamed_vs_oneshot_lse=error_stats(flash[1], std[1], prec)))
                continue
            backend = get_backend(name)
            if dtype not in backend.dtypes:
                continue
            reason = backend.unavailable_for(case.shape, dtype) or backend.not_applicable(
                case.variant(seed)) or (None if backend.varlen else
                                        "not applicable: it takes no packed (varlen) batch")
            scores = case.shape.H * sum(n * n for n in case.varlen)
            if reason is None and backend.interpreted() and scores > INTERPRETER_LIMIT:
                reason = INTERPRETER_TOO_SLOW
            if reason is not None:
                records.append(Unavailable(case, name, dtype, reason))
                continue
            say(f"  {name} {dtype} varlen")
            given = [torch.from_numpy(x).to(torch_dtype(prec)) for x in (q, k, v)]
            given = [t.to(backend.device(t.device)) for t in given]
            try:
                o, lse = backend.varlen(*given, cu, cu, **kw)
            except BackendUnavailable as exc:
                records.append(Unavailable(case, name, dtype, str(exc)))
                continue
            except Exception as exc:  # noqa: BLE001 - a backend's failure is a record
                records.append(Failed(case, name, dtype, f"raised {type(exc).__name__}: "
                                      f"{exc}", peer=backend.peer))
                continue
            out = (o.detach().cpu().double().numpy(), lse.detach().cpu().double().numpy())
            if out[0].shape != ref[0].shape or out[1].shape != ref[1].shape:
                records.append(Failed(case, name, dtype, f"returned o {out[0].shape}, lse "
                                      f"{out[1].shape}; expected {ref[0].shape}, "
                                      f"{ref[1].shape}", peer=backend.peer))
                continue
            records.append(_accuracy(case, name, prec, out, std, ref, fallback=flash,
                                     peer=backend.peer, bands=bands))
    return records
