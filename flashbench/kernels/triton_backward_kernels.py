"""The Triton backward's kernels (jitted helpers and the three kernel functions).

Launched by :mod:`flashbench.kernels.triton_backward` (which documents the algorithm,
masks, rounding points and where they run) through
:class:`flashbench.kernels.launch.TritonKernel`: the kernel functions here are plain
Python functions (compiled or interpreted per launch), their helpers ``@triton.jit``.
The names (p, ds, delta, lse_ref) are those of the NumPy twin,
:func:`flashbench.reference.streaming_bwd.stream_attention_grad`.
"""

from __future__ import annotations

import triton
import triton.language as tl

# the key-block phases of a query block and the mask of a masked block, shared with the
# forward; head columns past d (dv) masked where the width is padded, as in the forward
from flashbench.kernels.phases import key_mask, masked_load, variant_phases

# for interpreted bf16 launches (UPCAST) only, shared with the forward: the interpreter's
# fp32 -> bf16 cast truncates toward zero, where the GPU rounds to nearest even
from flashbench.kernels.rounding import round_bf16
from flashbench.kernels.softcap import tanh

__all__ = ["attn_bwd_preprocess", "attn_bwd_dkdv", "attn_bwd_dq", "round_bf16"]


@triton.jit
def _sequence(CU_Q, CU_K, off_b, N_Q, N_K, VARLEN: tl.constexpr):
    """``(q_start, k_start, n_q, n_k)``: a packed batch's sequence ``off_b`` (its first row
    and lengths, from cu_seqlens), else rows from 0 and the launch's lengths."""
    q_start = off_b * 0  # int64, as the loaded starts
    k_start = off_b * 0
    if VARLEN:
        q_start = tl.load(CU_Q + off_b).to(tl.int64)
        k_start = tl.load(CU_K + off_b).to(tl.int64)
        N_Q = (tl.load(CU_Q + off_b + 1) - q_start).to(tl.int32)
        N_K = (tl.load(CU_K + off_b + 1) - k_start).to(tl.int32)
    return q_start, k_start, N_Q, N_K


@triton.jit
def _trips(lo, hi, BLOCK: tl.constexpr):
    """The blocks ``range(lo, hi, BLOCK)`` visits (for the COUNT of visited blocks)."""
    return tl.cdiv(tl.maximum(hi - lo, 0), BLOCK)


@triton.jit
def _dkdv_blocks(dk, dv, k, v, q_base, do_base, lse_base, delta_base,
                 stride_qm, stride_qd, stride_dom, stride_dod, offs_n, offs_d, lo, hi,
                 n_q, n_k, causal_offset, qk_scale, left, right, cap, offs_dv,
                 BLOCK_M: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
                 PRECISION: tl.constexpr, UPCAST: tl.constexpr, WINDOW: tl.constexpr,
                 SOFTCAP: tl.constexpr, D_QK: tl.constexpr, D_V: tl.constexpr,
                 PAD_QK: tl.constexpr, PAD_V: tl.constexpr):
    """Accumulate the query blocks [lo, hi) of one query head into dk [BLOCK_N, D] and dv
    [BLOCK_N, DV] (head columns past d, dv masked when PAD_QK, PAD_V)."""
    offs_m = tl.arange(0, BLOCK_M)
    for start_m in range(lo, hi, BLOCK_M):
        start_m = tl.multiple_of(start_m, BLOCK_M)
        rows = start_m + offs_m
        q_ptrs = q_base + rows[:, None] * stride_qm + offs_d[None, :] * stride_qd
        do_ptrs = do_base + rows[:, None] * stride_dom + offs_dv[None, :] * stride_dod
        q = masked_load(q_ptrs, rows[:, None] < n_q, offs_d[None, :] < D_QK, MASKED, PAD_QK)
        do = masked_load(do_ptrs, rows[:, None] < n_q, offs_dv[None, :] < D_V, MASKED, PAD_V)
        if MASKED:
            lse = tl.load(lse_base + rows, mask=rows < n_q, other=0.0)
            delta = tl.load(delta_base + rows, mask=rows < n_q, other=0.0)
        else:
            lse = tl.load(lse_base + rows)
            delta = tl.load(delta_base + rows)
        # blind rows (LSE = -inf) are masked below; a finite stand-in keeps exp2 quiet
        lse_ref = tl.where(lse == float("-inf"), 0.0, lse * 1.4426950408889634)
        # -- recompute P^T = exp(S^T - LSE) (log2 domain) --
        if UPCAST:
            qkT = tl.dot(k.to(tl.float32), tl.trans(q).to(tl.float32), input_precision="ieee")
        else:
            qkT = tl.dot(k, tl.trans(q), input_precision=PRECISION)
        if SOFTCAP:  # capped log2-domain scores t = cap tanh(qk scale / c), as the forward
            qkT = cap * tanh(qkT * qk_scale)
            p = tl.math.exp2(qkT - lse_ref[None, :])
        else:
            p = tl.math.exp2(qkT * qk_scale - lse_ref[None, :])  # [BLOCK_N, BLOCK_M]: P^T
        if MASKED:  # S^T: keys on axis 0, query rows (and Nq's ragged tail) on axis 1
            keep = (rows[None, :] < n_q) & key_mask(rows[None, :], offs_n[:, None], n_k,
                                                    causal_offset, left, right, CAUSAL, WINDOW)
            p = tl.where(keep, p, 0.0)
        # -- dV += T(P)^T dO --
        if UPCAST:
            dv = tl.dot(round_bf16(p), do.to(tl.float32), dv, input_precision="ieee")
            dpT = tl.dot(v.to(tl.float32), tl.trans(do).to(tl.float32), input_precision="ieee")
        else:
            dv = tl.dot(p.to(do.dtype), do, dv, input_precision=PRECISION)
            dpT = tl.dot(v, tl.trans(do), input_precision=PRECISION)
        # -- dS^T = P^T * (dP^T - D) (through a softcap: times 1 - (t / cap)^2) --
        ds = p * (dpT - delta[None, :])
        if SOFTCAP:
            u = qkT / cap
            ds = ds * (1.0 - u * u)
        # -- dK += T(dS)^T Q --
        if UPCAST:
            dk = tl.dot(round_bf16(ds), q.to(tl.float32), dk, input_precision="ieee")
        else:
            dk = tl.dot(ds.to(q.dtype), q, dk, input_precision=PRECISION)
    return dk, dv


