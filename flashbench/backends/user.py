"""A user's own attention function as a backend, judged like flashbench's own kernel.

Two ways in: ``flashbench check --backend package.module:function`` (repeatable; named by
the spec), or an entry point in the group ``flashbench.backends`` (every installed one joins
under its name). Every call runs in a worker process (:mod:`flashbench.backends.worker`).

The function is called as ``fn(q, k, v, causal=causal)`` (plus ``scale=`` when a scale is
set) on torch tensors and returns ``o`` or ``(o, lse)`` (:mod:`flashbench.backends.outputs`);
optional ``flashbench_*`` attributes declare what it takes (dtypes, head dims, gqa,
differentiable, variants). A function that cannot be imported, raises (or exits), changes
its inputs, runs past the per-call time limit or returns a wrong or non-finite output is
a FAIL with that reason; the other backends still run. A decode function
(``flashbench_kind = "decode"``, :mod:`flashbench.backends.decode`) runs and fails alike.
Contract, attributes and their defaults: docs/backends.md ("Your own kernel").
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
from functools import partial

from flashbench.backends.declared import (
    FORWARD,
    call_forward,
    check_kind,
    load,
    parse_spec,
)
from flashbench.backends.record import VARIANTS, Backend
from flashbench.inputs.precision import DTYPES
from flashbench.kernels.validate import BackendFailed

__all__ = ["GROUP", "parse_spec", "load", "user_backend", "worker_backend", "request",
           "output", "imported", "broken", "session", "release", "entry_point_names", "find"]

GROUP = "flashbench.backends"


def broken(reason: str, *args, **kwargs):
    """What every call of a backend that cannot run does: BackendFailed with ``reason``."""
    raise BackendFailed(reason)


def _failing(name: str, description: str, origin: str, reason: str):
    """A backend whose every call fails with ``reason`` (the check reports it as FAIL).

    It declares every dtype, every variant, a packed path and a backward, so that a check
    with ``--dtype fp64``, ``--window``, ``--softcap``, ``--sinks``, ``--varlen`` or ``--pass
    bwd`` calls it and FAILs it by name, never "not applicable" (a PASS for a kernel that
    never ran; --pass bwd read "its forward is not declared differentiable", --dtype fp64
    "takes fp32, fp16, bf16, not fp64", for a module that did not import)."""
    fail = partial(broken, reason)
    return Backend(name, fail, description, DTYPES, timed=fail, gqa=True,
                   origin=origin, variants=VARIANTS, varlen=fail, differentiable=True,
                   grad_variants=VARIANTS, varlen_grad=True, grads=fail)


@functools.cache
def imported(spec: str):
    """The bare function, imported in this process (what timings call)."""
    return load(spec)[0]


def _timed(spec: str, q, k, v, causal=False, scale=None, **variant):
    """The bare function, imported here on first use: what timings call (in process)."""
    return call_forward(imported(spec), q, k, v, causal=causal, scale=scale, **variant)


def request(op: str, tensors: dict, **rest) -> dict:
    """A worker request: ``op``, CPU tensors (None stays None) and the other fields; a
    variant's NumPy values as Python's (the worker's loader takes no NumPy object: a packed
    batch's sinks, a NumPy array, ended every packed call with --sinks, a probe 2026-12-07)."""
    if rest.get("variant"):
        rest["variant"] = {n: _plain(x) for n, x in rest["variant"].items()}
    return {"op": op, **{n: None if t is None else t.detach().cpu() for n, t in tensors.items()},
            **rest}


def _plain(value):
    """A NumPy array as a tuple of Python numbers, a NumPy number as a Python one."""
    if hasattr(value, "tolist") and type(value).__module__ == "numpy":
        value = value.tolist()
        return tuple(value) if isinstance(value, list) else value
    return value


def output(reply: dict, device):
    """o, or (o, lse) when the function returned its own, from a worker's reply."""
    o = reply["o"].to(device)
    return o if reply["lse"] is None else (o, reply["lse"].to(device))


def _forward(worker, q, k, v, causal=False, scale=None, **variant):
    """The accuracy callable: the function run in its worker on copies of q, k, v (with the
    variant's keywords it declared, :data:`flashbench.backends.VARIANTS`)."""
    return output(worker.call(request("forward", {"q": q, "k": k, "v": v}, causal=causal,
                                      scale=scale, variant=variant)), q.device)


def _varlen(worker, expand: bool, q, k, v, cu_q, cu_k, causal=False, scale=None, **variant):
    """The packed accuracy callable: the function's packed path run in its worker on copies
    (k, v expanded to q's heads for a function without GQA), cu_seqlens as int32 tensors."""
    import torch

    from flashbench.backends.outputs import BackendOutput
    from flashbench.kernels.validate import expand_kv

    if expand:
        k, v = expand_kv(q, k, v)
    cu = {n: torch.as_tensor(c).to(torch.int32) for n, c in (("cu_q", cu_q), ("cu_k", cu_k))}
    reply = worker.call(request("varlen", {"q": q, "k": k, "v": v, **cu}, causal=causal,
                                scale=scale, variant=variant))
    own = reply["lse"] is not None  # else the stand-in LSE: shown, never judged
    return BackendOutput(reply["o"].to(q.device),
                         (reply["lse"] if own else reply["stand_in"]).to(q.device), own)


def _grads(worker, expand: bool, q, k, v, do, causal=False, dsinks=False, **variant):
    """(dq, dk, dv): autograd through the function, in its worker (with the variant's
    keywords: those its backward takes, ``flashbench_grad_variants``); ``dsinks`` (a function
    that declares ``flashbench_dsinks``, a case with sinks): (dq, dk, dv, dsinks)."""
    reply = worker.call({"op": "grads", "q": q, "k": k, "v": v, "do": do, "causal": causal,
                         "expand": expand, "variant": variant, "dsinks": dsinks})
    return tuple(reply["grads"])


_MADE: dict = {}  # (spec, name, origin, kind) -> Backend or DecodeBackend, until release()


def worker_backend(spec: str, name: str, origin: str, kind: str, build, failing):
    """The backend of a user's ``"module:function"`` called as ``kind`` (made once, kept
    until :func:`release`): ``build(worker, declared)`` once its worker process
    (:mod:`flashbench.backends.worker`) imported it and said what it declares, else
    ``failing(reason)``: it cannot be imported, declares invalid attributes, or is
    not of ``kind`` (:func:`flashbench.backends.declared.check_kind`). A malformed spec
    is a ValueError, or, as an entry point's value (``name`` not the spec), ``failing``."""
    from flashbench.backends.worker import Worker

    try:
        parse_spec(spec)
    except ValueError:
        if name == spec:  # --backend's (refused before a check starts) or in code
            raise
        return failing(f"its entry point value {spec!r} is not of the form module:function")
    key = (spec, name, origin, kind)
    if key not in _MADE:
        worker = Worker(spec)
        try:
            declared = worker.call({"op": "describe"})
            check_kind(spec, declared["kind"], kind)
        except BackendFailed as exc:
            worker.close()
            _MADE[key] = failing(str(exc))
        else:
            _MADE[key] = build(worker, declared)
    return _MADE[key]


def user_backend(spec: str, name: str | None = None, origin: str = "user"):
    """The :class:`~flashbench.backends.Backend` for a user's ``"module:function"``: its
    calls run in a worker process of its own (:mod:`flashbench.backends.worker`; the
    module is imported there, never in the harness's process).

    A function that cannot be imported (or declares invalid attributes, or is a decode
    function) still gives a backend: one whose every call fails with that reason, so
    the check reports it.
    """
    name = spec if name is None else name
    return worker_backend(spec, name, origin, FORWARD, partial(_make, spec, name, origin),
                          partial(_failing, name, f"user function {spec}", origin))


def _make(spec: str, name: str, origin: str, worker, declared: dict):
    head_dims = declared["head_dims"]
    return Backend(name, partial(_forward, worker), f"user function {spec}",
                   tuple(declared["dtypes"]), timed=partial(_timed, spec),
                   head_dims=None if head_dims is None else tuple(head_dims),
                   gqa=declared["gqa"], differentiable=declared["differentiable"],
                   grads=partial(_grads, worker, not declared["gqa"])
                   if declared["differentiable"] else None,
                   ran_interpreted=worker.interpreted,
                   variants=tuple(declared.get("variants", ())),
                   grad_variants=tuple(declared.get("grad_variants", ()))
                   if declared["differentiable"] else (),
                   dsinks=bool(declared.get("dsinks")),
                   varlen=partial(_varlen, worker, not declared["gqa"])
                   if declared.get("varlen") else None,
                   lse="the function's own when it returns (o, lse); o alone: judged on o",
                   own_lse=True, origin=origin,
                   limits=None if declared.get("dv") else _same_head_dims)


def _same_head_dims(shape) -> str | None:
    """Why a function that declares no ``flashbench_dv`` is not given dv != d (None: it is)."""
    if shape.head_dim_v == shape.d:
        return None
    return (f"it declares no dv != d (d={shape.d}, dv={shape.head_dim_v}); a function that "
            f"takes v of another head dim sets flashbench_dv = True")


@contextlib.contextmanager
def session(time_limit: float | None = None):
    """A check's span: every worker call takes at most ``time_limit`` seconds (None:
    :data:`flashbench.backends.worker.DEFAULT_TIME_LIMIT`); at its end the workers stop
    and the backends are forgotten (:func:`release`)."""
    from flashbench.backends import worker

    worker.set_time_limit(worker.DEFAULT_TIME_LIMIT if time_limit is None else time_limit)
    try:
        yield
    finally:
        release()


def release() -> None:
    """Stop every user backend's worker and forget the backends (the end of a check)."""
    from flashbench.backends.worker import close_all

    close_all()
    _MADE.clear()


def _entry_points(registry) -> dict[str, str]:
    """Installed entry points of :data:`GROUP`: name -> "module:function". A name that
    is already a registry backend's becomes ``NAME-entry-point``."""
    points = {}
    for ep in importlib.metadata.entry_points(group=GROUP):
        points[ep.name if ep.name not in registry else f"{ep.name}-entry-point"] = ep.value
    return points


def entry_point_names(registry) -> list[str]:
    """Names of the installed ``flashbench.backends`` entry points, sorted."""
    return sorted(_entry_points(registry))


def find(name: str, registry: dict):
    """A backend that is not in ``registry``: an entry point's or a ``module:function``."""
    if ":" in name:
        return user_backend(name)
    points = _entry_points(registry)
    if name in points:
        value, origin = points[name], f"entry point {name} = {points[name]}"
        return user_backend(value, name=name, origin=origin)
    raise ValueError(f"unknown backend {name!r}; known: {sorted(registry)}"
                     + (f", entry points ({GROUP}): {sorted(points)}" if points else "")
                     + "; or package.module:function")
