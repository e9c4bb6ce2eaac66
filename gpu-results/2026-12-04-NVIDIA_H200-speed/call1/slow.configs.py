"""Launch configs of the forward kernel: a pruned Hopper autotune space and fixed configs.

A GPU window's compile budget is small, so the space is written per (operand width, head
dim), not as a full product (:data:`HOPPER_CANDIDATES` for 16-bit operands,
:data:`FP8_CANDIDATES` for e4m3), and pruned per launch:

- :func:`prune_forward` (Triton's ``early_config_prune``): drops configs whose pipelined
  tiles exceed Hopper's shared memory (:func:`fits_shared_memory`), and query blocks longer
  than the whole (padded) query length when a smaller candidate exists;
- :func:`fixed_config`: one per (dtype, d) for checks, fp32 and per-block fp8; for 16-bit
  and fp8 operands a candidate, so a check and an autotuned run share the compilation.

Plain data, shared by the launch code, :mod:`flashbench.kernels.plan` and other kernels
(and :func:`default_config`, the config a forward call that names none launches with);
why these candidates: docs/gpu.md ("Configs and the compile budget").
"""

from __future__ import annotations

import contextlib
import contextvars

import numpy as np

from flashbench.inputs.precision import PRECISIONS
from flashbench.kernels.launch import Config

__all__ = ["HOPPER_SMEM_BYTES", "HOPPER_CANDIDATES", "FP32_FIXED", "FP8_CANDIDATES",
           "FIXED_FP8", "INTERPRETER_CONFIG",
           "candidates", "fixed_config", "prune_forward", "forward_smem_bytes",
           "fits_shared_memory", "default_config", "current_config"]

HOPPER_SMEM_BYTES = 227 * 1024  # per thread block, opt-in maximum on sm_90


def _c(bm: int, bn: int, warps: int, stages: int) -> Config:
    return Config.of(num_warps=warps, num_stages=stages, BLOCK_M=bm, BLOCK_N=bn)


# head dim -> candidates for fp16/bf16 operands, best guesses first
HOPPER_CANDIDATES: dict[int, tuple[Config, ...]] = {
    16: (_c(128, 64, 4, 3), _c(64, 64, 4, 3), _c(128, 128, 4, 3), _c(128, 64, 4, 4)),
    32: (_c(128, 64, 4, 3), _c(64, 64, 4, 3), _c(128, 128, 4, 3), _c(128, 64, 4, 4)),
    64: (_c(128, 64, 4, 3), _c(128, 128, 8, 3), _c(128, 64, 8, 4), _c(64, 64, 4, 4),
         _c(128, 128, 4, 3)),
    128: (_c(64, 32, 4, 2),),
    256: (_c(64, 64, 4, 2), _c(128, 64, 8, 2), _c(64, 32, 4, 3), _c(128, 32, 8, 2)),
}
# fixed configs: 16-bit operands (one of the candidates) and fp32 operands
FIXED_16BIT = {16: _c(64, 64, 4, 3), 32: _c(64, 64, 4, 3), 64: _c(128, 64, 4, 3),
               128: _c(64, 32, 4, 2), 256: _c(64, 64, 4, 2)}
# (IEEE fp32 dots unroll into FMA code: small tiles keep the compile near 10 s at d=128)
FP32_FIXED = {16: _c(64, 32, 4, 2), 32: _c(64, 32, 4, 2), 64: _c(64, 32, 4, 2),
              128: _c(64, 32, 8, 2), 256: _c(32, 32, 8, 2)}
# fp8 (e4m3) operands, after Triton's fused-attention tutorial for fp8 on Hopper (128 x 128
# tiles, 8 warps for d >= 128): half the bytes of a 16-bit tile, so wider key blocks fit
# the same shared memory; register pressure (the fp32 S tile and O accumulator) sets the
# limits. The fixed config is the first candidate.
FP8_CANDIDATES: dict[int, tuple[Config, ...]] = {
    32: (_c(128, 128, 4, 3), _c(128, 64, 4, 3), _c(64, 128, 4, 3)),
    64: (_c(128, 128, 8, 3), _c(128, 64, 4, 3), _c(128, 128, 4, 3), _c(64, 128, 4, 3)),
    128: (_c(128, 128, 8, 3), _c(128, 64, 8, 3), _c(128, 128, 8, 4), _c(64, 128, 4, 3)),
    256: (_c(128, 64, 8, 2), _c(64, 64, 4, 3), _c(64, 128, 8, 2)),
}
FIXED_FP8 = {d: c[0] for d, c in FP8_CANDIDATES.items()}
# Interpreter: one tile size (warps and stages mean nothing there); tests pass others.
INTERPRETER_CONFIG = _c(128, 128, 1, 1)


def _width(dtype) -> int:
    """Bytes per element of a torch dtype or precision name: the item size of the
    precision's storage dtype in the registry (:mod:`flashbench.inputs.precision`; tf32 is stored
    as float32, so 4). ValueError for a dtype no precision stores."""
    name = str(dtype).removeprefix("torch.")
    for prec in PRECISIONS.values():
        if name in (prec.name, prec.torch_name):
            return np.dtype(prec.storage).itemsize
    raise ValueError(f"dtype {dtype!r} is none of flashbench's precisions {sorted(PRECISIONS)} "
                     f"(nor their torch dtypes)")


