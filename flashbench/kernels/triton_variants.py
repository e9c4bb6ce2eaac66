"""The Triton forward with the variants: sliding window, softcap, sinks, packed varlen batches.

One :class:`~flashbench.inputs.variant.Variant` says what the kernel computes; this module
turns it into the forward kernel's arguments (:class:`KernelVariant`) and launches
:func:`flashbench.kernels.triton_forward.forward`: key blocks outside every row's window are
never visited (``count=True`` returns the blocks each program visited), the softcap is
``c log2(e) tanh(s / c)`` in fp32 (:func:`flashbench.kernels.softcap.tanh`) before
masking, the sink joins (m, l) before the one division. Packed batches (q [total_q, H, d],
k, v [total_k, Hkv, d], ``cu_seqlens_q`` / ``cu_seqlens_k``): one program per (sequence,
head, query block of the longest sequence); blocks past a sequence's end visit nothing.
Gradients (:func:`variant_attention`, :func:`triton_varlen_attention`): the Triton
backward with the window and the softcap, :func:`sink_grad` for a sinks tensor that
requires grad, :func:`triton_varlen_backward` for packed batches. The contract, what the
window skips and the packed backward: docs/variants.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from flashbench.inputs.variant import Variant, check_cu_pair, variant_of
from flashbench.kernels import triton_forward
from flashbench.kernels.triton_backward import Packed, backward
from flashbench.kernels.validate import validate_heads

__all__ = ["KernelVariant", "variant_forward", "variant_attention", "triton_varlen_attention",
           "triton_varlen_backward", "packed_batch", "sink_grad"]

UNBOUNDED = 2**30  # a window side of -1, as the kernel's int32 bound


@dataclass
class KernelVariant:
    """The forward kernel's variant arguments (:func:`flashbench.kernels.triton_forward.launch`):
    ``batch`` programs' batches (sequences when packed), ``max_q`` / ``max_k`` the grid's
    and the masks' lengths, the LSE to write, and the optional tensors."""

    variant: Variant
    batch: int
    max_q: int
    max_k: int
    lse: torch.Tensor
    sinks: torch.Tensor | None = None
    cu_q: torch.Tensor | None = None
    cu_k: torch.Tensor | None = None
    visits: torch.Tensor | None = None

    def score_scale(self, scale: float) -> float:
        """What launch multiplies by log2(e): with a softcap, ``scale / c`` before the tanh."""
        c = self.variant.softcap
        return scale if c is None else scale / (c * triton_forward.LOG2E)

    def args(self, scale: float) -> tuple:
        left, right = (UNBOUNDED if w < 0 else w for w in self.variant.window)
        cap = 1.0 if self.variant.softcap is None else self.variant.softcap * triton_forward.LOG2E
        s_b, s_h = (0, self.lse.stride(0)) if self.cu_q is not None else self.lse.stride()[:2]
        return (self.sinks, self.cu_q, self.cu_k, self.visits, left, right, cap, s_b, s_h)

    def strides(self, t: torch.Tensor) -> tuple[int, ...]:
        """A [B, H, N, d] tensor's strides; packed: batch stride 0 (rows start at cu[b])."""
        return (0, *t.stride()[1:]) if self.cu_q is not None else t.stride()

    def constexprs(self) -> dict:
        return dict(WINDOW=self.variant.window != (-1, -1),
                    SOFTCAP=self.variant.softcap is not None,
                    HAS_SINKS=self.sinks is not None, VARLEN=self.cu_q is not None,
                    COUNT=self.visits is not None)


def sink_grad(sinks: torch.Tensor, lse: torch.Tensor, o: torch.Tensor, do: torch.Tensor):
    """The sinks' gradient [H]: ``-sum P_sink D`` over batch and rows, ``P_sink = exp(sink -
    LSE)``, ``D = rowsum(dO * O)`` (:func:`flashbench.reference.streaming_bwd.sink_grad`)."""
    delta = (o.float() * do.float()).sum(-1)
    p = torch.where(torch.isneginf(lse), 0.0, torch.exp(sinks.float()[None, :, None] - lse))
    return -(p * delta).sum((0, 2)).to(sinks.dtype)


