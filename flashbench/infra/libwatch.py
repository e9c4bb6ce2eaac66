"""Which shared functions a process's untrusted code replaced: the review worker's watch.

The review's worker (``review/worker_process.py``, which loads this file by path) runs both
commits in one process: a side that replaces a function of numpy, torch, ``time`` or the
worker's own timer would change the other side's numbers. The worker snapshots these entry
points (the object, and a Python function's code and defaults, and what it wraps) before
each side loads and after every request, refuses a side that replaced one by name, and puts
the original back. A library a side imports first is recorded when its own import completes
(an import hook, :class:`_Finder`), so nothing is imported ahead of need; a library's own
lazy changes named in :data:`LIBRARY_OWN` are the library's. A library imported past the
hook, a swapped module and a tree that would shadow a library are refused. A tripwire, not a
wall: what it cannot see, docs/review.md. Imports nothing of flashbench.
"""

import sys
import threading
import types


def _sibling(name: str) -> types.ModuleType:
    """flashbench/infra/NAME.py, loaded by path (this file imports nothing of flashbench)."""
    import importlib.util
    import os

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), name + ".py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_hooks = _sibling("sidehooks")  # what a side may not leave in the worker: at-fork, threads
AT_FORK = _hooks.AT_FORK

# the shared libraries whose public callables a side may not replace
# (os, random, secrets and numpy.random: where the suites draw each run's seeds; a head that
# made os.urandom constant had every request's inputs known in advance: a probe, 2026-12-05)
GUARDED_MODULES = ("numpy", "numpy.linalg", "numpy.fft", "numpy.random", "scipy.special",
                   "torch", "torch.nn.functional", "torch.cuda", "torch.autograd", "time",
                   "gc", "math", "os", "random", "secrets")
# imports that replace their own library's entry points (flex_attention's first call imports
# torch._dynamo), with the names each is known to replace: only those changes are the
# library's, never the side's that imported it
LIBRARY_OWN = {"torch._dynamo": ("torch.manual_seed",)}
REFUSED = "replaced what the other side shares"  # the words of a refusal (review/rules.py)
# ... and of a side refused for what its import left running in the worker (pointfork)
LEFT_IN_WORKER = ("process(es) running in the review's worker", "thread(s) in the review's worker",
                  AT_FORK)
PAST = " (imported past the watch)"
MODULE = "<module>"  # the entry of a guarded module object itself

LOADED: dict = {}  # "module.name": its entry point when its module's import completed
ACCEPTED: dict = {}  # "module.name": (before, after) a LIBRARY_OWN import changed it
_DEPTH = threading.local()  # watched imports in progress in this thread
# Python threads when the worker loaded this module, before either side's import: one a
# side's import started ran beside the other's requests (a red team's, 2026-12-07, killed
# base's request processes: every row "coverage gained", a 1.5x slower head OK, exit 0).
# Those _thread started count too (sidehooks.threads: threading does not list them).
_THREADS = threading.active_count()


def _attr(obj, name: str):
    try:
        return getattr(obj, name, None)
    except Exception:  # noqa: BLE001 - an object whose attribute lookup raises: no such part
        return None


def _entry(obj) -> tuple:
    """(obj, its code, defaults, keyword defaults, the function it wraps (numpy's dispatchers'
    ``_implementation``, ``__wrapped__``) and that one's code): any of them swapped is a
    replacement."""
    inner = _attr(obj, "_implementation")
    inner = _attr(obj, "__wrapped__") if inner is None else inner
    return (obj, _attr(obj, "__code__"), _attr(obj, "__defaults__"),
            _attr(obj, "__kwdefaults__"), inner, _attr(inner, "__code__"))


