"""Every --help of the command line is plain words: no reStructuredText markup, no
argparse escape left in."""

from __future__ import annotations

import re

import pytest

from flashbench.cli import COMMANDS, main

# "%%" is argparse's escape in an argument's help, printed as is in a description ("%% of
# this run's measured matmul peak" in speed's, found 2026-12-06)
MARKUP = re.compile(r"``|:(func|mod|class|data|meth|attr|ref|doc):|%%")


def _help(capsys, argv) -> str:
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 0
    return capsys.readouterr().out


def test_no_help_output_holds_restructuredtext_markup(capsys):
    """Failed before: the top parser's description was the module docstring's first line,
    "Command line: ``flashbench check | history | review | ...``"."""
    top = _help(capsys, ["--help"])
    assert "keeps attention kernels honest" in top
    names = [c.__name__.rsplit(".", 1)[-1] for c in COMMANDS]
    outputs = {"flashbench": top, **{n: _help(capsys, [n, "--help"]) for n in names}}
    for name in names:
        assert name in top
    bad = {n: MARKUP.search(text).group(0) for n, text in outputs.items() if MARKUP.search(text)}
    assert not bad, f"--help output with reStructuredText markup or a \"%%\": {bad}"
