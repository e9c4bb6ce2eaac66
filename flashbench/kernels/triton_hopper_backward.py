"""A Hopper variant of the backward's dK/dV kernel: Q and dO streamed by TMA descriptors in
one loop.

``attn_bwd_dkdv_tma`` takes the arguments of ``triton_backward_kernels.attn_bwd_dkdv`` (so the
backward launches it in its place: ``triton_backward.backward(..., kernel="tma")``) and computes
the same thing for plain and grouped-query attention, causal or not (no window, softcap or
packed batch): one program per key block of a kv head, one loop over (query head of the
group, query block) pairs, every block masked (the form warp specialisation needs; Triton
3.9's Hopper pass refuses this loop: "unsupported load type for producer commit"). Rows
past a head's end in the [B*H*Nq, d] descriptors are zeroed. dQ and D = rowsum(dO * O) stay today's
kernels: the split design (no atomics, bitwise repeatable) is kept. Same names and rounding
points as ``_dkdv_blocks``. Design and offline figures: docs/gpu.md ("Hopper variants").
"""

from __future__ import annotations

import triton.language as tl

from flashbench.kernels.launch import Config, TritonKernel
from flashbench.kernels.rounding import round_bf16

__all__ = ["DKDV_TMA", "DKDV_TMA_CONFIGS", "attn_bwd_dkdv_tma"]


