"""FlashAttention-3 style FP8 forward on flashbench's Triton kernel: the host side.

The forward kernel of :mod:`flashbench.kernels.triton_forward` in its FP8 mode (the constexpr
``FP8``: one kernel, not a copy) rounds where :func:`flashbench.numerics.fp8.flash_fp8`
does: e4m3 q, k, v with fp32 descales (per tensor, per (batch, head) or per tile of rows),
fp8 dots with fp32 accumulation, P rounded to e4m3 as 256 P, O written in bf16.

- :func:`triton_attention_fp8` takes fp16 / bf16 / fp32 / fp64 tensors and quantises them
  as the model does (:func:`quantize`, bit for bit; ``quant="block"``, ``incoherent=True``).
- :func:`forward_fp8` takes e4m3 tensors and their descales (FlashAttention-3's
  ``flash_attn_func`` with fp8 inputs); what a timing measures.

V goes in key-major (:func:`key_major`: Hopper's fp8 wgmma takes K-major operands only).
More, and the interpreter's rounding: docs/fp8.md ("The Triton FP8 forward").
"""

from __future__ import annotations

import torch

from flashbench.inputs.validation import check_scale
from flashbench.kernels import configs as _configs
from flashbench.kernels import triton_forward
from flashbench.kernels.headdim import HEAD_DIMS as _HEAD_DIMS
from flashbench.kernels.headdim import config_width, validate_head_dims
from flashbench.kernels.launch import Config, interpreted_for
from flashbench.kernels.rounding import E4M3_MAX
from flashbench.kernels.validate import validate_heads, validate_tensors

__all__ = ["triton_attention_fp8", "forward_fp8", "quantize", "key_major", "tiles",
           "HEAD_DIMS", "INPUT_DTYPES", "FP8_DTYPE", "QUANT", "E4M3_MAX",
           "INTERPRETER_BLOCK_M", "INTERPRETER_BLOCK_N"]

FP8_DTYPE = torch.float8_e4m3fn
HEAD_DIMS = _HEAD_DIMS  # padded to a width >= 32: fp8 wgmma reduces over 32 elements
INPUT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
QUANT = ("block", "tensor")
# Interpreter tiles: those of the fp8 flash model's default block (64 keys, block_q = 64),
# so that `flashbench check --dtype fp8` runs kernel and model on the same blocks.
INTERPRETER_BLOCK_M = 64
INTERPRETER_BLOCK_N = 64


