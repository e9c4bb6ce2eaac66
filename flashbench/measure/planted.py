"""What a kernel's code wrote into the files the harness runs from, while it ran.

A kernel runs as the same user as the harness, so it can write where the harness reads: a
probe's kernel (2026-12-05) wrote bytecode for ``flashbench/bands/table.py`` (a tolerance
of 1e9; the source untouched, the bytecode dated as the source), which the harness imported
after the kernel's worker started: a wrong kernel PASSed in that run and in every later one.
``flashbench speed`` imports what judges before any worker starts (:func:`import_judges`)
and compares, after the run, every file of the flashbench package and the bytecode of every
module imported then (:func:`snapshot`, :func:`planted`): a source or data file changed, or
bytecode that Python would not have written from its source (compiled again to compare),
fails the run by name, and that bytecode is deleted, so that no later run imports it. So
does a new importable name on the import path (``sitecustomize.py`` beside a kernel), and a
start-up hook imported from outside the interpreter's folders (:func:`startup_hooks`).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import marshal
import os
import sys

from flashbench.infra.libwatch import spec_elsewhere

__all__ = ["JUDGES", "import_judges", "snapshot", "planted", "startup_hooks",
           "ImportGuard"]

# what judges a speed run's outputs, imported before any kernel's code runs
JUDGES = ("flashbench.measure.speedrun", "flashbench.measure.speedworker",
          "flashbench.measure.speedgrad", "flashbench.measure.speedvarlen",
          "flashbench.measure.speeddecode", "flashbench.measure.decode",
          "flashbench.timed.shared", "flashbench.timed.decode", "flashbench.timed.commit",
          "flashbench.backends.tensors",  # imported at the first user's row before (rt12)
          "flashbench.bands.table", "flashbench.bands.case", "flashbench.accuracy",
          "flashbench.numerics", "flashbench.reference", "flashbench.backends.outputs",
          "scipy.special")


def import_judges() -> None:
    """Import :data:`JUDGES` and read the shipped tolerance table they consult."""
    for name in JUDGES:
        importlib.import_module(name)
    from flashbench.bands.table import load_table

    load_table()


def _key(path: str):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _package_files() -> list[str]:
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # flashbench/
    return [os.path.join(folder, n) for folder, _, names in os.walk(top) for n in names]


def _module_files() -> list[str]:
    found = []
    for module in list(sys.modules.values()):
        source = getattr(module, "__file__", None)
        if isinstance(source, str) and source.endswith(".py"):
            found.append(source)
            try:
                found.append(importlib.util.cache_from_source(source))
            except (ValueError, NotImplementedError):
                pass
    return found


def _path_entries() -> list[str]:
    """What Python could import by a new name from each folder on this process's sys.path:
    its modules, extensions, .pth files, and packages' ``__init__.py`` (a kernel's run wrote
    ``sitecustomize.py`` beside itself, on the harness's PYTHONPATH: every later run
    imported it at start-up and judged nothing)."""
    found = []
    for folder in dict.fromkeys(p for p in sys.path if p and os.path.isdir(p)):
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for n in names:
            path = os.path.join(folder, n)
            if n.endswith((".py", ".pth", ".so", ".pyc")):
                found.append(path)
            elif n != "__pycache__" and os.path.isfile(os.path.join(path, "__init__.py")):
                found.append(os.path.join(path, "__init__.py"))
    return found


def startup_hooks() -> list[str]:
    """``sitecustomize`` / ``usercustomize`` modules this process imported at start-up from
    outside the interpreter's own folders: code that ran in the harness before it did."""
    roots = tuple(os.path.join(os.path.realpath(p), "")
                  for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, "/etc"})
    found = []
    for name in ("sitecustomize", "usercustomize"):
        path = getattr(sys.modules.get(name), "__file__", None)
        if isinstance(path, str) and not os.path.realpath(path).startswith(roots):
            found.append(f"{path}: {name} imported at this run's start, from outside the "
                         "interpreter's folders (code that runs in the harness before it: "
                         "a kernel of an earlier run may have written it)")
    return found


