"""Which shared functions a process's untrusted code replaced: the review worker's watch.

The review's worker runs both commits in one process (loaded by path by
``review/worker_process.py``), so a side whose code replaces a function of numpy, torch,
``time`` or of the worker's own timer would change the other side's numbers. The worker
snapshots these entry points before each side loads and after every request, refuses (by
name) a side that replaced one, and puts the original back. Imports nothing of flashbench.

A library first imported by a side is watched from the moment its own import completes: an
import hook (:class:`_Finder`, first on ``sys.meta_path`` from the first snapshot on)
records its functions then, before the side's code can touch them, so nothing is imported
ahead of need (torch and torch._dynamo, imported up front before, cost ~2.9 s of CPU a
worker, also for numpy-only suites). A library's own lazy changes (torch._dynamo wraps
torch.manual_seed when first imported) are the library's: accepted where the function was
untouched when that import began. A watched library imported past the hook is refused.
"""

import sys

# the shared libraries whose public callables a side may not replace
GUARDED_MODULES = ("numpy", "numpy.linalg", "numpy.fft", "scipy.special", "torch",
                   "torch.nn.functional", "torch.cuda", "torch.autograd", "time", "gc", "math")
# imports that replace their own library's entry points (flex_attention's first call imports
# torch._dynamo): what they change is the library's, not the side's that imported them
LIBRARY_OWN = ("torch._dynamo",)
REFUSED = "replaced what the other side shares"  # the words of a refusal (review/rules.py)

LOADED: dict = {}  # "module.name": the object when its module's import completed
ACCEPTED: dict = {}  # "module.name": (before, after) a LIBRARY_OWN import changed it
_DEPTH = [0]  # watched imports in progress (a library imports its own submodules)


def _callables() -> dict:
    found = {}
    for mod in GUARDED_MODULES:
        m = sys.modules.get(mod)
        if m is None:
            continue
        for name, obj in list(vars(m).items()):  # not getattr: no lazy import starts here
            if not name.startswith("_") and callable(obj) and not isinstance(obj, type(sys)):
                found[f"{mod}.{name}"] = obj
    return found


class _Loader:
    """A watched module's loader: the real one's, then the record (module docstring)."""

    def __init__(self, loader, name: str):
        self.loader, self.name = loader, name

    def __getattr__(self, attr):
        return getattr(self.loader, attr)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        own = _callables() if self.name in LIBRARY_OWN else None
        _DEPTH[0] += 1
        try:
            self.loader.exec_module(module)
        finally:
            _DEPTH[0] -= 1
            module.__loader__ = self.loader  # the library sees its own loader again
            if getattr(module, "__spec__", None) is not None:
                module.__spec__.loader = self.loader
        if own is not None:
            for name, obj in _callables().items():
                if name in own and own[name] is not obj:
                    ACCEPTED[name] = (own[name], obj)
        if _DEPTH[0] == 0:  # the outermost watched import is complete: no side code ran yet
            for name, obj in _callables().items():
                LOADED.setdefault(name, obj)


class _Finder:
    """First on sys.meta_path: a watched module's spec from the other finders, its loader
    wrapped in :class:`_Loader`."""

    def find_spec(self, name, path=None, target=None):
        if name not in GUARDED_MODULES and name not in LIBRARY_OWN:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader, name)
                return spec
        return None


FINDER = _Finder()


def entry_points(own: dict) -> dict:
    """{"module.name": object} of the public callables of :data:`GUARDED_MODULES` imported
    now, plus ``own`` (the worker's timing functions by name); the watch of later imports
    starts with the first call."""
    if FINDER not in sys.meta_path:
        sys.meta_path.insert(0, FINDER)
    return {**_callables(), **own}


def _base(before: dict) -> dict:
    return {**LOADED, **before}


def changed(before: dict, now: dict) -> list:
    """Names whose object is not what ``before`` (or, for a library imported since, its
    import) left: replaced, or deleted from a module still imported (a LIBRARY_OWN import's
    change of an untouched function is not one); and every name of a watched module imported
    past the hook. Sorted."""
    def library_own(n):
        was, became = ACCEPTED.get(n, (None, None))
        return was is base[n] and became is now[n]

    base = _base(before)
    names = [n for n, obj in base.items()
             if (n in now and now[n] is not obj and not library_own(n))
             or (n not in now and n.rpartition(".")[0] in sys.modules)]
    seen = {n.rpartition(".")[0] for n in base}
    names += sorted({f"{n.rpartition('.')[0]} (imported past the watch)" for n in now
                     if n.rpartition(".")[0] not in seen})
    return sorted(names)


def restore(before: dict, names, own_globals: dict) -> None:
    """Put back the objects of ``names`` (the worker's own functions into ``own_globals``)."""
    base = _base(before)
    for name in (n for n in names if n in base):
        mod, _, attr = name.rpartition(".")
        if mod == "worker_process":
            own_globals[attr] = base[name]
        elif mod in sys.modules:
            setattr(sys.modules[mod], attr, base[name])


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
    import traceback

    try:
        __import__("flashbench")
    except BaseException as own:  # any failure to import is the answer
        first = traceback.format_exception_only(type(own), own)[-1].strip().splitlines()
        return "its flashbench failed to import: " + (first[0] if first else repr(own))[:500]
    return "benchmark discovery failed: " + reason
