"""Defective flash kernels as NumPy models: fixtures of the band rule's power study.

:func:`kernel` is a FlashAttention-2 forward written independently of
:func:`flashbench.numerics.flash_model` (block 128, scores in the exp2 domain as real
kernels compute them), correct with ``defect=None``: the "correct user kernel" of the
calibration (studies/band_calibration.py). Each defect moves one rounding point to the
storage dtype T, as a real kernel bug does:

``acc_low`` (the O accumulator kept in T between key blocks), ``p_coarse`` (P rounded to
a coarser dtype, :data:`COARSER`), ``pv_twice`` (P and then the P V tile rounded to T),
``rescale_low`` (running max and rescale factor in T), ``l_low`` (l kept in T, LSE
rounded to T), ``scale_low`` (scores q k^T stored and scaled in T), ``cap_low`` (with a
softcap: the score stored in T and each op of the cap, s / c, tanh, * c, rounded to T).
It takes the variants (``window``, ``softcap``, ``sinks``) as the models do.

:func:`kernel_grad` is the backward (flash model's forward, FlashAttention-2's
recurrence, block 128); ``defect="ds_early"`` rounds dP = dO V^T to T before the row-sum
subtraction dP - D (dS rounded before the subtraction); ``"dq_acc_low"`` keeps the dQ
accumulator in T between key blocks (FlashAttention-2 accumulates it in fp32).
Neither lives in the package.
"""

from __future__ import annotations

import numpy as np

from flashbench import numerics
from flashbench.inputs.precision import get_precision
from flashbench.inputs.variant import Variant

FORWARD_DEFECTS = ("acc_low", "p_coarse", "pv_twice", "rescale_low", "l_low", "scale_low",
                   "cap_low")
COARSER = {"fp32": "fp16", "tf32": "bf16", "fp16": "bf16", "bf16": "fp8"}  # p_coarse's P
GRAD_DEFECTS = ("ds_early", "dq_acc_low")
LOG2E = np.float32(np.log2(np.e))


def _heads(q, k, v):
    """k, v repeated to q's heads (grouped-query attention)."""
    group = q.shape[-3] // k.shape[-3]
    if group > 1:
        k, v = np.repeat(k, group, axis=-3), np.repeat(v, group, axis=-3)
    return k, v


def kernel(q, k, v, dtype: str, causal: bool = False, defect: str | None = None,
           block: int = 128, window=(-1, -1), softcap=None, sinks=None):
    """(o, lse) of a FlashAttention-2 forward in ``dtype`` with one ``defect`` (or none);
    ``window``, ``softcap``, ``sinks``: the variant (the softcap in fp32, then scores to
    the exp2 domain; the sink merged into (m, l) after the last block)."""
    if defect is not None and defect not in FORWARD_DEFECTS:
        raise ValueError(f"defect must be one of {FORWARD_DEFECTS} or None, got {defect!r}")
    prec = get_precision(dtype)
    t = prec.operand  # to T's values, returned in float32
    q, k, v = (t(np.asarray(x, dtype=np.float64)) for x in (q, k, v))
    k, v = _heads(q, k, v)
    nq, nk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = np.float32(1 / np.sqrt(d))
    variant = Variant(causal=causal, window=window, softcap=softcap)
    cap = None if softcap is None else np.float32(softcap)
    o = np.zeros(q.shape[:-1] + (v.shape[-1],), np.float32)
    m = np.full(q.shape[:-1], -np.inf, np.float32)  # running max, log2 domain
    l = np.zeros(q.shape[:-1], np.float32)
    for start in range(0, nk, block):
        stop = min(start + block, nk)
        s = np.matmul(q, np.swapaxes(k[..., start:stop, :], -1, -2))
        if cap is not None:  # natural-domain score, capped, then to the exp2 domain
            s = t(s) * scale if defect in ("scale_low", "cap_low") else s * scale
            s = (t(cap * t(np.tanh(t(s / cap)))) if defect == "cap_low"
                 else cap * np.tanh(s / cap)) * LOG2E
        else:
            s = t(t(s) * scale) * LOG2E if defect == "scale_low" else s * (scale * LOG2E)
        hidden = variant.hidden(nq, nk, start, stop)
        if hidden is not None:
            s[..., hidden] = -np.inf
        m_new = np.maximum(m, s.max(axis=-1))
        if defect == "rescale_low":
            m_new = t(m_new)
        m_safe = np.where(np.isneginf(m_new), np.float32(0), m_new)
        alpha = np.exp2(m - m_safe)
        if defect == "rescale_low":
            alpha = t(alpha)
        p = np.exp2(s - m_safe[..., None])
        l = alpha * l + p.sum(axis=-1)
        p_t = get_precision(COARSER[dtype]).operand(p) if defect == "p_coarse" else t(p)
        pv = np.matmul(p_t, v[..., start:stop, :])
        o = alpha[..., None] * o + (t(pv) if defect == "pv_twice" else pv)
        if defect == "acc_low":
            o = t(o)
        if defect == "l_low":
            l = t(l)
        m = m_new
    if sinks is not None:  # the sink joins (m, l) as one more key with no value
        sink = (np.asarray(sinks, np.float32) * LOG2E)[:, None]  # [H, 1] against [..., H, Nq]
        m_new = np.maximum(m, sink)
        m_safe = np.where(np.isneginf(m_new), np.float32(0), m_new)
        alpha = np.exp2(m - m_safe)
        o, l, m = alpha[..., None] * o, alpha * l + np.exp2(sink - m_safe), m_new
    seen = l > 0
    o = np.divide(o, l[..., None], out=np.zeros_like(o), where=seen[..., None])
    lse = np.where(seen, (m + np.log2(np.where(seen, l, 1))) / LOG2E, -np.inf)
    if defect == "l_low":
        lse = t(lse)
    return prec.store(o), lse.astype(np.float32)