def attn_bwd_dkdv_tma(Q, K, V, DO, LSE, DELTA, DK, DV,
                     stride_qb, stride_qh, stride_qm, stride_qd,
                     stride_kb, stride_kh, stride_kn, stride_kd,
                     stride_vb, stride_vh, stride_vn, stride_vd,
                     stride_dob, stride_doh, stride_dom, stride_dod,
                     stride_dkb, stride_dkh, stride_dkn, stride_dkd,
                     stride_dvb, stride_dvh, stride_dvn, stride_dvd,
                     H, HKV, GROUP, N_Q, N_K, qk_scale, scale, LEFT, RIGHT, CAP,
                     CU_Q, CU_K, VISITS, stride_lb, stride_lh,
                     HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
                     UPCAST: tl.constexpr, WINDOW: tl.constexpr, SOFTCAP: tl.constexpr,
                     VARLEN: tl.constexpr, COUNT: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM_V: tl.constexpr,
                     D_QK: tl.constexpr, D_V: tl.constexpr, PAD_QK: tl.constexpr,
                     PAD_V: tl.constexpr):
    tl.static_assert(not (WINDOW or SOFTCAP or VARLEN or COUNT or PAD_QK or PAD_V))
    tl.static_assert(HEAD_DIM_V == HEAD_DIM)  # d = dv, a power of two (the launch checks)
    off_bkv = tl.program_id(0)
    start_n = tl.program_id(1)
    off_b = (off_bkv // HKV).to(tl.int64)
    off_hkv = (off_bkv % HKV).to(tl.int64)
    offs_n = start_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    col_ok = offs_n < N_K
    k = tl.load(K + off_b * stride_kb + off_hkv * stride_kh + offs_n[:, None] * stride_kn
                + offs_d[None, :] * stride_kd, mask=col_ok[:, None], other=0.0)
    v = tl.load(V + off_b * stride_vb + off_hkv * stride_vh + offs_n[:, None] * stride_vn
                + offs_d[None, :] * stride_vd, mask=col_ok[:, None], other=0.0)
    dk = tl.full([BLOCK_N, HEAD_DIM], 0.0, dtype=tl.float32)
    dv = tl.full([BLOCK_N, HEAD_DIM], 0.0, dtype=tl.float32)
    causal_offset = N_K - N_Q
    lo = 0
    if CAUSAL:  # query blocks before the first row that sees key start_n: never visited
        lo = (tl.maximum(start_n * BLOCK_N - causal_offset, 0) // BLOCK_M) * BLOCK_M
    n_blocks = tl.cdiv(tl.maximum(N_Q - lo, 0), BLOCK_M)
    # contiguous Q and dO (the launch makes them so) as [rows, d]; rows up to this batch's end
    b32 = off_bkv // HKV  # descriptor coordinates are 32-bit (as TMA's)
    rows_total = (b32 + 1) * H * N_Q
    desc_q = tl.make_tensor_descriptor(Q, shape=[rows_total, HEAD_DIM], strides=[HEAD_DIM, 1],
                                       block_shape=[BLOCK_M, HEAD_DIM])
    desc_do = tl.make_tensor_descriptor(DO, shape=[rows_total, HEAD_DIM],
                                        strides=[HEAD_DIM, 1], block_shape=[BLOCK_M, HEAD_DIM])
    for it in tl.range(0, GROUP * n_blocks):  # (query head of the group, query block)
        start_m = lo + (it % n_blocks) * BLOCK_M
        rows = start_m + offs_m
        row_ok = rows < N_Q
        first = (b32 * H + (off_bkv % HKV) * GROUP + it // n_blocks) * N_Q + start_m  # head h
        q = tl.where(row_ok[:, None], desc_q.load([first, 0]), 0.0)  # past Nq: next head's
        do = tl.where(row_ok[:, None], desc_do.load([first, 0]), 0.0)
        off_h = off_hkv * GROUP + it // n_blocks
        lse = tl.load(LSE + off_b * stride_lb + off_h * stride_lh + rows, mask=row_ok,
                      other=0.0)
        delta = tl.load(DELTA + off_b * stride_lb + off_h * stride_lh + rows, mask=row_ok,
                        other=0.0)
        # blind rows (LSE = -inf) are masked below; a finite stand-in keeps exp2 quiet
        lse_ref = tl.where(lse == float("-inf"), 0.0, lse * 1.4426950408889634)
        # -- recompute P^T = exp(S^T - LSE) (log2 domain) --
        if UPCAST:
            qkT = tl.dot(k.to(tl.float32), tl.trans(q).to(tl.float32), input_precision="ieee")
        else:
            qkT = tl.dot(k, tl.trans(q), input_precision=PRECISION)
        p = tl.math.exp2(qkT * qk_scale - lse_ref[None, :])  # [BLOCK_N, BLOCK_M]: P^T
        keep = row_ok[None, :] & col_ok[:, None]
        if CAUSAL:
            keep = keep & (offs_n[:, None] <= rows[None, :] + causal_offset)
        p = tl.where(keep, p, 0.0)
        # -- dV += T(P)^T dO --
        if UPCAST:
            dv = tl.dot(round_bf16(p), do.to(tl.float32), dv, input_precision="ieee")
            dpT = tl.dot(v.to(tl.float32), tl.trans(do).to(tl.float32), input_precision="ieee")
        else:
            dv = tl.dot(p.to(do.dtype), do, dv, input_precision=PRECISION)
            dpT = tl.dot(v, tl.trans(do), input_precision=PRECISION)
        # -- dS^T = P^T * (dP^T - D); dK += T(dS)^T Q --
        ds = p * (dpT - delta[None, :])
        if UPCAST:
            dk = tl.dot(round_bf16(ds), q.to(tl.float32), dk, input_precision="ieee")
        else:
            dk = tl.dot(ds.to(q.dtype), q, dk, input_precision=PRECISION)
    dk = dk * scale
    if UPCAST:  # round to nearest here, so that the store's conversion is exact
        dk = round_bf16(dk)
        dv = round_bf16(dv)
    tl.store(DK + off_b * stride_dkb + off_hkv * stride_dkh + offs_n[:, None] * stride_dkn
             + offs_d[None, :] * stride_dkd, dk.to(DK.dtype.element_ty), mask=col_ok[:, None])
    tl.store(DV + off_b * stride_dvb + off_hkv * stride_dvh + offs_n[:, None] * stride_dvn
             + offs_d[None, :] * stride_dvd, dv.to(DV.dtype.element_ty), mask=col_ok[:, None])


DKDV_TMA = TritonKernel(attn_bwd_dkdv_tma, name="attn_bwd_dkdv_tma",
                       do_not_specialize=("H", "HKV", "GROUP", "N_Q", "N_K", "LEFT", "RIGHT",
                                          "CAP", "CU_Q", "CU_K", "VISITS", "stride_lb",
                                          "stride_lh"))


def _c(bm: int, bn: int, warps: int, stages: int) -> Config:
    return Config.of(num_warps=warps, num_stages=stages, BLOCK_M=bm, BLOCK_N=bn)


# 16-bit operands, per head dim: 128 keys held, 64 query rows a step (today's dkdv config
# streams 32 rows with 8 warps); d = 256 halves the keys
DKDV_TMA_CONFIGS = {16: _c(64, 128, 4, 3), 32: _c(64, 128, 4, 3), 64: _c(64, 128, 8, 3),
                    128: _c(64, 128, 8, 2), 256: _c(64, 64, 8, 2)}
