"""Running a kernel's interpreted twin (for :mod:`flashbench.kernels.launch`).

Triton's interpreter runs a kernel as Python over NumPy when ``TRITON_INTERPRET`` was set
before the kernel was decorated; flashbench never sets it (see
:mod:`flashbench.kernels.launch`). Instead an interpreted launch runs
``InterpretedFunction(fn)`` (the twin of the kernel's plain Python function) inside
:func:`jitted_helpers_interpreted`, which for its duration (under a lock):

- replaces ``JITFunction.__call__`` (which only ever raises) by a call of the helper's
  interpreted twin, so the kernel's jitted helpers and triton.language's (``tl.max``,
  ``tl.sum``) run interpreted whatever the order of imports;
- puts triton.language back exactly as it was afterwards: Triton's interpreter restores
  what a kernel launch patches, but an interpreted *helper* call patches the modules in
  that helper's globals (``triton.language.core`` for Triton's own helpers) and never
  restores them, after which the next kernel *compiled* in the process (a cache miss)
  fails with a CompilationError.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

__all__ = ["twin", "jitted_helpers_interpreted", "language_objects"]

_LOCK = threading.RLock()
_TWINS: dict[Callable, object] = {}
_GONE = object()


def twin(fn: Callable):
    """The InterpretedFunction of a plain Python kernel function (built once)."""
    from triton.runtime.interpreter import InterpretedFunction

    found = _TWINS.get(fn)
    if found is None:
        found = _TWINS[fn] = InterpretedFunction(fn)
    return found


def _call_interpreted(self, *args, **kwargs):
    # Stands in for JITFunction.__call__ during an interpreted launch: a jitted helper
    # called from interpreted code runs as its interpreted twin.
    return twin(self.fn)(*args, **kwargs)


def language_objects() -> list:
    """What Triton's interpreter patches while it runs: triton.language, its core and math
    modules, the tensor classes."""
    import triton.language as tl

    objs = [tl, tl.core, tl.math, tl.core.tensor]
    base = getattr(tl.core, "tensor_descriptor_base", None)
    return objs + ([base] if base is not None else [])


@contextlib.contextmanager
def _language_restored():
    """Every attribute of :func:`language_objects` back as it was (module docstring):
    added ones deleted, replaced ones put back."""
    saved = [(obj, dict(vars(obj))) for obj in language_objects()]
    try:
        yield
    finally:
        for obj, before in saved:
            now = vars(obj)
            for name in [n for n in now if n not in before]:
                delattr(obj, name)
            for name, value in before.items():
                if now.get(name, _GONE) is not value:
                    setattr(obj, name, value)


@contextlib.contextmanager
def jitted_helpers_interpreted():
    """For an interpreted launch: jitted helpers run as their interpreted twins, and
    triton.language is put back afterwards (module docstring)."""
    from triton.runtime.jit import JITFunction

    with _LOCK, _language_restored():
        original = JITFunction.__dict__["__call__"]
        JITFunction.__call__ = _call_interpreted
        try:
            yield
        finally:
            JITFunction.__call__ = original
