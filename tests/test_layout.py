"""The house: packages by job, their public faces, what a process start imports."""

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_top_level_holds_packages_only():
    loose = sorted(p.name for p in (ROOT / "flashbench").glob("*.py")
                   if p.name != "__init__.py")
    assert loose == []


def test_import_flashbench_installs_no_import_hook_and_old_paths_are_gone():
    """The old module paths had no user left (issue 38): no finder answers for them, and
    ``import flashbench`` leaves ``sys.meta_path`` as it found it."""
    code = ("import sys\nbefore = list(sys.meta_path)\nimport flashbench\n"
            "assert sys.meta_path == before, sys.meta_path\n"
            "try:\n    import flashbench.precision\nexcept ModuleNotFoundError:\n    pass\n"
            "else:\n    sys.exit('flashbench.precision still imports')\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_nothing_reaches_into_a_study_or_into_tests_and_no_test_loads_a_file_by_path():
    """scripts/ sorted by job (issue 38): a study answers one question once, so nothing in
    flashbench/, tools/, benchmarks/ or tests/ imports one; nothing puts tests/ or studies/ on
    sys.path; and no test loads a module by its file path (the GPU harness, the shared
    defective kernels and the synthetic corpus are imported by name from tools/)."""
    bad = []
    for folder in ("flashbench", "tools", "benchmarks", "tests", "studies", "scripts"):
        for path in (ROOT / folder).rglob("*.py"):
            text = path.read_text()
            where = path.relative_to(ROOT)
            if re.search(r"sys\.path\.(insert|append)\([^\n]*[\"'](tests|studies)[\"']",
                         text):
                bad.append(f"{where}: puts tests/ or studies/ on sys.path")
            if folder == "tests" and path.name != "test_layout.py" and \
                    "spec_from_file_location" in text:
                bad.append(f"{where}: loads a module by file path")
            if folder == "studies" or ("studies" not in text and "defects" not in text):
                continue  # (no import of either can be in a file that never names it)
            for node in ast.walk(ast.parse(text)):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                         [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                bad += [f"{where}: imports {n}" for n in names
                        if n.split(".")[0] in ("studies", "defects")]
    assert bad == []


def test_the_public_faces_keep_their_contract_names():
    for module, names in {
        "flashbench.reference": ["softmax", "online_softmax", "attention", "online_attention",
                                 "attention_grad", "online_attention_grad"],
        "flashbench.accuracy": ["error_stats", "baseline_rule", "judge", "judge_gradient"],
        "flashbench.inputs": ["Shape", "make_qkv"],
        "flashbench.numerics": ["flash_model", "standard_model"],
    }.items():
        mod = importlib.import_module(module)
        assert all(callable(getattr(mod, n)) for n in names), module


@pytest.mark.parametrize("module, absent", [
    ("flashbench.cli", ("torch", "ml_dtypes", "pandas")),  # `history`, `review`: no torch
    ("flashbench.backends.worker", ("ml_dtypes", "pandas")),  # a user kernel's process
    ("flashbench.history", ("torch", "ml_dtypes")),
])
def test_a_process_start_imports_only_what_it_uses(module, absent):
    """Every CLI call, every user kernel's worker and every asv process pays its imports:
    torch costs about 1.3 s a process here and ml_dtypes 0.6 s, so each is imported where
    it is used (a bf16 or fp8 rounding, a kernel call), not at the package's import."""
    code = f"import sys, {module}; print(sorted(m for m in {absent!r} if m in sys.modules))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]", f"importing {module} imported {r.stdout.strip()}"