def _by_width(dtype, tables: dict[int, dict]) -> dict:
    width = _width(dtype)
    if width not in tables:
        raise ValueError(f"the forward kernel takes 4-, 2- and 1-byte operands (fp32, "
                         f"fp16/bf16, fp8), got {dtype} ({width} bytes)")
    return tables[width]


def candidates(head_dim: int, dtype) -> tuple[Config, ...]:
    """The autotune candidates for ``head_dim`` and operand ``dtype`` (16-bit and fp8;
    fp32 has just its fixed config)."""
    fp32 = {d: (c,) for d, c in FP32_FIXED.items()}
    return _by_width(dtype, {4: fp32, 2: HOPPER_CANDIDATES, 1: FP8_CANDIDATES})[head_dim]


def fixed_config(head_dim: int, dtype) -> Config:
    """The one config used for correctness checks, fp32 operands and per-block fp8
    descales (whose blocks are the tiles)."""
    return _by_width(dtype, {4: FP32_FIXED, 2: FIXED_16BIT, 1: FIXED_FP8})[head_dim]


def forward_smem_bytes(cfg: Config, head_dim: int, dtype, head_dim_v: int | None = None) -> int:
    """Shared memory of the forward's pipelined tiles: the Q block once, K and V blocks
    once per stage (what Triton 3.9 allocates for 16-bit operands on sm_90, checked with
    ``gpu_bench.py --plan --compile``; fp32 takes less). ``head_dim_v``: V's compiled
    width where it differs from Q's and K's."""
    p = cfg.kwargs
    dv = head_dim if head_dim_v is None else head_dim_v
    return _width(dtype) * (head_dim * (p["BLOCK_M"] + p["BLOCK_N"] * cfg.num_stages)
                            + dv * p["BLOCK_N"] * cfg.num_stages)


def fits_shared_memory(nbytes: int, limit: int = HOPPER_SMEM_BYTES) -> bool:
    return nbytes <= limit


def prune_forward(configs: list[Config], named_args: dict, **constexprs) -> list[Config]:
    """Triton ``early_config_prune`` for the forward kernel (see the module docstring).

    Reads the operand dtype from ``named_args["Q"]``, the head dim from
    ``constexprs["HEAD_DIM"]`` (and ``HEAD_DIM_V``) and the query length from ``named_args["N_Q"]``.
    Never returns an empty list: if every config would be dropped, the first stays.
    """
    dtype, d, n_q = named_args["Q"].dtype, constexprs["HEAD_DIM"], named_args["N_Q"]
    dv = constexprs.get("HEAD_DIM_V", d)
    kept = [c for c in configs if fits_shared_memory(forward_smem_bytes(c, d, dtype, dv))]
    short = [c for c in kept if c.kwargs["BLOCK_M"] <= max(16, n_q)]
    if short:
        kept = short
    return kept or configs[:1]


# The Hopper variants (flashbench.kernels.triton_hopper): two candidates per head dim and
# variant, so the GPU window's variants phase compiles 4 variants x 2 configs per signature.
# 128 x 64 tiles with 8 warps are today's fixed d=128 config; 128 x 128 with 2 stages is the
# tutorial's TMA shape. attn_fwd_ws takes 4 warps per consumer warpgroup (Triton's Hopper
# warp specialisation adds the producer and a second consumer group: 12 warps in all; with
# 8 warps it leaves the loop unspecialised). The first is each variant's fixed config.
VARIANT_CANDIDATES: dict[int, tuple[Config, ...]] = {
    16: (_c(128, 64, 4, 3), _c(64, 64, 4, 3)),
    32: (_c(128, 64, 4, 3), _c(64, 64, 4, 3)),
    64: (_c(128, 64, 4, 3), _c(128, 128, 8, 3)),
    128: (_c(128, 64, 8, 3), _c(128, 128, 8, 2)),
    256: (_c(64, 64, 4, 2), _c(128, 64, 8, 2)),
}
WS_CANDIDATES: dict[int, tuple[Config, ...]] = {
    16: (_c(128, 64, 4, 3), _c(128, 128, 4, 2)),
    32: (_c(128, 64, 4, 3), _c(128, 128, 4, 2)),
    64: (_c(128, 64, 4, 3), _c(128, 128, 4, 2)),
    128: (_c(128, 64, 4, 3), _c(128, 128, 4, 2)),
    256: (_c(128, 64, 4, 2), _c(128, 32, 4, 3)),
}


def variant_candidates(head_dim: int, dtype, kernel: str = "tma") -> tuple[Config, ...]:
    """The autotune candidates of Hopper variant ``kernel`` (16-bit operands only)."""
    table = WS_CANDIDATES if kernel == "ws" else VARIANT_CANDIDATES
    return _by_width(dtype, {2: table})[head_dim]


_DEFAULT_CONFIG: contextvars.ContextVar = contextvars.ContextVar("flashbench_forward_config",
                                                                 default=None)


@contextlib.contextmanager
def default_config(config: Config | str | None):
    """Within the block, calls that name no config use ``config`` (``"fixed"``: the fixed
    config, as correctness checks want; None: autotune). Contextvar: per thread/task."""
    token = _DEFAULT_CONFIG.set(config)
    try:
        yield
    finally:
        _DEFAULT_CONFIG.reset(token)


def current_config() -> Config | str | None:
    """The config of the innermost :func:`default_config` block (None outside one): what
    a call that names no config launches with (the forward, the fp8 and
    the Hopper forwards read it)."""
    return _DEFAULT_CONFIG.get()
