"""Module boundaries read from the code: no private name imported across modules, measure
returns records (the renderers live in cli), and the backends package has no import circle,
lazy imports included (issue 38, items 2-4)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "flashbench"


def _imports(path: Path):
    """(line, module, name) of every ``from ... import name`` in ``path``, at any depth
    (lazy imports in functions too), relative imports resolved to their package."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = parts[:len(parts) - node.level]
                module = ".".join(base + ((module,) if module else ()))
            for alias in node.names:
                yield node.lineno, module, alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, None


def _is_module(module: str, name: str) -> bool:
    """Whether ``module.name`` is a module of this repository (a package's private module
    is the package's own business)."""
    where = ROOT.joinpath(*module.split("."), name)
    return where.with_suffix(".py").exists() or (where / "__init__.py").exists()


def test_no_private_name_crosses_a_module_boundary():
    """A name that starts with "_" is its module's own: no other module of flashbench or of
    the asv suites imports it (a package's private submodule, as ``flashbench._moved``, is
    not a name). A suite keeps a helper's old local name with ``import public as _name``, so
    that no benchmark's source, and so no asv series, changes."""
    crossing = []
    for path in sorted([*PACKAGE.rglob("*.py"), *(ROOT / "benchmarks").glob("*.py")]):
        for line, module, name in _imports(path):
            if (name is not None and name.startswith("_") and not name.startswith("__")
                    and module.split(".")[0] in ("flashbench", "benchmarks")
                    and not _is_module(module, name)):
                crossing.append(f"{path.relative_to(ROOT)}:{line}: {module}.{name}")
    assert crossing == []


def test_measure_bands_and_review_return_records_and_render_no_table():
    """No module of flashbench.measure, bands or review imports tabulate (lazily or not): the
    CLI renders (flashbench.cli.check_tables, check_view, bands_tables, review_markdown). It
    failed on measure/check.py, bands/render.py and review/render.py."""
    found = [f"{path.relative_to(PACKAGE)}:{line}: {module}"
             for room in ("measure", "bands", "review")
             for path in sorted((PACKAGE / room).glob("*.py"))
             for line, module, _ in _imports(path) if module.split(".")[0] == "tabulate"]
    assert found == []


def _backends_graph() -> dict[str, set[str]]:
    """flashbench.backends' modules -> the modules of flashbench.backends each imports,
    lazy imports included; the package's __init__ is "flashbench.backends"."""
    graph = {}
    for path in (PACKAGE / "backends").glob("*.py"):
        me = "flashbench.backends" + ("" if path.stem == "__init__" else f".{path.stem}")
        deps = set()
        for _, module, name in _imports(path):
            if name is not None and _is_module(module, name):
                module = f"{module}.{name}"
            if module.startswith("flashbench.backends") and module != me:
                deps.add(module)
        graph[me] = deps
    return graph


def test_the_backends_package_has_no_import_circle_lazy_or_not():
    graph = _backends_graph()
    below_init = {m: deps for m, deps in graph.items() if m != "flashbench.backends"}
    # no module of the package imports the package's __init__ (the re-exports) back
    assert {m for m, deps in below_init.items() if "flashbench.backends" in deps} == set()
    circles, done = [], set()

    def visit(module, path):
        if module in path:
            circles.append(path[path.index(module):] + [module])
            return
        if module in done:
            return
        for dep in sorted(graph.get(module, ())):
            visit(dep, path + [module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
    assert circles == []


def test_the_backends_init_only_re_exports():
    """The registry lives in backends/registry.py; __init__ defines nothing of its own."""
    tree = ast.parse((PACKAGE / "backends" / "__init__.py").read_text())
    defined = [n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)]
    assert defined == []
