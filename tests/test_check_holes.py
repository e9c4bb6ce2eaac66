"""Issue 36's wrong verdicts in ``flashbench check``: a backend that fails before it runs
FAILs by name under every variant, decode refuses the variant flags it does not read, and
numbers from outside float range are one-line errors (exit 2), never a crash (exit 3)."""

import json
import sys
import textwrap

import pytest

from flashbench.cli import main

USER = textwrap.dedent('''
    def attn(q, k, v, causal=False, scale=None, window=(-1, -1)):
        raise RuntimeError("never reached")
    attn.flashbench_variants = ("window", "varlen")  # "varlen" is not a declared variant

    def dec(q, k_cache, v_cache, cache_seqlens, block_table=None, causal=False, scale=None):
        raise RuntimeError("never reached")
    dec.flashbench_kind = "decode"
''')


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "fbholes_kern.py").write_text(USER)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("fbholes_kern", None)


def check_json(capsys, *args):
    rc = main(["check", "--dtype", "fp32", "--dist", "normal", "--causal", "off", "--json",
               "--quiet", *args])
    return rc, json.loads(capsys.readouterr().out)


CANNOT_RUN = {
    "no_such_mod_holes:attn": "cannot import no_such_mod_holes:attn: ModuleNotFoundError",
    "fbholes_kern:missing": "cannot import fbholes_kern:missing: AttributeError",
    "fbholes_kern:attn": "its flashbench_variants attribute ('window', 'varlen') is not valid",
    "fbholes_kern:dec": "fbholes_kern:dec is a decode function",
}
VARIANT_FLAGS = [["--window", "8,0"], ["--softcap", "5"], ["--sinks"], ["--varlen", "30,40"]]


@pytest.mark.parametrize("spec, variant", [
    *(("no_such_mod_holes:attn", v) for v in VARIANT_FLAGS),
    ("fbholes_kern:missing", ["--varlen", "30,40"]),
    ("fbholes_kern:attn", ["--window", "8,0"]),
    ("fbholes_kern:dec", ["--sinks"]),
])
def test_a_backend_that_cannot_run_fails_by_name_under_every_variant(
        capsys, user_module, spec, variant):
    """Before: "skipped (not applicable: its forward takes no window)", RESULT PASS, exit 0."""
    shape = [] if variant[0] == "--varlen" else ["--shape", "1x2x32x16"]
    rc, report = check_json(capsys, *shape, *variant, "--backend", spec)
    assert rc == 1 and not report["passed"]
    rows = [r for r in report["backends"] if r["backend"] == spec]
    assert rows and all(CANNOT_RUN[spec] in r.get("failed", "") for r in rows), rows
    assert not any("skipped" in r for r in rows)
