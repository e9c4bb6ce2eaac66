"""Split-KV decode in Triton: a kernel reading a KV cache (paged through its block table)
per key chunk, and the kernel that merges the chunks' partial states.

Layouts and the causal rule: :mod:`flashbench.inputs.kvcache`; the kernels:
:mod:`.triton_decode_kernels`. ``decode_split``, grid (B x Hkv, num_splits): one program
holds the G x Nq query rows of one kv head (each K/V block read once for the group; the
absorbed MLA form, ``v_cache=None``: 64-row blocks, V the cache's first dv columns) and
streams its chunk through the forward's fp32 (m, l) recurrence (names as in
:mod:`flashbench.kernels.triton_forward`), writing O_s and LSE_s in fp32, or with one split O
and LSE directly. ``decode_merge``, one program per query row:
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

from flashbench.inputs.kvcache import (
    check_block_table,
    check_cache,
    check_seqlens,
    check_splits,
    value_cache,
)
from flashbench.inputs.validation import check_causal, check_scale
from flashbench.kernels.headdim import (
    DECODE_MAX_ROWS,
    HEAD_DIMS,
    decode_block_n,
    decode_head_dims_problem,
    decode_rows_problem,
    dim_constexprs,
)
from flashbench.kernels.launch import Config, TritonKernel, interpreted_for
from flashbench.kernels.triton_decode_kernels import decode_merge, decode_split

__all__ = ["triton_decode", "decode_forward", "choose_splits", "decode_config", "DecodeLaunch",
           "SPLIT", "MERGE", "HEAD_DIMS", "DTYPES", "MAX_ROWS", "H200_SMS"]

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_ROWS = DECODE_MAX_ROWS  # G x Nq query rows one program holds (kernels/headdim.py)
ABSORBED_BLOCK_M = 64  # query rows per program in the absorbed form (FlashMLA's 64 heads)
H200_SMS = 132  # streaming multiprocessors of an H100/H200: the heuristic's default
LOG2E = 1.4426950408889634


# output strides that are 1 or not with Nq: not specialised (one compilation for all Nq)
_OUT_STRIDES = ("stride_os", "stride_ob", "stride_oh", "stride_om", "stride_ls", "stride_lb",
                "stride_lh", "stride_lm")
SPLIT = TritonKernel(decode_split, name="decode_split",
                     do_not_specialize=("H_KV", "GROUP", "N_Q", "chunk", "stride_tb",
                                        "ROW_BLOCKS",
                                        *_OUT_STRIDES))
MERGE = TritonKernel(decode_merge, name="decode_merge",
                     do_not_specialize=("N_SPLITS", "H", "N_Q", "stride_ps", "stride_pb",
                                        "stride_ph", "stride_pm", *_OUT_STRIDES[4:],
                                        "stride_ob", "stride_om", "stride_oh", "stride_rb",
                                        "stride_rh", "stride_rm"))


def decode_config(head_dim: int, dtype, absorbed: bool = False) -> Config:
    """The decode kernel's one config per head dim (no autotuning: the compile plan stays
    small): 64-key blocks (32 past d=128), 4 warps, 2 stages; the absorbed MLA form holds
    64 query rows x 512 fp32 accumulator columns: 32-key blocks over 8 warps."""
    if absorbed:
        return Config.of(num_warps=8, num_stages=2, BLOCK_N=decode_block_n(head_dim, True))
    return Config.of(num_warps=4, num_stages=2, BLOCK_N=decode_block_n(head_dim))


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
    problem = decode_head_dims_problem(layout.d, layout.dv, absorbed)
    if problem is not None:
        raise ValueError(problem)
    problem = decode_rows_problem(layout.group, layout.Nq)
    if problem is not None:
        raise ValueError(problem)
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


def _leading_columns(k_cache, v_cache) -> bool:
    """True when v_cache is a view of k_cache's first columns (the absorbed MLA form given as
    ``k_cache[..., :dv]``, as the decode peers take it): the kernel reads those once."""
    return (isinstance(k_cache, torch.Tensor) and isinstance(v_cache, torch.Tensor)
            and k_cache.dim() == v_cache.dim() == 4 and v_cache.shape[-1] < k_cache.shape[-1]
            and v_cache.data_ptr() == k_cache.data_ptr() and v_cache.dtype == k_cache.dtype
            and v_cache.shape[:3] == k_cache.shape[:3] and v_cache.stride() == k_cache.stride())


def decode_forward(q, k_cache, v_cache, cache_seqlens, block_table=None, causal: bool = False,
                   scale: float | None = None, num_splits: int | None = None, *,
                   check: bool = True, config: Config | None = None, sm_count: int | None = None,
                   dv: int | None = None):
    """Launch split-KV decode: ``(o, lse, DecodeLaunch)`` (arguments as :func:`triton_decode`;
    ``config``: the split kernel's, default :func:`decode_config`; ``sm_count``: the
    multiprocessors the heuristic fills, default the device's, or :data:`H200_SMS`)."""
    if dv is None and _leading_columns(k_cache, v_cache):  # V given as k_cache[..., :dv]
        v_cache, dv = None, v_cache.shape[-1]
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
