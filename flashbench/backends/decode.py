"""Decode backends: every decode implementation as data, beside the forward registry.

Called as ``fn(q, k_cache, v_cache, cache_seqlens, block_table=None, causal=False,
scale=None)`` on torch tensors (layouts of :mod:`flashbench.inputs.kvcache`), returning o
[B, Nq, H, dv] or ``(o, lse)``; outputs are checked as the forward's are
(:func:`checked_decode_output`), and a call that changes its inputs FAILs.
:data:`DECODE_BACKENDS` uses the forward's names for the decode counterparts
(``triton``, ``torch-naive``, ``torch-sdpa``, ``flex``). A user's
``package.module:function`` joins when the function declares ``flashbench_kind =
"decode"`` (else it FAILs saying so; a forward check FAILs a decode function), as do
entry points of the group ``flashbench.decode_backends``. It runs in a worker process
of its own as a forward user function does (:mod:`flashbench.backends.worker`,
docs/check.md) and is judged like flashbench's own kernel.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch

from flashbench.backends import user
from flashbench.backends.declared import DECODE, DECODE_INPUTS, call_decode, parse_spec
from flashbench.backends.outputs import BackendOutput, checked_decode_output, guarded
from flashbench.backends.record import TORCH_FLOATS, Implementation, always_available, never
from flashbench.backends.registry import BACKENDS
from flashbench.inputs.precision import DTYPES
from flashbench.kernels import torch_decode as td
from flashbench.kernels import torch_peers as tp
from flashbench.kernels.headdim import (
    DECODE_HEAD_DIMS,
    decode_head_dims_problem,
    decode_page_problem,
    decode_rows_problem,
)
from flashbench.kernels.validate import TORCH_DTYPES, BackendUnavailable

__all__ = ["DecodeBackend", "DECODE_BACKENDS", "DECODE_GROUP", "get_decode_backend",
           "user_decode_backend", "resolve_decode_backends", "checked_decode_output", "KIND",
           "DECODE_HEAD_DIMS"]

DECODE_GROUP = "flashbench.decode_backends"
KIND = DECODE  # the value of a user function's flashbench_kind attribute


@dataclass(frozen=True)
class DecodeBackend(Implementation):
    """One decode implementation (fields as :class:`flashbench.backends.Backend`'s)."""

    own_lse: bool = False
    origin: str = "flashbench"
    default_on: tuple[str, ...] = ("cpu", "cuda")
    head_dims: tuple[int, ...] | None = None
    ran_interpreted: Callable[[], bool] = never  # as Backend's (a user's, in its worker)

    def unavailable_for(self, d: int, dtype: str) -> str | None:
        reason = self.unavailable()
        if reason is None:
            reason = self.dtype_refusal(dtype)
        if reason is None and d is not None and self.head_dims is not None \
                and d not in self.head_dims:
            reason = f"head dim d={d} is not one it takes ({', '.join(map(str, self.head_dims))})"
        return reason

    def case_unavailable(self, case, dtype: str) -> str | None:
        """Why this backend cannot take decode ``case`` (a measure.decode.DecodeCase) in
        ``dtype``, None where it can: the Triton decode by its own rules, its head dims
        (plain or absorbed), page size and query rows (its d list, up to the absorbed
        form's 768, read "d=100 is not one it takes (8, 16, ..., 768)" of a plain case it
        takes up to 256)."""
        if self.head_dims != DECODE_HEAD_DIMS:
            return self.unavailable_for(case.d, dtype)
        return (self.unavailable_for(None, dtype)
                or decode_head_dims_problem(case.d, case.dv, case.absorbed)
                or decode_rows_problem(case.H // case.Hkv, case.Nq)
                or decode_page_problem(case.page_size, case.d, case.absorbed))

    def __call__(self, q, k_cache, v_cache, cache_seqlens, block_table=None, causal=False,
                 scale=None) -> BackendOutput:
        """(o, lse) for accuracy checks, validated; BackendUnavailable / BackendFailed (a
        call that changes its inputs fails: they are compared with copies taken before)."""
        reason = self.unavailable_for(q.shape[-1], _precision(q.dtype))
        if reason is not None:
            raise BackendUnavailable(reason)
        given = (q, k_cache, v_cache, cache_seqlens, block_table)
        out = guarded(lambda: self.fn(*given, causal=causal, scale=scale),
                      dict(zip(DECODE_INPUTS, given, strict=True)))
        return checked_decode_output(out, *given, causal, scale, self.own_lse)


def _precision(dtype) -> str:
    return next(n for n, t in TORCH_DTYPES.items() if t == dtype and n != "tf32")


def _triton(q, k_cache, v_cache, cache_seqlens, block_table=None, causal=False, scale=None):
    from flashbench.kernels.triton_decode import triton_decode

    return triton_decode(q, k_cache, v_cache, cache_seqlens, block_table, causal, scale)


def _triton_timed(q, k_cache, v_cache, cache_seqlens, block_table=None, causal=False,
                  scale=None):
    from flashbench.kernels.triton_decode import triton_decode

    return triton_decode(q, k_cache, v_cache, cache_seqlens, block_table, causal, scale,
                         check=False)[0]


def _peer(name, op, description, unavailable=always_available, default_on=("cpu", "cuda")):
    return DecodeBackend(name, td.with_lse(op), description, TORCH_FLOATS, unavailable,
                         timed=op, peer=True, origin="torch", default_on=default_on)


DECODE_BACKENDS: dict[str, DecodeBackend] = {b.name: b for b in (
    DecodeBackend("triton", _triton, "flashbench's Triton split-KV decode and merge kernels "
                  "(paged through the block table)", TORCH_FLOATS, BACKENDS["triton"].unavailable,
                  BACKENDS["triton"].interpreted, timed=_triton_timed, own_lse=True,
                  head_dims=DECODE_HEAD_DIMS),
    _peer("torch-naive", td.naive_decode, "gathered cache, scores and softmax materialised "
          "in the input dtype"),
    _peer("torch-sdpa", td.sdpa_decode, "gathered cache, scaled_dot_product_attention with "
          "the ragged/causal mask"),
    _peer("flex", td.flex_decode, "gathered cache, torch.compile(flex_attention) with a "
          "block mask from cache_seqlens", tp.flex_unavailable, default_on=("cuda",)),
)}


def _decode(worker, q, k_cache, v_cache, cache_seqlens, block_table=None, causal=False,
            scale=None):
    """The accuracy callable of a user's function: run in its worker on copies."""
    given = (q, k_cache, v_cache, cache_seqlens, block_table)
    reply = worker.call(user.request("decode", dict(zip(DECODE_INPUTS, given, strict=True)),
                                     causal=causal, scale=scale))
    return user.output(reply, q.device)


def _timed(spec: str, *args, **kwargs):
    """The bare function, imported here on first use: what timings call (in process)."""
    return call_decode(user.imported(spec), *args, **kwargs)


def user_decode_backend(spec: str, name: str | None = None,
                        origin: str = "user") -> DecodeBackend:
    """A user's ``module:function`` as a decode backend, run in a worker process of its
    own (:func:`flashbench.backends.user.worker_backend`); one that cannot be imported,
    or that declares no decode signature, fails every call with that reason."""
    name = spec if name is None else name
    return user.worker_backend(spec, name, origin, KIND, partial(_made, spec, name, origin),
                               partial(_failing, spec, name, origin))


def _made(spec, name, origin, worker, declared) -> DecodeBackend:
    head_dims = declared["head_dims"]
    return DecodeBackend(name, partial(_decode, worker), f"user function {spec}",
                         tuple(declared["dtypes"]), timed=partial(_timed, spec),
                         own_lse=True, origin=origin, ran_interpreted=worker.interpreted,
                         head_dims=None if head_dims is None else tuple(head_dims))


def _failing(spec, name, origin, reason) -> DecodeBackend:
    """Every call FAILs with ``reason``; every dtype declared (user._failing's why)."""
    fail = partial(user.broken, reason)
    return DecodeBackend(name, fail, f"user function {spec}", DTYPES, timed=fail,
                         own_lse=True, origin=origin)


def _entry_points() -> dict[str, str]:
    return {ep.name: ep.value for ep in importlib.metadata.entry_points(group=DECODE_GROUP)}


def _user(name: str) -> tuple[str, str] | None:
    """(spec, origin) of a user's decode backend called ``name``, None for a registry
    name; ValueError for a name that is neither (nothing is imported or started)."""
    if name in DECODE_BACKENDS:
        return None
    if ":" in name:
        parse_spec(name)  # ValueError for a malformed spec
        return name, "user"
    points = _entry_points()
    if name in points:
        return points[name], f"entry point {name}"
    raise ValueError(f"unknown decode backend {name!r}; known: {sorted(DECODE_BACKENDS)}"
                     + (f", entry points ({DECODE_GROUP}): {sorted(points)}" if points else "")
                     + "; or package.module:function")


def get_decode_backend(name: str) -> DecodeBackend:
    """A registry name, an entry point of :data:`DECODE_GROUP` or ``module:function``."""
    found = _user(name)
    return DECODE_BACKENDS[name] if found is None else user_decode_backend(
        found[0], name=name, origin=found[1])


def resolve_decode_backends(values=()) -> list[str]:
    """The decode backends ``check --decode`` and ``speed --decode`` run: those named
    (ValueError for an unknown one; a user's is not started yet), else every registry
    backend whose ``default_on`` holds this machine's kind and every installed entry point;
    a ``module:function`` adds to them, as the forward's ``--backend`` (before, it replaced
    them: ``speed --decode --backend mod:fn`` timed no torch peer, its speedup "-")."""
    names, specs = [], []
    for value in values:
        _user(value)
        (specs if ":" in value else names).append(value)
    if not names:
        machine = "cuda" if torch.cuda.is_available() else "cpu"
        names = [n for n, b in DECODE_BACKENDS.items() if machine in b.default_on]
        names += sorted(_entry_points())
    return list(dict.fromkeys(names + specs))
