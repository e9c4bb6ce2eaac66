"""Are stored results of two asv environments comparable? (``review --reuse``)

asv names an environment after how it was made: ``virtualenv-py3.11-numpy-torch2.13.0``
(Python version, each requirement with its pinned version) or
``existing-py_usr_bin_python3`` (an interpreter's path: read here when it is this
interpreter, local version labels such as ``+cpu`` ignored; another cannot be checked).
Two names are comparable when they describe the same Python and pinned packages;
unpinned requirements cannot be checked, and :func:`comparable` says so.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import sys
from dataclasses import dataclass, field


@dataclass(frozen=True)
class EnvFacts:
    name: str
    python: str | None  # "3.11"; None when the name does not say
    pinned: dict[str, str] = field(default_factory=dict)
    unpinned: tuple[str, ...] = ()


def existing_name(executable: str = sys.executable) -> str:
    """The name asv gives ``-E existing:<executable>`` (asv.environment.get_env_name)."""
    from asv.environment import get_env_name

    path = os.path.abspath(shutil.which(executable) or executable)
    return get_env_name("existing", path.replace(os.path.sep, "_"), {}, {})


def _public(version: str) -> str:
    return version.split("+", 1)[0]


def facts(name: str, requirements: list[str]) -> EnvFacts:
    """What ``name`` says; ``requirements``: the requirement names of asv.conf.json's
    matrix (needed to split ``torch2.13.0`` into name and version)."""
    if name == existing_name():
        pinned = {}
        for req in requirements:
            try:
                pinned[req] = _public(importlib.metadata.version(req))
            except importlib.metadata.PackageNotFoundError:
                pinned[req] = "not installed"
        return EnvFacts(name, f"{sys.version_info[0]}.{sys.version_info[1]}", pinned)
    tool, _, rest = name.partition("-")
    if tool == "existing" or not rest.startswith("py"):
        return EnvFacts(name, None)
    tokens = rest.split("-")
    python = tokens[0][2:] or None
    pinned, unpinned = {}, []
    for token in tokens[1:]:
        req = max((r for r in requirements if token.startswith(r)), key=len, default=None)
        if req is None:
            continue
        if token == req:
            unpinned.append(req)
        else:
            pinned[req] = _public(token[len(req):])
    return EnvFacts(name, python, pinned, tuple(unpinned))


def _describe(f: EnvFacts) -> str:
    if f.python is None:
        return f"{f.name} (an interpreter this review cannot inspect)"
    reqs = ", ".join(f"{k} {v}" for k, v in sorted(f.pinned.items()))
    return f"{f.name} (Python {f.python}{', ' + reqs if reqs else ''})"


def comparable(a: str, b: str, requirements: list[str]) -> tuple[bool, str]:
    """(comparable?, explanation) for results of environments ``a`` and ``b``."""
    if a == b:
        return True, ""
    fa, fb = facts(a, requirements), facts(b, requirements)
    if fa.python is None or fb.python is None:
        return False, f"{_describe(fa)} vs {_describe(fb)}"
    differ = []
    if fa.python != fb.python:
        differ.append(f"Python {fa.python} vs {fb.python}")
    for req in sorted(set(fa.pinned) & set(fb.pinned)):
        if fa.pinned[req] != fb.pinned[req]:
            differ.append(f"{req} {fa.pinned[req]} vs {fb.pinned[req]}")
    if differ:
        return False, f"{_describe(fa)} vs {_describe(fb)}: {'; '.join(differ)}"
    unchecked = sorted(set(fa.unpinned) | set(fb.unpinned))
    return True, (f"environments {a} and {b} have the same Python and pinned packages"
                  + (f" (unpinned, not checked: {', '.join(unchecked)})" if unchecked else ""))
