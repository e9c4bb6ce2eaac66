"""FlashAttention-2 style fused forward kernel in Triton.

One program computes one block of BLOCK_M query rows of one (batch, query head): it
streams BLOCK_N-key blocks of K and V through the (m, l) recurrence in fp32, in the log2
domain (``p = exp2(qk * qk_scale - m)``, ``qk_scale = scale * log2(e)``), divides by l
once at the end, writes O in q's dtype and the natural-log LSE in fp32. The names (m_new,
m_ref, alpha, p) are those of :mod:`flashbench.reference.streaming`. A scale <= 0 is made
positive on the host (q negated or zeroed), so masked -inf scores stay -inf. Key blocks
run in three phases (:mod:`flashbench.kernels.phases`); softcap, sinks and packed batches:
:mod:`flashbench.kernels.triton_variants`; the FP8 mode (constexpr ``FP8``):
:mod:`flashbench.kernels.triton_fp8`; interpreted bf16 launches round P and O themselves
(constexpr ``ROUND``). Contract, grid, where it runs (:mod:`flashbench.kernels.launch`),
configs and the interpreter's defects: docs/gpu.md ("The Triton kernel"); the FP8 mode:
docs/fp8.md ("The Triton FP8 forward"); the phases: docs/variants.md.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from flashbench.inputs.validation import check_causal, check_scale
from flashbench.kernels import configs as _configs
from flashbench.kernels.configs import current_config, default_config
from flashbench.kernels.headdim import HEAD_DIMS, config_width, dim_constexprs, validate_head_dims
from flashbench.kernels.launch import Config, TritonKernel, default_interpreted, interpreted_for
from flashbench.kernels.phases import key_mask, masked_load, merge_sink, variant_phases
from flashbench.kernels.rounding import accumulate_pv, round_bf16, round_e4m3
from flashbench.kernels.softcap import tanh
from flashbench.kernels.validate import validate_heads, validate_tensors

__all__ = ["forward", "launch", "default_config", "current_config",
           "FORWARD", "HEAD_DIMS", "DTYPES", "INTERPRET"]

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
NO_VARIANT = dict.fromkeys(("WINDOW", "SOFTCAP", "HAS_SINKS", "VARLEN", "COUNT"), False)
LOG2E = 1.4426950408889634  # 1 / ln 2 (the kernel multiplies by ln 2 = 0.693... at the end)
# True when the kernel runs interpreted here by default (no CUDA GPU): read once at
# import, without side effects; each call still decides from its tensors' device.
INTERPRET = default_interpreted()
# Interpreter tiles; tests lower them (and make them unequal) to cross more block edges.
INTERPRETER_BLOCK_M = _configs.INTERPRETER_CONFIG.kwargs["BLOCK_M"]
INTERPRETER_BLOCK_N = _configs.INTERPRETER_CONFIG.kwargs["BLOCK_N"]


@triton.jit
def _attn_fwd_blocks(acc, l_i, m_i, visits, q, k_base, v_base, stride_kn, stride_kd,
                     stride_vn, stride_vd, offs_m, offs_d, lo, hi, n_k, causal_offset,
                     qk_scale, kd_base, vd_base, stride_kd_n, left, right, cap, offs_dv,
                     BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
                     PRECISION: tl.constexpr, UPCAST: tl.constexpr, FP8: tl.constexpr,
                     ROUND: tl.constexpr, WINDOW: tl.constexpr, SOFTCAP: tl.constexpr,
                     D_QK: tl.constexpr, D_V: tl.constexpr, PAD_QK: tl.constexpr,
                     PAD_V: tl.constexpr):
    """Stream key blocks [lo, hi) into (acc, l_i, m_i); mask keys only when MASKED, head
    columns past d (dv) only when PAD_QK (PAD_V); ``visits`` counts the blocks."""
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in range(lo, hi, BLOCK_N):
        visits += 1
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + offs_n
        k_ptrs = k_base + cols[None, :] * stride_kn + offs_d[:, None] * stride_kd
        v_ptrs = v_base + cols[:, None] * stride_vn + offs_dv[None, :] * stride_vd
        # -- S = Q K^T (raw scores; the scale is folded into the exponent) --
        k = masked_load(k_ptrs, cols[None, :] < n_k, offs_d[:, None] < D_QK, MASKED, PAD_QK)
        if UPCAST:
            qk = tl.dot(q.to(tl.float32), k.to(tl.float32), input_precision="ieee")
        else:
            qk = tl.dot(q, k, input_precision=PRECISION)
        if FP8:  # this key block's descale joins the folded score scale
            s_scale = qk_scale * tl.load(kd_base + (start_n // BLOCK_N) * stride_kd_n)
        else:
            s_scale = qk_scale
        if SOFTCAP:  # cap * tanh(qk * scale / c), cap = c log2(e): log2-domain capped scores
            qk = cap * tanh(qk * s_scale)
            s_scale = 1.0
        if MASKED:
            keep = key_mask(offs_m[:, None], cols[None, :], n_k, causal_offset, left, right,
                            CAUSAL, WINDOW)
            qk = tl.where(keep, qk, float("-inf"))
        # -- update m_i and l_i (log2 domain: m is max(qk) * s_scale) --
        m_new = tl.maximum(m_i, tl.max(qk, 1) * s_scale)
        m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows that saw no key yet
        if FP8:  # FlashAttention-3's Max_offset 8: p = 256 P, in [0, 256]
            p = tl.math.exp2(qk * s_scale - (m_ref[:, None] - 8.0))
        else:
            p = tl.math.exp2(qk * s_scale - m_ref[:, None])  # one fused multiply-add per score
        alpha = tl.math.exp2(m_i - m_ref)
        l_i = l_i * alpha + tl.sum(p, 1)
        # -- update the output accumulator --
        acc = acc * alpha[:, None]
        v = masked_load(v_ptrs, cols[:, None] < n_k, offs_dv[None, :] < D_V, MASKED, PAD_V)
        if FP8:  # P rounded to e4m3; this value block's descale applied to its P V tile
            if ROUND:
                p = round_e4m3(p)
            pv = tl.dot(p.to(v.dtype), v)
            acc += pv * tl.load(vd_base + (start_n // BLOCK_N) * stride_kd_n)
        else:
            acc = accumulate_pv(acc, p, v, PRECISION, UPCAST, ROUND)
        m_i = m_new
    return acc, l_i, m_i, visits


def _attn_fwd(Q, K, V, O, LSE, QD, KD, VD,
              stride_qb, stride_qh, stride_qm, stride_qd,
              stride_kb, stride_kh, stride_kn, stride_kd,
              stride_vb, stride_vh, stride_vn, stride_vd,
              stride_ob, stride_oh, stride_om, stride_od,
              stride_qd_bh, stride_qd_m, stride_kd_bh, stride_kd_n,
              H, GROUP, N_Q, N_K, qk_scale,
              SINKS, CU_Q, CU_K, VISITS, LEFT, RIGHT, CAP, stride_lb, stride_lh,
              HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
              UPCAST: tl.constexpr, FP8: tl.constexpr, ROUND: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, WINDOW: tl.constexpr,
              SOFTCAP: tl.constexpr, HAS_SINKS: tl.constexpr, VARLEN: tl.constexpr,
              COUNT: tl.constexpr, HEAD_DIM_V: tl.constexpr, D_QK: tl.constexpr,
              D_V: tl.constexpr, PAD_QK: tl.constexpr, PAD_V: tl.constexpr):
    off_bh = tl.program_id(0)
    if CAUSAL:  # the last query blocks see the most keys: launch them first
        start_m = tl.num_programs(1) - 1 - tl.program_id(1)
    else:
        start_m = tl.program_id(1)
    off_b = (off_bh // H).to(tl.int64)
    off_h = off_bh % H
    off_hkv = (off_h // GROUP).to(tl.int64)  # grouped-query: query head h reads kv head h // GROUP
    off_h = off_h.to(tl.int64)
    offs_m = tl.multiple_of(start_m * BLOCK_M, BLOCK_M) + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    offs_dv = tl.arange(0, HEAD_DIM_V)  # d and dv: padded to compiled widths (headdim)
    q_start = 0
    k_start = 0
    if VARLEN:  # packed sequences: batch b is rows cu[b]..cu[b+1]-1 (batch strides are 0)
        q_start = tl.load(CU_Q + off_b).to(tl.int64)
        k_start = tl.load(CU_K + off_b).to(tl.int64)
        N_Q = (tl.load(CU_Q + off_b + 1) - q_start).to(tl.int32)
        N_K = (tl.load(CU_K + off_b + 1) - k_start).to(tl.int32)

    q_ptrs = (Q + off_b * stride_qb + off_h * stride_qh + q_start * stride_qm
              + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd)
    q = masked_load(q_ptrs, offs_m[:, None] < N_Q, offs_d[None, :] < D_QK, True, PAD_QK)
    k_base = K + off_b * stride_kb + off_hkv * stride_kh + k_start * stride_kn
    v_base = V + off_b * stride_vb + off_hkv * stride_vh + k_start * stride_vn
    if FP8:  # descales: per (batch, head) and block of rows; strides 0 where shared
        qk_scale = qk_scale * tl.load(QD + off_bh.to(tl.int64) * stride_qd_bh
                                      + start_m * stride_qd_m)
        off_bkv = (off_b * (H // GROUP) + off_hkv) * stride_kd_bh
        kd_base = KD + off_bkv
        vd_base = VD + off_bkv
    else:
        kd_base = KD
        vd_base = VD

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.full([BLOCK_M], 0.0, dtype=tl.float32)
    acc = tl.full([BLOCK_M, HEAD_DIM_V], 0.0, dtype=tl.float32)

    # Phase 1 [lo, a_end): blocks a window's left edge cuts (masked; empty without a window).
    # Phase 2 [a_end, full): blocks inside Nk that every row of this query block sees.
    # Phase 3 [full, hi): blocks on the diagonal, a window's right edge or Nk's ragged tail.
    causal_offset, lo, a_end, full, hi = variant_phases(start_m, N_Q, N_K, LEFT, RIGHT,
                                                        BLOCK_M, BLOCK_N, CAUSAL, WINDOW)
    if VARLEN:  # a query block past its sequence's end visits nothing
        hi = tl.where(start_m * BLOCK_M < N_Q, hi, 0)
        a_end = tl.minimum(a_end, hi)  # a window's left-edge phase too
        full = tl.minimum(full, hi)
    visits = 0
    acc, l_i, m_i, visits = _attn_fwd_blocks(
        acc, l_i, m_i, visits, q, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
        offs_m, offs_d, lo, a_end, N_K, causal_offset, qk_scale, kd_base, vd_base,
        stride_kd_n, LEFT, RIGHT, CAP, offs_dv, BLOCK_N, True, CAUSAL, PRECISION, UPCAST, FP8,
        ROUND, WINDOW, SOFTCAP, D_QK, D_V, PAD_QK, PAD_V)
    acc, l_i, m_i, visits = _attn_fwd_blocks(
        acc, l_i, m_i, visits, q, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
        offs_m, offs_d, a_end, full, N_K, causal_offset, qk_scale, kd_base, vd_base,
        stride_kd_n, LEFT, RIGHT, CAP, offs_dv, BLOCK_N, False, CAUSAL, PRECISION, UPCAST, FP8,
        ROUND, WINDOW, SOFTCAP, D_QK, D_V, PAD_QK, PAD_V)
    acc, l_i, m_i, visits = _attn_fwd_blocks(
        acc, l_i, m_i, visits, q, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
        offs_m, offs_d, tl.maximum(full, a_end), hi, N_K, causal_offset, qk_scale, kd_base,
        vd_base, stride_kd_n, LEFT, RIGHT, CAP, offs_dv, BLOCK_N, True, CAUSAL, PRECISION,
        UPCAST, FP8, ROUND, WINDOW, SOFTCAP, D_QK, D_V, PAD_QK, PAD_V)
    if COUNT:
        tl.store(VISITS + off_bh.to(tl.int64) * tl.num_programs(1) + start_m, visits)
    if HAS_SINKS:  # the sink joins (m, l) as a key with no value (log2 domain)
        acc, l_i, m_i = merge_sink(acc, l_i, m_i, tl.load(SINKS + off_h).to(tl.float32))

    # -- epilogue: one division by l; LSE back to natural log --
    blind = l_i == 0.0  # rows that saw no key; a NaN l (non-finite input) stays NaN
    l_safe = tl.where(blind, 1.0, l_i)
    acc = acc / l_safe[:, None]
    if FP8:  # l summed 256 P: the factor cancels in O, and comes off the LSE here
        m_i = m_i - 8.0
    lse = tl.where(blind, float("-inf"), (m_i + tl.math.log2(l_safe)) * 0.6931471805599453)
    if ROUND:  # interpreted bf16 output: round here, so that the store's conversion is exact
        acc = round_bf16(acc)

    row_ok = offs_m < N_Q
    o_ptrs = (O + off_b * stride_ob + off_h * stride_oh + q_start * stride_om
              + offs_m[:, None] * stride_om + offs_dv[None, :] * stride_od)
    if PAD_V:
        tl.store(o_ptrs, acc.to(O.dtype.element_ty), mask=row_ok[:, None] & (offs_dv < D_V))
    else:
        tl.store(o_ptrs, acc.to(O.dtype.element_ty), mask=row_ok[:, None])
    tl.store(LSE + off_b * stride_lb + off_h * stride_lh + q_start + offs_m, lse, mask=row_ok)


FORWARD = TritonKernel(
    _attn_fwd, name="attn_fwd",
    # sizes vary per shape; fp8 descales: any layout (strides 0 where shared), any address
    do_not_specialize=("H", "GROUP", "N_Q", "N_K", "QD", "KD", "VD", "stride_qd_bh",
                       "stride_qd_m", "stride_kd_bh", "stride_kd_n", "SINKS", "CU_Q", "CU_K",
                       "VISITS", "LEFT", "RIGHT", "CAP", "stride_lb", "stride_lh"),
    autotune_key=("N_Q", "N_K", "HEAD_DIM", "D_QK", "D_V", "CAUSAL", "PRECISION", "FP8", "WINDOW",
                  "SOFTCAP", "HAS_SINKS", "VARLEN"),
    prune=_configs.prune_forward,
)


def _validate(q, k, v, causal, scale, allow_tf32) -> float:
    validate_heads(q, k, v)
    validate_tensors(q, k, v, dtypes=DTYPES, gqa=True, causal=causal)
    validate_head_dims(q.shape[-1], v.shape[-1], "the Triton forward")
    if allow_tf32 and q.dtype != torch.float32:
        raise ValueError(f"allow_tf32 applies to float32 inputs only, got {q.dtype}")
    if q.device.type not in ("cpu", "cuda", "meta"):
        raise ValueError(f"q, k, v must be CUDA tensors (compiled kernel) or CPU tensors "
                         f"(Triton interpreter), got {q.device}")
    return check_scale(scale, q.shape[-1])


def forward(q, k, v, causal: bool = False, scale: float | None = None, *,
            allow_tf32: bool = False, config: Config | str | None = None, variant=None,
            kernel: str | None = None):
    """Launch the forward kernel: ``(o, lse, config)``. For reuse by other kernels' code
    (the backward needs o and lse) and by the GPU script (the config chosen).

    ``config``: None autotunes 16-bit operands on a GPU (fp32: its fixed config), unless
    :func:`default_config` says otherwise;
    ``"fixed"`` takes the fixed config (:func:`flashbench.kernels.configs.fixed_config`);
    a :class:`Config` is launched as given (also under the interpreter, where None
    means the interpreter tiles ``INTERPRETER_BLOCK_M`` x ``INTERPRETER_BLOCK_N``).
    Returns the config the compiled kernel ran with (interpreter: the tiles).
    ``variant``: see :func:`launch` (:mod:`flashbench.kernels.triton_variants` passes it).
    ``kernel``: None (this kernel) or a Hopper variant's name
    (:data:`flashbench.kernels.triton_hopper.VARIANTS`), which takes no ``allow_tf32``/``variant``.
    """
    if kernel is not None:
        from flashbench.kernels import triton_hopper

        if allow_tf32 or variant is not None:
            raise ValueError(f"kernel={kernel!r} takes no allow_tf32 or variant (fp16/bf16, "
                             f"causal or full attention only)")
        return triton_hopper.forward(q, k, v, causal, scale, kernel=kernel, config=config)
    scale = _validate(q, k, v, causal, scale, allow_tf32)
    if config is None:
        config = current_config()
    if isinstance(config, str) and config != "fixed":
        raise ValueError(f"config must be None, 'fixed' or a Config, got {config!r}")
    if scale <= 0:  # keep the kernel's folded scale positive (see module docstring)
        q = torch.zeros_like(q) if scale == 0 else -q
        scale = 1.0 if scale == 0 else -scale
    if config == "fixed" or (config is None and q.dtype == torch.float32
                             and not interpreted_for(q.device)):
        config = _configs.fixed_config(config_width(q.shape[-1], v.shape[-1]), q.dtype)
    o = q.new_empty((*q.shape[:-1], v.shape[-1]))  # [B, H, Nq, dv], contiguous
    # IEEE fp32 dots where fp32 accuracy is promised; 16-bit operands take the default
    # ("tf32", which only affects fp32 operands) so their tensor-core path is untouched.
    ieee = q.dtype == torch.float32 and not allow_tf32
    lse, used = launch(q, k, v, o, scale, causal, config, precision="ieee" if ieee else "tf32",
                       candidates=_configs.candidates(config_width(q.shape[-1], v.shape[-1]),
                                                      q.dtype),
                       tiles=(INTERPRETER_BLOCK_M, INTERPRETER_BLOCK_N), variant=variant)
    return o, lse, used


def launch(q, k, v, o, scale: float, causal: bool, config: Config | None, *,
           precision: str = "tf32", descales=None, candidates=(), tiles=(128, 128),
           variant=None):
    """Launch :data:`FORWARD` on checked tensors, writing ``o``; returns ``(lse, config)``.

    ``scale`` > 0 (the callers turn other scales into that). ``config``: a
    :class:`Config`, or None to autotune over ``candidates`` (pruned); interpreted
    launches without a config take ``tiles`` (BLOCK_M, BLOCK_N). ``descales``: None,
    or for fp8 operands ``(q_descale, k_descale, v_descale)``, fp32 tensors indexed as
    ``qd[bh * s_bh + m_block * s_m]`` (bh = b * H + h) and
    ``kd[bkv * s_bh + n_block * s_n]`` (bkv = b * Hkv + hkv) with the strides returned
    by :func:`flashbench.kernels.triton_fp8.descale_strides` (0 where a scale is shared).
    ``variant``: None, or the window, softcap, sinks and packed-batch arguments
    :func:`flashbench.kernels.triton_variants.kernel_variant` builds (a
    :class:`~flashbench.kernels.triton_variants.KernelVariant`).
    """
    if config is not None and not isinstance(config, Config):
        raise ValueError(f"config must be None, 'fixed' or a Config, got {config!r}")
    B, H, n_q, d = q.shape
    n_k = k.shape[-2]
    fp8 = descales is not None
    if fp8:
        (qd, (sq_bh, sq_m)), (kd, (sk_bh, sk_n)), (vd, _) = descales
    else:
        qd = kd = vd = None
        sq_bh = sq_m = sk_bh = sk_n = 0
    if variant is None:
        lse = torch.empty((B, H, n_q), dtype=torch.float32, device=q.device)
        extra, flags = (None, None, None, None, 0, 0, 1.0, H * n_q, n_q), NO_VARIANT
    else:
        lse, extra, flags = variant.lse, variant.args(scale), variant.constexprs()
        B, n_q, n_k = variant.batch, variant.max_q, variant.max_k
        scale = variant.score_scale(scale)
    strides = [t.stride() if variant is None else variant.strides(t) for t in (q, k, v, o)]
    args = (q, k, v, o, lse, qd, kd, vd, *(x for st in strides for x in st),
            sq_bh, sq_m, sk_bh, sk_n, H, H // k.shape[1], n_q, n_k, scale * LOG2E, *extra)
    interpreted = interpreted_for(q.device)
    # Interpreted launches only: bf16 dot operands upcast (triton issue 11584); P and a
    # bf16 output rounded to nearest even in fp32 before their (wrong) conversions.
    constexprs = dict(**dim_constexprs(d, v.shape[-1], 32 if fp8 else 16),
                      CAUSAL=check_causal(causal), PRECISION=precision,
                      UPCAST=interpreted and q.dtype == torch.bfloat16, FP8=fp8,
                      ROUND=interpreted and (fp8 or q.dtype == torch.bfloat16), **flags)

    def grid(meta):
        return (B * H, triton.cdiv(n_q, meta["BLOCK_M"]))

    used = FORWARD.launch(grid, args, constexprs, device=q.device, config=config,
                          configs=None if config is not None else tuple(candidates),
                          interpret_config=Config.of(num_warps=1, num_stages=1,
                                                     BLOCK_M=tiles[0], BLOCK_N=tiles[1]))
    return lse, used
