"""The forward's accuracy: the cases flashbench judges and one record per measurement.

Measuring apart from reporting: this module returns the records of :mod:`.records`, which
``flashbench check`` renders (:mod:`flashbench.cli.check_tables`), the asv accuracy suite
tracks and the GPU script tabulates; nothing here prints (progress goes through ``say``) or
decides an exit status. :func:`default_cases`; :func:`exactness` (streamed vs one-shot in
float64 -> :class:`~.records.Exactness`, passed iff max |diff| <= 1e-12 x max(1, |value|));
:func:`measure_accuracy` (each kernel in each dtype against the float64 reference, by the
baseline rule and the band rule -> :class:`~.records.Accuracy`, or
:class:`~.records.Unavailable` with the reason, or :class:`~.records.Failed`). Gradients:
:mod:`flashbench.measure.backward`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial

from flashbench import numerics, reference
from flashbench.accuracy import error_stats
from flashbench.bands.measure import caller_inputs
from flashbench.inputs.precision import Precision, get_precision
from flashbench.inputs.problem import Shape
from flashbench.inputs.variant import Variant
from flashbench.measure.bandjudge import CaseBands
from flashbench.measure.diagnose import dense_candidates, diagnose
from flashbench.measure.records import (
    INTERPRETER_NOTE,
    Accuracy,
    Case,
    Exactness,
    Unavailable,
    accuracy_record,
    attempt,
    exact,
    handed,
    not_taken,
    private,
    unavailable_reason,
    with_note,
)
from flashbench.reference.streaming import masked_scores

__all__ = ["default_cases", "exactness", "measure_accuracy"]


def default_cases() -> list[Case]:
    """Realistic shapes (H 2..8, N 1024..4096, d 64 and 128), normal and FA3-outlier inputs,
    and one small case of the edges a kernel gets wrong first: two batch elements,
    grouped-query heads, fewer queries than keys under a causal mask (bottom-right aligned),
    lengths no block divides (a red team, 2026-12-06: kernels that masked top-left, or read
    batch 0's K and V for every batch element, PASSed the six square B = 1 cases)."""
    return [
        Case(Shape(2, 4, 200, 333, 64, Hkv=2), "normal", True),
        Case(Shape(1, 2, 1024, 1024, 64), "normal", False),
        Case(Shape(1, 2, 1024, 1024, 64), "normal", True),
        Case(Shape(1, 4, 2048, 2048, 128), "normal", False),
        Case(Shape(1, 4, 2048, 2048, 128), "normal", True),
        Case(Shape(1, 2, 4096, 4096, 64), "normal", False),
        Case(Shape(1, 8, 2048, 2048, 64), "outliers", False),
    ]


def exactness(case: Case, q, k, v, ref, block: int, seed: int = 0) -> list[Exactness]:
    """Streamed vs one-shot in float64: softmax of head 0's masked scores, attention O and LSE."""
    kw = case.kwargs(seed)
    o_s, lse_s = reference.online_attention(q, k, v, block=block, **kw)
    mask = Variant(causal=case.causal, window=case.window, softcap=case.softcap)
    s = masked_scores(q[0, 0], k[0, 0], 1 / math.sqrt(case.shape.d), mask)
    one = reference.softmax(s)
    diffs = {
        "softmax": (reference.online_softmax(s, block), one),
        "attention O": (o_s, ref[0]),
        "attention LSE": (lse_s, ref[1]),
    }
    return [exact(case, what, error_stats(got, want, max_only=True)["max_abs"], want)
            for what, (got, want) in diffs.items()]


def measure_accuracy(case: Case, dtypes: Sequence[str | Precision], kernels: Sequence[str],
                     seed: int = 0, block: int = 64,
                     say: Callable[[str], None] = lambda msg: None, inputs=None, ref=None,
                     band_rule: bool = True) -> list[Accuracy | Unavailable]:
    """Judge each kernel in each dtype against the float64 reference and standard_model.

    ``dtypes``: names or their Precisions (resolved once, here).
    ``kernels``: "flash_model" and/or backend names (:mod:`flashbench.backends`).
    ``inputs`` / ``ref``: (q, k, v) and the float64 (o, lse) when the caller has them
    (else drawn from ``case`` and ``seed``); every backend call gets its own copies
    (:func:`~.records.handed`), the models use the harness's read-only ones
    (:func:`~.records.private`).
    ``band_rule`` False: ``inputs`` not drawn from ``case.dist`` (hand-made): the band
    rule, whose band describes that distribution, is left out and the records judge by the
    baseline rule alone (a case's variant is measured into its band:
    :mod:`flashbench.bands.case`). Returns one record per kernel x dtype,
    in that order: :class:`Accuracy`, or :class:`Unavailable` for a kernel that
    cannot run the case here; backends get no record for dtypes they do not take.
    """
    q, k, v = private(*(case.qkv(seed) if inputs is None else inputs))
    kw, variant = case.kwargs(seed), case.variant(seed)
    ref = reference.attention(q, k, v, **kw) if ref is None else ref
    records: list[Accuracy | Unavailable] = []
    bands = CaseBands(case, (q, k, v), apply=band_rule, seed=seed)
    tried = functools.cache(partial(dense_candidates, q, k, v, kw))  # a FAIL's: once a case
    for prec in (get_precision(d) for d in dtypes):  # the door: names become Precisions
        dtype = prec.name  # what records and backends (their declared dtypes) speak
        std = numerics.standard_model(q, k, v, prec, **kw)
        # the flash model in this dtype: its own record, and the yardstick of the ratios
        # where the standard model overflowed (computed once, when first asked for)
        flash = functools.cache(partial(numerics.flash_model, q, k, v, prec, block=block,
                                        **kw))
        for name in kernels:
            if name == "flash_model":
                say(f"  flash_model {dtype}")
                out = flash()
                records.append(accuracy_record(
                    case, name, prec, out, std, ref, fallback=flash, bands=bands,
                    streamed_vs_oneshot_o=error_stats(out[0], std[0], prec),
                    streamed_vs_oneshot_lse=error_stats(out[1], std[1], prec)))
                continue
            from flashbench.backends import get_backend  # torch: the flash model needs none

            backend = get_backend(name)
            if dtype not in backend.dtypes:  # not applicable: a user's kernel says so
                records += not_taken(case, name, dtype, backend)
                continue
            reason = unavailable_reason(backend, case.shape, dtype)
            if reason is not None:
                records.append(Unavailable(case, name, dtype, reason, backend.peer))
                continue
            say(f"  {name} {dtype}")
            # fp8 kernels quantise fp32 inputs themselves
            given = prec if backend.inputs is None else get_precision(backend.inputs)
            # rounded by NumPy first: torch rounds float64 to fp16 / bf16 through fp32
            # (twice), and every kernel must get the values the models and bands use
            given_qkv = (caller_inputs(given, x) for x in (q, k, v))
            # a variant it does not declare: "not applicable" (never run without it)
            out, failed = attempt(case, name, dtype, backend, backend,
                                  *handed(given, *given_qkv), causal=case.causal, dtype=dtype,
                                  **({} if variant is None else {"variant": variant}))
            if failed is not None:
                records.append(failed)
                continue
            rec = accuracy_record(case, name, prec, out, std, ref, fallback=flash,
                                  own_lse=getattr(out, "own_lse", True), peer=backend.peer,
                                  bands=bands)
            if not rec.passed and with_note("", backend, dtype):
                rec = replace(rec, note=INTERPRETER_NOTE)
            elif not rec.passed and not rec.peer:  # tried: a plausible wrong semantics
                rec = replace(rec, diagnosis=diagnose(
                    tried(), out, ref, rec.o_standard["max_abs"],
                    rec.lse_standard["max_abs"] if rec.lse is not None else None))
            records.append(rec)
    return records
