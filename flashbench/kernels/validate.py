"""Validation of torch (q, k, v) tensors, shared by every torch backend.

Layout [B, H, N, d] (that of ``torch.nn.functional.scaled_dot_product_attention``):
q [B, H, Nq, d], k [B, Hkv, Nk, d], v [B, Hkv, Nk, dv]. Hkv == H is plain attention;
a kernel that takes grouped-query attention (``gqa=True``) also accepts Hkv dividing
H, query head h reading kv head ``h // (H // Hkv)`` (Hkv == 1: multi-query). Errors
name the argument and what was expected.

Also the two ways a backend call can end without a result
(:class:`BackendUnavailable`, :class:`BackendFailed`), raised by the kernels and the
backend registry and turned into records by :mod:`flashbench.measure`.
"""

from __future__ import annotations

import torch

from flashbench.inputs.precision import PRECISIONS, Precision, get_precision
from flashbench.inputs.validation import check_causal, head_group

__all__ = ["torch_dtype", "precision_name", "TORCH_DTYPES", "ALL_DTYPES", "validate_tensors",
           "kv_group", "validate_heads", "expand_kv", "GroupedKVError",
           "BackendUnavailable", "BackendFailed", "a_type"]


class BackendUnavailable(RuntimeError):
    """This backend cannot run this case here (the message is the reason, one sentence);
    the other backends still run."""


class BackendFailed(RuntimeError):
    """A backend ran and gave no valid result (raised, wrong shape or dtype, non-finite
    output for finite inputs): a FAIL with the message as its reason."""


class GroupedKVError(ValueError):
    """k, v have fewer heads than q, and the kernel takes only Hkv == H."""


def a_type(x) -> str:
    """``x``'s type name with its article, for a message: "an int", "an ndarray" (said
    "en-d-array"), "a dict"."""
    name = type(x).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' or name.startswith('nd') else 'a'} {name}"


def torch_dtype(dtype: str | Precision) -> torch.dtype:
    """The torch dtype that holds tensors of precision ``dtype`` (a name or its Precision:
    :mod:`flashbench.inputs.precision`); ValueError for those torch cannot store."""
    prec = get_precision(dtype)
    name = prec.torch_name
    if name is None or not hasattr(torch, name):
        raise ValueError(f"dtype {prec.name!r} has no torch storage dtype in this torch "
                         f"{torch.__version__}")
    return getattr(torch, name)


# precision name -> torch dtype, read from the registry (tf32 is stored as float32)
TORCH_DTYPES = {n: getattr(torch, p.torch_name) for n, p in PRECISIONS.items()
                if p.torch_name is not None and hasattr(torch, p.torch_name)}
ALL_DTYPES = tuple(dict.fromkeys(TORCH_DTYPES.values()))


def precision_name(dtype: torch.dtype) -> str:
    """The precision name a torch dtype stores ("fp32" for float32, never "tf32")."""
    for name, t in TORCH_DTYPES.items():
        if t == dtype:
            return name
    raise ValueError(f"torch dtype {dtype} is none of flashbench's precisions "
                     f"{sorted(TORCH_DTYPES)}")


def kv_group(q, k, v) -> int:
    """Query heads per kv head, G = H // Hkv (dim 1 holds the heads); ValueError naming
    both head counts when k and v differ or Hkv does not divide H: the rule of
    :func:`flashbench.inputs.validation.head_group`, which the NumPy side applies too."""
    try:
        return head_group(q.shape[1], k.shape[1], v.shape[1])
    except ValueError as err:
        raise ValueError(f"{err}; shapes q {tuple(q.shape)}, k {tuple(k.shape)}, "
                         f"v {tuple(v.shape)}") from None


def validate_heads(q, k, v) -> None:
    """The head counts of q, k, v (:func:`kv_group`) checked first, before the rest of
    :func:`validate_tensors`, where all three are 4-D tensors (else validate_tensors words
    the error). For kernels that take grouped-query attention."""
    if all(isinstance(t, torch.Tensor) and t.dim() == 4 for t in (q, k, v)):
        kv_group(q, k, v)


def expand_kv(q, k, v):
    """k, v repeated to q's H heads (head h holds kv head h // G): the expanded copy a
    kernel without grouped-query support needs. Unchanged when Hkv == H."""
    group = kv_group(q, k, v)
    if group == 1:
        return k, v
    return k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)


def validate_tensors(q, k, v, dtypes=ALL_DTYPES, head_dims=None, gqa: bool = False,
                  causal=False):
    """Raise TypeError/ValueError unless q, k, v are consistent [B, H, N, d] tensors.

    ``dtypes``: accepted torch dtypes; ``head_dims``: accepted d (None: any);
    ``gqa``: accept k, v with Hkv heads dividing H (else :class:`GroupedKVError`, a
    ValueError, when Hkv != H); ``causal``: the call's causal flag, which must be a
    bool (:func:`flashbench.inputs.validation.check_causal`). Returns the group size
    G = H // Hkv.
    """
    check_causal(causal)
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
    if not (q.shape[0] == k.shape[0] == v.shape[0]):
        raise ValueError(
            f"q, k, v must share the batch B: got q {tuple(q.shape)}, k {tuple(k.shape)}, "
            f"v {tuple(v.shape)}"
        )
    group = kv_group(q, k, v)
    if group > 1 and not gqa:
        raise GroupedKVError(
            f"q, k, v must share B and H for this kernel: q has H={q.shape[1]} heads, k and v "
            f"Hkv={k.shape[1]} (it takes no grouped-query attention: expand k and v)")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share head dim d: q has {q.shape[-1]}, k has {k.shape[-1]}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must share Nk: k has {k.shape[-2]}, v has {v.shape[-2]}")
    if head_dims is not None and q.shape[-1] not in head_dims:
        raise ValueError(f"head dim d={q.shape[-1]} is not supported; supported: {list(head_dims)}")
    return group
