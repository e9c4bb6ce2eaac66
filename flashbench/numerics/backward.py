"""Precision models of attention's backward pass: a flash kernel's, and plain autograd's.

:func:`flash_model_grad` is a FlashAttention-2 style backward storing its tensors in T, the
backward of :func:`flashbench.numerics.flash_model`: P recomputed in fp32 from the forward's
fp32 LSE, P and dS rounded to T before their matmuls, fp32 elsewhere, dq, dk, dv rounded
once at the end. :func:`standard_model_grad` is autograd of
:func:`flashbench.numerics.standard_model`'s graph, every op's result stored in T (the
same-dtype yardstick of the gradient rule). Both take NumPy q [..., Nq, d], k [..., Nk, d],
v [..., Nk, dv] (grouped-query and broadcast as in the reference), the output gradient do
[..., Nq, dv] and a ``dtype`` in :data:`GRAD_DTYPES` (no fp8), and return ``(dq, dk, dv)``
in T's storage dtype (with sinks ``(dq, dk, dv, dsinks)``, dsinks fp32); "fp64" rounds nothing and
equals the reference's gradients. Every rounding point, step by step, with the variants and
grouped-query heads: docs/backward.md ("Where a backward rounds").
"""

from __future__ import annotations

import numpy as np

from flashbench.inputs.precision import FP8_DTYPES, PRECISIONS, Precision, get_precision
from flashbench.inputs.validation import (
    attention_shape,
    check_block,
    check_shaped,
    grouped_grad,
    sum_to,
)
from flashbench.numerics.forward import flash_model, standard_model
from flashbench.reference.oneshot import problem
from flashbench.reference.products import matmul
from flashbench.reference.streaming import masked_scores, safe_max, unnormalised_softmax
from flashbench.reference.streaming_bwd import sink_grad, stream_attention_grad

__all__ = ["flash_model_grad", "standard_model_grad", "GRAD_DTYPES"]

# precisions the backward models cover: every precision of the registry but the fp8 ones
# (fp8 training is not modelled), in the registry's order
GRAD_DTYPES = tuple(name for name in PRECISIONS if name not in FP8_DTYPES)


def _precision(dtype: str | Precision) -> Precision:
    """The door of both models: a name becomes its Precision here, once."""
    prec = get_precision(dtype)
    if prec.name not in GRAD_DTYPES:
        raise ValueError(f"dtype must be one of {list(GRAD_DTYPES)} for the backward "
                         f"models, got {dtype!r}")
    return prec


def _inputs(q, k, v, do, dtype: str | Precision, causal, scale, window, softcap, sinks,
            check_finite):
    prec = _precision(dtype)
    q, k, v, variant, scale, sink = problem(q, k, v, causal, scale, window, softcap, sinks,
                                            check_finite)
    do = check_shaped(do, "do", attention_shape(q.shape, k.shape, v.shape),
                      "the output's shape [..., Nq, dv]", finite=check_finite)
    return prec, q, k, v, do, variant, scale, sink


def _sink_grad(prec: Precision, sink, lse, o, do):
    """dsinks [H] from the model's forward O, LSE, summed in float64, stored in fp32 (the
    sinks' own dtype, as a kernel returns it: stored in an fp16 T a dsinks of 2e-14 read 0);
    fp64 rounds nothing."""
    g = sink_grad(sink, np.asarray(lse, np.float64), np.asarray(o, np.float64),
                  np.asarray(do, np.float64))
    return g if prec.name == "fp64" else g.astype(np.float32).astype(np.float64)


