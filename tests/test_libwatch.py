"""The review worker's watch of the libraries both sides share (flashbench/infra/libwatch.py):
each case in a fresh process, since the watch's import hook is the process's."""

import subprocess
import sys
import textwrap

import pytest


def _run(code: str, cwd=None) -> None:
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, timeout=300, cwd=cwd)
    assert r.returncode == 0, r.stderr[-3000:]


def test_a_library_a_side_imports_first_is_watched_from_its_own_import():
    """Nothing is imported ahead of need, and a side that imports numpy and replaces
    numpy.dot in the same import is still caught, and the original put back."""
    _run("""
        import sys
        import flashbench.infra.libwatch as g
        before = g.entry_points({})
        assert "torch" not in sys.modules and "numpy" not in sys.modules
        import numpy
        dot = numpy.dot
        numpy.dot = lambda a, b: 0
        why = g.refusal(before, g.entry_points({}), "its import", {})
        assert why.startswith("its import " + g.REFUSED + ": numpy.dot"), why
        assert numpy.dot is dot
        assert g.changed(before, g.entry_points({})) == []
    """)


def test_torchs_own_lazy_wrap_of_manual_seed_is_not_blamed_on_a_side():
    """Importing torch._dynamo (flex_attention's first call does) wraps torch.manual_seed:
    the review's worker refused whichever side imported it first (every base row of a
    whole-suite review "failed", found by the review-power study, 2026-12-03). That change
    is the library's; a side's own replacement is still caught."""
    pytest.importorskip("torch")
    _run("""
        import flashbench.infra.libwatch as g
        g.entry_points({})
        import torch
        before = g.entry_points({})
        import torch._dynamo
        assert g.changed(before, g.entry_points({})) == [], g.changed(before, g.entry_points({}))
        torch.manual_seed = lambda s: None
        assert g.changed(before, g.entry_points({})) == ["torch.manual_seed"]
    """)


def test_only_a_librarys_named_changes_are_its_own(tmp_path):
    """A stand-in library that wraps math.sqrt when imported (as torch._dynamo wraps
    torch.manual_seed): that named change is the library's; a side that replaced math.sqrt
    before the import is still blamed, and so is any other change made while the library
    imported (code a side slips into that import: a finder, a thread)."""
    (tmp_path / "wrapping_lib.py").write_text(textwrap.dedent("""
        import math
        _inner = math.sqrt
        def sqrt(x):
            return _inner(x)
        math.sqrt = sqrt
        if getattr(math, "ALSO", False):
            math.floor = lambda x: 0
    """))
    head = """
        import math
        import flashbench.infra.libwatch as g
        g.LIBRARY_OWN = {"wrapping_lib": ("math.sqrt",)}
        before = g.entry_points({})
    """
    _run(head + """
        import wrapping_lib
        assert g.changed(before, g.entry_points({})) == []
    """, cwd=tmp_path)
    _run(head + """
        math.sqrt = lambda x: 0.0  # replaced, then wrapped by the library's import
        import wrapping_lib
        assert g.changed(before, g.entry_points({})) == ["math.sqrt"]
    """, cwd=tmp_path)
    _run(head + """
        math.ALSO = True
        import wrapping_lib
        assert g.changed(before, g.entry_points({})) == ["math.floor"]
    """, cwd=tmp_path)


def test_swapped_code_a_swapped_module_and_odd_keys_are_caught_not_crashed():
    """A replacement by a function's code (numpy's dispatcher's implementation, the worker's
    own timer), the module itself swapped in sys.modules (by another module or a non-module),
    and a non-string key in a module's namespace: refused, put back, no crash."""
    _run("""
        import gc, sys, types
        import numpy as np
        import flashbench.infra.libwatch as g

        def fake(*a, **k):
            return 0

        def timer():
            pass

        own = {"worker_process._sample": timer}
        before = g.entry_points(own)
        impl = np.linalg.solve._implementation
        code = impl.__code__
        impl.__code__ = fake.__code__
        timer.__code__ = fake.__code__
        assert g.changed(before, g.entry_points(own)) == ["numpy.linalg.solve",
                                                          "worker_process._sample"]
        assert g.refusal(before, g.entry_points(own), "its import", {})
        assert impl.__code__ is code and g.changed(before, g.entry_points(own)) == []
        real = sys.modules["gc"]
        for stand_in in (types.ModuleType("gc"), 5):
            sys.modules["gc"] = stand_in
            assert "gc.<module>" in g.changed(before, g.entry_points(own))
            g.refusal(before, g.entry_points(own), "its import", {})
            assert sys.modules["gc"] is real
        vars(np)[1] = print
        assert g.changed(before, g.entry_points(own)) == []
    """)


def test_a_tree_holding_a_shared_librarys_name_is_refused(tmp_path):
    """A side's tree with numpy.py or a torch/ folder at its top would be that side's numpy
    (its tree is first on the path), the suites' own checks included."""
    from flashbench.infra.libwatch import refuse_shadows

    refuse_shadows(str(tmp_path))  # nothing shadowed
    (tmp_path / "numpy.py").write_text("")
    (tmp_path / "torch").mkdir()
    with pytest.raises(ValueError, match="its tree holds numpy.py, torch, named as a library"):
        refuse_shadows(str(tmp_path))


def test_a_library_imported_past_the_watch_is_refused():
    """A side that takes the hook off sys.meta_path and imports a watched library gets
    nothing watched: refused by the library's name."""
    _run("""
        import sys
        import flashbench.infra.libwatch as g
        before = g.entry_points({})
        sys.meta_path.remove(g.FINDER)
        import numpy
        numpy.dot = lambda a, b: 0
        names = g.changed(before, g.entry_points({}))
        assert "numpy (imported past the watch)" in names, names
    """)


def test_a_side_that_adds_a_finder_which_finds_nothing_is_not_refused_for_its_libraries():
    """A side's finder that finds nothing, then numpy's and torch's import: modules that put
    another in their place (typing.io, torch.backends) or have no file were called "imported
    through a finder of its own" and dropped (a fresh-eyes review, 2026-12-05)."""
    pytest.importorskip("torch")
    _run("""
        import sys
        import flashbench.infra.libwatch as g

        class Nothing:
            def find_spec(self, name, path=None, target=None):
                return None

        imports = g.Importers()
        imports.use("head")
        sys.meta_path.append(Nothing())
        before = set(sys.modules)
        import numpy, torch, typing
        why = imports.hooked(before, lambda n: n.startswith("flashbench"))
        assert why is None, why
        assert "torch.backends" in sys.modules and "numpy" in sys.modules
    """)
