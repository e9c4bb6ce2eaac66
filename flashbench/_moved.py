"""Old import paths of modules that moved into packages: they keep working, with a
DeprecationWarning that names the new path (``import flashbench.precision`` ->
``flashbench.inputs.precision``)."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
import warnings

MOVED = {
    "flashbench.precision": "flashbench.inputs.precision",
    "flashbench.validation": "flashbench.inputs.validation",
    "flashbench.streaming": "flashbench.reference.streaming",
    "flashbench.streaming_bwd": "flashbench.reference.streaming_bwd",
    "flashbench.measure_grad": "flashbench.measure.backward",
    "flashbench.footprint": "flashbench.measure.footprint",
    "flashbench.timing": "flashbench.measure.timing",
    "flashbench.check": "flashbench.measure.run",
    "flashbench.tables": "flashbench.measure.papers",
    "flashbench.machine": "flashbench.infra.machine",
    "flashbench.locks": "flashbench.infra.locks",
}


class _Moved(types.ModuleType):
    """An old path: every attribute is read from (and written to) the module's new home."""

    def __getattr__(self, name):
        return getattr(importlib.import_module(MOVED[self.__name__]), name)


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if name in MOVED else None

    def create_module(self, spec):
        warnings.warn(f"{spec.name} moved to {MOVED[spec.name]}; import it from there",
                      DeprecationWarning, stacklevel=3)
        return _Moved(spec.name)

    def exec_module(self, module):
        importlib.import_module(MOVED[module.__name__])


def install() -> None:
    """Put the finder on ``sys.meta_path`` once (it answers for :data:`MOVED` names only)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())