def flash_model_grad(q, k, v, do, dtype: str | Precision, block: int = 64, causal: bool = False,
                     scale: float | None = None, window: tuple[int, int] = (-1, -1),
                     softcap: float | None = None, sinks=None, check_finite: bool = False):
    """Model of a FlashAttention-2 backward computing in ``dtype`` (module docstring).

    ``block``: keys per block, as for :func:`flashbench.numerics.flash_model` (its
    forward gives O and LSE). Returns (dq, dk, dv) in T's storage dtype (with sinks:
    (dq, dk, dv, dsinks)).
    """
    block = check_block(block)
    prec, q, k, v, do, variant, scale, sink = _inputs(q, k, v, do, dtype, causal, scale,
                                                      window, softcap, sinks, check_finite)
    # the variant as merged (a Variant given as ``causal`` carries its window and softcap:
    # passing the arguments alone dropped them from O and LSE)
    o, lse = flash_model(q, k, v, prec, block=block, causal=variant, scale=scale)
    compute = prec.compute
    o = np.asarray(o).astype(compute)  # O and dO as the kernel reads them from memory
    do = prec.stored(do)
    dq, dk, dv = grouped_grad(stream_attention_grad, prec.operand(q), prec.operand(k),
                              prec.operand(v), ((o, -3), (lse.astype(compute), -2), (do, -3)),
                              block=block, causal=variant, scale=scale, compute=compute,
                              round_op=None if prec.name in ("fp64", "fp32") else prec.operand)
    grads = prec.store(dq), prec.store(dk), prec.store(dv)
    return grads if sink is None else (*grads, _sink_grad(prec, sink, lse, o, do))


def standard_model_grad(q, k, v, do, dtype: str | Precision, causal: bool = False,
                        scale: float | None = None, window: tuple[int, int] = (-1, -1),
                        softcap: float | None = None, sinks=None, check_finite: bool = False):
    """Model of autograd through plain attention in ``dtype`` (module docstring).

    Returns (dq, dk, dv) in T's storage dtype (with sinks: (dq, dk, dv, dsinks)).
    """
    prec, q, k, v, do, variant, scale, sink = _inputs(q, k, v, do, dtype, causal, scale,
                                                      window, softcap, sinks, check_finite)
    if sink is not None:
        sink = prec.stored(sink).astype(prec.compute)  # the sink column of S, in T
    grads = grouped_grad(_standard_grad, prec.operand(q), prec.operand(k), prec.operand(v),
                         ((prec.operand(do), -3), (sink, -2)), variant=variant, scale=scale,
                         prec=prec)
    grads = tuple(prec.store(g) for g in grads)
    if sink is None:
        return grads
    o, lse = standard_model(q, k, v, prec, causal=variant, scale=scale)  # merged, as above
    return (*grads, _sink_grad(prec, sink, lse, o, prec.stored(do)))


def _standard_grad(q, k, v, do, sink, *, variant, scale, prec: Precision):
    compute = prec.compute

    def store(x):  # round in place to T (values kept in the compute dtype): no extra copy
        if np.dtype(prec.storage) != np.dtype(compute):
            x[...] = x.astype(prec.storage)
        return x

    def op(x):  # a matmul operand: T values already, but for tf32's operand rounding
        return prec.operand(x) if prec.name == "tf32" else x

    s = masked_scores(q, k, scale, variant, round_s=store)
    dcap = None if variant.softcap is None else store(variant.cap_grad(s))
    p, m = unnormalised_softmax(s)
    l = p.sum(axis=-1, keepdims=True)
    if sink is not None:  # softmax over [S, sink]; the sink's column is dropped after
        with np.errstate(over="ignore"):  # a sink e^709 above every score: P = 0, as it is
            l += np.exp(sink - safe_max(m))[..., None]
    store(np.divide(p, l, out=p, where=l != 0))  # P = T(softmax(S)), fp32 softmax
    dv = sum_to(store(matmul(np.swapaxes(op(p), -1, -2), do)), v.shape)
    ds = store(matmul(do, np.swapaxes(v, -1, -2)))  # dP = T(dO V^T)
    ds -= np.einsum("...ij,...ij->...i", p, ds)[..., None]
    ds *= p
    del p
    ds = store(ds)  # dS = T(P * (dP - rowsum(P * dP)))
    if dcap is not None:  # through the softcap: one more T op
        ds = store(ds * dcap)
    ds = op(ds)
    c = compute(scale)
    dq = matmul(ds, k)
    dq *= c
    dk = matmul(np.swapaxes(ds, -1, -2), q)
    dk *= c
    return sum_to(store(dq), q.shape), sum_to(store(dk), k.shape), dv
