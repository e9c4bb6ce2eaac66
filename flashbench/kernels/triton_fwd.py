"""FlashAttention-2 style fused forward kernel in Triton.

One program computes one block of BLOCK_M query rows of one (batch, head): it
streams BLOCK_N-key blocks of K and V through the (m, l) recurrence in fp32, in the
log2 domain (``log2(e)`` is folded into the softmax scale so every exponential is an
``exp2``), divides by l once at the end, writes O in q's dtype and the natural-log
LSE in fp32.

Key blocks are visited in two phases:

1. blocks every row of the query block sees whole: no mask at all;
2. blocks that straddle the causal diagonal or hold the ragged tail of Nk: masked.

With ``causal=True`` (bottom-right aligned: query i sees key j iff
``j <= i + Nk - Nq``) blocks wholly above the diagonal are never loaded. Rows that
see no key keep ``l = 0`` and finish with O = 0 and LSE = -inf.

Where it runs. On a machine with a CUDA GPU the kernel is compiled and autotuned
(BLOCK_M, BLOCK_N, warps, stages) per (Nq, Nk, d, causal, dtype). Without one,
importing this module sets ``TRITON_INTERPRET=1``, so Triton's interpreter runs the
same kernel on CPU tensors with numpy, with fixed INTERPRETER_BLOCK x INTERPRETER_BLOCK
tiles: correct, and far too slow to time. The interpreter's ``tl.dot`` on bfloat16
operands is broken (triton issue 11584), so in interpreter mode only bf16 operands
are upcast to fp32 before each dot: bf16 x bf16 products are exact in fp32 and the
dot accumulates in fp32 either way, so the result is the one the GPU computes.
"""

from __future__ import annotations

import math
import os

import torch

INTERPRET = os.environ.get("TRITON_INTERPRET", "") == "1" or not torch.cuda.is_available()
if INTERPRET:  # must be set before the kernels below are decorated
    os.environ["TRITON_INTERPRET"] = "1"

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from flashbench.kernels.checks import check_tensors  # noqa: E402

HEAD_DIMS = (16, 32, 64, 128, 256)
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
LOG2E = 1.4426950408889634
INTERPRETER_BLOCK = 128  # tests may lower it to cross more block edges


