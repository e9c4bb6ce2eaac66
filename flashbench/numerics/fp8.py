"""FP8 precision models: FlashAttention-3's baseline FP8 attention and its FP8 forward.

:func:`standard_fp8` is the baseline (per-tensor scales, fp32 accumulation, softmax in fp16),
materialised; :func:`flash_fp8` the FP8 forward (incoherent processing, per-block scales, P
rounded to fp8 as 256 P), streamed with the (m, l) recurrence of
:func:`flashbench.reference.streaming.stream_attention`. Both take NumPy q [..., Nq, d],
k [..., Nk, d], v [..., Nk, dv] (grouped-query allowed) and ``"fp8"`` (e4m3) or
``"fp8_e5m2"`` (the same model with e5m2 at every fp8 rounding point), and return
``(o, lse)``: o bfloat16 (as FlashAttention-3 writes its FP8 output), lse float32.
:func:`quantize` is the one place values become fp8: a group (the tensor, or a block of
rows) gets the scale ``s = max / amax``, is stored as the saturating nearest-even
``fp8(x * s)`` (:func:`flashbench.inputs.precision.round_to_fp8`), its descale ``1 / s``
beside it. Every rounding point, step by step, and where the models differ from a Hopper
kernel: docs/fp8.md ("FP8 models").
"""

from __future__ import annotations

import numpy as np

from flashbench.inputs.incoherent import hadamard, incoherence_matrix
from flashbench.inputs.precision import (
    FP8_DTYPES,
    PRECISIONS,
    Precision,
    get_precision,
    round_to_fp8,
)
from flashbench.inputs.validation import (
    check_block,
    check_causal,
    check_qkv,
    check_scale,
    grouped_query,
)
from flashbench.reference.products import matmul
from flashbench.reference.streaming import (
    log_sum_exp,
    masked_scores,
    stream_attention,
    unnormalised_softmax,
)

__all__ = ["P_SCALE", "QUANT", "standard_fp8", "flash_fp8", "quantize", "hadamard",
           "incoherence_matrix", "fp8_precision"]

P_SCALE = 256.0  # 2**8: FlashAttention-3's Max_offset = 8 for FP8 (P in [0, 256])
QUANT = ("block", "tensor")


def fp8_precision(dtype: str | Precision) -> Precision:
    """The fp8 :class:`Precision` called ``dtype`` (or given: it passes through), resolved
    once at the fp8 models' door; ValueError for any other."""
    prec = get_precision(dtype)
    if prec.name not in FP8_DTYPES:
        raise ValueError(f"dtype must be one of {list(FP8_DTYPES)} for the fp8 models, "
                         f"got {prec.name!r}")
    return prec


