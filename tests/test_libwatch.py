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


def test_a_replacement_a_librarys_own_import_then_wraps_is_still_the_sides(tmp_path):
    """A side that replaces a function which a library's own import then wraps (as
    torch._dynamo wraps torch.manual_seed) is blamed: only a change of an untouched
    function is the library's. A stand-in library that wraps math.sqrt when imported."""
    (tmp_path / "wrapping_lib.py").write_text(textwrap.dedent("""
        import math
        _inner = math.sqrt
        def sqrt(x):
            return _inner(x)
        math.sqrt = sqrt
    """))
    _run("""
        import math
        import flashbench.infra.libwatch as g
        g.LIBRARY_OWN = ("wrapping_lib",)
        before = g.entry_points({})
        import wrapping_lib
        assert g.changed(before, g.entry_points({})) == []
    """, cwd=tmp_path)
    _run("""
        import math
        import flashbench.infra.libwatch as g
        g.LIBRARY_OWN = ("wrapping_lib",)
        before = g.entry_points({})
        math.sqrt = lambda x: 0.0  # replaced, then wrapped by the library's import
        import wrapping_lib
        assert g.changed(before, g.entry_points({})) == ["math.sqrt"]
    """, cwd=tmp_path)


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