@triton.jit
def _attn_fwd_blocks(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_kd,
                     stride_vn, stride_vd, offs_m, offs_d, lo, hi, n_k, causal_offset,
                     qk_scale, BLOCK_N: tl.constexpr, MASKED: tl.constexpr,
                     CAUSAL: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    """Stream key blocks [lo, hi) into (acc, l_i, m_i); mask keys only when MASKED."""
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        k_ptrs = k_base + cols[None, :] * stride_kn + offs_d[:, None] * stride_kd
        v_ptrs = v_base + cols[:, None] * stride_vn + offs_d[None, :] * stride_vd
        if MASKED:
            k = tl.load(k_ptrs, mask=cols[None, :] < n_k, other=0.0)
            v = tl.load(v_ptrs, mask=cols[:, None] < n_k, other=0.0)
        else:
            k = tl.load(k_ptrs)
            v = tl.load(v_ptrs)
        if UPCAST:
            qk = tl.dot(q.to(tl.float32), k.to(tl.float32), input_precision="ieee")
        else:
            qk = tl.dot(q, k, input_precision=PRECISION)
        qk = qk * qk_scale  # log2 domain
        if MASKED:
            keep = cols[None, :] < n_k
            if CAUSAL:
                keep = keep & (cols[None, :] <= offs_m[:, None] + causal_offset)
            qk = tl.where(keep, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows that saw no key yet
        p = tl.math.exp2(qk - m_ref[:, None])
        alpha = tl.math.exp2(m_i - m_ref)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        if UPCAST:
            acc = tl.dot(p.to(v.dtype).to(tl.float32), v.to(tl.float32), acc,
                         input_precision="ieee")
        else:
            acc = tl.dot(p.to(v.dtype), v, acc, input_precision=PRECISION)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _attn_fwd(Q, K, V, O, LSE,
              stride_qb, stride_qh, stride_qm, stride_qd,
              stride_kb, stride_kh, stride_kn, stride_kd,
              stride_vb, stride_vh, stride_vn, stride_vd,
              stride_ob, stride_oh, stride_om, stride_od,
              H, N_Q, N_K, qk_scale,
              HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
              UPCAST: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0)
    off_bh = tl.program_id(1)
    off_b = off_bh // H
    off_h = off_bh % H
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)

    q_ptrs = (Q + off_b * stride_qb + off_h * stride_qh
              + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd)
    q = tl.load(q_ptrs, mask=offs_m[:, None] < N_Q, other=0.0)
    k_base = K + off_b * stride_kb + off_h * stride_kh
    v_base = V + off_b * stride_vb + off_h * stride_vh

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)

    # Phase 1 covers [0, full): blocks inside Nk that every row of this query block sees.
    # Phase 2 covers [full, hi): blocks on the diagonal or holding Nk's ragged tail.
    causal_offset = N_K - N_Q
    full = (N_K // BLOCK_N) * BLOCK_N
    hi = N_K
    if CAUSAL:
        first_row_limit = start_m * BLOCK_M + causal_offset + 1  # keys the first row sees
        full = tl.minimum(full, (tl.maximum(first_row_limit, 0) // BLOCK_N) * BLOCK_N)
        hi = tl.minimum(hi, tl.maximum((start_m + 1) * BLOCK_M + causal_offset, 0))
    acc, l_i, m_i = _attn_fwd_blocks(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_kd,
                                     stride_vn, stride_vd, offs_m, offs_d, 0, full, N_K,
                                     causal_offset, qk_scale, BLOCK_N, False, CAUSAL,
                                     PRECISION, UPCAST)
    acc, l_i, m_i = _attn_fwd_blocks(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_kd,
                                     stride_vn, stride_vd, offs_m, offs_d, full, hi, N_K,
                                     causal_offset, qk_scale, BLOCK_N, True, CAUSAL,
                                     PRECISION, UPCAST)

    blind = l_i == 0.0  # rows that saw no key; a NaN l (non-finite input) stays NaN
    l_safe = tl.where(blind, 1.0, l_i)
    acc = acc / l_safe[:, None]
    lse = tl.where(blind, float("-inf"), (m_i + tl.math.log2(l_safe)) * 0.6931471805599453)

    row_ok = offs_m < N_Q
    o_ptrs = (O + off_b * stride_ob + off_h * stride_oh
              + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od)
    tl.store(o_ptrs, acc.to(O.dtype.element_ty), mask=row_ok[:, None])
    tl.store(LSE + off_bh * N_Q + offs_m, lse, mask=row_ok)


def _gpu_configs():
    return [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
        for bm in (64, 128)
        for bn in (32, 64, 128)
        for w in (4, 8)
        for s in (2, 3, 4)
        if not (bm == 128 and bn == 128 and s == 4)
    ]


if not INTERPRET:
    _attn_fwd_tuned = triton.autotune(
        configs=_gpu_configs(), key=["N_Q", "N_K", "HEAD_DIM", "CAUSAL", "PRECISION"]
    )(_attn_fwd)


def triton_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                     scale: float | None = None, allow_tf32: bool = False):
    """Fused attention forward: ``softmax(q k^T * scale) v`` and its LSE.

    Args:
        q: [B, H, Nq, d]; k: [B, H, Nk, d]; v: [B, H, Nk, d]. One dtype among float16,
            bfloat16, float32; d in (16, 32, 64, 128, 256); any strides; CUDA tensors,
            or CPU tensors when running under the Triton interpreter (no GPU present:
            see the module docstring).
        causal: bottom-right aligned mask, query i sees key j iff j <= i + Nk - Nq.
        scale: score scale; None means 1/sqrt(d).
        allow_tf32: fp32 inputs only: let the matmuls round their operands to tf32
            (tensor-core speed, 10-bit mantissa). Default False computes fp32 dots in
            IEEE fp32. Under the interpreter dots are always computed in fp32.

    Returns:
        (o, lse): o [B, H, Nq, d] in q's dtype; lse [B, H, Nq] float32 natural-log
        log-sum-exp of the scaled, masked scores (-inf for rows that see no key).
    """
    check_tensors(q, k, v, dtypes=DTYPES, head_dims=HEAD_DIMS)
    if v.shape[-1] != q.shape[-1]:
        raise ValueError(f"v must have head dim d={q.shape[-1]} like q, got dv={v.shape[-1]}")
    if allow_tf32 and q.dtype != torch.float32:
        raise ValueError(f"allow_tf32 applies to float32 inputs only, got {q.dtype}")
    if INTERPRET and q.device.type != "cpu":
        raise ValueError(
            f"under the Triton interpreter q, k, v must be CPU tensors, got {q.device}")
    if not INTERPRET and q.device.type != "cuda":
        raise ValueError(f"the compiled Triton kernel needs CUDA tensors, got {q.device}")
    B, H, n_q, d = q.shape
    n_k = k.shape[-2]
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    o = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = torch.empty((B, H, n_q), dtype=torch.float32, device=q.device)
    args = (q, k, v, o, lse, *q.stride(), *k.stride(), *v.stride(), *o.stride(),
            H, n_q, n_k, scale * LOG2E)
    # IEEE fp32 dots where fp32 accuracy is promised; 16-bit operands take the default
    # ("tf32", which only affects fp32 operands) so their tensor-core path is untouched.
    ieee = q.dtype == torch.float32 and not allow_tf32
    meta = dict(HEAD_DIM=d, CAUSAL=bool(causal), PRECISION="ieee" if ieee else "tf32")
    if INTERPRET:
        grid = (triton.cdiv(n_q, INTERPRETER_BLOCK), B * H)
        _attn_fwd[grid](*args, **meta, UPCAST=q.dtype == torch.bfloat16,
                        BLOCK_M=INTERPRETER_BLOCK, BLOCK_N=INTERPRETER_BLOCK)
    else:
        def grid(m):
            return (triton.cdiv(n_q, m["BLOCK_M"]), B * H)

        _attn_fwd_tuned[grid](*args, **meta, UPCAST=False)
    return o, lse
