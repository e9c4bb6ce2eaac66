"""Validation of torch (q, k, v) tensors, shared by every torch backend.

Layout [B, H, N, d] (that of ``torch.nn.functional.scaled_dot_product_attention``):
q [B, H, Nq, d], k [B, H, Nk, d], v [B, H, Nk, dv]. Errors name the argument and
what was expected.
"""

from __future__ import annotations

import torch

from flashbench.precision import PRECISIONS, get_precision


def torch_dtype(dtype: str) -> torch.dtype:
    """The torch dtype that holds tensors of precision ``dtype`` (see
    :mod:`flashbench.precision`); ValueError for names torch cannot store."""
    name = get_precision(dtype).torch_name
    if name is None or not hasattr(torch, name):
        raise ValueError(f"dtype {dtype!r} has no torch storage dtype in this torch "
                         f"{torch.__version__}")
    return getattr(torch, name)


# precision name -> torch dtype, read from the registry (tf32 is stored as float32)
TORCH_DTYPES = {n: getattr(torch, p.torch_name) for n, p in PRECISIONS.items()
                if p.torch_name is not None and hasattr(torch, p.torch_name)}
ALL_DTYPES = tuple(dict.fromkeys(TORCH_DTYPES.values()))


def check_tensors(q, k, v, dtypes=ALL_DTYPES, head_dims=None):
    """Raise TypeError/ValueError unless q, k, v are consistent [B, H, N, d] tensors.

    ``dtypes``: accepted torch dtypes; ``head_dims``: accepted d (None: any).
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor [B, H, N, d], got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D [B, H, N, d], got shape {tuple(t.shape)}")
        if t.dtype not in dtypes:
            raise TypeError(f"{name} has dtype {t.dtype}; supported: {[str(d) for d in dtypes]}")
        if 0 in t.shape:
            raise ValueError(f"{name} must have no empty dim, got shape {tuple(t.shape)}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    if q.shape[:2] != k.shape[:2] or k.shape[:2] != v.shape[:2]:
        raise ValueError(
            f"q, k, v must share B and H: got q {tuple(q.shape)}, k {tuple(k.shape)}, "
            f"v {tuple(v.shape)}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share head dim d: q has {q.shape[-1]}, k has {k.shape[-1]}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must share Nk: k has {k.shape[-2]}, v has {v.shape[-2]}")
    if head_dims is not None and q.shape[-1] not in head_dims:
        raise ValueError(f"head dim d={q.shape[-1]} is not supported; supported: {list(head_dims)}")
