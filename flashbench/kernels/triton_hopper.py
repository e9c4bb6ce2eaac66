"""Hopper variants of the forward kernel: tensor descriptors (TMA), warp specialisation, the
softmax overlapped with the next QK^T, and a persistent grid with causal load balancing.

Four plainly named kernels (:data:`KERNELS`), one tile body (:func:`_attn_tile`): the same
(m, l) recurrence, names (m_new, m_ref, alpha, p), phases (:func:`~flashbench.kernels.phases.
key_phases`) and epilogue as :mod:`flashbench.kernels.triton_forward`, with Q, K, V tiles moved by
device-side tensor descriptors (``tl.make_tensor_descriptor``: TMA on sm_90) over [B*H*N, d]
(rows past a head's end are masked: scores -inf, V zeroed, O and LSE stored by row). Selected with
:func:`forward`'s ``kernel=`` (or ``triton_forward.forward(..., kernel=)``); today's kernel stays
the default everywhere. fp16/bf16 operands, head dims 16..256, causal or not, grouped-query
heads; no window, softcap, sinks, packed batches or fp8 (those stay with triton_forward).
Interpreted on CPU tensors like triton_forward (descriptors run there too; warp specialisation is
a compile-time hint the interpreter ignores). Triton APIs used, present in 3.6 and 3.9:
``tl.make_tensor_descriptor``, ``tl.range(..., warp_specialize=)``, ``triton.set_allocator``.
Design and offline figures: docs/gpu.md ("Hopper variants of the forward").
"""

from __future__ import annotations

import contextvars

import torch
import triton
import triton.language as tl

from flashbench.inputs.validation import check_causal, check_scale
from flashbench.kernels import configs as _configs
from flashbench.kernels.launch import Config, TritonKernel, interpreted_for
from flashbench.kernels.phases import key_mask, key_phases
from flashbench.kernels.rounding import accumulate_pv, round_bf16
from flashbench.kernels.validate import validate_heads, validate_tensors

__all__ = ["forward", "KERNELS", "VARIANTS", "DTYPES", "HEAD_DIMS", "INTERPRETER_PROGRAMS"]

DTYPES = (torch.float16, torch.bfloat16)
HEAD_DIMS = (16, 32, 64, 128, 256)
LOG2E = 1.4426950408889634  # 1 / ln 2
# interpreted persistent launches: this many programs, so that each loops over several tiles
INTERPRETER_PROGRAMS = 3


# ---------------------------------------------------------------- jitted pieces


@triton.jit
def _desc(X, rows, n, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr):
    """A descriptor of contiguous X [rows, n, HEAD_DIM] as [rows * n, HEAD_DIM] with tiles
    [BLOCK, HEAD_DIM] (2-D: Triton's Hopper warp specialisation splits 2-D tiles only; a
    tile past a head's end reads the next head's rows, which the callers mask)."""
    return tl.make_tensor_descriptor(X, shape=[rows * n, HEAD_DIM], strides=[HEAD_DIM, 1],
                                     block_shape=[BLOCK, HEAD_DIM])


