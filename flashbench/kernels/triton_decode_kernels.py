"""The split-KV decode's kernel functions (launched by :mod:`flashbench.kernels.triton_decode`,
which documents layouts, splits, the absorbed MLA form and where they run): ``decode_split``
streams one key chunk of one kv head's query rows through the (m, l) recurrence;
``decode_merge`` merges the chunks' partial states. Plain Python functions (compiled or
interpreted per launch through :class:`flashbench.kernels.launch.TritonKernel`); their
helpers ``@triton.jit``.
"""

from __future__ import annotations

import triton
import triton.language as tl

from flashbench.kernels.phases import masked_load
from flashbench.kernels.rounding import accumulate_pv, round_bf16

__all__ = ["decode_split", "decode_merge"]


def decode_split(Q, K, V, O, LSE, TABLE, SEQLENS,
                  stride_qb, stride_qm, stride_qh, stride_qd,
                  stride_kp, stride_kn, stride_kh, stride_kd,
                  stride_vp, stride_vn, stride_vh, stride_vd,
                  stride_os, stride_ob, stride_oh, stride_om, stride_od,
                  stride_ls, stride_lb, stride_lh, stride_lm, stride_tb,
                  H_KV, GROUP, N_Q, chunk, qk_scale, sm_scale, ROW_BLOCKS,
                  HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  PAGE_SIZE: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
                  UPCAST: tl.constexpr, ROUND: tl.constexpr, ROUND_O: tl.constexpr,
                  HEAD_DIM_V: tl.constexpr, D_QK: tl.constexpr, D_V: tl.constexpr,
                  PAD_QK: tl.constexpr, PAD_V: tl.constexpr, ABSORBED: tl.constexpr):
    # ABSORBED (MLA): V is K's first D_V columns, read once per key block for both dots;
    # q.k splits into those columns and the D_QK - D_V tail (HEAD_DIM: the tail's width)
    off_bkv = tl.program_id(0) // ROW_BLOCKS
    row_block = tl.program_id(0) % ROW_BLOCKS
    split = tl.program_id(1)
    off_b = (off_bkv // H_KV).to(tl.int64)
    off_hkv = (off_bkv % H_KV).to(tl.int64)
    seqlen = tl.load(SEQLENS + off_b).to(tl.int32)
    start = split * chunk
    stop = tl.minimum(start + chunk, seqlen)

    rows = row_block * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < GROUP * N_Q
    offs_i = rows % N_Q  # query row (new token) of each program row
    offs_h = off_hkv * GROUP + rows // N_Q  # its query head
    offs_d = tl.arange(0, HEAD_DIM)
    offs_dv = tl.arange(0, HEAD_DIM_V)
    q_rows = Q + off_b * stride_qb + offs_i[:, None] * stride_qm + offs_h[:, None] * stride_qh
    if ABSORBED:
        q = masked_load(q_rows + offs_dv[None, :] * stride_qd, row_ok[:, None],
                        offs_dv[None, :] < D_V, True, PAD_V)
        q_t = masked_load(q_rows + (D_V + offs_d[None, :]) * stride_qd, row_ok[:, None],
                          offs_d[None, :] < D_QK - D_V, True, PAD_QK)
    else:
        q = masked_load(q_rows + offs_d[None, :] * stride_qd, row_ok[:, None],
                        offs_d[None, :] < D_QK, True, PAD_QK)
    causal_limit = seqlen - N_Q + offs_i  # the last key each row sees

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.full([BLOCK_M], 0.0, dtype=tl.float32)
    acc = tl.full([BLOCK_M, HEAD_DIM_V], 0.0, dtype=tl.float32)
    offs_n = tl.arange(0, BLOCK_N)
    k_head = K + off_hkv * stride_kh
    v_head = V + off_hkv * stride_vh
    for start_n in range(start, stop, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + offs_n
        in_chunk = cols < stop
        # -- where the block's keys lie: contiguous, one page, or one page per key --
        if PAGE_SIZE == 0:
            k_rows = off_b * stride_kp + cols.to(tl.int64) * stride_kn
            v_rows = off_b * stride_vp + cols.to(tl.int64) * stride_vn
        elif PAGE_SIZE >= BLOCK_N:
            page = tl.load(TABLE + off_b * stride_tb + start_n // PAGE_SIZE).to(tl.int64)
            within = (start_n % PAGE_SIZE + offs_n).to(tl.int64)
            k_rows = page * stride_kp + within * stride_kn
            v_rows = page * stride_vp + within * stride_vn
        else:
            pages = tl.load(TABLE + off_b * stride_tb + cols // PAGE_SIZE, mask=in_chunk,
                            other=0).to(tl.int64)
            within = (cols % PAGE_SIZE).to(tl.int64)
            k_rows = pages * stride_kp + within * stride_kn
            v_rows = pages * stride_vp + within * stride_vn
        # -- S = Q K^T (raw scores; the scale is folded into the exponent) --
        if ABSORBED:  # the V columns [N, DV] once, for Q K^T and then P V; the tail apart
            v = masked_load(k_head + k_rows[:, None] + offs_dv[None, :] * stride_kd,
                            in_chunk[:, None], offs_dv[None, :] < D_V, True, PAD_V)
            k = masked_load(k_head + k_rows[None, :] + (D_V + offs_d[:, None]) * stride_kd,
                            in_chunk[None, :], offs_d[:, None] < D_QK - D_V, True, PAD_QK)
            qk = _dot(q, tl.trans(v), PRECISION, UPCAST) + _dot(q_t, k, PRECISION, UPCAST)
        else:
            k = masked_load(k_head + k_rows[None, :] + offs_d[:, None] * stride_kd,
                            in_chunk[None, :], offs_d[:, None] < D_QK, True, PAD_QK)
            qk = _dot(q, k, PRECISION, UPCAST)
        keep = in_chunk[None, :]
        if CAUSAL:
            keep = keep & (cols[None, :] <= causal_limit[:, None])
        qk = tl.where(keep, qk, float("-inf"))
        # -- update m_i (raw scores, as FA2 keeps it) and l_i (exponents in log2 domain) --
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        m_ref = tl.where(m_new == float("-inf"), 0.0, m_new * qk_scale)  # rows that saw no key
        p = tl.math.exp2(qk * qk_scale - m_ref[:, None])
        alpha = tl.math.exp2(m_i * qk_scale - m_ref)
        l_i = l_i * alpha + tl.sum(p, 1)
        # -- update the output accumulator --
        acc = acc * alpha[:, None]
        if not ABSORBED:
            v = masked_load(v_head + v_rows[:, None] + offs_dv[None, :] * stride_vd,
                            in_chunk[:, None], offs_dv[None, :] < D_V, True, PAD_V)
        acc = accumulate_pv(acc, p, v, PRECISION, UPCAST, ROUND)
        m_i = m_new

    # -- epilogue: this chunk's O_s (normalised by its own l) and LSE_s, natural log, from
    # the raw max as FA2 writes it: (m + log2 l) ln 2 would carry the fp32 rounding of
    # scale x log2(e) times m into every LSE (docs/decode.md) --
    blind = l_i == 0.0  # rows that saw no key of this chunk
    l_safe = tl.where(blind, 1.0, l_i)
    acc = acc / l_safe[:, None]
    lse = tl.where(blind, float("-inf"), m_i * sm_scale + tl.log(l_safe))
    if ROUND_O:  # interpreted bf16 output (one split): round here, the store's cast is exact
        acc = round_bf16(acc)
    o_ptrs = (O + split.to(tl.int64) * stride_os + off_b * stride_ob
              + offs_h[:, None] * stride_oh + offs_i[:, None] * stride_om
              + offs_dv[None, :] * stride_od)
    if PAD_V:
        tl.store(o_ptrs, acc.to(O.dtype.element_ty), mask=row_ok[:, None] & (offs_dv < D_V))
    else:
        tl.store(o_ptrs, acc.to(O.dtype.element_ty), mask=row_ok[:, None])
    tl.store(LSE + split.to(tl.int64) * stride_ls + off_b * stride_lb + offs_h * stride_lh
             + offs_i * stride_lm, lse, mask=row_ok)


def decode_merge(O_PART, LSE_PART, O, LSE, N_SPLITS, H, N_Q,
                  stride_ps, stride_pb, stride_ph, stride_pm, stride_pd,
                  stride_ls, stride_lb, stride_lh, stride_lm,
                  stride_ob, stride_om, stride_oh, stride_od,
                  stride_rb, stride_rh, stride_rm,
                  HEAD_DIM: tl.constexpr, BLOCK_S: tl.constexpr, ROUND: tl.constexpr,
                  D_V: tl.constexpr, PAD_V: tl.constexpr):
    row = tl.program_id(0)
    off_b = (row // (H * N_Q)).to(tl.int64)
    off_h = ((row // N_Q) % H).to(tl.int64)
    off_i = (row % N_Q).to(tl.int64)
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, HEAD_DIM)
    lse_base = LSE_PART + off_b * stride_lb + off_h * stride_lh + off_i * stride_lm
    o_base = O_PART + off_b * stride_pb + off_h * stride_ph + off_i * stride_pm
    # -- m = max_s LSE_s, over BLOCK_S chunks at a time --
    m_s = tl.full([BLOCK_S], float("-inf"), dtype=tl.float32)
    for s0 in range(0, N_SPLITS, BLOCK_S):
        splits = s0 + offs_s
        m_s = tl.maximum(m_s, tl.load(lse_base + splits * stride_ls, mask=splits < N_SPLITS,
                                      other=float("-inf")))
    m = tl.max(m_s, 0)
    m_ref = tl.where(m == float("-inf"), 0.0, m)
    # -- weights exp(LSE_s - m), 0 for chunks that saw no key (their O_s is not read) --
    l_s = tl.full([BLOCK_S], 0.0, dtype=tl.float32)
    acc = tl.full([BLOCK_S, HEAD_DIM], 0.0, dtype=tl.float32)
    for s0 in range(0, N_SPLITS, BLOCK_S):
        splits = s0 + offs_s
        lse_s = tl.load(lse_base + splits * stride_ls, mask=splits < N_SPLITS,
                        other=float("-inf"))
        w = tl.exp(lse_s - m_ref)
        l_s += w
        seen = lse_s > float("-inf")
        o_s = masked_load(o_base + splits[:, None] * stride_ps + offs_d[None, :] * stride_pd,
                          seen[:, None], offs_d[None, :] < D_V, True, PAD_V)
        acc += o_s * w[:, None]
    l = tl.sum(l_s, 0)
    blind = l == 0.0
    l_safe = tl.where(blind, 1.0, l)
    o = tl.sum(acc, 0) / l_safe
    lse = tl.where(blind, float("-inf"), m_ref + tl.log(l_safe))
    if ROUND:
        o = round_bf16(o)
    o_ptrs = O + off_b * stride_ob + off_i * stride_om + off_h * stride_oh + offs_d * stride_od
    if PAD_V:
        tl.store(o_ptrs, o.to(O.dtype.element_ty), mask=offs_d < D_V)
    else:
        tl.store(o_ptrs, o.to(O.dtype.element_ty))
    tl.store(LSE + off_b * stride_rb + off_h * stride_rh + off_i * stride_rm, lse)


@triton.jit
def _dot(a, b, PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    """a @ b in fp32; ``UPCAST``: the operands in fp32, IEEE (interpreted bf16)."""
    if UPCAST:
        out = tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    else:
        out = tl.dot(a, b, input_precision=PRECISION)
    return out
