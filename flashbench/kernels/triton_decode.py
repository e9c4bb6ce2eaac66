"""Split-KV decode in Triton: a kernel reading a KV cache (paged through its block table)
per key chunk, and the kernel that merges the chunks' partial states.

Layouts and the causal rule: :mod:`flashbench.inputs.kvcache`. ``decode_split``, grid
(B x Hkv, num_splits): one program holds the G x Nq query rows of one kv head (each K/V
block read once for the group) and streams its chunk through the forward's fp32 (m, l)
recurrence (names as in :mod:`flashbench.kernels.triton_fwd`), writing O_s and LSE_s in
fp32, or with one split O and LSE directly. ``decode_merge``, one program per query row:
:func:`flashbench.reference.merge_states`'s rule, 16 chunks at a time. Splits:
FlashAttention-2's heuristic (:func:`choose_splits`) or fixed. CPU tensors run both under
Triton's interpreter with the forward's bf16 workarounds (triton issue 11584). Paging,
chunking and why fp32 partials: docs/decode.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from flashbench.inputs.kvcache import (
    check_block_table,
    check_cache,
    check_seqlens,
    check_splits,
    value_cache,
)
from flashbench.inputs.validation import check_causal, check_scale
from flashbench.kernels.headdim import (
    HEAD_DIMS,
    MAX_HEAD_DIM,
    check_head_dims,
    dim_constexprs,
    kernel_width,
)
from flashbench.kernels.launch import Config, TritonKernel, interpreted_for
from flashbench.kernels.phases import masked_load
from flashbench.kernels.rounding import accumulate_pv, round_bf16

__all__ = ["triton_decode", "decode_forward", "choose_splits", "decode_config", "DecodeLaunch",
           "SPLIT", "MERGE", "HEAD_DIMS", "DTYPES", "MAX_ROWS", "H200_SMS"]

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_ROWS = 128  # G x Nq query rows one program holds (absorbed MLA: per kv head, in blocks)
ABSORBED_BLOCK_M = 64  # query rows per program in the absorbed form (FlashMLA's 64 heads)
MAX_ABSORBED_DV = 512  # the absorbed form: dv <= 512 and d - dv <= 256 (DeepSeek: 576 / 512)
H200_SMS = 132  # streaming multiprocessors of an H100/H200: the heuristic's default
LOG2E = 1.4426950408889634


def _decode_split(Q, K, V, O, LSE, TABLE, SEQLENS,
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


def _decode_merge(O_PART, LSE_PART, O, LSE, N_SPLITS, H, N_Q,
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


# output strides that are 1 or not with Nq: not specialised (one compilation for all Nq)
_OUT_STRIDES = ("stride_os", "stride_ob", "stride_oh", "stride_om", "stride_ls", "stride_lb",
                "stride_lh", "stride_lm")
SPLIT = TritonKernel(_decode_split, name="decode_split",
                     do_not_specialize=("H_KV", "GROUP", "N_Q", "chunk", "stride_tb",
                                        "ROW_BLOCKS",
                                        *_OUT_STRIDES))
MERGE = TritonKernel(_decode_merge, name="decode_merge",
                     do_not_specialize=("N_SPLITS", "H", "N_Q", "stride_ps", "stride_pb",
                                        "stride_ph", "stride_pm", *_OUT_STRIDES[4:],
                                        "stride_ob", "stride_om", "stride_oh", "stride_rb",
                                        "stride_rh", "stride_rm"))


def decode_config(head_dim: int, dtype, absorbed: bool = False) -> Config:
    """The decode kernel's one config per head dim (no autotuning: the compile plan stays
    small): 64-key blocks (32 past d=128), 4 warps, 2 stages; the absorbed MLA form holds
    64 query rows x 512 fp32 accumulator columns: 32-key blocks over 8 warps."""
    if absorbed:
        return Config.of(num_warps=8, num_stages=2, BLOCK_N=32)
    return Config.of(num_warps=4, num_stages=2,
                     BLOCK_N=32 if kernel_width(head_dim) == 256 else 64)


def choose_splits(programs: int, cache_len: int, block_n: int, sm_count: int = H200_SMS,
                  max_splits: int = 128) -> int:
    """FlashAttention-2's ``num_splits_heuristic`` (flash_api.cpp): no split when the
    ``programs`` (B x Hkv) already fill 80% of the ``sm_count`` multiprocessors; else the
    fewest splits whose wave efficiency (programs x splits / SMs over its ceiling) is
    within 85% of the best, among split counts that change the blocks per split."""
    n_blocks = max(1, -(-cache_len // block_n))
    if programs >= 0.8 * sm_count:
        return 1
    top = min(max_splits, sm_count, n_blocks)

    def eligible(s):
        return s == 1 or -(-n_blocks // s) != -(-n_blocks // (s - 1))

    eff = {s: (w := programs * s / sm_count) / math.ceil(w) for s in range(1, top + 1)
           if eligible(s)}
    best = max(eff.values())
    return min(s for s, e in eff.items() if e >= 0.85 * best)


@dataclass(frozen=True)
class DecodeLaunch:
    """How a decode call ran: splits, keys per split, the config, the query rows padded."""

    num_splits: int
    chunk: int
    config: Config
    block_m: int


def _validate(q, k_cache, v_cache, cache_seqlens, block_table, causal, check, absorbed=False):
    check_causal(causal)
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache),
                    ("cache_seqlens", cache_seqlens)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if block_table is not None and not isinstance(block_table, torch.Tensor):
        raise TypeError(f"block_table must be a torch.Tensor or None, got "
                        f"{type(block_table).__name__}")
    if not (q.dtype == k_cache.dtype == v_cache.dtype) or q.dtype not in DTYPES:
        raise TypeError(f"q, k_cache, v_cache must share one dtype among "
                        f"{[str(d) for d in DTYPES]}, got {q.dtype}, {k_cache.dtype}, "
                        f"{v_cache.dtype}")
    layout = check_cache(q.shape, k_cache.shape, v_cache.shape,
                         None if block_table is None else block_table.shape)
    if absorbed:
        tail = layout.d - layout.dv
        if layout.dv % 8 or layout.dv > MAX_ABSORBED_DV or tail % 8 or tail > MAX_HEAD_DIM:
            raise ValueError(f"head dims d={layout.d}, dv={layout.dv}: the absorbed decode "
                             f"takes dv a multiple of 8 up to {MAX_ABSORBED_DV} and a q.k tail "
                             f"d - dv a multiple of 8 up to {MAX_HEAD_DIM} (DeepSeek: 576, 512)")
    else:
        check_head_dims(layout.d, layout.dv, "the Triton decode")
    if layout.group * layout.Nq > MAX_ROWS:
        raise ValueError(f"(H / Hkv) x Nq = {layout.group} x {layout.Nq} query rows per kv "
                         f"head exceed the kernel's {MAX_ROWS}")
    tensors = [q, k_cache, v_cache, cache_seqlens] + ([] if block_table is None else [block_table])
    if len({t.device for t in tensors}) != 1:
        raise ValueError(f"all tensors must be on one device, got "
                         f"{[str(t.device) for t in tensors]}")
    if q.device.type not in ("cpu", "cuda", "meta"):
        raise ValueError(f"tensors must be CUDA (compiled) or CPU (interpreter), got {q.device}")
    for name, t in (("cache_seqlens", cache_seqlens), ("block_table", block_table)):
        if t is not None and t.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"{name} must be an int32 or int64 tensor, got {t.dtype}")
    if check and q.device.type != "meta":  # values: one device-to-host copy each
        lens = check_seqlens(cache_seqlens.cpu().numpy(), layout, causal)
        if block_table is not None:
            check_block_table(block_table.cpu().numpy(), layout, lens)
    elif tuple(cache_seqlens.shape) != (layout.B,):
        raise ValueError(f"cache_seqlens must have shape [B] = ({layout.B},), got "
                         f"{tuple(cache_seqlens.shape)}")
    return layout


def decode_forward(q, k_cache, v_cache, cache_seqlens, block_table=None, causal: bool = False,
                   scale: float | None = None, num_splits: int | None = None, *,
                   check: bool = True, config: Config | None = None, sm_count: int | None = None,
                   dv: int | None = None):
    """Launch split-KV decode: ``(o, lse, DecodeLaunch)`` (arguments as :func:`triton_decode`;
    ``config``: the split kernel's, default :func:`decode_config`; ``sm_count``: the
    multiprocessors the heuristic fills, default the device's, or :data:`H200_SMS`)."""
    v_cache, absorbed = value_cache(k_cache, v_cache, dv)
    layout = _validate(q, k_cache, v_cache, cache_seqlens, block_table, causal, check, absorbed)
    scale = check_scale(scale, layout.d)
    config = decode_config(layout.d, q.dtype, absorbed) if config is None else config
    block_n = config.kwargs["BLOCK_N"]
    page = layout.page_size or 0
    if page and page % block_n and block_n % page:
        raise ValueError(f"page_size={page} and the kernel's key block BLOCK_N={block_n}: one "
                         f"must divide the other (a block lies within one page or covers "
                         f"whole pages)")
    if num_splits is None:
        if sm_count is None:
            sm_count = (torch.cuda.get_device_properties(q.device).multi_processor_count
                        if q.device.type == "cuda" else H200_SMS)
    rows = layout.group * layout.Nq
    block_m = min(ABSORBED_BLOCK_M, max(16, triton.next_power_of_2(rows))) if absorbed else (
        max(16, triton.next_power_of_2(rows)))
    row_blocks = -(-rows // block_m)
    if num_splits is None:
        num_splits = choose_splits(layout.B * layout.Hkv * row_blocks, layout.capacity,
                                   block_n, sm_count)
    num_splits = check_splits(num_splits)
    if scale <= 0:  # keep the folded scale positive (as the forward does)
        q = torch.zeros_like(q) if scale == 0 else -q
        scale = 1.0 if scale == 0 else -scale
    per = -(-layout.capacity // num_splits)
    chunk = -(-per // block_n) * block_n
    B, nq, H, d = q.shape
    dv = layout.dv
    o = q.new_empty((B, nq, H, dv))
    lse = torch.empty((B, H, nq), dtype=torch.float32, device=q.device)
    if num_splits == 1:  # write O and LSE directly: [B, Nq, H, d] as [S=1, B, H, Nq, d]
        o_part, lse_part = o, lse
        o_strides = (0, o.stride(0), o.stride(2), o.stride(1), o.stride(3))
        l_strides = (0, *lse.stride())
    else:
        o_part = torch.empty((num_splits, B, H, nq, dv), dtype=torch.float32, device=q.device)
        lse_part = torch.empty((num_splits, B, H, nq), dtype=torch.float32, device=q.device)
        o_strides, l_strides = o_part.stride(), lse_part.stride()
    table = cache_seqlens if block_table is None else block_table  # never read when contiguous
    interpreted = interpreted_for(q.device)
    ieee = q.dtype == torch.float32
    upcast = interpreted and q.dtype == torch.bfloat16
    split_args = (q, k_cache, v_cache, o_part, lse_part, table, cache_seqlens, *q.stride(),
                  *k_cache.stride(), *v_cache.stride(), *o_strides, *l_strides, table.stride(0),
                  layout.Hkv, layout.group, nq, chunk, scale * LOG2E, scale, row_blocks)
    # absorbed: HEAD_DIM is the q.k tail's width (d - dv), PAD_QK its masked columns
    dims = dim_constexprs(d - dv if absorbed else d, dv)
    dims["D_QK"] = d
    SPLIT.launch(lambda meta: (B * layout.Hkv * row_blocks, num_splits), split_args,
                 dict(**dims, ABSORBED=absorbed, BLOCK_M=block_m, PAGE_SIZE=page, CAUSAL=causal,
                      PRECISION="ieee" if ieee else "tf32", UPCAST=upcast, ROUND=upcast,
                      ROUND_O=upcast and num_splits == 1),
                 device=q.device, config=config)
    if num_splits > 1:
        merge_args = (o_part, lse_part, o, lse, num_splits, H, nq, *o_part.stride(),
                      *lse_part.stride(), o.stride(0), o.stride(1), o.stride(2), o.stride(3),
                      *lse.stride())
        MERGE.launch(lambda meta: (B * H * nq,), merge_args,
                     dict(HEAD_DIM=dims["HEAD_DIM_V"], BLOCK_S=16, ROUND=upcast, D_V=dv,
                          PAD_V=dims["PAD_V"]),
                     device=q.device, config=Config.of(num_warps=4, num_stages=1))
    return o, lse, DecodeLaunch(num_splits, chunk, config, block_m)


def triton_decode(q, k_cache, v_cache, cache_seqlens, block_table=None, causal: bool = False,
                  scale: float | None = None, num_splits: int | None = None, *,
                  check: bool = True, dv: int | None = None):
    """Split-KV decode attention over a KV cache, contiguous or paged.

    Args:
        q: [B, Nq, H, d]. k_cache: [B, capacity, Hkv, d] (contiguous) or
            [num_pages, page_size, Hkv, d] (paged), Hkv dividing H; v_cache: the same with
            dv columns; one dtype among float16, bfloat16, float32; d, dv multiples of 8 up
            to 256 (padded to a compiled width); (H / Hkv) x Nq <= 128.
            ``v_cache=None`` with ``dv``: the absorbed MLA form, V = k_cache[..., :dv]
            (DeepSeek's d = 576, dv = 512 over one kv head; dv <= 512, d - dv <= 256).
        cache_seqlens: [B] int32/int64, the keys each sequence holds.
        block_table: None (contiguous) or [B, max_pages] int32/int64 page indices;
            page_size a multiple of the key block (64; 32 at d=256) or dividing it.
        causal: the new tokens are the last Nq positions (query i sees key j iff
            j <= cache_seqlens[b] - Nq + i).
        scale: score scale; None means 1/sqrt(d).
        num_splits: key chunks; None chooses (:func:`choose_splits`), an int >= 1 fixes it.
        check: read cache_seqlens and block_table back to check their values (one
            device-to-host copy each); False for timed loops on checked inputs.

    Returns:
        (o [B, Nq, H, dv] in q's dtype, lse [B, H, Nq] float32, natural log; -inf for rows
        that see no key, whose o is 0). CUDA tensors run compiled; CPU tensors under
        Triton's interpreter (accuracy only).
    """
    o, lse, _ = decode_forward(q, k_cache, v_cache, cache_seqlens, block_table, causal, scale,
                               num_splits, check=check, dv=dv)
    return o, lse
