"""The inputs of a timed attention call, made from one content seed, the same in any process
(the harness rebuilds a worker's inputs from the seeds to check its outputs): q, k, v, and dO
for a backward; :func:`pass_call` makes the timed call of each pass (fwd, bwd, fwdbwd)."""

from __future__ import annotations

from flashbench.inputs.precision import get_precision
from flashbench.inputs.problem import Shape

__all__ = ["attention_maker", "qkv_shapes", "varlen_maker", "packed_shape", "grad_maker",
           "do_maker",
           "pass_call", "NoBackward", "pool_size", "POOL_BYTES", "MIN_SLOTS", "MAX_SLOTS",
           "PASSES", "torch_dtype"]

PASSES = ("fwd", "bwd", "fwdbwd")  # what a timed call runs: forward, backward, both

POOL_BYTES = 64 * 1024**2  # a pool holds up to this much input (more than a CPU's L3)
MIN_SLOTS, MAX_SLOTS = 3, 16


def torch_dtype(dtype: str):
    """The torch dtype that stores precision ``dtype`` (a name or its Precision; tf32 is
    float32), imported here so that the timed side needs no kernel module."""
    import torch

    return getattr(torch, get_precision(dtype).torch_name)


def attention_maker(shape: Shape, dtype: str, device: str = "cpu", draw: str = "cpu",
                    softcap: float | None = None):
    """``make(seed) -> (q, k, v)``: torch tensors [B, H, Nq, d], [B, Hkv, Nk, d],
    [B, Hkv, Nk, dv] in ``dtype`` on ``device``, N(0, 1) from a generator seeded with
    ``seed`` (with ``softcap``, q and k times :func:`~flashbench.inputs.problem.softcap_gain`,
    as check's: where the cap bends the scores). ``draw``: "cpu", a CPU generator (identical
    in every process: the harness rebuilds a worker's inputs), or "device", one on
    ``device`` (identical within a process, hundreds of times faster on a GPU: the harness's
    own rows, whose pool and checks share its process; on an H200 the CPU draws were a
    quarter of a speed run)."""
    import torch

    dt, dims, on = torch_dtype(dtype), qkv_shapes(shape), _drawn_on(device, draw)
    gains = _gains(softcap)

    def make(seed: int) -> tuple:
        g = torch.Generator(device=on).manual_seed(int(seed))
        return tuple(_scaled(torch.randn(d, generator=g, device=on), a).to(dt).to(device)
                     for d, a in zip(dims, gains, strict=True))

    return make


def _gains(softcap) -> tuple[float, float, float]:
    """q's, k's and v's factors: a softcap's gain on q and k (1 without one)."""
    from flashbench.inputs.problem import softcap_gain

    a = softcap_gain(softcap)
    return a, a, 1.0


def _scaled(x, gain: float):
    """``x`` times ``gain``, in place; untouched at 1 (every pool without a softcap: no pass
    over its draws for nothing)."""
    return x if gain == 1.0 else x.mul_(gain)


def qkv_shapes(shape: Shape) -> tuple:
    """The shapes of q, k, v: [B, H, Nq, d], [B, Hkv, Nk, d], [B, Hkv, Nk, dv] (and of
    their gradients dq, dk, dv)."""
    return ((shape.B, shape.H, shape.Nq, shape.d), (shape.B, shape.kv_heads, shape.Nk, shape.d),
            (shape.B, shape.kv_heads, shape.Nk, shape.head_dim_v))


def _drawn_on(device: str, draw: str) -> str:
    if draw not in ("cpu", "device"):
        raise ValueError(f"draw must be 'cpu' or 'device', got {draw!r}")
    return device if draw == "device" else "cpu"


def packed_shape(lengths, shape: Shape, keys=None) -> Shape:
    """The packed batch of ``lengths`` (``keys``: its key lengths where they differ) as one
    sequence of all its rows: B = 1, Nq the queries' total, Nk the keys', ``shape``'s heads
    and head dims (what sizes its pool and counts its bytes)."""
    total = sum(int(n) for n in lengths)
    total_k = total if keys is None else sum(int(n) for n in keys)
    return Shape(1, shape.H, total, total_k, shape.d, shape.dv, Hkv=shape.Hkv)


def _cu(lengths):
    import torch

    return torch.tensor([0, *torch.tensor([int(n) for n in lengths]).cumsum(0).tolist()],
                        dtype=torch.int32)


def varlen_maker(lengths, shape: Shape, dtype: str, device: str = "cpu", keys=None,
                 softcap: float | None = None):
    """``make(seed) -> (q, k, v, cu_seqlens_q, cu_seqlens_k)``: a packed batch in
    FlashAttention's varlen layout, q [total_q, H, d], k [total_k, Hkv, d], v [total_k, Hkv,
    dv] in ``dtype`` on ``device``, N(0, 1) from a CPU generator seeded with ``seed``
    (identical in every process); the cu_seqlens int32 [len + 1] on ``device``, the same for
    every seed (``keys``: the key lengths where they differ from ``lengths``; ``softcap``:
    q and k scaled as :func:`attention_maker`'s)."""
    import torch

    dt = torch_dtype(dtype)
    p = packed_shape(lengths, shape, keys)
    dims = ((p.Nq, p.H, p.d), (p.Nk, p.kv_heads, p.d), (p.Nk, p.kv_heads, p.head_dim_v))
    cu_q, cu_k = _cu(lengths), _cu(lengths if keys is None else keys)
    gains = _gains(softcap)

    def make(seed: int) -> tuple:
        g = torch.Generator().manual_seed(int(seed))
        return (*(_scaled(torch.randn(d, generator=g), a).to(dt).to(device)
                  for d, a in zip(dims, gains, strict=True)),
                cu_q.clone().to(device), cu_k.clone().to(device))

    return make