def _groups(x: np.ndarray, rows: int | None) -> np.ndarray:
    """amax of |x| per group: the whole array (rows None) or blocks of ``rows`` rows of
    axis -2 per leading index; returned broadcastable against x ([..., N, 1])."""
    a = np.abs(x)
    if rows is None:
        return np.max(a, initial=0.0, keepdims=True).reshape((1,) * x.ndim)
    n = x.shape[-2]
    row_amax = np.max(a, axis=-1, initial=0.0)  # [..., N]
    nb = -(-n // rows)
    padded = np.zeros(row_amax.shape[:-1] + (nb * rows,), dtype=row_amax.dtype)
    padded[..., :n] = row_amax
    block_amax = padded.reshape(row_amax.shape[:-1] + (nb, rows)).max(axis=-1)  # [..., nb]
    return np.repeat(block_amax, rows, axis=-1)[..., :n, None]


def quantize(x, dtype: str | Precision = "fp8",
             block: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Quantise ``x`` [..., N, d] to fp8 with FlashAttention-3's scales (module docstring).

    ``block``: None for one scale over the whole tensor, else one scale per ``block``
    rows of axis -2 (and per leading index). Returns ``(x8, descale)``: x8 float32
    holding fp8 values (x * scale rounded, saturating at +-max), descale float32
    broadcastable against x8, so ``x8 * descale`` approximates x. An all-zero group
    gets scale 1; a group holding inf or nan gives nan.
    """
    prec = fp8_precision(dtype)
    x32 = np.asarray(x, dtype=np.float32)
    if block is not None and x32.ndim < 2:
        raise ValueError(f"x must be [..., N, d] for per-block scales, got shape {x32.shape}")
    amax = _groups(x32, None if block is None else check_block(block))
    top = np.float32(prec.max)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # a group whose amax is below max / 3.4e38 would overflow the fp32 scale: clamp it
        scale = np.where(amax > 0, np.minimum(top / amax, np.finfo(np.float32).max),
                         np.float32(1)).astype(np.float32)
        scale = np.where(np.isfinite(amax), scale, np.float32(np.nan))
        descale = (np.float32(1) / scale).astype(np.float32)
        x8 = round_to_fp8(x32 * scale, prec.storage)
    return x8, descale


def _options(quant, incoherent) -> tuple[str, bool]:
    if quant not in QUANT:
        raise ValueError(f"quant must be one of {list(QUANT)}, got {quant!r}")
    if not isinstance(incoherent, (bool, np.bool_)):
        raise TypeError(f"incoherent must be True or False, got {type(incoherent).__name__} "
                        f"{incoherent!r}")
    return quant, bool(incoherent)


def _prepared(q, k, v, dtype, scale, check_finite):
    prec = fp8_precision(dtype)
    q, k, v = check_qkv(q, k, v, finite=check_finite)
    return prec, q, k, v, check_scale(scale, q.shape[-1])


def _p_rounder(prec: Precision):
    """FlashAttention-3's P conversion: fp8(256 P) / 256, exact but for the fp8 rounding."""
    up, down = np.float32(P_SCALE), np.float32(1.0 / P_SCALE)

    def round_p(p: np.ndarray) -> np.ndarray:
        return round_to_fp8(p * up, prec.storage) * down

    return round_p


def flash_fp8(q, k, v, dtype: str | Precision = "fp8", block: int = 64, causal: bool = False,
              scale: float | None = None, check_finite: bool = False, quant: str = "block",
              incoherent: bool = True, block_q: int | None = None, seed: int = 0):
    """FlashAttention-3 style FP8 forward (docs/fp8.md, "FP8 models": steps 1-5).

    ``quant``: "block" (one scale per ``block_q`` query rows and per ``block`` key
    rows) or "tensor" (one scale per tensor). ``incoherent``: multiply q and k by
    :func:`incoherence_matrix` (d, ``seed``) first. ``block_q`` defaults to ``block``.
    Returns (o bf16 [..., Nq, dv], lse float32 [..., Nq]).
    """
    block = check_block(block)
    block_q = block if block_q is None else check_block(block_q)
    causal = check_causal(causal)
    quant, incoherent = _options(quant, incoherent)
    prec, q, k, v, scale = _prepared(q, k, v, dtype, scale, check_finite)
    if incoherent:
        m = incoherence_matrix(q.shape[-1], seed)
        q, k = q @ m, k @ m
    return _flash_fp8(q, k, v, prec=prec, rows=(block_q, block, block), causal=causal,
                      scale=scale, tensor=quant == "tensor")


# Grouped-query k, v run grouped (a k or v head's scales are those of each q head it
# serves; one tensor's amax is that of its expansion): a probe's Hkv = 2 of H = 4 raised
# a broadcast error, in flashbench check --dtype fp8 too (2026-12-07)
@grouped_query
def _flash_fp8(q, k, v, *, prec: Precision, rows, causal, scale, tensor: bool):
    (q8, dq), (k8, dk), (v8, dv) = (quantize(x, prec, None if tensor else n)
                                    for x, n in zip((q, k, v), rows, strict=True))
    o, lse = stream_attention(q8 * dq, k8 * dk, v8 * dv, block=rows[1], causal=causal,
                              scale=scale, compute=np.float32, round_p=_p_rounder(prec))
    return prec.out.store(o), lse


def standard_fp8(q, k, v, dtype: str | Precision = "fp8", causal: bool = False,
                 scale: float | None = None, check_finite: bool = False):
    """FlashAttention-3's baseline FP8 attention (docs/fp8.md, "FP8 models": steps 1-4).

    Returns (o bf16 [..., Nq, dv], lse float32 [..., Nq]).
    """
    prec, q, k, v, scale = _prepared(q, k, v, dtype, scale, check_finite)
    return _standard_fp8(q, k, v, prec=prec, causal=check_causal(causal), scale=scale)


@grouped_query
def _standard_fp8(q, k, v, *, prec: Precision, causal, scale):
    (q8, dq), (k8, dk), (v8, dv) = (quantize(x, prec) for x in (q, k, v))
    fp16 = PRECISIONS["fp16"]
    s = masked_scores(q8 * dq, k8 * dk, scale, causal, round_s=fp16.stored)
    e, m = unnormalised_softmax(s)
    l = e.sum(axis=-1)
    p = np.divide(e, l[..., None], out=e, where=(l != 0)[..., None])  # softmax in fp32
    p8, dp = quantize(fp16.stored(p), prec)
    o = matmul(p8, v8 * dv) * dp
    return prec.out.store(o), log_sum_exp(m, l)