def snapshot() -> dict:
    """{path: (inode, size, mtime, ctime) or None}: the flashbench package's files, the
    source and bytecode of every module imported now, and every importable name on the
    import path (:func:`_path_entries`)."""
    return {p: _key(p) for p in (*_package_files(), *_module_files(), *_path_entries())}


def genuine(pyc: str) -> bool:
    """Whether ``pyc`` is what Python writes from its source as it is now: its header (the
    source's time and size, or hash) and its code, compared as code objects (which ignore
    the file name a process imported it by)."""
    try:
        source = importlib.util.source_from_cache(pyc)
        with open(pyc, "rb") as f:
            data = f.read()
        with open(source, "rb") as f:
            text = f.read()
        st = os.stat(source)
        flags = int.from_bytes(data[4:8], "little")
        header = (importlib.util.source_hash(text) if flags else
                  (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
                  + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little"))
        if data[:4] != importlib.util.MAGIC_NUMBER or data[8:16] != header:
            return False
        level = pyc.rsplit(".opt-", 1)[1].split(".")[0] if ".opt-" in pyc else ""
        return marshal.loads(data[16:]) == compile(text, source, "exec", dont_inherit=True,
                                                   optimize=int(level) if level else 0)
    except (OSError, ValueError, EOFError, TypeError, SyntaxError):
        return False


def planted(before: dict) -> list[str]:
    """What changed since ``before`` (:func:`snapshot`): a sentence per file; bytecode that
    is not its source's is deleted. A bytecode file Python wrote meanwhile (a module
    imported for the first time) is its source's, and not named."""
    now = {p: _key(p) for p in (*before, *_package_files(), *_path_entries())}
    found = startup_hooks()
    for path in sorted(p for p, key in now.items() if key != before.get(p)):
        if path.endswith(".pyc"):
            if now[path] is None and before.get(path) is not None:
                found.append(f"{path}: bytecode removed during the run (Python replaces its "
                             "bytecode, never removes it: a kernel, or another run's check "
                             "of a plant)")
                continue
            if now[path] is None or genuine(path):
                continue
            try:
                os.remove(path)
                found.append(f"{path}: bytecode that its source does not compile to "
                             "(deleted)")
            except OSError as exc:
                found.append(f"{path}: bytecode that its source does not compile to, "
                             f"not deleted ({exc.strerror}): delete it")
        else:
            found.append(f"{path}: {'removed' if now[path] is None else 'written'} during "
                         "the run")
    return found


class ImportGuard(importlib.abc.MetaPathFinder):
    """First on ``sys.meta_path`` while kernels run (:meth:`install`): a module this process
    imports from a file written since (its ctime), or whose bytecode was written since and
    is not its source's (deleted), is refused (ImportError) and named in :attr:`refused`.
    A second red team's kernel (2026-12-06) wrote code into a flashbench module the harness
    first imported at the first user's row: it ran in the harness, switched the plant check
    off and put the file back (a zeros kernel PASSed, 54x); another's, into a torch module
    imported later, ran in every later run. Modules loaded by path (torch.compile's and
    Triton's caches) do not pass here."""

    def __init__(self, since_ns: int):
        self.since, self.refused = since_ns, []

    @classmethod
    def install(cls) -> ImportGuard:
        import time

        guard = cls(time.time_ns())
        sys.meta_path.insert(0, guard)
        return guard

    def remove(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)

    def find_spec(self, name, path=None, target=None):
        spec = spec_elsewhere(self, name, path, target)
        if spec is None:
            return None
        origin = spec.origin if spec.has_location else None
        why = self._written(origin) if isinstance(origin, str) else None
        if why is not None:
            self.refused.append(f"{origin}: {why}: not imported by the harness")
            raise ImportError(f"flashbench: {origin} {why}", name=name)
        return spec

    def _written(self, origin: str) -> str | None:
        key = _key(origin)
        if key is None:
            return None
        if key[3] >= self.since:
            return "written during this run, after its kernels' workers could write it"
        if origin.endswith(".py"):
            pyc = importlib.util.cache_from_source(origin)
            cached = _key(pyc)
            if cached is not None and cached[3] >= self.since and not genuine(pyc):
                try:
                    os.remove(pyc)
                except OSError:
                    pass
                return "has bytecode written during this run that its source does not " \
                       "compile to (deleted)"
        return None