def grad_maker(shape: Shape, dtype: str, device: str = "cpu", draw: str = "cpu",
               softcap: float | None = None):
    """``make(seed) -> (q, k, v, do)``: :func:`attention_maker`'s q, k, v and the output
    gradient dO [B, H, Nq, dv] in ``dtype``, N(0, 1) from a second generator, drawn where
    ``draw`` says (as :func:`attention_maker`). ``seed``: an int (dO's generator seeded with
    ``seed + 1``) or a pair (q, k, v's seed, dO's seed: a pool's content once its dO was
    drawn after the forward, :meth:`flashbench.timed.pool.Pool.arm`)."""
    qkv = attention_maker(shape, dtype, device, draw, softcap)
    do = do_maker(shape, dtype, device, draw)

    def make(seed) -> tuple:
        s, d = (seed, int(seed) + 1) if isinstance(seed, int) else seed
        return (*qkv(s), *do(d))

    return make


def do_maker(shape: Shape, dtype: str, device: str = "cpu", draw: str = "cpu"):
    """``make(seed) -> (do,)``: the output gradient dO of :func:`grad_maker` from its own
    seed (a pool's late argument: :attr:`flashbench.timed.pool.Pool.late`)."""
    import torch

    dt = torch_dtype(dtype)
    dims = (shape.B, shape.H, shape.Nq, shape.head_dim_v)
    on = _drawn_on(device, draw)

    def make(seed: int) -> tuple:
        g = torch.Generator(device=on).manual_seed(int(seed))
        return (torch.randn(dims, generator=g, device=on).to(dt).to(device),)

    return make


class NoBackward(Exception):
    """The forward's output carries no gradient: the backward cannot be timed."""


def _graph(forward, q, k, v):
    """o of ``forward(q, k, v)`` (the first item of a tuple) with q, k, v as fresh leaves
    sharing the slot's storage; :class:`NoBackward` when o carries no gradient."""
    import torch

    leaves = tuple(t.detach().requires_grad_(True) for t in (q, k, v))
    with torch.enable_grad():
        out = forward(*leaves)
    o = out[0] if isinstance(out, tuple | list) else out
    if not isinstance(o, torch.Tensor) or not o.requires_grad:
        what = "not a tensor" if not isinstance(o, torch.Tensor) else "no gradient (autograd)"
        raise NoBackward(f"no backward: its output carries {what}")
    return o, leaves


def pass_call(forward, direction: str):
    """(setup, call) of one timed call of pass ``direction`` for ``forward(q, k, v) -> o``:
    ``setup(q, k, v)`` runs outside the clock, ``call(*setup(...)[, do])`` is timed.

    "fwd": o. "bwd": the forward and its graph are built in ``setup(q, k, v) -> (o, q, k,
    v)``, before dO exists (:meth:`flashbench.timed.pool.Pool.arm`); the call,
    ``call(o, q, k, v, do)``, is ``torch.autograd.grad`` of o with dO -> (dq, dk, dv).
    "fwdbwd": forward and backward in the call -> (o, dq, dk, dv). Gradients are of the
    slot's own q, k, v (grouped-query k, v: their Hkv heads)."""
    import torch

    if direction == "fwd":
        return None, forward
    if direction == "bwd":
        def setup(q, k, v):
            o, leaves = _graph(forward, q, k, v)
            return o, *leaves

        def call(o, q, k, v, do):
            return torch.autograd.grad(o, (q, k, v), do.to(o.dtype))

        return setup, call
    if direction != "fwdbwd":
        raise ValueError(f"pass must be one of {list(PASSES)}, got {direction!r}")

    def both(q, k, v, do):
        o, leaves = _graph(forward, q, k, v)
        return (o.detach(), *torch.autograd.grad(o, leaves, do.to(o.dtype)))

    return None, both


def pool_size(shape: Shape, dtype: str, samples: int) -> int:
    """Slots of a pool for ``shape`` and ``samples`` timed calls: enough for
    :data:`POOL_BYTES` of inputs, within [:data:`MIN_SLOTS`, :data:`MAX_SLOTS`], and at most
    a third of the calls, so that some contents come back (a cache that hits on them is
    then caught under the roofline floor; refilled slots catch the caches keyed on addresses)."""
    item = torch_dtype(dtype).itemsize
    per = item * shape.B * (shape.H * shape.Nq * shape.d
                            + shape.kv_heads * shape.Nk * (shape.d + shape.head_dim_v))
    return max(MIN_SLOTS, min(MAX_SLOTS, -(-POOL_BYTES // per), samples // 3))
