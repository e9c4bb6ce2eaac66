"""A user's attention function by its spec, and what it declares.

:func:`load` imports ``"package.module:function"`` in the calling process (a worker's,
:mod:`flashbench.backends.child`; or a timing's) and reads the optional attributes that
declare what the function takes (:mod:`flashbench.backends.user` lists them), among
them ``flashbench_kind``: "forward" (the default) or "decode"
(:mod:`flashbench.backends.decode`); a function is called only as its kind
(:func:`check_kind`), as :func:`call_forward` / :func:`call_decode` say. Kept apart from
the registry and the worker so that the worker's child imports only this.
"""

from __future__ import annotations

import importlib
import re

from flashbench.backends.record import TORCH_FLOATS, VARIANTS
from flashbench.inputs.precision import PRECISIONS
from flashbench.kernels.validate import BackendFailed, a_type

__all__ = ["DEFAULT_DTYPES", "FORWARD", "DECODE", "DECODE_INPUTS", "parse_spec", "load",
           "check_kind", "call_forward", "call_varlen", "call_decode", "as_declared"]

DEFAULT_DTYPES = TORCH_FLOATS  # from the precision registry (flashbench.backends.record)
FORWARD, DECODE = "forward", "decode"  # the values of a function's flashbench_kind
DECODE_INPUTS = ("q", "k_cache", "v_cache", "cache_seqlens", "block_table")  # call_decode's
_DOTTED = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"
_SPEC = re.compile(rf"^({_DOTTED}):({_DOTTED})$")


def parse_spec(spec: str) -> tuple[str, str]:
    """("package.module", "function") from ``"package.module:function"``; ValueError
    naming the expected form otherwise."""
    m = _SPEC.match(spec.strip()) if isinstance(spec, str) else None
    if m is None:
        raise ValueError(f"backend {spec!r} is not of the form package.module:function "
                         "(dotted Python names)")
    if m[1] == "py" or m[1].endswith(".py"):  # "good.py:forward" read as package good
        raise ValueError(f"backend {spec!r}: name the module without .py "  # (a probe)
                         f"({m[1][:-3] or m[1]}:{m[2]}), found as python -m finds it")
    return m[1], m[2]


def _declared(fn, attr: str, default, check):
    value = getattr(fn, attr, default)
    try:
        return check(value)
    except (TypeError, ValueError):
        hint = " (True or False)" if check is _flag else (
            f" (a tuple of precision names, e.g. ('fp16', 'bf16'); of {', '.join(PRECISIONS)})"
            if check is _dtypes else "")
        raise BackendFailed(f"its {attr} attribute {value!r} is not valid{hint}") from None


def _dtypes(value) -> tuple[str, ...]:
    if isinstance(value, str):  # "bf16" read as ('b', 'f', '1', '6') (a probe)
        raise ValueError(value)
    names = tuple(value)
    if not names or any(n not in PRECISIONS for n in names):
        raise ValueError(names)
    return names


def _variants(value) -> tuple[str, ...]:
    names = (value,) if isinstance(value, str) else tuple(value)
    if any(n not in VARIANTS for n in names):
        raise ValueError(names)
    return names


def _flag(value) -> bool:
    if not isinstance(value, bool):
        raise TypeError(value)
    return value


def _kind(value) -> str:
    if value not in (FORWARD, DECODE):
        raise ValueError(value)
    return value


def check_kind(spec: str, kind: str, wanted: str) -> None:
    """BackendFailed unless a function of ``kind`` may be called as ``wanted``."""
    if kind == wanted:
        return
    if wanted == DECODE:
        raise BackendFailed(f"{spec} declares no decode signature (flashbench_kind = "
                            f"{kind!r}; a decode function sets flashbench_kind = 'decode')")
    raise BackendFailed(f"{spec} is a decode function (flashbench_kind = {kind!r}): run it "
                        "with --decode (check --decode, speed --decode)")


def call_forward(fn, q, k, v, causal=False, scale=None, **variant):
    """``fn(q, k, v, causal=, [scale=,] **variant)``: scale passed only when set."""
    return fn(q, k, v, **_keywords(causal, scale), **variant)


