"""The inputs of a timed attention call, made from one content seed, the same in any process
(the harness rebuilds a worker's inputs from the seeds to check its outputs)."""

from __future__ import annotations

from flashbench.inputs.precision import get_precision
from flashbench.inputs.problem import Shape

__all__ = ["attention_maker", "pool_size", "POOL_BYTES", "MIN_SLOTS", "MAX_SLOTS"]

POOL_BYTES = 64 * 1024**2  # a pool holds up to this much input (more than a CPU's L3)
MIN_SLOTS, MAX_SLOTS = 3, 16


def _torch_dtype(dtype: str):
    import torch

    return getattr(torch, get_precision(dtype).torch_name)


def attention_maker(shape: Shape, dtype: str, device: str = "cpu"):
    """``make(seed) -> (q, k, v)``: torch tensors [B, H, Nq, d], [B, Hkv, Nk, d],
    [B, Hkv, Nk, dv] in ``dtype`` on ``device``, N(0, 1) from a CPU generator seeded with
    ``seed`` (identical in every process)."""
    import torch

    dt = _torch_dtype(dtype)
    dims = ((shape.B, shape.H, shape.Nq, shape.d), (shape.B, shape.kv_heads, shape.Nk, shape.d),
            (shape.B, shape.kv_heads, shape.Nk, shape.head_dim_v))

    def make(seed: int) -> tuple:
        g = torch.Generator().manual_seed(int(seed))
        return tuple(torch.randn(d, generator=g).to(dt).to(device) for d in dims)

    return make


def pool_size(shape: Shape, dtype: str, samples: int) -> int:
    """Slots of a pool for ``shape`` and ``samples`` timed calls: enough for
    :data:`POOL_BYTES` of inputs, within [:data:`MIN_SLOTS`, :data:`MAX_SLOTS`], and at most
    a third of the calls, so that some contents come back (a cache that hits on them is
    then caught under the roofline floor; refilled slots catch the caches keyed on addresses)."""
    item = _torch_dtype(dtype).itemsize
    per = item * shape.B * (shape.H * shape.Nq * shape.d
                            + shape.kv_heads * shape.Nk * (shape.d + shape.head_dim_v))
    return max(MIN_SLOTS, min(MAX_SLOTS, -(-POOL_BYTES // per), samples // 3))