def _same(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def _callables() -> dict:
    found = {}
    for mod in GUARDED_MODULES:
        m = sys.modules.get(mod)
        if not isinstance(m, types.ModuleType):  # not imported, or replaced by a non-module
            continue
        found[f"{mod}.{MODULE}"] = (m,)  # the module itself: a side may not swap it either
        for name, obj in list(vars(m).items()):  # not getattr: no lazy import starts here
            if (isinstance(name, str) and not name.startswith("_") and callable(obj)
                    and not isinstance(obj, types.ModuleType)):
                found[f"{mod}.{name}"] = _entry(obj)
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
        _DEPTH.n = getattr(_DEPTH, "n", 0) + 1
        try:
            self.loader.exec_module(module)
        finally:
            _DEPTH.n -= 1
            module.__loader__ = self.loader  # the library sees its own loader again
            if getattr(module, "__spec__", None) is not None:
                module.__spec__.loader = self.loader
        if own is not None:
            now = _callables()
            for name in LIBRARY_OWN[self.name]:
                if name in own and name in now and not _same(own[name], now[name]):
                    ACCEPTED[name] = (own[name], now[name])
        if _DEPTH.n == 0:  # the outermost watched import is complete
            for name, entry in _callables().items():
                LOADED.setdefault(name, entry)


def spec_elsewhere(skip, name: str, path=None, target=None):
    """Module ``name``'s spec from the finders on sys.meta_path other than ``skip`` (a
    finder that sits first and looks at what the others find), None where none finds it."""
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if finder is skip or find is None:
            continue
        spec = find(name, path, target)
        if spec is not None:
            return spec
    return None


class _Finder:
    """First on sys.meta_path: a watched module's spec from the other finders, its loader
    wrapped in :class:`_Loader`."""

    def find_spec(self, name, path=None, target=None):
        if name not in GUARDED_MODULES and name not in LIBRARY_OWN:
            return None
        spec = spec_elsewhere(self, name, path, target)
        if spec is not None and spec.loader is not None and hasattr(spec.loader,
                                                                     "exec_module"):
            spec.loader = _Loader(spec.loader, name)
        return spec


FINDER = _Finder()


class Importers:
    """Each side's own import machinery: ``sys.meta_path``, ``sys.path_hooks`` and the path
    importer cache, swapped by :meth:`use` as the worker swaps the sides' modules. A finder
    one side's code adds is never asked for the other side's lazily imported modules (a head
    whose import hooked what base imported in its calls slowed base: a probe, 2026-12-05);
    key None is the libraries' own, under which shared modules are imported for all."""

    def __init__(self):
        if FINDER not in sys.meta_path:
            sys.meta_path.insert(0, FINDER)
        self.saved, self.active = {}, None
        self.saved[None] = self.now()

    @staticmethod
    def now() -> tuple:
        return list(sys.meta_path), list(sys.path_hooks), dict(sys.path_importer_cache)

    def use(self, key) -> None:
        if key == self.active:
            return
        self.saved[self.active] = self.now()
        meta, hooks, cache = self.saved.get(key, self.saved[None])
        sys.meta_path, sys.path_hooks, sys.path_importer_cache = list(meta), list(hooks), dict(
            cache)  # new objects: a list a side kept a hold of is no longer the process's
        self.active = key

    def hooked(self, before, owned) -> str | None:
        """Why the active side is refused when a shared module imported since ``before``
        (names in sys.modules then; ``owned(name)``: a side's own) came through a finder of
        its own: the libraries' finders (key None) find it elsewhere or with another kind of
        loader. Both sides would hold that module (a head that wrapped a library's inner
        module on the way in baked its change into what the watch records). A module only
        the side's finders provide is its own business. None when it added no finder. The
        modules found are dropped from sys.modules."""
        own = [f for f in (*sys.meta_path, *sys.path_hooks)
               if not any(f is g for g in (*self.saved[None][0], *self.saved[None][1]))]
        if not own:
            return None
        new = sorted(n for n in set(sys.modules) - set(before) if not owned(n))
        key, found = self.active, []
        self.use(None)
        try:
            for name in new:
                if _elsewhere(name, sys.modules.get(name)):
                    found.append(name)
        finally:
            self.use(key)
        for name in found:  # the other side imports its own copy, through the libraries'
            sys.modules.pop(name, None)
        return None if not found else (
            f"its import {REFUSED}: {', '.join(found[:5])} imported through a finder of its "
            "own (one side's finder may not load a module both sides hold)")


def _elsewhere(name: str, module) -> bool:
    """Whether the finders on ``sys.meta_path`` now (but the watch's) find ``module``'s name
    with another origin or another kind of loader than the one it was loaded with. Only a
    module loaded under its own name from a file is compared (a module that put another in
    its place, torch.backends or typing.io, and a namespace package are not)."""
    spec = getattr(module, "__spec__", None)
    if getattr(spec, "name", None) != name or not getattr(spec, "has_location", False):
        return False
    parent = sys.modules.get(name.rpartition(".")[0]) if "." in name else None
    path = getattr(parent, "__path__", None)
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if finder is FINDER or find is None:
            continue
        try:
            ref = find(name, path, None)
        except Exception:  # noqa: BLE001 - a finder that fails on this name: not it
            continue
        if ref is not None:
            return ref.origin != spec.origin or (
                type(ref.loader) is not type(getattr(module, "__loader__", None)))
    return False


def entry_points(own: dict) -> dict:
    """{"module.name": entry point} of the public callables of :data:`GUARDED_MODULES`
    imported now, plus ``own`` (the worker's timing functions by name); the watch of later
    imports starts with the first call (and the hook is put back first if a side took it
    off)."""
    if FINDER not in sys.meta_path:
        sys.meta_path.insert(0, FINDER)
    return {**_callables(), **{name: _entry(fn) for name, fn in own.items()}}


def refuse_shadows(tree: str) -> None:
    """ValueError where ``tree`` holds a module or package named as a shared library
    (``numpy.py``, ``torch/``): first on the path, it would be that side's numpy, also the
    suites' own checks'."""
    import os

    _hooks.TREES.add(os.path.realpath(tree) + os.sep)
    tops = {m.partition(".")[0] for m in GUARDED_MODULES}
    try:
        entries = os.listdir(tree)
    except OSError:
        return
    found = sorted(e for e in entries if e.removesuffix(".py") in tops
                   and (e.endswith(".py") or os.path.isdir(os.path.join(tree, e))))
    if found:
        raise ValueError(f"its tree holds {', '.join(found)}, named as a library both sides "
                         "share (it would shadow it for the suites too)")


def top_level_names(tree: str) -> set:
    """What ``import NAME`` finds at the top of ``tree`` (its own modules), but a library
    both sides share."""
    import os

    try:
        entries = os.listdir(tree)
    except OSError:
        return set()
    names = {e[:-3] for e in entries if e.endswith(".py") and os.path.isfile(os.path.join(tree, e))}
    names |= {e for e in entries if e.isidentifier()
              and os.path.isfile(os.path.join(tree, e, "__init__.py"))}
    return names - {m.partition(".")[0] for m in GUARDED_MODULES}


def import_own(tree: str) -> None:
    """Import ``tree``'s flashbench where it holds one: the suites import it lazily (in
    setup), so a commit whose flashbench does not import is named once, at discovery
    (:func:`discovery_error`), not skipped grid point by grid point."""
    import os

    if os.path.isfile(os.path.join(tree, "flashbench", "__init__.py")):
        __import__("flashbench")
    if (more := _hooks.threads() - _THREADS) > 0:  # this side's or the other's
        raise RuntimeError(f"its import started {more} thread(s) in the review's worker, "
                           "where they would run beside the other side's requests")


def _base(before: dict) -> dict:
    return {**LOADED, **before}


def changed(before: dict, now: dict) -> list:
    """Names whose entry point is not what ``before`` (or, for a library imported since, its
    import) left: replaced (or its code swapped), or deleted from a module still imported (a
    LIBRARY_OWN import's named change of an untouched function is not one); and each watched
    module imported past the hook. Sorted."""
    def library_own(n):
        was, became = ACCEPTED.get(n, ((), ()))
        return _same(was, base[n]) and _same(became, now[n])

    base = _base(before)
    names = [n for n, entry in base.items()
             if (n in now and not _same(now[n], entry) and not library_own(n))
             or (n not in now and n.rpartition(".")[0] in sys.modules)]
    seen = {n.rpartition(".")[0] for n in base}
    names += sorted({n.rpartition(".")[0] + PAST for n in now if n.rpartition(".")[0] not in seen})
    return sorted(names)


def restore(before: dict, names, own_globals: dict) -> None:
    """Put back the entry points of ``names`` (the worker's own functions into
    ``own_globals``); a module imported past the watch is dropped, with its submodules."""
    base = _base(before)
    for name in names:
        if name.endswith(PAST):
            mod = name[:-len(PAST)]
            for m in [m for m in sys.modules if m == mod or m.startswith(mod + ".")]:
                del sys.modules[m]
            continue
        if name not in base:
            continue
        mod, _, attr = name.rpartition(".")
        if attr == MODULE:
            sys.modules[mod] = base[name][0]
            continue
        obj, code, defaults, kwdefaults, inner, inner_code = base[name]
        if code is not None:  # a swapped code object or defaults go back too
            try:
                obj.__code__, obj.__defaults__, obj.__kwdefaults__ = code, defaults, kwdefaults
            except (AttributeError, TypeError):  # a compiled function's: never swapped
                pass
        if inner_code is not None:
            inner.__code__ = inner_code
        if mod.partition(".")[0] == "worker_process":  # its function, or a class's method
            owner = mod.partition(".")[2]
            if owner:
                setattr(own_globals[owner], attr, obj)
            else:
                own_globals[attr] = obj
        elif isinstance(sys.modules.get(mod), types.ModuleType):
            setattr(sys.modules[mod], attr, obj)


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


if __name__ == "libwatch":  # loaded by path in the review's worker (never as flashbench's)
    _sibling("sealed").no_ptrace()  # neither side may trace the other's processes
    _hooks.watch_at_fork()
    _hooks.count_threads()
    _THREADS = _hooks.threads()
