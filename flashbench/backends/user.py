"""A user's own attention function as a backend, judged like flashbench's own kernel.

Two ways in:

- ``flashbench check --backend package.module:function`` (repeatable): the module is
  imported from ``sys.path`` and ``function`` (a dotted attribute path) looked up;
  the backend's name is the spec itself.
- an entry point in the group ``flashbench.backends`` (``name = "module:function"`` in
  a package's metadata, e.g. pyproject's ``[project.entry-points."flashbench.backends"]``):
  every installed one joins ``flashbench check`` under its entry-point name (one
  that a registry backend already has becomes ``NAME-entry-point``).

The function is called as ``fn(q, k, v, causal=causal)`` (plus ``scale=`` when a scale
is set) on torch tensors q [B, H, Nq, d], k, v [B, Hkv, Nk, d] and returns ``o``
[B, H, Nq, dv] in q's dtype or ``(o, lse)`` with lse [B, H, Nq]
(:mod:`flashbench.backends.outputs`). Optional attributes of the function declare
what it takes (else the defaults):

- ``flashbench_dtypes``: precision names, default ``TORCH_FLOATS`` ("fp32", "fp16",
  "bf16": the registry's default-judged precisions with a torch dtype of their own);
- ``flashbench_head_dims``: head dims d, default any;
- ``flashbench_gqa``: True if k, v may have fewer heads than q (Hkv dividing H);
  default False: k and v are expanded to H heads for it;
- ``flashbench_differentiable``: True if autograd flows through it (default False).

A function that cannot be imported, raises, returns the wrong shape or dtype, or
non-finite values where the reference is finite is a FAIL with that reason; the
other backends still run.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
from functools import partial

from flashbench.backends import TORCH_FLOATS
from flashbench.inputs.precision import PRECISIONS
from flashbench.kernels.checks import BackendFailed

__all__ = ["GROUP", "parse_spec", "user_backend", "entry_point_names", "find"]

GROUP = "flashbench.backends"
DEFAULT_DTYPES = TORCH_FLOATS  # from the precision registry (flashbench.backends)
_DOTTED = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"
_SPEC = re.compile(rf"^({_DOTTED}):({_DOTTED})$")


def parse_spec(spec: str) -> tuple[str, str]:
    """("package.module", "function") from ``"package.module:function"``; ValueError
    naming the expected form otherwise."""
    m = _SPEC.match(spec.strip()) if isinstance(spec, str) else None
    if m is None:
        raise ValueError(f"backend {spec!r} is not of the form package.module:function "
                         "(dotted Python names)")
    return m[1], m[2]


def _call(fn, q, k, v, causal=False, scale=None):
    kwargs = {"causal": causal} if scale is None else {"causal": causal, "scale": scale}
    return fn(q, k, v, **kwargs)


def _broken(reason: str, q, k, v, causal=False, scale=None):
    raise BackendFailed(reason)


def _declared(fn, attr: str, default, check):
    value = getattr(fn, attr, default)
    try:
        return check(value)
    except (TypeError, ValueError):
        raise BackendFailed(f"its {attr} attribute {value!r} is not valid") from None


def _dtypes(value) -> tuple[str, ...]:
    names = tuple(value)
    if not names or any(n not in PRECISIONS for n in names):
        raise ValueError(names)
    return names


def _head_dims(value) -> tuple[int, ...] | None:
    if value is None:
        return None
    dims = tuple(int(d) for d in value)
    if not dims or any(d < 1 for d in dims):
        raise ValueError(dims)
    return dims


def _failing(name: str, reason: str, description: str, origin: str):
    """A backend whose every call fails with ``reason`` (the check reports it as FAIL)."""
    from flashbench.backends import Backend

    fail = partial(_broken, reason)
    return Backend(name, fail, description, DEFAULT_DTYPES, timed=fail, gqa=True,
                   origin=origin)


def user_backend(spec: str, name: str | None = None, origin: str = "user"):
    """The :class:`~flashbench.backends.Backend` for a user's ``"module:function"``.

    A function that cannot be imported (or declares invalid attributes) still gives a
    backend: one whose every call fails with that reason, so the check reports it.
    """
    from flashbench.backends import Backend

    module_name, attr = parse_spec(spec)
    name = spec if name is None else name
    description = f"user function {spec}"
    try:
        obj = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
        if not callable(obj):
            raise TypeError(f"{spec} is a {type(obj).__name__}, not a function")
        dtypes = _declared(obj, "flashbench_dtypes", DEFAULT_DTYPES, _dtypes)
        head_dims = _declared(obj, "flashbench_head_dims", None, _head_dims)
    except Exception as exc:  # a user's module may fail in any way: report it, run the rest
        reason = str(exc) if isinstance(exc, BackendFailed) else (
            f"cannot import {spec}: {type(exc).__name__}: {exc}")
        return _failing(name, reason, description, origin)
    return Backend(name, partial(_call, obj), description, dtypes, timed=partial(_call, obj),
                   head_dims=head_dims, gqa=bool(getattr(obj, "flashbench_gqa", False)),
                   differentiable=bool(getattr(obj, "flashbench_differentiable", False)),
                   lse="the function's own when it returns (o, lse); o alone: judged on o",
                   own_lse=True, origin=origin)


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
        try:
            parse_spec(value)
        except ValueError:
            return _failing(name, f"its entry point value {value!r} is not of the form "
                            "module:function", f"entry point {name}", origin)
        return user_backend(value, name=name, origin=origin)
    raise ValueError(f"unknown backend {name!r}; known: {sorted(registry)}"
                     + (f", entry points ({GROUP}): {sorted(points)}" if points else "")
                     + "; or package.module:function")