class _VariantAttention(torch.autograd.Function):
    """The variant forward and the Triton backward as one autograd node, for [B, H, N, d]
    tensors or (``packed`` given) a packed batch; LSE not differentiable, the sinks tensor,
    when given, differentiable."""

    @staticmethod
    def forward(ctx, q, k, v, sinks, variant, scale, allow_tf32, packed, config, visits):
        if packed is None:
            o, lse, _ = variant_forward(q, k, v, variant, scale, allow_tf32=allow_tf32)
        else:
            o, lse = _varlen_forward(q, k, v, packed, variant, scale, allow_tf32, config,
                                     visits)
        ctx.save_for_backward(q, k, v, o, lse, sinks)
        ctx.packed, ctx.variant, ctx.scale, ctx.allow_tf32 = packed, variant, scale, allow_tf32
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, do, _dlse):
        q, k, v, o, lse, sinks = ctx.saved_tensors
        var, packed = ctx.variant, ctx.packed
        kw = dict(allow_tf32=ctx.allow_tf32, window=var.window, softcap=var.softcap)
        if packed is None:
            dq, dk, dv = backward(q, k, v, o, lse, do, var.causal, ctx.scale, **kw)
        else:
            dq, dk, dv = triton_varlen_backward(q, k, v, o, lse, do, packed, var.causal,
                                                ctx.scale, **kw)
            lse, o, do = lse[None], _heads_first(o), _heads_first(do)
        dsinks = sink_grad(sinks, lse, o, do) if ctx.needs_input_grad[3] else None
        return dq, dk, dv, dsinks, *(None,) * 6


def variant_attention(q, k, v, causal: bool = False, scale: float | None = None, *,
                      window=(-1, -1), softcap=None, sinks=None, allow_tf32: bool = False):
    """``(o, lse)`` of the variant forward, differentiable in q, k, v (and in ``sinks`` when
    it is a tensor that requires grad) through the Triton backward."""
    variant = variant_of(causal, window, softcap, sinks)
    validate_heads(q, k, v)
    variant.sink_logits(q.shape[1])  # the sinks' shape, checked before any launch
    sink_t = sinks if isinstance(sinks, torch.Tensor) else None
    return _VariantAttention.apply(q, k, v, sink_t, variant, scale, allow_tf32, None, None,
                                   None)


def _sinks(variant: Variant, heads: int, device) -> torch.Tensor | None:
    if variant.sinks is None:
        return None
    variant.sink_logits(heads)  # checks the shape [H]
    return torch.tensor(variant.sinks, dtype=torch.float32, device=device)


