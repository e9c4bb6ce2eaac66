"""FlashAttention-2's backward recurrence, written once for every compute dtype.

The forward's side output LSE makes the backward cheap: the probabilities of any key block
are recomputed, ``P_blk = exp(S_blk - LSE)``, never stored; with ``D = rowsum(dO * O)``
(softmax backward's ``sum_j P_ij dP_ij``, one number per row, computed once from O
instead of from P) each key block contributes dV, dS, dQ and dK on its own.
:func:`stream_attention_grad` serves :func:`flashbench.reference.online_attention_grad`
(float64) and :func:`flashbench.numerics.flash_model_grad` (float32, P and dS rounded to a
storage dtype before their matmuls); it shares the score tile and the variant's bookkeeping
with :mod:`flashbench.reference.streaming` and holds a few ``[..., Nq, block]`` tiles at
most. A softcap multiplies dS by ``1 - (t / c)^2``; sinks need nothing but their own
gradient (:func:`sink_grad`: the LSE holds them); a broadcast input gets the sum of its
gradients (:func:`flashbench.inputs.validation.sum_to`). The steps, blind rows, unseen
keys: docs/backward.md ("Gradient contracts"); the variants': docs/variants.md.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from flashbench.inputs.validation import sum_to
from flashbench.inputs.variant import Variant, variant_of
from flashbench.reference.products import matmul
from flashbench.reference.streaming import key_blocks, safe_max, score_tile

__all__ = ["stream_attention_grad", "sink_grad"]


def sink_grad(sink: np.ndarray, lse: np.ndarray, o: np.ndarray, do: np.ndarray) -> np.ndarray:
    """The gradient of each sink logit [H]: a sink is a key with no value, so its dS is
    ``P_sink (0 - D)`` with ``P_sink = exp(sink - LSE)`` and ``D = rowsum(dO * O)``, summed
    over the rows of its head (every axis but the head axis -2 of lse [..., H, Nq]).

    ``sink``: [H, 1] logits; rows with LSE -inf (no key, no sink) contribute 0."""
    delta = np.einsum("...ij,...ij->...i", do, o)
    lse_ref = np.where(np.isneginf(lse), 0.0, lse)
    p_sink = np.where(np.isneginf(lse), 0.0, np.exp(sink - lse_ref))
    ds = -(p_sink * delta)
    ds = ds.reshape((-1,) + ds.shape[-2:]) if ds.ndim >= 2 else ds[None, None]
    return ds.sum(axis=(0, 2))


def stream_attention_grad(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    o: np.ndarray,
    lse: np.ndarray,
    do: np.ndarray,
    *,
    block: int,
    causal: bool | Variant,
    scale: float,
    compute: type = np.float64,
    round_op: Callable[[np.ndarray], np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stream key/value blocks through FlashAttention-2's backward (module docstring).

    Args:
        q: [..., Nq, d], k: [..., Nk, d], v: [..., Nk, dv]; o, do: [..., Nq, dv] (the
            broadcast batch shape); lse: [..., Nq]. All in ``compute`` dtype, already
            rounded to whatever the caller models.
        block: keys per block (>= 1; the last block may be shorter).
        causal: a bool (bottom-right aligned causal mask) or a :class:`Variant`.
        scale: the forward's score scale; multiplies dQ and dK once, at the end.
        compute: float64 or float32: dtype of S, P, dP, dS, D and the accumulators.
        round_op: rounds the matmul operands the recurrence makes or reads: P before
            ``P^T dO``, dS before ``dS K`` and ``dS^T Q``, and dO (whose unrounded values
            give D). None: no rounding.

    Returns:
        (dq, dk, dv) with q's, k's and v's shapes, in ``compute`` dtype.
    """
    variant = variant_of(causal)
    nq, nk = q.shape[-2], k.shape[-2]
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    delta = np.einsum("...ij,...ij->...i", do, o)  # D = rowsum(dO * O) [..., Nq]
    if round_op is not None:
        do = round_op(do)
    lse_ref = safe_max(lse)  # blind rows: S is -inf there, so P = exp(-inf) = 0
    dq = np.zeros(batch + q.shape[-2:], dtype=compute)
    dk = np.zeros(k.shape, dtype=compute)
    dv = np.zeros(v.shape, dtype=compute)
    kt = np.swapaxes(k, -1, -2)
    for start, stop, (r0, r1) in key_blocks(variant, nq, nk, block):
        # keys no query sees are never visited: dk = dv = 0 there
        q_r, do_r = q[..., r0:r1, :], do[..., r0:r1, :]
        k_b, v_b = k[..., start:stop, :], v[..., start:stop, :]
        # -- recompute P from S and the LSE --
        s = score_tile(q, kt, start, stop, (r0, r1), compute(scale), variant)
        dcap = None if variant.softcap is None else variant.cap_grad(s)
        s -= lse_ref[..., r0:r1, None]
        p = np.exp(s, out=s)
        # -- dV_blk = P^T dO --
        p_op = p if round_op is None else round_op(p)
        dv[..., start:stop, :] += sum_to(matmul(np.swapaxes(p_op, -1, -2), do_r),
                                         v_b.shape)
        # -- dS = P * (dO V^T - D) --
        ds = matmul(do_r, np.swapaxes(v_b, -1, -2))
        ds -= delta[..., r0:r1, None]
        ds *= p
        if dcap is not None:  # through the softcap: d(c tanh(x / c)) / dx
            ds *= dcap
        ds_op = ds if round_op is None else round_op(ds)
        # -- dQ += dS K_blk; dK_blk = dS^T Q --
        dq[..., r0:r1, :] += matmul(ds_op, k_b)
        dk[..., start:stop, :] += sum_to(matmul(np.swapaxes(ds_op, -1, -2), q_r), k_b.shape)
    scale_c = compute(scale)
    dq *= scale_c
    dk *= scale_c
    return sum_to(dq, q.shape), dk, dv
