"""Decode backends: every decode implementation as data, beside the forward registry.

Called as ``fn(q, k_cache, v_cache, cache_seqlens, block_table=None, causal=False,
scale=None)`` on torch tensors (layouts of :mod:`flashbench.inputs.kvcache`), returning o
[B, Nq, H, dv] or ``(o, lse)``; outputs are checked as the forward's are
(:func:`checked_decode_output`). :data:`DECODE_BACKENDS` uses the forward's names for the
decode counterparts (``triton``, ``torch-naive``, ``torch-sdpa``, ``flex``). A user's
``package.module:function`` joins when the function declares ``flashbench_kind =
"decode"`` (else it FAILs saying so), as do entry points of the group
``flashbench.decode_backends``, so forward checks never call a decode function; it is
judged like flashbench's own kernel.
"""

from __future__ import annotations

import importlib.metadata
import pkgutil
from dataclasses import dataclass
from functools import partial

import torch

from flashbench.backends import BACKENDS, TORCH_FLOATS, Implementation, _always
from flashbench.backends.outputs import BackendOutput
from flashbench.inputs.precision import PRECISIONS
from flashbench.kernels import torch_decode as td
from flashbench.kernels import torch_peers as tp
from flashbench.kernels.checks import TORCH_DTYPES, BackendFailed, BackendUnavailable

__all__ = ["DecodeBackend", "DECODE_BACKENDS", "DECODE_GROUP", "get_decode_backend",
           "resolve_decode_backends", "checked_decode_output", "KIND"]

DECODE_GROUP = "flashbench.decode_backends"
KIND = "decode"  # the value of a user function's flashbench_kind attribute


@dataclass(frozen=True)
class DecodeBackend(Implementation):
    """One decode implementation (fields as :class:`flashbench.backends.Backend`'s)."""

    own_lse: bool = False
    origin: str = "flashbench"
    default_on: tuple[str, ...] = ("cpu", "cuda")
    head_dims: tuple[int, ...] | None = None

    def unavailable_for(self, d: int, dtype: str) -> str | None:
        reason = self.unavailable()
        if reason is None and dtype not in self.dtypes:
            reason = f"takes {', '.join(self.dtypes)}, not {dtype}"
        if reason is None and self.head_dims is not None and d not in self.head_dims:
            reason = f"head dim d={d} is not one it takes ({', '.join(map(str, self.head_dims))})"
        return reason

    def __call__(self, q, k_cache, v_cache, cache_seqlens, block_table=None, causal=False,
                 scale=None) -> BackendOutput:
        """(o, lse) for accuracy checks, validated; BackendUnavailable / BackendFailed."""
        reason = self.unavailable_for(q.shape[-1], _precision(q.dtype))
        if reason is not None:
            raise BackendUnavailable(reason)
        try:
            out = self.fn(q, k_cache, v_cache, cache_seqlens, block_table, causal=causal,
                          scale=scale)
        except (BackendUnavailable, BackendFailed):
            raise
        except Exception as exc:
            raise BackendFailed(f"raised {type(exc).__name__}: {exc}") from exc
        return checked_decode_output(out, q, k_cache, v_cache, cache_seqlens, block_table,
                                     causal, scale, self.own_lse)


def _precision(dtype) -> str:
    return next(n for n, t in TORCH_DTYPES.items() if t == dtype and n != "tf32")


def checked_decode_output(out, q, k_cache, v_cache, cache_seqlens, block_table, causal, scale,
                          own_lse: bool = True) -> BackendOutput:
    """(o, lse) from a decode backend's return value; BackendFailed when o is not a tensor
    [B, Nq, H, dv] in q's dtype, lse (when given) not [B, H, Nq], or either non-finite where
    the float64 reference is finite (an LSE of -inf only on rows that see no key)."""
    o, lse = (out, None) if isinstance(out, torch.Tensor) else (
        tuple(out) if isinstance(out, tuple | list) and len(out) == 2 else (None, None))
    B, nq, H, _ = q.shape
    want = (B, nq, H, v_cache.shape[-1])
    if not isinstance(o, torch.Tensor) or tuple(o.shape) != want or o.dtype != q.dtype:
        got = (f"a {o.dtype} tensor of shape {tuple(o.shape)}" if isinstance(o, torch.Tensor)
               else f"a {type(out).__name__}")
        raise BackendFailed(f"returned {got}; expected o [B, Nq, H, dv] = {want} in {q.dtype}, "
                            f"or (o, lse)")
    own_lse = own_lse and lse is not None
    if lse is None:
        lse = td.decode_lse(q, k_cache, v_cache, cache_seqlens, block_table, causal, scale)
    elif not isinstance(lse, torch.Tensor) or tuple(lse.shape) != (B, H, nq):
        raise BackendFailed(f"returned lse that is not a tensor [B, H, Nq] = {(B, H, nq)}")
    if all(bool(torch.isfinite(t).all()) for t in (q, k_cache, v_cache)):
        if not bool(torch.isfinite(o).all()):
            raise BackendFailed(f"returned {int((~torch.isfinite(o)).sum())} non-finite value(s) "
                                f"in o for finite inputs")
        lens = cache_seqlens.to(lse.device).long()[:, None, None]
        i = torch.arange(nq, device=lse.device)[None, None, :]
        blind = (lens == 0) | ((lens - nq + i < 0) if causal else torch.zeros_like(i, dtype=bool))
        wrong = torch.isnan(lse) | torch.isposinf(lse) | (torch.isneginf(lse) & ~blind)
        if bool(wrong.any()):
            raise BackendFailed(f"returned {int(wrong.sum())} non-finite LSE value(s) on rows "
                                f"that see keys")
    return BackendOutput(o, lse, own_lse)


