"""Precision models: where a flash kernel, and a plain framework implementation, round.

:func:`flash_model` reproduces a FlashAttention-2 style kernel storing its tensors in T: the
(m, l) recurrence of :func:`flashbench.reference.streaming.stream_attention` in fp32, P
rounded to T before ``P @ V``, O rounded once at the end, LSE fp32. :func:`standard_model`
is what a framework does in T (FlashAttention's tests call it the same-dtype reference): S
and P stored in T, the softmax in fp32; its error is the baseline rule's yardstick. Both take
NumPy q [..., Nq, d], k [..., Nk, d], v [..., Nk, dv] (any real dtype) and ``dtype``, a name
or its Precision (resolved once, at the model's door: :mod:`flashbench.inputs.precision`),
and return ``(o, lse)``: o in T's storage dtype, lse fp32. "fp64" equals the reference; the
fp8 dtypes go to :mod:`flashbench.numerics.fp8` (causal only). Rounding points, step by
step: docs/check.md ("The precision models (forward)"); the variants': docs/variants.md
("The models"); the returns, and what each model stands for: docs/numerics.md.
"""

from __future__ import annotations

import numpy as np

from flashbench.inputs.precision import FP8_DTYPES, Precision, get_precision
from flashbench.inputs.validation import check_block, check_causal, grouped_query
from flashbench.inputs.variant import variant_of
from flashbench.numerics import fp8
from flashbench.reference.oneshot import problem
from flashbench.reference.products import matmul
from flashbench.reference.streaming import (
    log_sum_exp,
    masked_scores,
    safe_max,
    stream_attention,
    unnormalised_softmax,
)

__all__ = ["flash_model", "standard_model"]


def _fp8_variant(prec: Precision, causal, window, softcap, sinks) -> bool:
    """True for an fp8 precision (whose models take causal only: ValueError for a variant)."""
    if prec.name not in FP8_DTYPES:
        return False
    if not variant_of(check_causal(causal), window, softcap, sinks).plain:
        raise ValueError(f"the fp8 models take causal only; window, softcap and sinks are "
                         f"not modelled for dtype {prec.name!r}")
    return True


def flash_model(q, k, v, dtype: str | Precision, block: int = 64, causal: bool = False,
                scale: float | None = None, window: tuple[int, int] = (-1, -1),
                softcap: float | None = None, sinks=None, check_finite: bool = False,
                quant: str | None = None, incoherent: bool | None = None):
    """Model of a FlashAttention-2 kernel computing in ``dtype`` (module docstring).

    ``window``, ``softcap``, ``sinks``: the variants, as for
    :func:`flashbench.reference.attention`.
    ``check_finite``: raise ValueError if q, k or v hold inf or nan.
    ``quant`` ("block" | "tensor", default "block") and ``incoherent`` (default True):
    FlashAttention-3's FP8 options, for the fp8 dtypes only
    (:func:`flashbench.numerics.fp8.flash_fp8`).
    """
    prec = get_precision(dtype)  # the door: a name becomes its Precision here, once
    if _fp8_variant(prec, causal, window, softcap, sinks):
        return fp8.flash_fp8(q, k, v, prec, block=block, causal=causal, scale=scale,
                             check_finite=check_finite,
                             quant="block" if quant is None else quant,
                             incoherent=True if incoherent is None else incoherent)
    if quant is not None or incoherent is not None:
        raise ValueError(f"quant and incoherent apply to the fp8 dtypes {list(FP8_DTYPES)} "
                         f"only, got dtype {prec.name!r}")
    block = check_block(block)
    q, k, v, variant, scale, sink = problem(q, k, v, causal, scale, window, softcap, sinks,
                                            check_finite)
    o, lse = _flash(q, k, v, prec=prec, block=block, variant=variant, scale=scale, sink=sink)
    return prec.store(o), lse


@grouped_query  # k, v with Hkv heads dividing H (float64 here: the wrapper checks them)
def _flash(q, k, v, *, prec: Precision, block, variant, scale, sink):
    # Step 1 and the operand rounding of step 2: T's values, held in the compute dtype.
    round_p = None if prec.name in ("fp64", "fp32") else prec.operand
    return stream_attention(prec.operand(q), prec.operand(k), prec.operand(v), block=block,
                            causal=variant, scale=scale, compute=prec.compute,
                            round_p=round_p, sink=sink)


def standard_model(q, k, v, dtype: str | Precision, causal: bool = False,
                   scale: float | None = None, window: tuple[int, int] = (-1, -1),
                   softcap: float | None = None, sinks=None, check_finite: bool = False):
    """Model of plain (materialised) attention computing in ``dtype`` (module docstring).

    ``window``, ``softcap``, ``sinks``: the variants, as for
    :func:`flashbench.reference.attention`. ``check_finite``: raise ValueError if q, k or
    v hold inf or nan. The fp8 dtypes give FlashAttention-3's baseline
    (:func:`flashbench.numerics.fp8.standard_fp8`).
    """
    prec = get_precision(dtype)  # the door: a name becomes its Precision here, once
    if _fp8_variant(prec, causal, window, softcap, sinks):
        return fp8.standard_fp8(q, k, v, prec, causal=causal, scale=scale,
                                check_finite=check_finite)
    q, k, v, variant, scale, sink = problem(q, k, v, causal, scale, window, softcap, sinks,
                                            check_finite)
    if sink is not None:
        sink = prec.stored(sink).astype(prec.compute)  # the sink column of S, in T
    return _standard(q, k, v, variant=variant, scale=scale, sink=sink, prec=prec)


@grouped_query  # float64 q, k, v here (the wrapper checks them), rounded below
def _standard(q, k, v, *, variant, scale, sink, prec: Precision):
    q, k, v = prec.operand(q), prec.operand(k), prec.operand(v)
    e, m = unnormalised_softmax(masked_scores(q, k, scale, variant, round_s=prec.stored))
    l = e.sum(axis=-1)
    if sink is not None:  # softmax over [S, sink]: the sink's term in the fp32 denominator
        m_new = np.maximum(m, sink)
        m_ref = safe_max(m_new)
        e *= np.exp(m - m_ref)[..., None]
        l = l * np.exp(m - m_ref) + np.exp(sink - m_ref)
        m = m_new
    p = np.divide(e, l[..., None], out=e, where=(l != 0)[..., None])  # softmax in fp32
    o = matmul(prec.operand(p), v)
    return prec.store(o), log_sum_exp(m, l)