def call_varlen(fn, q, k, v, cu_q, cu_k, causal=False, scale=None, longest=None, **variant):
    """A packed batch, FlashAttention's varlen keywords: ``fn(q, k, v, causal=, [scale=,]
    cu_seqlens_q=, cu_seqlens_k=, max_seqlen_q=, max_seqlen_k=, **variant)``, cu_seqlens int32
    tensors on q's device. ``longest``: (max_seqlen_q, max_seqlen_k) when known (a timed
    call's, read once before the clock); None: read from cu_seqlens here, on the host."""
    import torch

    cu_q, cu_k = (c.to(device=q.device, dtype=torch.int32) if isinstance(c, torch.Tensor)
                  else torch.tensor(c, dtype=torch.int32, device=q.device) for c in (cu_q, cu_k))
    if longest is None:
        longest = tuple(int(c.diff().max()) if c.numel() > 1 else 0 for c in (cu_q, cu_k))
    return fn(q, k, v, **_keywords(causal, scale), cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
              max_seqlen_q=int(longest[0]), max_seqlen_k=int(longest[1]), **variant)


def call_decode(fn, q, k_cache, v_cache, cache_seqlens, block_table=None, causal=False,
                scale=None):
    """``fn(q, k_cache, v_cache, cache_seqlens, block_table, causal=, [scale=])``."""
    return fn(q, k_cache, v_cache, cache_seqlens, block_table, **_keywords(causal, scale))


def as_declared(declared: dict, variant: dict | None, device, grad: bool = False) -> dict:
    """The variant keywords (window, softcap, sinks it declared taking) as a function takes
    them: one that declares ``flashbench_dsinks`` gets its sinks as a float32 [H] tensor on
    ``device``, one that requires grad in a gradient call (``grad``: dsinks)."""
    variant = dict(variant or {})
    if variant.get("sinks") is not None and declared.get("dsinks"):
        import torch

        variant["sinks"] = torch.tensor(variant["sinks"], dtype=torch.float32,
                                        device=device).requires_grad_(grad)
    return variant


def _keywords(causal, scale) -> dict:
    return {"causal": causal} if scale is None else {"causal": causal, "scale": scale}


def _head_dims(value) -> tuple[int, ...] | None:
    if value is None:
        return None
    dims = tuple(int(d) for d in value)
    if not dims or any(d < 1 for d in dims):
        raise ValueError(dims)
    return dims


def load(spec: str):
    """(function, declared) for ``"module:function"``, imported in this process (the
    worker's, :mod:`flashbench.backends.child`; or a timing's): ``declared`` holds
    kind, dtypes, head_dims, gqa, differentiable, variants, grad_variants (those of them its
    backward takes: default all), dsinks (``flashbench_dsinks = True``: its sinks arrive as
    a float32 [H] tensor, and its backward gives their gradient), dv (``flashbench_dv = True``:
    it takes v with a head dim dv != d, DeepSeek's 192 / 128), varlen
    (``flashbench_varlen = True``: it takes packed batches, :func:`call_varlen`).
    BackendFailed with the reason otherwise."""
    module_name, attr = parse_spec(spec)
    try:
        obj = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except Exception as exc:
        raise BackendFailed(f"cannot import {spec}: {type(exc).__name__}: {exc}") from exc
    if not callable(obj):
        raise BackendFailed(f"{spec} is {a_type(obj)}, not a function")
    head_dims = _declared(obj, "flashbench_head_dims", None, _head_dims)
    variants = _declared(obj, "flashbench_variants", (), _variants)
    grad_variants = _declared(obj, "flashbench_grad_variants", variants, _variants)
    if not set(grad_variants) <= set(variants):
        raise BackendFailed(f"its flashbench_grad_variants {grad_variants!r} names a variant "
                            f"its forward does not take (flashbench_variants {variants!r})")
    differentiable = _declared(obj, "flashbench_differentiable", False, _flag)  # "False"
    # (a string) read as True before: its gradients judged and failed (a probe, 2026-12-07)
    dsinks = _declared(obj, "flashbench_dsinks", False, _flag)
    if dsinks and not (differentiable and "sinks" in grad_variants):
        raise BackendFailed("it declares flashbench_dsinks but its backward takes no sinks "
                            "(flashbench_differentiable = True and 'sinks' in "
                            "flashbench_variants and flashbench_grad_variants)")
    return obj, {"kind": _declared(obj, "flashbench_kind", FORWARD, _kind),
                 "dtypes": list(_declared(obj, "flashbench_dtypes", DEFAULT_DTYPES, _dtypes)),
                 "head_dims": None if head_dims is None else list(head_dims),
                 "gqa": _declared(obj, "flashbench_gqa", False, _flag),
                 "differentiable": differentiable, "dsinks": dsinks,
                 "variants": list(variants), "grad_variants": list(grad_variants),
                 "dv": _declared(obj, "flashbench_dv", False, _flag),
                 "varlen": _declared(obj, "flashbench_varlen", False, _flag)}