def _triton(q, k_cache, v_cache, cache_seqlens, block_table=None, causal=False, scale=None):
    from flashbench.kernels.triton_decode import triton_decode

    return triton_decode(q, k_cache, v_cache, cache_seqlens, block_table, causal, scale)


def _triton_timed(q, k_cache, v_cache, cache_seqlens, block_table=None, causal=False,
                  scale=None):
    from flashbench.kernels.triton_decode import triton_decode

    return triton_decode(q, k_cache, v_cache, cache_seqlens, block_table, causal, scale,
                         check=False)[0]


def _peer(name, op, description, unavailable=_always, default_on=("cpu", "cuda")):
    return DecodeBackend(name, td.with_lse(op), description, TORCH_FLOATS, unavailable,
                         timed=op, peer=True, origin="torch", default_on=default_on)


DECODE_BACKENDS: dict[str, DecodeBackend] = {b.name: b for b in (
    DecodeBackend("triton", _triton, "flashbench's Triton split-KV decode and merge kernels "
                  "(paged through the block table)", TORCH_FLOATS, BACKENDS["triton"].unavailable,
                  BACKENDS["triton"].interpreted, timed=_triton_timed, own_lse=True,
                  head_dims=(16, 32, 64, 128, 256)),
    _peer("torch-naive", td.naive_decode, "gathered cache, scores and softmax materialised "
          "in the input dtype"),
    _peer("torch-sdpa", td.sdpa_decode, "gathered cache, scaled_dot_product_attention with "
          "the ragged/causal mask"),
    _peer("flex", td.flex_decode, "gathered cache, torch.compile(flex_attention) with a "
          "block mask from cache_seqlens", tp.flex_unavailable, default_on=("cuda",)),
)}


def _broken(reason, *args, **kwargs):
    raise BackendFailed(reason)


def _call(fn, q, k_cache, v_cache, cache_seqlens, block_table=None, causal=False, scale=None):
    kw = {"causal": causal} if scale is None else {"causal": causal, "scale": scale}
    return fn(q, k_cache, v_cache, cache_seqlens, block_table, **kw)


def user_decode_backend(spec: str, name: str | None = None,
                        origin: str = "user") -> DecodeBackend:
    """A user's ``module:function`` as a decode backend; one that cannot be imported, or
    that declares no decode signature, fails every call with that reason."""
    from flashbench.backends.declared import parse_spec

    parse_spec(spec)  # ValueError for a malformed spec
    name = spec if name is None else name
    try:
        fn = pkgutil.resolve_name(spec)
        kind = getattr(fn, "flashbench_kind", "forward")
        if kind != KIND:
            raise BackendFailed(f"{spec} declares no decode signature (flashbench_kind = "
                                f"{kind!r}; a decode function sets flashbench_kind = 'decode')")
        dtypes = tuple(getattr(fn, "flashbench_dtypes", TORCH_FLOATS))
        if not dtypes or any(d not in PRECISIONS for d in dtypes):
            raise BackendFailed(f"its flashbench_dtypes attribute {dtypes!r} is not valid")
    except Exception as exc:  # a user's module may fail in any way: report it, run the rest
        reason = str(exc) if isinstance(exc, BackendFailed) else (
            f"cannot import {spec}: {type(exc).__name__}: {exc}")
        fail = partial(_broken, reason)
        return DecodeBackend(name, fail, f"user function {spec}", TORCH_FLOATS, timed=fail,
                             own_lse=True, origin=origin)
    return DecodeBackend(name, partial(_call, fn), f"user function {spec}", dtypes,
                         timed=partial(_call, fn), own_lse=True, origin=origin)


def _entry_points() -> dict[str, str]:
    return {ep.name: ep.value for ep in importlib.metadata.entry_points(group=DECODE_GROUP)}


def get_decode_backend(name: str) -> DecodeBackend:
    """A registry name, an entry point of :data:`DECODE_GROUP` or ``module:function``."""
    if name in DECODE_BACKENDS:
        return DECODE_BACKENDS[name]
    if ":" in name:
        return user_decode_backend(name)
    points = _entry_points()
    if name in points:
        return user_decode_backend(points[name], name=name, origin=f"entry point {name}")
    raise ValueError(f"unknown decode backend {name!r}; known: {sorted(DECODE_BACKENDS)}"
                     + (f", entry points ({DECODE_GROUP}): {sorted(points)}" if points else "")
                     + "; or package.module:function")


def resolve_decode_backends(values=()) -> list[str]:
    """The decode backends ``check --decode`` runs: those named (ValueError for an unknown
    one), else every registry backend whose ``default_on`` holds this machine's kind and
    every installed entry point."""
    names = []
    for value in values:
        get_decode_backend(value)
        names.append(value)
    if not names:
        machine = "cuda" if torch.cuda.is_available() else "cpu"
        names = [n for n, b in DECODE_BACKENDS.items() if machine in b.default_on]
        names += sorted(_entry_points())
    return list(dict.fromkeys(names))