def _visits(count: bool, programs: int, max_q: int, device) -> torch.Tensor | None:
    if not count:
        return None
    tiles = triton_forward.INTERPRETER_BLOCK_M  # interpreted runs; compiled ones use the config
    return torch.zeros((programs, -(-max_q // min(tiles, 16))), dtype=torch.int32,
                       device=device)


def variant_forward(q, k, v, causal: bool = False, scale: float | None = None, *,
                    window=(-1, -1), softcap=None, sinks=None, allow_tf32: bool = False,
                    config=None, count: bool = False):
    """The forward kernel with a variant, for [B, H, N, d] tensors: ``(o, lse, config)``,
    and with ``count=True`` a fourth, the key blocks each program visited
    (int32 [B * H, query blocks], zero past the grid's blocks)."""
    variant = variant_of(causal, window, softcap, sinks)
    validate_heads(q, k, v)
    B, H, n_q, _ = q.shape
    lse = torch.empty((B, H, n_q), dtype=torch.float32, device=q.device)
    kv = KernelVariant(variant, B, n_q, k.shape[-2], lse, _sinks(variant, H, q.device),
                       visits=_visits(count, B * H, n_q, q.device))
    o, lse, used = triton_forward.forward(q, k, v, variant.causal, scale, allow_tf32=allow_tf32,
                                      config=config, variant=kv)
    return (o, lse, used, kv.visits) if count else (o, lse, used)


def packed_batch(q, k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None
                 ) -> Packed:
    """A packed batch's launch arguments, checked (:func:`check_cu_pair`, on the host: a
    device sync): int32 cu_seqlens on q's device and the longest lengths (at least 1)."""
    for name, t in (("q", q), ("k", k)):
        if not isinstance(t, torch.Tensor) or t.dim() != 3:
            raise ValueError(f"{name} must be a torch.Tensor of the packed shape "
                             f"[total, heads, d], got {getattr(t, 'shape', type(t).__name__)}")
    cu_q, cu_k = check_cu_pair(cu_seqlens_q, cu_seqlens_k, q.shape[0], k.shape[0],
                               max_seqlen_q, max_seqlen_k)
    longest = [int(max_seqlen or max(int((cu[1:] - cu[:-1]).max()), 1))
               for cu, max_seqlen in ((cu_q, max_seqlen_q), (cu_k, max_seqlen_k))]
    return Packed(*(torch.as_tensor(c, dtype=torch.int32, device=q.device)
                    for c in (cu_q, cu_k)), *longest)


def _heads_first(t: torch.Tensor) -> torch.Tensor:
    return t.transpose(0, 1).unsqueeze(0)  # packed [total, heads, d] -> [1, heads, total, d]


def _varlen_forward(q, k, v, packed: Packed, variant: Variant, scale, allow_tf32, config,
                    visits):
    H = q.shape[1]
    lse = torch.full((H, q.shape[0]), float("-inf"), dtype=torch.float32, device=q.device)
    sink = _sinks(variant, H, q.device)
    if q.shape[0] == 0 or k.shape[0] == 0:  # nothing to launch: O = 0, LSE = -inf or the sink
        if sink is not None:
            lse[...] = sink[:, None]
        return q.new_zeros((*q.shape[:-1], v.shape[-1])), lse
    kv = KernelVariant(variant, packed.batch, packed.max_q, packed.max_k, lse, sink,
                       packed.cu_q, packed.cu_k, visits)
    o, lse, _ = triton_forward.forward(*map(_heads_first, (q, k, v)), variant.causal, scale,
                                   allow_tf32=allow_tf32, config=config, variant=kv)
    return o[0].transpose(0, 1), lse


def triton_varlen_backward(q, k, v, o, lse, do, packed: Packed, causal: bool = False,
                           scale: float | None = None, *, window=(-1, -1), softcap=None,
                           allow_tf32: bool = False, count: bool = False):
    """``(dq, dk, dv)`` of a packed batch (packed shapes, q's dtype) from the varlen forward's
    ``o`` [total_q, H, d] and ``lse`` [H, total_q]: the backward kernels with one program per
    (sequence, head, block of the longest sequence), each reading its sequence's rows from
    ``packed``; blocks past a sequence's end visit nothing. ``count``: also the blocks each
    program visited (``{"dkdv": [B * Hkv, key blocks], "dq": [B * H, query blocks]}``)."""
    if q.shape[0] == 0 or k.shape[0] == 0:  # no launch: every row blind, every key unseen
        grads = tuple(torch.zeros_like(t) for t in (q, k, v))
        return (*grads, None) if count else grads
    out = backward(*map(_heads_first, (q, k, v, o)), lse, _heads_first(do), causal, scale,
                   allow_tf32=allow_tf32, window=window, softcap=softcap, packed=packed,
                   count=count)
    grads = tuple(g[0].transpose(0, 1) for g in out[:3])
    return (*grads, out[3]) if count else grads


def triton_varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None,
                            max_seqlen_k=None, causal: bool = False, scale: float | None = None,
                            window=(-1, -1), softcap=None, sinks=None,
                            allow_tf32: bool = False, config=None, count: bool = False):
    """Fused attention of a packed batch (FlashAttention's varlen layout), differentiable in
    q, k, v (and in ``sinks`` when it is a tensor that requires grad) through
    :func:`triton_varlen_backward`.

    Args:
        q: [total_q, H, d]; k, v: [total_k, Hkv, d] (Hkv dividing H), one dtype among
            float16, bfloat16, float32; CUDA tensors or CPU ones (interpreter).
        cu_seqlens_q, cu_seqlens_k: int [B + 1] tensors or arrays, from 0, non-decreasing,
            ending at total_q and total_k (checked on the host: a device sync).
        max_seqlen_q, max_seqlen_k: None (taken from cu_seqlens) or ints >= the longest.
        causal, scale, window, softcap, sinks: as :func:`flashbench.reference.attention`,
            per sequence (bottom-right aligned within each).

    Returns:
        (o [total_q, H, d] in q's dtype, lse [H, total_q] float32); with ``count=True`` also
        the key blocks each forward program visited (None when nothing was launched).
    """
    variant = variant_of(causal, window, softcap, sinks)
    if not isinstance(v, torch.Tensor) or v.dim() != 3:
        raise ValueError(f"v must be a torch.Tensor of the packed shape [total, heads, d], "
                         f"got {getattr(v, 'shape', type(v).__name__)}")
    packed = packed_batch(q, k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    launched = q.shape[0] > 0 and k.shape[0] > 0
    visits = _visits(count and launched, packed.batch * q.shape[1], packed.max_q, q.device)
    sink_t = sinks if isinstance(sinks, torch.Tensor) else None
    o, lse = _VariantAttention.apply(q, k, v, sink_t, variant, scale, allow_tf32, packed,
                                     config, visits)
    return (o, lse, visits) if count else (o, lse)