@triton.jit
def _dq_blocks(dq, q, do, lse_ref, delta, k_base, v_base, stride_kn, stride_kd,
               stride_vn, stride_vd, offs_m, offs_d, lo, hi, n_k, causal_offset, qk_scale,
               left, right, cap, offs_dv, BLOCK_N: tl.constexpr, MASKED: tl.constexpr,
               CAUSAL: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
               WINDOW: tl.constexpr, SOFTCAP: tl.constexpr, D_QK: tl.constexpr,
               D_V: tl.constexpr, PAD_QK: tl.constexpr, PAD_V: tl.constexpr):
    """Accumulate the key blocks [lo, hi) into dq [BLOCK_M, D] (head columns past d, dv
    masked when PAD_QK, PAD_V)."""
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + offs_n
        kT_ptrs = k_base + cols[None, :] * stride_kn + offs_d[:, None] * stride_kd
        vT_ptrs = v_base + cols[None, :] * stride_vn + offs_dv[:, None] * stride_vd
        kT = masked_load(kT_ptrs, cols[None, :] < n_k, offs_d[:, None] < D_QK, MASKED, PAD_QK)
        vT = masked_load(vT_ptrs, cols[None, :] < n_k, offs_dv[:, None] < D_V, MASKED, PAD_V)
        # -- recompute P = exp(S - LSE) (log2 domain) --
        if UPCAST:
            qk = tl.dot(q.to(tl.float32), kT.to(tl.float32), input_precision="ieee")
            dp = tl.dot(do.to(tl.float32), vT.to(tl.float32), input_precision="ieee")
        else:
            qk = tl.dot(q, kT, input_precision=PRECISION)
            dp = tl.dot(do, vT, input_precision=PRECISION)
        if SOFTCAP:
            qk = cap * tanh(qk * qk_scale)
            p = tl.math.exp2(qk - lse_ref[:, None])
        else:
            p = tl.math.exp2(qk * qk_scale - lse_ref[:, None])
        if MASKED:
            keep = key_mask(offs_m[:, None], cols[None, :], n_k, causal_offset, left, right,
                            CAUSAL, WINDOW)
            p = tl.where(keep, p, 0.0)
        # -- dS = P * (dP - D); dQ += T(dS) K --
        ds = p * (dp - delta[:, None])
        if SOFTCAP:
            u = qk / cap
            ds = ds * (1.0 - u * u)
        if UPCAST:
            dq = tl.dot(round_bf16(ds), tl.trans(kT).to(tl.float32), dq,
                        input_precision="ieee")
        else:
            dq = tl.dot(ds.to(kT.dtype), tl.trans(kT), dq, input_precision=PRECISION)
    return dq