def quantize(x: torch.Tensor, block: int | None = None):
    """``x`` [..., N, d] to e4m3 with FlashAttention-3's scales, as
    :func:`flashbench.numerics.fp8.quantize` does (bit for bit): per group (the whole
    tensor, or ``block`` rows of dim -2 per leading index) ``s = 448 / amax`` in fp32
    (1 for an all-zero group, at most fp32's max), ``x8 = e4m3(clip(x * s))``
    nearest-even, saturating.

    Returns ``(x8, descale)``: x8 ``float8_e4m3fn`` with x's shape; descale fp32, 0-d
    (``block`` None) or ``[..., ceil(N / block)]``; ``x8 * descale`` approximates x.
    """
    x32 = x.float()
    if block is None:
        amax = x32.abs().amax() if x32.numel() else x32.new_zeros(())
    else:
        if isinstance(block, bool) or not isinstance(block, int) or block < 1:
            raise ValueError(f"block must be None or an int >= 1, got {block!r}")
        rows = x32.abs().amax(dim=-1)  # [..., N]
        n, nb = rows.shape[-1], -(-rows.shape[-1] // block)
        rows = torch.nn.functional.pad(rows, (0, nb * block - n))
        amax = rows.view(*rows.shape[:-1], nb, block).amax(dim=-1)  # [..., nb]
    big = torch.finfo(torch.float32).max
    # tensor / tensor: one IEEE division, as NumPy's (python_scalar / tensor is computed
    # as a reciprocal times the scalar in torch: two roundings)
    scale = torch.where(amax > 0, torch.clamp(torch.full_like(amax, E4M3_MAX) / amax, max=big),
                        torch.ones_like(amax))
    scale = torch.where(torch.isfinite(amax), scale, torch.full_like(amax, float("nan")))
    descale = torch.ones_like(scale) / scale
    rows_scale = scale if block is None else (
        scale.repeat_interleave(block, dim=-1)[..., : x32.shape[-2], None])
    x8 = torch.clamp(x32 * rows_scale, -E4M3_MAX, E4M3_MAX).to(FP8_DTYPE)
    return x8, descale


def key_major(v8: torch.Tensor) -> torch.Tensor:
    """``v8`` [..., Nk, d] as a view with the keys contiguous (``stride(-2) == 1``) over a
    [..., d, Nk'] buffer, Nk' = Nk rounded up to 16: the layout of the second operand of
    ``P V`` that Hopper's fp8 wgmma needs (module docstring). Returned as is when it
    already has that layout."""
    nk = v8.shape[-2]
    if v8.stride(-2) == 1 and v8.stride(-1) % 16 == 0:
        return v8
    pad = -(-nk // 16) * 16
    buf = torch.empty(*v8.shape[:-2], v8.shape[-1], pad, dtype=v8.dtype, device=v8.device)
    out = buf[..., :nk].transpose(-1, -2)
    out.copy_(v8)
    return out


def _resolve(config, d: int, device, block_quant: bool) -> Config | None:
    """The config of an fp8 launch: a Config as given; "fixed" (or a block-quantised
    launch, whose blocks must be known before the kernel runs): the fixed fp8 config
    on a GPU, the interpreter tiles on CPU; None: autotune (GPU) / interpreter tiles."""
    if config is None:
        config = _configs.current_config()
    if isinstance(config, str) and config != "fixed":
        raise ValueError(f"config must be None, 'fixed' or a Config, got {config!r}")
    if isinstance(config, Config):
        return config
    if interpreted_for(device):
        return Config.of(num_warps=1, num_stages=1, BLOCK_M=INTERPRETER_BLOCK_M,
                         BLOCK_N=INTERPRETER_BLOCK_N)
    if config == "fixed" or block_quant:
        return _configs.fixed_config(d, FP8_DTYPE)
    return None


def tiles(d: int, device, config=None) -> tuple[int, int] | None:
    """(BLOCK_M, BLOCK_N) a block-quantised fp8 launch on ``device`` uses (its quantiser's
    blocks): the given config's, else the fixed fp8 config's (GPU) or the interpreter's."""
    cfg = _resolve(config, config_width(d, least=32), torch.device(device), True)
    return cfg.kwargs["BLOCK_M"], cfg.kwargs["BLOCK_N"]


def _validate_fp8(q8, k8, v8, causal) -> None:
    for name, t in (("q8", q8), ("k8", k8), ("v8", v8)):
        if not isinstance(t, torch.Tensor) or t.dtype != FP8_DTYPE:
            got = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
            raise TypeError(f"{name} must be a {FP8_DTYPE} tensor [B, H, N, d], got {got}")
    validate_heads(q8, k8, v8)
    validate_tensors(q8, k8, v8, dtypes=(FP8_DTYPE,), gqa=True, causal=causal)
    validate_head_dims(q8.shape[-1], v8.shape[-1], "the Triton FP8 forward")
    if q8.device.type not in ("cpu", "cuda", "meta"):
        raise ValueError(f"q8, k8, v8 must be CUDA tensors (compiled kernel) or CPU tensors "
                         f"(Triton interpreter), got {q8.device}")


def _descale(name: str, t, batch: int, heads: int, n: int, block: int | None, device):
    """(contiguous fp32 descale, (stride per batch x head, stride per block)) for a descale
    given per tensor (one element), per head [B, heads] or per block [B, heads, nb]."""
    if not isinstance(t, torch.Tensor) or t.dtype != torch.float32:
        got = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
        raise TypeError(f"{name} must be a float32 tensor, got {got}")
    if t.device != device:
        raise ValueError(f"{name} must be on {device} like the fp8 tensors, got {t.device}")
    t = t.contiguous()
    if t.numel() == 1:
        return t.reshape(()), (0, 0)
    if tuple(t.shape) == (batch, heads):
        return t, (1, 0)
    nb = None if block is None else -(-n // block)
    if block is not None and tuple(t.shape) == (batch, heads, nb):
        return t, (nb, 1)
    per_block = ("[B, heads, ceil(N / block)] (per block: needs the launch's tiles, give "
                 "config=)" if block is None else f"{(batch, heads, nb)} per block of {block}")
    raise ValueError(f"{name} must hold one descale (per tensor), shape {(batch, heads)} "
                     f"(per head) or {per_block}; got shape {tuple(t.shape)}")


def _negated(q8: torch.Tensor) -> torch.Tensor:
    """-q8, exactly (the sign bit flipped)."""
    return (q8.view(torch.uint8) ^ 0x80).view(FP8_DTYPE)


def forward_fp8(q8, k8, v8, q_descale, k_descale, v_descale, causal: bool = False,
                scale: float | None = None, *, config: Config | str | None = None):
    """The FP8 forward on e4m3 tensors: ``(o bf16, lse fp32, config)``.

    Args:
        q8 [B, H, Nq, d], k8, v8 [B, Hkv, Nk, d]: ``torch.float8_e4m3fn``, Hkv dividing H,
            d, dv in :data:`HEAD_DIMS` (multiples of 8 to 256); v8 ideally
            :func:`key_major` (else copied to it).
        q_descale, k_descale, v_descale: fp32 tensors: one element (per tensor),
            [B, H] / [B, Hkv] (per head), or [B, H, ceil(Nq / BLOCK_M)] /
            [B, Hkv, ceil(Nk / BLOCK_N)] (per block of the launch's tiles,
            :func:`tiles`; per-block descales need a known config, so they never
            autotune). The score of a query in block i and a key in block j is
            ``(q8 k8^T) * scale * qd[i] * kd[j]``; P V tiles are scaled by ``vd[j]``.
        causal, scale: as :func:`flashbench.triton_attention`.
        config: a Config, "fixed", or None (GPU: autotune over the fp8 candidates
            unless a descale is per block; CPU: the interpreter tiles).
    """
    _validate_fp8(q8, k8, v8, causal)
    scale = check_scale(scale, q8.shape[-1])
    B, H, n_q, d = q8.shape
    hkv, n_k = k8.shape[1], k8.shape[2]
    per_block = any(isinstance(t, torch.Tensor) and t.dim() == 3
                    for t in (q_descale, k_descale, v_descale))
    width = config_width(d, v8.shape[-1], 32)
    cfg = _resolve(config, width, q8.device, per_block)
    bm, bn = (None, None) if cfg is None else (cfg.kwargs["BLOCK_M"], cfg.kwargs["BLOCK_N"])
    descales = (_descale("q_descale", q_descale, B, H, n_q, bm, q8.device),
                _descale("k_descale", k_descale, B, hkv, n_k, bn, q8.device),
                _descale("v_descale", v_descale, B, hkv, n_k, bn, q8.device))
    if descales[1][1] != descales[2][1]:
        raise ValueError("k_descale and v_descale must have the same layout (per tensor, per "
                         "head or per block)")
    if scale <= 0:  # keep the folded scale positive, as the 16-bit forward does
        q8 = torch.zeros_like(q8) if scale == 0 else _negated(q8)
        scale = 1.0 if scale == 0 else -scale
    o = torch.empty((B, H, n_q, v8.shape[-1]), dtype=torch.bfloat16, device=q8.device)
    lse, used = triton_forward.launch(
        q8, k8, key_major(v8), o, scale, causal, cfg, descales=descales,
        candidates=_configs.candidates(width, FP8_DTYPE),
        tiles=(INTERPRETER_BLOCK_M, INTERPRETER_BLOCK_N))
    return o, lse, used


def _validate_inputs(q, k, v, causal) -> None:
    validate_heads(q, k, v)
    validate_tensors(q, k, v, dtypes=INPUT_DTYPES, gqa=True, causal=causal)
    validate_head_dims(q.shape[-1], v.shape[-1], "the Triton FP8 forward")


def triton_attention_fp8(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                         causal: bool = False, scale: float | None = None, *,
                         quant: str = "block", incoherent: bool = True, seed: int = 0,
                         config: Config | str | None = None):
    """FlashAttention-3 style FP8 attention forward of higher-precision inputs.

    Quantises q, k, v as :func:`flashbench.numerics.fp8.flash_fp8` does with the same
    ``quant``, ``incoherent`` and ``seed`` (the model's ``block_q`` / ``block`` are the
    launch's BLOCK_M / BLOCK_N, :func:`tiles`), then runs :func:`forward_fp8`.

    Args:
        q [B, H, Nq, d], k, v [B, Hkv, Nk, d]: float16, bfloat16, float32 or float64
            (one dtype), Hkv dividing H, d, dv in :data:`HEAD_DIMS` (multiples of 8 to 256).
        quant: "block" (one scale per tile of rows, per batch and head; runs the fixed
            fp8 config on a GPU) or "tensor" (one scale per tensor; autotuned).
        incoherent: multiply q and k by the model's random orthogonal matrix
            (:func:`flashbench.inputs.incoherent.incoherence_matrix` (d, ``seed``)) in
            float64 before quantising (FlashAttention-3's incoherent processing).
        config: as :func:`forward_fp8`.

    Returns:
        (o, lse): o [B, H, Nq, d] bfloat16, lse [B, H, Nq] float32; not differentiable.
    """
    _validate_inputs(q, k, v, causal)
    if quant not in QUANT:
        raise ValueError(f"quant must be one of {list(QUANT)}, got {quant!r}")
    if not isinstance(incoherent, bool):
        raise TypeError(f"incoherent must be True or False, got {incoherent!r}")
    scale = check_scale(scale, q.shape[-1])
    if scale <= 0:  # as the model: the scale multiplies q k^T of the quantised values
        q = torch.zeros_like(q) if scale == 0 else -q
        scale = 1.0 if scale == 0 else -scale
    if incoherent:
        from flashbench.inputs.incoherent import incoherence_matrix

        m = torch.from_numpy(incoherence_matrix(q.shape[-1], seed)).to(q.device)
        q, k = q.double() @ m, k.double() @ m
    cfg = _resolve(config, config_width(q.shape[-1], v.shape[-1], 32), q.device,
                   quant == "block")
    bm, bn = (None, None) if quant == "tensor" else (cfg.kwargs["BLOCK_M"],
                                                     cfg.kwargs["BLOCK_N"])
    (q8, qd), (k8, kd), (v8, vd) = (quantize(q, bm), quantize(k, bn), quantize(v, bn))
    o, lse, _ = forward_fp8(q8, k8, key_major(v8), qd, kd, vd, causal, scale,
                            config=cfg)
    return o, lse