@triton.jit
def _scores(q, desc_k, kv_base, start_n, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
            PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    """S = Q K^T for the key block at ``start_n`` (raw: the scale is folded into exp2)."""
    k = desc_k.load([kv_base + start_n, 0])
    if UPCAST:  # interpreted bf16 (triton issue 11584): exact products in fp32
        qk = tl.dot(q.to(tl.float32), tl.trans(k).to(tl.float32), input_precision="ieee")
    else:
        qk = tl.dot(q, tl.trans(k), input_precision=PRECISION)
    return qk


@triton.jit
def _softmax_pv(acc, l_i, m_i, qk, desc_v, kv_base, start_n, offs_m, n_k, causal_offset,
                qk_scale, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, MASKED: tl.constexpr,
                CAUSAL: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
                ROUND: tl.constexpr):
    """One key block's scores into (acc, l_i, m_i): triton_forward's recurrence, log2 domain."""
    if MASKED:
        cols = start_n + tl.arange(0, BLOCK_N)
        keep = key_mask(offs_m[:, None], cols[None, :], n_k, causal_offset, 0, 0, CAUSAL, False)
        qk = tl.where(keep, qk, float("-inf"))
    # -- update m_i and l_i --
    m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
    m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows that saw no key yet
    p = tl.math.exp2(qk * qk_scale - m_ref[:, None])
    alpha = tl.math.exp2(m_i - m_ref)
    l_i = l_i * alpha + tl.sum(p, 1)
    # -- update the output accumulator --
    acc = acc * alpha[:, None]
    v = desc_v.load([kv_base + start_n, 0])
    if MASKED:  # rows past Nk belong to the next head: zero, so that 0 * inf never enters
        v = tl.where((start_n + tl.arange(0, BLOCK_N))[:, None] < n_k, v, 0.0)
    acc = accumulate_pv(acc, p, v, PRECISION, UPCAST, ROUND)
    return acc, l_i, m_new


@triton.jit
def _kv_loop(acc, l_i, m_i, q, desc_k, desc_v, kv_base, offs_m, lo, hi, n_k, causal_offset,
             qk_scale, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, MASKED: tl.constexpr,
             CAUSAL: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
             ROUND: tl.constexpr, WARP_SPEC: tl.constexpr):
    """Key blocks [lo, hi) one after the other; ``WARP_SPEC``: Triton's automatic warp
    specialisation of the loop (loads in a producer partition, the math in consumers)."""
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WARP_SPEC):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        qk = _scores(q, desc_k, kv_base, start_n, BLOCK_N, HEAD_DIM, PRECISION, UPCAST)
        acc, l_i, m_i = _softmax_pv(acc, l_i, m_i, qk, desc_v, kv_base, start_n, offs_m, n_k,
                                    causal_offset, qk_scale, BLOCK_N, HEAD_DIM, MASKED, CAUSAL,
                                    PRECISION, UPCAST, ROUND)
    return acc, l_i, m_i