def attn_bwd_preprocess(O, DO, DELTA,
                         stride_ob, stride_oh, stride_om, stride_od,
                         stride_dob, stride_doh, stride_dom, stride_dod,
                         H, N_Q, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                         D_V: tl.constexpr, PAD_V: tl.constexpr):
    off_bh = tl.program_id(0)
    off_b = (off_bh // H).to(tl.int64)
    off_h = (off_bh % H).to(tl.int64)
    offs_m = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < N_Q
    d_ok = offs_d[None, :] < D_V  # HEAD_DIM: dv's compiled width
    o = masked_load(O + off_b * stride_ob + off_h * stride_oh + offs_m[:, None] * stride_om
                    + offs_d[None, :] * stride_od, row_ok[:, None], d_ok, True, PAD_V)
    do = masked_load(DO + off_b * stride_dob + off_h * stride_doh + offs_m[:, None]
                     * stride_dom + offs_d[None, :] * stride_dod, row_ok[:, None], d_ok, True,
                     PAD_V)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), axis=1)  # D = rowsum(dO * O)
    tl.store(DELTA + off_bh.to(tl.int64) * N_Q + offs_m, delta, mask=row_ok)


def attn_bwd_dkdv(Q, K, V, DO, LSE, DELTA, DK, DV,
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
    off_bkv = tl.program_id(0)
    start_n = tl.program_id(1)  # causal: the first key blocks are seen most, and run first
    off_b = (off_bkv // HKV).to(tl.int64)
    off_hkv = (off_bkv % HKV).to(tl.int64)
    # packed: batch b is sequence b (rows from cu[b]; batch strides 0), its own lengths
    q_start, k_start, N_Q, N_K = _sequence(CU_Q, CU_K, off_b, N_Q, N_K, VARLEN)
    offs_n = start_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    offs_dv = tl.arange(0, HEAD_DIM_V)
    col_ok = offs_n < N_K
    k = masked_load(K + off_b * stride_kb + off_hkv * stride_kh + (k_start + offs_n[:, None])
                    * stride_kn + offs_d[None, :] * stride_kd, col_ok[:, None],
                    offs_d[None, :] < D_QK, True, PAD_QK)
    v = masked_load(V + off_b * stride_vb + off_hkv * stride_vh + (k_start + offs_n[:, None])
                    * stride_vn + offs_dv[None, :] * stride_vd, col_ok[:, None],
                    offs_dv[None, :] < D_V, True, PAD_V)
    dk = tl.full([BLOCK_N, HEAD_DIM], 0.0, dtype=tl.float32)
    dv = tl.full([BLOCK_N, HEAD_DIM_V], 0.0, dtype=tl.float32)

    # Query blocks: [lo, a) on the causal diagonal (masked), [a, b) every pair visible
    # (no mask), [b, N_Q) the ragged tail of Nq, or everything after lo when this key
    # block holds Nk's ragged tail (masked).
    causal_offset = N_K - N_Q
    q_full = (N_Q // BLOCK_M) * BLOCK_M
    lo = 0
    a = 0
    if CAUSAL:
        first_row = start_n * BLOCK_N - causal_offset  # the first row that sees key start_n
        lo = (tl.maximum(first_row, 0) // BLOCK_M) * BLOCK_M
        full_row = first_row + BLOCK_N - 1  # the first row that sees every key of the block
        a = tl.cdiv(tl.maximum(full_row, 0), BLOCK_M) * BLOCK_M
        a = tl.maximum(lo, tl.minimum(a, q_full))
    hi = N_Q
    if WINDOW:  # rows [lo, hi) see some key of this block; [a, b) every key of it
        right = tl.minimum(RIGHT, 0) if CAUSAL else RIGHT
        first_row = start_n * BLOCK_N - causal_offset - right
        lo = (tl.maximum(first_row, 0) // BLOCK_M) * BLOCK_M
        a = tl.cdiv(tl.maximum(first_row + BLOCK_N - 1, 0), BLOCK_M) * BLOCK_M
        a = tl.maximum(lo, tl.minimum(a, q_full))
        last_row = start_n * BLOCK_N - causal_offset + LEFT  # the last row that sees key start_n
        q_full = tl.minimum(q_full, (tl.maximum(last_row + 1, 0) // BLOCK_M) * BLOCK_M)
        hi = tl.maximum(tl.minimum(N_Q, (start_n + 1) * BLOCK_N - causal_offset + LEFT), 0)
    b = tl.where((start_n + 1) * BLOCK_N > N_K, a, tl.maximum(a, q_full))
    if VARLEN:  # a key block past its sequence's end visits nothing
        past = start_n * BLOCK_N >= N_K
        lo = tl.where(past, 0, lo)
        a = tl.where(past, 0, a)
        b = tl.where(past, 0, b)
        hi = tl.where(past, 0, hi)
    if COUNT:  # the query blocks visited, over the group's heads
        visits = GROUP * (_trips(lo, a, BLOCK_M) + _trips(a, b, BLOCK_M)
                          + _trips(b, hi, BLOCK_M))
        tl.store(VISITS + off_bkv.to(tl.int64) * tl.num_programs(1) + start_n, visits)
    for g in range(GROUP):  # the query heads reading this kv head: no atomics needed
        off_h = off_hkv * GROUP + g
        q_base = Q + off_b * stride_qb + off_h * stride_qh + q_start * stride_qm
        do_base = DO + off_b * stride_dob + off_h * stride_doh + q_start * stride_dom
        lse_base = LSE + off_b * stride_lb + off_h * stride_lh + q_start
        delta_base = DELTA + off_b * stride_lb + off_h * stride_lh + q_start
        dk, dv = _dkdv_blocks(dk, dv, k, v, q_base, do_base, lse_base, delta_base,
                              stride_qm, stride_qd, stride_dom, stride_dod, offs_n, offs_d,
                              lo, a, N_Q, N_K, causal_offset, qk_scale, LEFT, RIGHT, CAP,
                              offs_dv, BLOCK_M, True, CAUSAL, PRECISION, UPCAST, WINDOW,
                              SOFTCAP, D_QK, D_V, PAD_QK, PAD_V)
        dk, dv = _dkdv_blocks(dk, dv, k, v, q_base, do_base, lse_base, delta_base,
                              stride_qm, stride_qd, stride_dom, stride_dod, offs_n, offs_d,
                              a, b, N_Q, N_K, causal_offset, qk_scale, LEFT, RIGHT, CAP,
                              offs_dv, BLOCK_M, False, CAUSAL, PRECISION, UPCAST, WINDOW,
                              SOFTCAP, D_QK, D_V, PAD_QK, PAD_V)
        dk, dv = _dkdv_blocks(dk, dv, k, v, q_base, do_base, lse_base, delta_base,
                              stride_qm, stride_qd, stride_dom, stride_dod, offs_n, offs_d,
                              b, hi, N_Q, N_K, causal_offset, qk_scale, LEFT, RIGHT, CAP,
                              offs_dv, BLOCK_M, True, CAUSAL, PRECISION, UPCAST, WINDOW,
                              SOFTCAP, D_QK, D_V, PAD_QK, PAD_V)
    dk = dk * scale
    if UPCAST:  # round to nearest here, so that the store's conversion is exact
        dk = round_bf16(dk)
        dv = round_bf16(dv)
    dk_ok = col_ok[:, None]
    if PAD_QK:
        dk_ok = dk_ok & (offs_d[None, :] < D_QK)
    dv_ok = col_ok[:, None]
    if PAD_V:
        dv_ok = dv_ok & (offs_dv[None, :] < D_V)
    tl.store(DK + off_b * stride_dkb + off_hkv * stride_dkh + (k_start + offs_n[:, None])
             * stride_dkn + offs_d[None, :] * stride_dkd, dk.to(DK.dtype.element_ty),
             mask=dk_ok)
    tl.store(DV + off_b * stride_dvb + off_hkv * stride_dvh + (k_start + offs_n[:, None])
             * stride_dvn + offs_dv[None, :] * stride_dvd, dv.to(DV.dtype.element_ty),
             mask=dv_ok)


def attn_bwd_dq(Q, K, V, DO, LSE, DELTA, DQ,
                 stride_qb, stride_qh, stride_qm, stride_qd,
                 stride_kb, stride_kh, stride_kn, stride_kd,
                 stride_vb, stride_vh, stride_vn, stride_vd,
                 stride_dob, stride_doh, stride_dom, stride_dod,
                 stride_dqb, stride_dqh, stride_dqm, stride_dqd,
                 H, GROUP, N_Q, N_K, qk_scale, scale, LEFT, RIGHT, CAP,
                 CU_Q, CU_K, VISITS, stride_lb, stride_lh,
                 HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
                 UPCAST: tl.constexpr, WINDOW: tl.constexpr, SOFTCAP: tl.constexpr,
                 VARLEN: tl.constexpr, COUNT: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM_V: tl.constexpr,
                 D_QK: tl.constexpr, D_V: tl.constexpr, PAD_QK: tl.constexpr,
                 PAD_V: tl.constexpr):
    off_bh = tl.program_id(0)
    if CAUSAL:  # the last query blocks see the most keys: launch them first
        start_m = tl.num_programs(1) - 1 - tl.program_id(1)
    else:
        start_m = tl.program_id(1)
    off_b = (off_bh // H).to(tl.int64)
    off_h = off_bh % H
    off_hkv = (off_h // GROUP).to(tl.int64)  # query head h reads kv head h // GROUP
    off_h = off_h.to(tl.int64)
    q_start, k_start, N_Q, N_K = _sequence(CU_Q, CU_K, off_b, N_Q, N_K, VARLEN)
    offs_m = tl.multiple_of(start_m * BLOCK_M, BLOCK_M) + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    offs_dv = tl.arange(0, HEAD_DIM_V)
    row_ok = offs_m < N_Q
    q_base = Q + off_b * stride_qb + off_h * stride_qh + q_start * stride_qm
    do_base = DO + off_b * stride_dob + off_h * stride_doh + q_start * stride_dom
    q = masked_load(q_base + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd,
                    row_ok[:, None], offs_d[None, :] < D_QK, True, PAD_QK)
    do = masked_load(do_base + offs_m[:, None] * stride_dom + offs_dv[None, :] * stride_dod,
                     row_ok[:, None], offs_dv[None, :] < D_V, True, PAD_V)
    rows = off_b * stride_lb + off_h * stride_lh + q_start + offs_m
    lse = tl.load(LSE + rows, mask=row_ok, other=0.0)
    delta = tl.load(DELTA + rows, mask=row_ok, other=0.0)
    lse_ref = tl.where(lse == float("-inf"), 0.0, lse * 1.4426950408889634)
    k_base = K + off_b * stride_kb + off_hkv * stride_kh + k_start * stride_kn
    v_base = V + off_b * stride_vb + off_hkv * stride_vh + k_start * stride_vn
    dq = tl.full([BLOCK_M, HEAD_DIM], 0.0, dtype=tl.float32)

    # Key blocks as in the forward: [lo, a_end) a window's left edge (masked), [a_end, full)
    # seen whole by every row, [full, hi) masked (variant_phases).
    causal_offset, lo, a_end, full, hi = variant_phases(start_m, N_Q, N_K, LEFT, RIGHT,
                                                        BLOCK_M, BLOCK_N, CAUSAL, WINDOW)
    if VARLEN:  # a query block past its sequence's end visits nothing
        hi = tl.where(start_m * BLOCK_M < N_Q, hi, 0)
        a_end = tl.minimum(a_end, hi)
        full = tl.minimum(full, hi)
    if COUNT:
        visits = (_trips(lo, a_end, BLOCK_N) + _trips(a_end, full, BLOCK_N)
                  + _trips(tl.maximum(full, a_end), hi, BLOCK_N))
        tl.store(VISITS + off_bh.to(tl.int64) * tl.num_programs(1) + start_m, visits)
    dq = _dq_blocks(dq, q, do, lse_ref, delta, k_base, v_base, stride_kn, stride_kd,
                    stride_vn, stride_vd, offs_m, offs_d, lo, a_end, N_K, causal_offset,
                    qk_scale, LEFT, RIGHT, CAP, offs_dv, BLOCK_N, True, CAUSAL, PRECISION,
                    UPCAST, WINDOW, SOFTCAP, D_QK, D_V, PAD_QK, PAD_V)
    dq = _dq_blocks(dq, q, do, lse_ref, delta, k_base, v_base, stride_kn, stride_kd,
                    stride_vn, stride_vd, offs_m, offs_d, a_end, full, N_K, causal_offset,
                    qk_scale, LEFT, RIGHT, CAP, offs_dv, BLOCK_N, False, CAUSAL, PRECISION,
                    UPCAST, WINDOW, SOFTCAP, D_QK, D_V, PAD_QK, PAD_V)
    dq = _dq_blocks(dq, q, do, lse_ref, delta, k_base, v_base, stride_kn, stride_kd,
                    stride_vn, stride_vd, offs_m, offs_d, tl.maximum(full, a_end), hi, N_K,
                    causal_offset, qk_scale, LEFT, RIGHT, CAP, offs_dv, BLOCK_N, True, CAUSAL,
                    PRECISION, UPCAST, WINDOW, SOFTCAP, D_QK, D_V, PAD_QK, PAD_V)
    dq = dq * scale
    if UPCAST:
        dq = round_bf16(dq)
    dq_ok = row_ok[:, None]
    if PAD_QK:
        dq_ok = dq_ok & (offs_d[None, :] < D_QK)
    tl.store(DQ + off_b * stride_dqb + off_h * stride_dqh + (q_start + offs_m[:, None])
             * stride_dqm + offs_d[None, :] * stride_dqd, dq.to(DQ.dtype.element_ty),
             mask=dq_ok)
