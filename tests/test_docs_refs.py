"""What README.md and docs/ name in backticks exists: a script or module path (``*.py``,
``*.sh``) is a file of the repository, and a dotted name under one of its packages
(``flashbench.``, ``tools.``, ``benchmarks.``, ``studies.``) is a module, or a name one
defines. A docs audit (2026-12-06) found commands for a `gpu_history.py` renamed away and
functions named under a module that no longer exists."""

from __future__ import annotations

import ast
import fnmatch
import re
import subprocess
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PACKAGES = ("flashbench", "tools", "benchmarks", "studies")
# named on purpose though absent: a retired script's record (docs/gpu.md's first run),
# examples of what a kernel or a head commit could write, a CI runner's own script
ABSENT_ON_PURPOSE = {"gpu_check.sh", "scripts/gpu_check.sh", "sitecustomize.py", "numpy.py",
                     "./config.sh"}
TICKED = re.compile(r"`([^`\n]+)`")


@cache
def tracked() -> tuple[str, ...]:
    """git's files; outside a checkout (an sdist, an export), the tree's own files."""
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if out.returncode == 0 and out.stdout.strip():
        return tuple(out.stdout.split())
    skip = {".git", ".venv", ".asv", "node_modules", "__pycache__"}
    return tuple(str(f.relative_to(ROOT)) for f in ROOT.rglob("*")
                 if f.is_file() and not skip & set(f.relative_to(ROOT).parts))


def _ticked(pattern: re.Pattern) -> dict[str, str]:
    """{name: the doc that names it first} of every backticked span's matches."""
    found: dict[str, str] = {}
    for doc in DOCS:
        for span in TICKED.findall(doc.read_text()):
            for name in pattern.findall(span):
                found.setdefault(name, doc.name)
    return found


def _file_exists(name: str) -> bool:
    """A tracked file at ``name`` or ending in ``/name`` (a glob: one that matches)."""
    name = name.removeprefix("./")
    return any(fnmatch.fnmatch(f, name) or fnmatch.fnmatch(f, "*/" + name) for f in tracked())


def test_every_script_or_module_file_the_docs_name_exists():
    names = _ticked(re.compile(r"(?:^|\s)((?:\.?/?[\w.*-]+/)*[\w*-]+\.(?:py|sh))\b"))
    missing = {n: doc for n, doc in names.items()
               if n not in ABSENT_ON_PURPOSE and not _file_exists(n)}
    assert not missing, f"files the docs name that the repository lacks: {missing}"
    assert "scripts/gpu_session.sh" in names  # the pattern reads what the docs write


@cache
def _defined(path: Path) -> frozenset[str]:
    """Every name a module defines or imports, at any depth (classes' methods included)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return frozenset(names)


def _resolves(dotted: str) -> bool:
    """A module (file or package) of the repository, or a name defined in the longest
    module prefix of ``dotted`` (its remaining parts: a class and its member)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:cut])
        module = next((p for p in (base.with_suffix(".py"), base / "__init__.py")
                       if p.is_file()), None)
        if module is None:
            continue
        rest = parts[cut:]
        return not rest or rest[0] in _defined(module)
    return False


FILE_SUFFIXES = {"json", "py", "sh", "md", "toml", "csv", "png", "txt", "parquet"}
GONE = {"flashbench.history_report"}  # named as gone, with what replaced it


@cache
def _entry_point_groups() -> frozenset[str]:
    """The quoted dotted strings of flashbench's code (entry-point groups among them)."""
    text = "\n".join(p.read_text() for p in (ROOT / "flashbench").rglob("*.py"))
    return frozenset(re.findall(r"[\"']((?:flashbench)(?:\.\w+)+)[\"']", text))


def test_every_dotted_name_under_the_repositorys_packages_resolves():
    names = _ticked(re.compile(rf"\b((?:{'|'.join(PACKAGES)})(?:\.\w+)+)"))
    names = {n.rstrip("."): doc for n, doc in names.items()
             if n.rsplit(".", 1)[-1] not in FILE_SUFFIXES and n not in GONE}
    bad = {n: doc for n, doc in names.items()
           if not _resolves(n) and n not in _entry_point_groups()}
    assert not bad, f"dotted names the docs give that no module defines: {bad}"
    assert "flashbench.timed" in names  # the pattern reads what the docs write


def test_the_reviews_reason_codes_in_its_docs_are_the_codes_it_gives():
    """docs/review.md's list of reason codes ("Every row carries a reason code") names each
    of flashbench.review.model.REASONS and no other (the audit found one missing and one
    filed under --reuse alone)."""
    from flashbench.review.model import REASONS

    text = (ROOT / "docs" / "review.md").read_text()
    start = text.index("Every row carries a reason code")
    listed = re.findall(r"`([a-z][a-z-]+)`", text[start:text.index("NaN (null instead)", start)])
    assert set(listed) == set(REASONS), (set(REASONS) - set(listed), set(listed) - set(REASONS))
