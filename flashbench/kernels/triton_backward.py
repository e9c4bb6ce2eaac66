"""FlashAttention-2 style backward kernels in Triton, and the autograd Function that makes
:func:`flashbench.triton_attention` differentiable in q, k and v.

Three kernels (:mod:`flashbench.kernels.triton_backward_kernels`): ``attn_bwd_preprocess``
(``D = rowsum(dO * O)``), ``attn_bwd_dkdv`` (one program per key block of one kv head,
looping over the query blocks of every query head of its group) and ``attn_bwd_dq`` (one
program per query block, looping over key blocks). No atomics, so every result is bitwise
repeatable. Names and rounding points are those of
:func:`flashbench.reference.streaming_bwd.stream_attention_grad` and
:func:`flashbench.numerics.flash_model_grad`; masks and phases as in the forward.
CUDA tensors run fixed configs per (operand width, head dim) (:data:`DKDV_CONFIGS`,
:data:`DQ_CONFIGS`; no autotuning); CPU tensors run interpreted on
``INTERPRETER_BLOCK_M`` x ``INTERPRETER_BLOCK_N`` tiles, with bf16 rounded by hand as in
the forward. More: docs/backward.md ("The Triton backward").
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton

from flashbench.inputs.validation import check_causal, check_scale
from flashbench.kernels import triton_forward
from flashbench.kernels.configs import fits_shared_memory
from flashbench.kernels.headdim import config_width, dim_constexprs
from flashbench.kernels.launch import Config, TritonKernel, interpreted_for
from flashbench.kernels.triton_backward_kernels import (
    attn_bwd_dkdv,
    attn_bwd_dq,
    attn_bwd_preprocess,
    round_bf16,
)

__all__ = ["attention_function", "backward", "Packed", "round_bf16", "PREPROCESS", "DKDV", "DQ",
           "DKDV_CONFIGS", "DQ_CONFIGS", "backward_config"]

LOG2E = triton_forward.LOG2E  # the kernels (triton_backward_kernels) inline it as a literal
# Interpreter tiles; tests lower them (and make them unequal) to cross more block edges.
INTERPRETER_BLOCK_M = 128
INTERPRETER_BLOCK_N = 128


_SIZES = ("H", "HKV", "GROUP", "N_Q", "N_K")
PREPROCESS = TritonKernel(attn_bwd_preprocess, name="attn_bwd_preprocess",
                          do_not_specialize=("H", "N_Q"))
# the variants' and packed batches' runtime arguments: any value, any address (as the forward)
_VARIANT = ("LEFT", "RIGHT", "CAP", "CU_Q", "CU_K", "VISITS", "stride_lb", "stride_lh")
DKDV = TritonKernel(attn_bwd_dkdv, name="attn_bwd_dkdv", do_not_specialize=_SIZES + _VARIANT)
DQ = TritonKernel(attn_bwd_dq, name="attn_bwd_dq",
                  do_not_specialize=_SIZES[:1] + _SIZES[2:] + _VARIANT)


def _c(bm: int, bn: int, warps: int, stages: int) -> Config:
    return Config.of(num_warps=warps, num_stages=stages, BLOCK_M=bm, BLOCK_N=bn)


# Fixed GPU configs per (operand width, head dim), after Triton's fused-attention tutorial
# on Hopper: dK/dV holds BLOCK_N = 128 keys and steps 32 query rows at a time, dQ the
# reverse; d = 256 halves the held block. fp32 (IEEE dots on CUDA cores) takes small tiles.
DKDV_CONFIGS: dict[tuple[int, int], Config] = {
    **{(2, d): _c(32, 128, 4, 3) for d in (16, 32, 64)}, (2, 128): _c(32, 128, 8, 3),
    (2, 256): _c(32, 64, 8, 2),
    **{(4, d): _c(32, 64, 4, 2) for d in (16, 32, 64)}, (4, 128): _c(32, 64, 8, 2),
    (4, 256): _c(16, 32, 8, 2),
}
DQ_CONFIGS: dict[tuple[int, int], Config] = {
    **{(2, d): _c(128, 32, 4, 3) for d in (16, 32, 64)}, (2, 128): _c(128, 32, 8, 3),
    (2, 256): _c(64, 32, 8, 2),
    **{(4, d): _c(64, 32, 4, 2) for d in (16, 32, 64)}, (4, 128): _c(64, 32, 8, 2),
    (4, 256): _c(32, 16, 8, 2),
}
PREPROCESS_CONFIG = Config.of(num_warps=4, num_stages=1, BLOCK_M=128)


def smem_bytes(kernel: str, cfg: Config, head_dim: int, width: int) -> int:
    """Shared memory of a backward kernel's pipelined tiles (the held block once, the
    two streamed operand tiles once per stage): dkdv holds K, V and streams Q, dO; dq
    holds Q, dO and streams K, V."""
    p = cfg.kwargs
    held, streamed = (p["BLOCK_N"], p["BLOCK_M"]) if kernel == "dkdv" else (p["BLOCK_M"],
                                                                              p["BLOCK_N"])
    return width * head_dim * 2 * (held + streamed * cfg.num_stages)


def backward_config(kernel: str, head_dim: int, dtype: torch.dtype) -> Config:
    """The fixed GPU config of ``kernel`` ("dkdv" or "dq") for ``head_dim`` and ``dtype``."""
    width = torch.empty((), dtype=dtype).element_size()
    table = DKDV_CONFIGS if kernel == "dkdv" else DQ_CONFIGS
    return table[(width, head_dim)]


def _interpret_config() -> Config:
    return Config.of(num_warps=1, num_stages=1, BLOCK_M=INTERPRETER_BLOCK_M,
                     BLOCK_N=INTERPRETER_BLOCK_N)


@dataclass(frozen=True)
class Packed:
    """A packed batch's launch arguments (FlashAttention's varlen layout): int32 cu_seqlens
    [B + 1] on the tensors' device and the longest sequence lengths (the grid's)."""

    cu_q: torch.Tensor
    cu_k: torch.Tensor
    max_q: int
    max_k: int

    @property
    def batch(self) -> int:
        return self.cu_q.shape[0] - 1


def _validate_do(do, o) -> None:
    if not isinstance(do, torch.Tensor):
        raise TypeError(f"do must be a torch.Tensor like o, got {type(do).__name__}")
    if do.shape != o.shape or do.dtype != o.dtype or do.device != o.device:
        raise ValueError(f"do must match o: shape {tuple(o.shape)}, dtype {o.dtype}, device "
                         f"{o.device}; got {tuple(do.shape)}, {do.dtype}, {do.device}")


def backward(q, k, v, o, lse, do, causal: bool = False, scale: float | None = None, *,
             allow_tf32: bool = False, window=(-1, -1), softcap: float | None = None,
             packed: Packed | None = None, count: bool = False, kernel: str | None = None):
    """Gradients ``(dq, dk, dv)`` of attention from the forward's ``o`` and ``lse``.

    Args:
        q [B, H, Nq, d], k, v [B, Hkv, Nk, d]: the forward's inputs (as for
            :func:`flashbench.triton_attention`).
        o [B, H, Nq, d], lse [B, H, Nq] float32: the forward kernel's outputs.
        do [B, H, Nq, d]: the gradient of o, o's dtype; any strides.
        causal, scale, allow_tf32, window, softcap: as given to the forward (sinks need
            nothing here: the LSE holds them; their gradient is
            :func:`flashbench.kernels.triton_variants.sink_grad`).
        packed: a packed batch (:class:`Packed`; :func:`varlen_backward` builds it): then
            q, k, v, o, do are [1, heads, total, d] views and lse is [H, total_q].
        count: also return the blocks each program visited (:func:`varlen_backward`).
        kernel: None (today's dK/dV kernel) or "tma", the Hopper variant
            (:mod:`flashbench.kernels.triton_hopper_backward`; 16-bit, no window, softcap, packing).

    Returns:
        (dq, dk, dv) with q's, k's and v's shapes and dtype (contiguous); with ``count``
        also ``{"dkdv": int32 [B * Hkv, key blocks], "dq": int32 [B * H, query blocks]}``.
    """
    _validate_do(do, o)
    causal = check_causal(causal)
    dkdv = DKDV
    if kernel is not None:
        from flashbench.kernels import triton_hopper_backward

        if kernel != "tma" or q.dtype == torch.float32 or tuple(window) != (-1, -1) or (
                softcap is not None or packed is not None or count) or (
                v.shape[-1] != q.shape[-1] or q.shape[-1] not in (16, 32, 64, 128, 256)):
            raise ValueError(f"kernel must be None or 'tma' (fp16/bf16, d = dv in 16..256 a "
                             f"power of two, no window, softcap, packing or count), got "
                             f"{kernel!r}")
        dkdv = triton_hopper_backward.DKDV_TMA
        q, do = q.contiguous(), do.contiguous()  # its descriptors read rows of d elements
    B, H, n_q, d = q.shape
    hkv, n_k = k.shape[1], k.shape[2]
    scale = check_scale(scale, d)
    lse = lse.contiguous()
    delta = torch.empty((B, H, n_q), dtype=torch.float32, device=q.device)
    # packed: the gradients keep the packed layout of q, k, v (views [1, heads, total, d])
    fmt = torch.contiguous_format if packed is None else torch.preserve_format
    dq, dk, dv = (torch.empty_like(t, memory_format=fmt) for t in (q, k, v))
    interpreted = interpreted_for(q.device)
    ieee = q.dtype == torch.float32 and not allow_tf32
    dims = dim_constexprs(d, v.shape[-1])
    meta = dict(**dims, CAUSAL=causal, PRECISION="ieee" if ieee else "tf32",
                UPCAST=interpreted and q.dtype == torch.bfloat16,
                WINDOW=tuple(window) != (-1, -1), SOFTCAP=softcap is not None,
                VARLEN=packed is not None, COUNT=count)
    # the variant's runtime arguments: window sides (2^30: unbounded) and the softcap, which
    # takes the scale before its tanh and gives log2-domain scores (as in the forward)
    left, right = (2**30 if w < 0 else int(w) for w in window)
    qk_scale, cap = (scale * LOG2E, 1.0) if softcap is None else (scale / softcap,
                                                                  softcap * LOG2E)
    tiles = _interpret_config()

    PREPROCESS.launch(lambda m: (B * H, triton.cdiv(n_q, m["BLOCK_M"])),
                      (o, do, delta, *o.stride(), *do.stride(), H, n_q),
                      dict(HEAD_DIM=dims["HEAD_DIM_V"], D_V=dims["D_V"], PAD_V=dims["PAD_V"]),
                      device=q.device, config=None if interpreted else PREPROCESS_CONFIG,
                      interpret_config=Config.of(BLOCK_M=INTERPRETER_BLOCK_M))
    # packed: programs per sequence of the longest lengths; batch strides 0 (rows from cu[b])
    batch, m_q, m_k = (B, n_q, n_k) if packed is None else (packed.batch, packed.max_q,
                                                            packed.max_k)
    strides = [t.stride() if packed is None else (0, *t.stride()[1:])
               for t in (q, k, v, do, dk, dv, dq)]
    cfg = {name: None if interpreted else backward_config(name, config_width(d, v.shape[-1]),
                                                          q.dtype)
           for name in ("dkdv", "dq")}
    if dkdv is not DKDV and not interpreted:
        cfg["dkdv"] = triton_hopper_backward.DKDV_TMA_CONFIGS[d]
    visits = {name: torch.zeros((batch * heads, triton.cdiv(n, _block(cfg[name], key)))
                                if count else (1,), dtype=torch.int32, device=q.device)
              for name, heads, n, key in (("dkdv", hkv, m_k, "BLOCK_N"),
                                          ("dq", H, m_q, "BLOCK_M"))}
    cu = (None, None) if packed is None else (packed.cu_q, packed.cu_k)
    lse_strides = (H * n_q, n_q) if packed is None else (0, lse.stride(-2))
    common = [x for st in strides[:4] for x in st]
    dkdv.launch(lambda m: (batch * hkv, triton.cdiv(m_k, m["BLOCK_N"])),
                (q, k, v, do, lse, delta, dk, dv, *common, *strides[4], *strides[5],
                 H, hkv, H // hkv, m_q, m_k, qk_scale, scale, left, right, cap,
                 *cu, visits["dkdv"], *lse_strides), meta,
                device=q.device, config=cfg["dkdv"], interpret_config=tiles)
    DQ.launch(lambda m: (batch * H, triton.cdiv(m_q, m["BLOCK_M"])),
              (q, k, v, do, lse, delta, dq, *common, *strides[6],
               H, H // hkv, m_q, m_k, qk_scale, scale, left, right, cap,
               *cu, visits["dq"], *lse_strides), meta,
              device=q.device, config=cfg["dq"], interpret_config=tiles)
    return (dq, dk, dv, visits) if count else (dq, dk, dv)


def _block(cfg: Config | None, key: str) -> int:
    """A launch's block size: the config's, or the interpreter tiles' (``cfg`` None)."""
    return (cfg or _interpret_config()).kwargs[key]


class _Attention(torch.autograd.Function):
    """Triton forward and backward as one autograd node; LSE is non-differentiable."""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale, allow_tf32):
        o, lse, _ = triton_forward.forward(q, k, v, causal=causal, scale=scale,
                                       allow_tf32=allow_tf32)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal, ctx.scale, ctx.allow_tf32 = causal, scale, allow_tf32
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, do, _dlse):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = backward(q, k, v, o, lse, do, ctx.causal, ctx.scale,
                              allow_tf32=ctx.allow_tf32)
        return dq, dk, dv, None, None, None


def attention_function(q, k, v, causal: bool = False, scale: float | None = None,
                       allow_tf32: bool = False):
    """``(o, lse)`` of the Triton forward, differentiable in q, k, v through
    :func:`backward` (``o.backward(do)`` fills q.grad, k.grad, v.grad)."""
    check_causal(causal)
    return _Attention.apply(q, k, v, causal, scale, allow_tf32)


def _check_configs_fit() -> None:
    for table, kernel in ((DKDV_CONFIGS, "dkdv"), (DQ_CONFIGS, "dq")):
        for (width, d), cfg in table.items():
            assert fits_shared_memory(smem_bytes(kernel, cfg, d, width)), (kernel, width, d)


_check_configs_fit()