@triton.jit
def _kv_loop_overlap(acc, l_i, m_i, q, desc_k, desc_v, kv_base, offs_m, lo, hi, n_k,
                     causal_offset, qk_scale, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                     CAUSAL: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
                     ROUND: tl.constexpr):
    """Unmasked key blocks [lo, hi) (hi - lo a multiple of BLOCK_N), software-pipelined: the
    next block's QK^T is issued before this block's softmax, so the asynchronous wgmma can
    run under the exponentials (FlashAttention-3's intra-warpgroup overlap, in source form)."""
    qk = _scores(q, desc_k, kv_base, lo, BLOCK_N, HEAD_DIM, PRECISION, UPCAST)  # zeros if empty
    for start_n in tl.range(lo, hi - BLOCK_N, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        qk_next = _scores(q, desc_k, kv_base, start_n + BLOCK_N, BLOCK_N, HEAD_DIM, PRECISION,
                          UPCAST)
        acc, l_i, m_i = _softmax_pv(acc, l_i, m_i, qk, desc_v, kv_base, start_n, offs_m, n_k,
                                    causal_offset, qk_scale, BLOCK_N, HEAD_DIM, False, CAUSAL,
                                    PRECISION, UPCAST, ROUND)
        qk = qk_next
    if hi > lo:  # the last block: its scores are already in qk
        acc, l_i, m_i = _softmax_pv(acc, l_i, m_i, qk, desc_v, kv_base, hi - BLOCK_N, offs_m,
                                    n_k, causal_offset, qk_scale, BLOCK_N, HEAD_DIM, False,
                                    CAUSAL, PRECISION, UPCAST, ROUND)
    return acc, l_i, m_i


@triton.jit
def _attn_tile(off_bh, start_m, desc_q, desc_k, desc_v, O, LSE, H, GROUP, N_Q, N_K,
               qk_scale, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
               UPCAST: tl.constexpr, ROUND: tl.constexpr, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr, WARP_SPEC: tl.constexpr, OVERLAP: tl.constexpr):
    """Query block ``start_m`` of (batch x head) ``off_bh``: O and LSE written."""
    off_h = off_bh % H
    kv_head = (off_bh // H) * (H // GROUP) + off_h // GROUP  # grouped-query: h // GROUP
    kv_base = kv_head * N_K  # the head's first row in the [B*Hkv*Nk, d] descriptor
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    # rows past Nq are the next head's (or zeros): computed, never stored
    q = desc_q.load([off_bh * N_Q + start_m * BLOCK_M, 0])
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.full([BLOCK_M], 0.0, dtype=tl.float32)
    acc = tl.full([BLOCK_M, HEAD_DIM], 0.0, dtype=tl.float32)
    # [0, full): blocks every row sees whole (unmasked); [full, hi): diagonal or ragged tail
    causal_offset, full, hi = key_phases(start_m, N_Q, N_K, BLOCK_M, BLOCK_N, CAUSAL)
    if WARP_SPEC:  # one loop, every block masked: Triton's Hopper pass specialises a lone loop
        acc, l_i, m_i = _kv_loop(acc, l_i, m_i, q, desc_k, desc_v, kv_base, offs_m, 0, hi, N_K,
                                 causal_offset, qk_scale, BLOCK_N, HEAD_DIM, True, CAUSAL,
                                 PRECISION, UPCAST, ROUND, True)
    else:
        if OVERLAP:
            acc, l_i, m_i = _kv_loop_overlap(acc, l_i, m_i, q, desc_k, desc_v, kv_base, offs_m,
                                             0, full, N_K, causal_offset, qk_scale, BLOCK_N,
                                             HEAD_DIM, CAUSAL, PRECISION, UPCAST, ROUND)
        else:
            acc, l_i, m_i = _kv_loop(acc, l_i, m_i, q, desc_k, desc_v, kv_base, offs_m, 0, full,
                                     N_K, causal_offset, qk_scale, BLOCK_N, HEAD_DIM, False,
                                     CAUSAL, PRECISION, UPCAST, ROUND, False)
        acc, l_i, m_i = _kv_loop(acc, l_i, m_i, q, desc_k, desc_v, kv_base, offs_m, full, hi,
                                 N_K, causal_offset, qk_scale, BLOCK_N, HEAD_DIM, True, CAUSAL,
                                 PRECISION, UPCAST, ROUND, False)
    # -- epilogue: one division by l; LSE back to natural log --
    blind = l_i == 0.0  # rows that saw no key; a NaN l (non-finite input) stays NaN
    l_safe = tl.where(blind, 1.0, l_i)
    acc = acc / l_safe[:, None]
    lse = tl.where(blind, float("-inf"), (m_i + tl.math.log2(l_safe)) * 0.6931471805599453)
    if ROUND:  # interpreted bf16 output: rounded here, so the store's conversion is exact
        acc = round_bf16(acc)
    rows = off_bh.to(tl.int64) * N_Q + offs_m  # stored with a mask: a tile never spills
    row_ok = offs_m < N_Q                     # into the next head
    offs_d = tl.arange(0, HEAD_DIM)
    tl.store(O + rows[:, None] * HEAD_DIM + offs_d[None, :], acc.to(O.dtype.element_ty),
             mask=row_ok[:, None])
    tl.store(LSE + rows, lse, mask=row_ok)


# ---------------------------------------------------------------- the kernels

@triton.jit
def _descriptors(Q, K, V, BH, BHKV, N_Q, N_K, HEAD_DIM: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    return (_desc(Q, BH, N_Q, HEAD_DIM, BLOCK_M), _desc(K, BHKV, N_K, HEAD_DIM, BLOCK_N),
            _desc(V, BHKV, N_K, HEAD_DIM, BLOCK_N))


@triton.jit
def _grid_tile(CAUSAL: tl.constexpr):
    """(off_bh, start_m) of a one-tile program; causal: the last query blocks (the most
    keys) launch first, as triton_forward."""
    start_m = tl.program_id(1)
    if CAUSAL:
        start_m = tl.num_programs(1) - 1 - start_m
    return tl.program_id(0), start_m


def attn_fwd_tma(Q, K, V, O, LSE, BH, BHKV, H, GROUP, N_Q, N_K, qk_scale,
                 HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
                 UPCAST: tl.constexpr, ROUND: tl.constexpr, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr):
    """One program per (batch x head, query block); tiles moved by TMA descriptors."""
    dq, dk, dv = _descriptors(Q, K, V, BH, BHKV, N_Q, N_K, HEAD_DIM, BLOCK_M, BLOCK_N)
    off_bh, start_m = _grid_tile(CAUSAL)
    _attn_tile(off_bh, start_m, dq, dk, dv, O, LSE, H, GROUP, N_Q, N_K, qk_scale, HEAD_DIM,
               CAUSAL, PRECISION, UPCAST, ROUND, BLOCK_M, BLOCK_N, False, False)


def attn_fwd_ws(Q, K, V, O, LSE, BH, BHKV, H, GROUP, N_Q, N_K, qk_scale,
                HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
                UPCAST: tl.constexpr, ROUND: tl.constexpr, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr):
    """attn_fwd_tma with its key loop warp-specialised (one TMA producer warpgroup, two
    consumer warpgroups of BLOCK_M / 2 rows: num_warps=4 compiles to 12 warps)."""
    dq, dk, dv = _descriptors(Q, K, V, BH, BHKV, N_Q, N_K, HEAD_DIM, BLOCK_M, BLOCK_N)
    off_bh, start_m = _grid_tile(CAUSAL)
    _attn_tile(off_bh, start_m, dq, dk, dv, O, LSE, H, GROUP, N_Q, N_K, qk_scale, HEAD_DIM,
               CAUSAL, PRECISION, UPCAST, ROUND, BLOCK_M, BLOCK_N, True, False)


def attn_fwd_overlap(Q, K, V, O, LSE, BH, BHKV, H, GROUP, N_Q, N_K, qk_scale,
                     HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
                     UPCAST: tl.constexpr, ROUND: tl.constexpr, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr):
    """attn_fwd_tma with the next block's QK^T issued before this block's softmax."""
    dq, dk, dv = _descriptors(Q, K, V, BH, BHKV, N_Q, N_K, HEAD_DIM, BLOCK_M, BLOCK_N)
    off_bh, start_m = _grid_tile(CAUSAL)
    _attn_tile(off_bh, start_m, dq, dk, dv, O, LSE, H, GROUP, N_Q, N_K, qk_scale, HEAD_DIM,
               CAUSAL, PRECISION, UPCAST, ROUND, BLOCK_M, BLOCK_N, False, True)


def attn_fwd_persistent(Q, K, V, O, LSE, BH, BHKV, H, GROUP, N_Q, N_K, qk_scale,
                        HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
                        UPCAST: tl.constexpr, ROUND: tl.constexpr, BLOCK_M: tl.constexpr,
                        BLOCK_N: tl.constexpr):
    """A persistent grid (one program per SM) walking the tiles in rounds. Causal: tiles in
    decreasing work (query block major, last blocks first) and every other round walked
    backwards, so the program that took the heaviest tile of one round takes the lightest
    of the next (a boustrophedon deal; its balance: docs/gpu.md); otherwise head-major, so
    concurrent programs share K and V in L2."""
    dq, dk, dv = _descriptors(Q, K, V, BH, BHKV, N_Q, N_K, HEAD_DIM, BLOCK_M, BLOCK_N)
    n_m = tl.cdiv(N_Q, BLOCK_M)
    tiles = BH * n_m
    programs = tl.num_programs(0)
    pid = tl.program_id(0)
    for rnd in range(0, tl.cdiv(tiles, programs)):
        lane = tl.where(rnd % 2 == 0, pid, programs - 1 - pid)
        tile = rnd * programs + lane
        if tile < tiles:
            if CAUSAL:
                start_m = n_m - 1 - tile // BH
                off_bh = tile % BH
            else:
                start_m = tile % n_m
                off_bh = tile // n_m
            _attn_tile(off_bh, start_m, dq, dk, dv, O, LSE, H, GROUP, N_Q, N_K, qk_scale,
                       HEAD_DIM, CAUSAL, PRECISION, UPCAST, ROUND, BLOCK_M, BLOCK_N, False,
                       False)


_SIZES = ("BH", "BHKV", "H", "GROUP", "N_Q", "N_K")  # vary per shape: not specialised
_KEY = ("N_Q", "N_K", "HEAD_DIM", "CAUSAL", "PRECISION")
VARIANTS = ("tma", "ws", "overlap", "persistent")
KERNELS = {name: TritonKernel(fn, name=fn.__name__, do_not_specialize=_SIZES, autotune_key=_KEY,
                              prune=_configs.prune_forward)
           for name, fn in zip(VARIANTS, (attn_fwd_tma, attn_fwd_ws, attn_fwd_overlap,
                                          attn_fwd_persistent), strict=True)}


def _scratch(device):
    """Triton's allocator for the device-side descriptors' global scratch, on ``device``."""
    def alloc(size: int, alignment: int, stream):
        return torch.empty(size, dtype=torch.int8, device=device)
    return alloc


def _validate(q, k, v, causal, scale, kernel) -> float:
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {list(KERNELS)}, got {kernel!r}")
    validate_heads(q, k, v)
    validate_tensors(q, k, v, dtypes=DTYPES, head_dims=HEAD_DIMS, gqa=True, causal=causal)
    if v.shape[-1] != q.shape[-1]:
        raise ValueError(f"v must have head dim d={q.shape[-1]} like q, got dv={v.shape[-1]}")
    if q.device.type not in ("cpu", "cuda", "meta"):
        raise ValueError(f"q, k, v must be CUDA tensors (compiled kernel) or CPU tensors "
                         f"(Triton interpreter), got {q.device}")
    return check_scale(scale, q.shape[-1])


def forward(q, k, v, causal: bool = False, scale: float | None = None, *, kernel: str = "tma",
            config: Config | str | None = None, tiles: tuple[int, int] = (64, 64)):
    """Launch the Hopper variant ``kernel`` (one of :data:`VARIANTS`): ``(o, lse, config)``.

    q [B, H, Nq, d], k and v [B, Hkv, Nk, d] (Hkv divides H), fp16 or bf16, CUDA (compiled)
    or CPU (interpreted) tensors; o has q's dtype and shape, lse is fp32 [B, H, Nq] (natural
    log; -inf where a row sees no key). ``config``: None autotunes over
    :func:`flashbench.kernels.configs.variant_candidates` on a GPU (unless
    ``configs.default_config`` says otherwise), ``"fixed"`` takes the first of them, a
    :class:`Config` is launched as given; interpreted launches without one take ``tiles``
    (BLOCK_M, BLOCK_N). Returns the config the kernel ran with.
    """
    scale = _validate(q, k, v, causal, scale, kernel)
    if config is None:
        config = _configs.current_config()  # a default_config block applies here too
    if isinstance(config, str) and config != "fixed":
        raise ValueError(f"config must be None, 'fixed' or a Config, got {config!r}")
    if config is not None and not isinstance(config, (Config, str)):
        raise ValueError(f"config must be None, 'fixed' or a Config, got {config!r}")
    if scale <= 0:  # keep the folded scale positive, as triton_forward (masked -inf stay -inf)
        q = torch.zeros_like(q) if scale == 0 else -q
        scale = 1.0 if scale == 0 else -scale
    B, H, n_q, d = q.shape
    hkv, n_k = k.shape[1], k.shape[2]
    candidates = _configs.variant_candidates(d, q.dtype, kernel)
    if config == "fixed":
        config = candidates[0]
    q, k, v = (t.contiguous() for t in (q, k, v))  # descriptors: unit stride in d
    o = torch.empty_like(q)
    lse = torch.empty((B, H, n_q), dtype=torch.float32, device=q.device)
    interpreted = interpreted_for(q.device)
    args = (q, k, v, o, lse, B * H, B * hkv, H, H // hkv, n_q, n_k, scale * LOG2E)
    bf16 = interpreted and q.dtype == torch.bfloat16
    constexprs = dict(HEAD_DIM=d, CAUSAL=check_causal(causal), PRECISION="tf32", UPCAST=bf16,
                      ROUND=bf16)
    if kernel == "persistent":
        programs = (INTERPRETER_PROGRAMS if interpreted or q.device.type != "cuda"
                    else torch.cuda.get_device_properties(q.device).multi_processor_count)

        def grid(meta):
            return (min(programs, B * H * triton.cdiv(n_q, meta["BLOCK_M"])),)
    else:
        def grid(meta):
            return (B * H, triton.cdiv(n_q, meta["BLOCK_M"]))

    def run():
        if q.device.type == "cuda" and not interpreted:
            triton.set_allocator(_scratch(q.device))  # in this copied context only
        return KERNELS[kernel].launch(
            grid, args, constexprs, device=q.device, config=config,
            configs=None if config is not None else candidates,
            interpret_config=Config.of(num_warps=1, num_stages=1, BLOCK_M=tiles[0],
                                       BLOCK_N=tiles[1]))

    used = contextvars.copy_context().run(run)
    return o, lse, used
