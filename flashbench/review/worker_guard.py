"""The review worker's guard of what both sides share (loaded by path by worker_process.py).

Both commits run in one process, so a side whose code replaces a function of numpy, torch,
``time`` or of the worker's own timer would change the other side's numbers. The worker
snapshots these entry points before each side loads and after every request, refuses (by
name) a side that replaced one, and puts the original back. Imports nothing of flashbench.
"""

import importlib
import importlib.util
import sys
import traceback

# the shared libraries whose public callables a side may not replace
GUARDED_MODULES = ("numpy", "numpy.linalg", "numpy.fft", "scipy.special", "torch",
                   "torch.nn.functional", "torch.cuda", "torch.autograd", "time", "gc", "math")
# modules of those libraries that replace the libraries' own entry points when first imported
# (torch._dynamo wraps torch.manual_seed): imported before the first snapshot, so a side whose
# call first imports one (flex_attention compiling) is not blamed for the library's own change
SETTLE = ("torch._dynamo",)
REFUSED = "replaced what the other side shares"  # the words of a refusal (review/rules.py)


def settle() -> None:
    """Import :data:`SETTLE` (where its library is installed) once, before the watch."""
    for name in SETTLE:
        if name not in sys.modules and importlib.util.find_spec(name.split(".")[0]):
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - a library that cannot: nothing to settle
                pass


def entry_points(own: dict) -> dict:
    """{"module.name": object} of the public callables of :data:`GUARDED_MODULES` imported
    now, plus ``own`` (the worker's timing functions by name), after :func:`settle`."""
    settle()
    found = {}
    for mod in GUARDED_MODULES:
        m = sys.modules.get(mod)
        if m is None:
            continue
        for name in dir(m):
            if not name.startswith("_"):
                obj = getattr(m, name, None)
                if callable(obj) and not isinstance(obj, type(sys)):
                    found[f"{mod}.{name}"] = obj
    return {**found, **own}


def changed(before: dict, now: dict) -> list:
    """Names in ``before`` whose object is no longer the same (replaced, or deleted from a
    module still imported), sorted."""
    return sorted(n for n, obj in before.items()
                  if (n in now and now[n] is not obj)
                  or (n not in now and n.rsplit(".", 1)[0] in sys.modules))


def restore(before: dict, names, own_globals: dict) -> None:
    """Put back the objects of ``names`` (the worker's own functions into ``own_globals``)."""
    for name in names:
        mod, _, attr = name.rpartition(".")
        if mod == "worker_process":
            own_globals[attr] = before[name]
        elif mod in sys.modules:
            setattr(sys.modules[mod], attr, before[name])


def refusal(before: dict, now: dict, when: str, own_globals: dict) -> str | None:
    """Why a side is refused when an entry point of ``before`` changed (the originals are
    put back, so the other side runs on the libraries it imported), else None."""
    names = changed(before, now)
    if not names:
        return None
    restore(before, names, own_globals)
    return (f"{when} {REFUSED}: {', '.join(names[:5])} (one "
            "side's code may not change the other's libraries or the timer)")


def discovery_error(exc: BaseException, reason: str) -> str:
    """Why a side's suites did not import: its own flashbench when that fails (the error's
    first line), else the suites' error (``reason``)."""
    try:
        __import__("flashbench")
    except BaseException as own:  # any failure to import is the answer
        first = traceback.format_exception_only(type(own), own)[-1].strip().splitlines()
        return "its flashbench failed to import: " + (first[0] if first else repr(own))[:500]
    return "benchmark discovery failed: " + reason
