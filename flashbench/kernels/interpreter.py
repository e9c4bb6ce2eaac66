"""Running a kernel's interpreted twin (for :mod:`flashbench.kernels.launch`).

flashbench never sets ``TRITON_INTERPRET``: an interpreted launch runs
``InterpretedFunction(fn)`` (the twin of the kernel's plain Python function) inside
:func:`jitted_helpers_interpreted`, which for its duration (under a lock) replaces
``JITFunction.__call__`` (which only ever raises) by a call of the helper's interpreted
twin, so the kernel's jitted helpers and triton.language's (``tl.max``, ``tl.sum``) run
interpreted whatever the order of imports, and afterwards puts triton.language back
exactly as it was (an interpreted helper call patches the modules in its globals and
Triton never restores them; the next kernel compiled in the process then failed).
:func:`patch_interpreter` fixes Triton's interpreter for a user's kernels run with
``TRITON_INTERPRET=1`` in their worker. Why and how: docs/gpu.md ("Where it runs"), and
for a user's kernel docs/check.md ("The kernel under test is untrusted code").
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from types import ModuleType

__all__ = ["twin", "jitted_helpers_interpreted", "language_objects", "patch_interpreter",
           "Launches", "skip_discarded_overflow_checks"]

_LOCK = threading.RLock()
_TWINS: dict[Callable, object] = {}
_GONE = object()


def twin(fn: Callable):
    """The InterpretedFunction of a plain Python kernel function (built once)."""
    from triton.runtime.interpreter import InterpretedFunction

    found = _TWINS.get(fn)
    if found is None:
        skip_discarded_overflow_checks()
        found = _TWINS[fn] = InterpretedFunction(fn)
    return found


def skip_discarded_overflow_checks() -> None:
    """Triton's interpreter computes an overflow check for every integer +, - and * under
    64 bits (``sanitize_overflow``), then drops it: the assert it feeds runs only with
    ``debug``, off in the interpreter (as on the GPU, where it compiles to nothing). Off
    where ``debug`` is: the same results, about a fifth less interpreted time (8 s of
    bench_accuracy's 41 s setup, cProfile). Idempotent; a Triton without it: nothing."""
    import dataclasses

    from triton.runtime import interpreter as ti

    builder = getattr(ti, "interpreter_builder", None)
    options = getattr(builder, "options", None)
    if (dataclasses.is_dataclass(options) and getattr(options, "sanitize_overflow", False)
            and not getattr(options, "debug", True)):
        builder.options = dataclasses.replace(options, sanitize_overflow=False)


_UNPATCHED: dict[int, object] = {}  # id(tl or tl.core) -> its own ``range``, during a launch


def _call_interpreted(self, *args, **kwargs):
    # Stands in for JITFunction.__call__ during an interpreted launch: a jitted helper
    # called from interpreted code runs as its interpreted twin. Its rewritten function is
    # called directly where the launch has already patched every triton.language module the
    # helper sees (their ``range`` is the interpreter's): Triton's twin patches them again on
    # every call, the same patch (a third of bench_accuracy's interpreted time, cProfile).
    found = twin(self.fn)
    langs = [m for m in self.fn.__globals__.values()
             if isinstance(m, ModuleType) and id(m) in _UNPATCHED]
    if (not hasattr(found, "rewrite") or not langs
            or any(vars(m).get("range", _GONE) is _UNPATCHED[id(m)] for m in langs)):
        return found(*args, **kwargs)
    from triton.runtime.interpreter import InterpreterError

    fn = found.rewrite()
    try:
        return fn(*args, **kwargs)
    except Exception as e:  # as Triton's twin raises it
        raise InterpreterError(repr(e)) from e


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
        import triton.language as tl

        original, unpatched = JITFunction.__dict__["__call__"], dict(_UNPATCHED)
        _UNPATCHED.update({id(m): vars(m).get("range", _GONE) for m in (tl, tl.core)})
        JITFunction.__call__ = _call_interpreted
        try:
            yield
        finally:
            JITFunction.__call__ = original
            _UNPATCHED.clear()
            _UNPATCHED.update(unpatched)


# ---------------------------------------------- a user's kernels (TRITON_INTERPRET=1)


class Launches:
    """How many kernel launches the interpreter has run in this process."""

    count = 0


_PATCHED: list[Launches] = []


def _bf16_as_fp32(data):
    import numpy as np

    return (np.asarray(data, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def _fp32_to_bf16_rtne(data):
    import ml_dtypes
    import numpy as np

    return np.asarray(data, dtype=np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)


def _fp32_to_e4m3_rtne(data):
    import ml_dtypes
    import numpy as np

    x = np.asarray(data, dtype=np.float32)
    x = np.where(np.isnan(x), x, np.clip(x, -448.0, 448.0))  # cvt.rn.satfinite
    return x.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)


def patch_interpreter() -> Launches:
    """Triton's interpreter made to compute what the GPU computes where flashbench knows
    how, for a process that runs a user's kernels with ``TRITON_INTERPRET=1`` (their worker,
    :mod:`flashbench.backends.worker`; never flashbench's own process, whose kernels carry
    these fixes themselves: :mod:`flashbench.kernels.rounding`):

    - ``tl.dot`` on bfloat16 operands: the interpreter multiplies their raw uint16 bits
      (triton issue 11584); they are widened to fp32 first (exact products, as the GPU);
    - fp32 -> bfloat16 truncates and fp32 -> e4m3 loses carries: both rounded to nearest
      even instead (e4m3 saturating at +-448, as ``cvt.rn.satfinite``).

    Other bf16 / fp8 arithmetic of the interpreter is not fixed (it runs on raw bits):
    a FAIL there names the interpreter as the likely cause. Returns the launch counter
    (idempotent)."""
    if _PATCHED:
        return _PATCHED[0]
    import triton.language as tl
    from triton.runtime import interpreter as ti

    skip_discarded_overflow_checks()

    builder, launches = ti.InterpreterBuilder, Launches()
    dot, cast, fp_to_fp = builder.create_dot, builder.cast_impl, builder.create_fp_to_fp

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        a, b = (ti.TensorHandle(_bf16_as_fp32(x.data), tl.float32)
                if x.dtype.scalar == tl.bfloat16 else x for x in (a, b))
        return dot(self, a, b, d, input_precision, max_num_imprecise_acc)

    def _rounded(src, dst_type):
        src_t, dst_t = src.dtype.scalar, dst_type.scalar
        if src_t == tl.float32 and dst_t == tl.bfloat16:
            return ti.TensorHandle(_fp32_to_bf16_rtne(src.data), dst_t)
        if src_t == tl.float32 and dst_t == tl.float8e4nv:
            return ti.TensorHandle(_fp32_to_e4m3_rtne(src.data), dst_t)
        return None

    def cast_impl(self, src, dst_type):
        out = _rounded(src, dst_type)
        return cast(self, src, dst_type) if out is None else out

    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        out = None if rounding_mode == ti._ir.ROUNDING_MODE.RTZ else _rounded(src, dst_type)
        return fp_to_fp(self, src, dst_type, rounding_mode) if out is None else out

    run = ti.GridExecutor.__call__

    def grid_call(self, *args, **kwargs):
        launches.count += 1
        return run(self, *args, **kwargs)

    builder.create_dot, builder.cast_impl = create_dot, cast_impl
    builder.create_fp_to_fp = create_fp_to_fp
    ti.GridExecutor.__call__ = grid_call
    _PATCHED.append(launches)
    return launches