def kernel_grad(q, k, v, do, dtype: str, causal: bool = False, defect: str | None = None,
                block: int = 128):
    """(dq, dk, dv) of a FlashAttention-2 backward in ``dtype`` (grouped-query k, v: their
    gradients summed over each group's query heads)."""
    if defect is not None and defect not in GRAD_DEFECTS:
        raise ValueError(f"defect must be one of {GRAD_DEFECTS} or None, got {defect!r}")
    prec = get_precision(dtype)
    t = prec.operand
    o, lse = numerics.flash_model(q, k, v, dtype, causal=causal)
    q, k, v, do = (t(np.asarray(x, dtype=np.float64)) for x in (q, k, v, do))
    hkv = k.shape[-3]
    k, v = _heads(q, k, v)
    o = np.asarray(o).astype(np.float32)
    nq, nk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = np.float32(1 / np.sqrt(d))
    delta = np.einsum("...ij,...ij->...i", do, o)
    lse_safe = np.where(np.isneginf(lse), np.float32(0), lse).astype(np.float32)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    for start in range(0, nk, block):
        stop = min(start + block, nk)
        kb, vb = k[..., start:stop, :], v[..., start:stop, :]
        s = np.matmul(q, np.swapaxes(kb, -1, -2)) * scale
        if causal:
            hidden = np.arange(start, stop)[None, :] > np.arange(nq)[:, None] + (nk - nq)
            s[..., hidden] = -np.inf
        p = np.exp(s - lse_safe[..., None])
        dv[..., start:stop, :] += np.matmul(np.swapaxes(t(p), -1, -2), do)
        dp = np.matmul(do, np.swapaxes(vb, -1, -2))
        if defect == "ds_early":
            dp = t(dp)
        ds = t(p * (dp - delta[..., None]))
        dq += np.matmul(ds, kb)
        if defect == "dq_acc_low":
            dq = t(dq * scale) / scale  # stored in T (scaled, as the kernel stores it)
        dk[..., start:stop, :] += np.matmul(np.swapaxes(ds, -1, -2), q)
    group = q.shape[-3] // hkv
    if group > 1:
        dk, dv = (x.reshape(*x.shape[:-3], hkv, group, *x.shape[-2:]).sum(axis=-3)
                  for x in (dk, dv))
    return prec.store(dq * scale), prec.store(dk * scale), prec.store(dv)
