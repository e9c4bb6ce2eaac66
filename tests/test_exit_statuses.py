"""Exit statuses mean one thing on every subcommand (issue 24): generated arguments, good
and bad mixed, small enough to run, give 0 or 1 (the answer) or 2 (bad input: one line,
"error"), never 3 (flashbench's own failure); no user file is overwritten without
--force. review's measuring is replaced by a marker (it takes minutes): everything
before it (arguments, the output check) runs for real."""

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cli_errors import run_in
from test_history import tiny_results

from flashbench.cli import COMMANDS, main

USER_TEXT = "a file of the user's\n"


class Reached(BaseException):
    """review got past its checks to the measuring."""


@pytest.fixture(scope="module")
def place(tmp_path_factory):
    root = tmp_path_factory.mktemp("statuses")
    tiny_results(root / "results", commits=2)
    (root / "empty").mkdir()
    (root / "mine").mkdir()
    return root


def _subset(values):
    return st.lists(st.sampled_from(values), min_size=1, max_size=3)


def _options(draw, table):
    argv = []
    for option, values in table.items():
        if draw(st.booleans()):
            value = draw(values) if isinstance(values, st.SearchStrategy) else values
            argv += [option] if value is None else [option, *map(str, value)] \
                if isinstance(value, list) else [option, str(value)]
    return argv


@st.composite
def check_args(draw):
    shape = draw(st.sampled_from(["1x1x16x16", "1x2x32x16", "1x2/1x16x32x16", "1x1x8x4x16",
                                  "1x1x16x24"]))
    return ["check", "--shape", shape, "--quiet", *_options(draw, {
        "--dtype": _subset(["fp32", "bf16", "fp16", "fp8", "fp64", "tf32"]),
        "--dist": _subset(["normal", "outliers", "uniform"]),
        "--causal": st.sampled_from(["on", "off", "both"]),
        "--seed": st.sampled_from([0, 3, -1]),
        "--block": st.sampled_from([1, 16, 0]),
        "--backend": st.sampled_from(["torch-naive", "sdpa-math", "nosuch", "nomod:fn",
                                      "a b"]),
        "--no-backends": None, "--json": None,
        "--kv-heads": st.sampled_from([1, 2, 3]),
        "--timeout": st.sampled_from([60, 0, "nan"])})]


@st.composite
def bands_args(draw, root):
    return ["bands", "--quiet", "--n", *map(str, draw(_subset([16, 64, 64, 0]))),
            "--seeds", str(draw(st.sampled_from([1, 2, 0]))), *_options(draw, {
                "--dtype": _subset(["fp16", "bf16", "fp32", "fp8", "nosuch"]),
                "--dist": _subset(["normal", "outliers"]),
                "--kernels": _subset(["flash_model", "torch-naive", "nosuch"]),
                "--causal": st.sampled_from(["on", "off", "both"]),
                "--tensor": st.sampled_from(["o", "lse"]),
                "--json": st.sampled_from([f"{root}/mine/bands.json", f"{root}/new.json",
                                           f"{root}/nowhere/b.json", f"{root}/mine"]),
                "--force": None,
                "--from-results": st.sampled_from([f"{root}/results", f"{root}/empty",
                                                   f"{root}/nowhere"])})]


@st.composite
def table_args(draw):
    shape = draw(st.sampled_from(["1x1x64x64", "1x4/2x64x64", "1x1x64x32x64", "1x1x16x16"]))
    return ["table", "fa3", "--quiet", "--shape", shape, *_options(draw, {
        "--seeds": st.sampled_from([[0], [0, 0], [-1]]),
        "--block-q": st.sampled_from([16, 0, 64]),
        "--block": st.sampled_from([16, 0, 32])})]


@st.composite
def history_args(draw, root):
    folders = draw(_subset([f"{root}/results", f"{root}/empty", f"{root}/nowhere"]))
    return ["history", *folders, *_options(draw, {
        "--out": st.sampled_from([f"{root}/mine", f"{root}/report", f"{root}/nowhere/r"]),
        "--force": None})]


@st.composite
def review_args(draw, root):
    return ["review", *_options(draw, {
        "--factor": st.sampled_from([1.2, "nan", 1]), "--reuse": None, "--quick": None,
        "--bench": st.sampled_from(["time_", "("]),
        "--machine": st.sampled_from(["here", "../x"]),
        "--output": st.sampled_from([f"{root}/mine/review.md", f"{root}/r.md",
                                     f"{root}/nowhere/r.md", f"{root}/mine"]),
        "--force": None, "--json": None, "--jobs": st.sampled_from([1, 2]),
        "--threads": st.sampled_from([1, 0]), "--budget": st.sampled_from([10, 0])})]


@st.composite
def speed_args(draw):
    shape = draw(st.sampled_from(["1x1x16x16", "1x2/1x32x16", "1x1x8x4x16", "1x0x16x16"]))
    return ["speed", "--shape", shape, "--quiet", "--backend", "torch-naive", *_options(draw, {
        "--dtype": _subset(["fp32", "bf16", "fp64"]),
        "--causal": st.sampled_from(["on", "off", "both"]),
        "--seed": st.sampled_from([0, 3, -1]), "--samples": st.sampled_from([10, 9, 0]),
        "--baseline": st.sampled_from(["torch-naive", "sdpa-math", "nosuch"]),
        "--json": None, "--timeout": st.sampled_from([60, 0, "nan"])})]


def _user_files(root):
    for name in ("bands.json", "review.md", "report.md"):
        (root / "mine" / name).write_text(USER_TEXT)


def run(root, argv):
    """main(argv) in ``root`` (HOME there too), stopped after a minute of work."""
    (root / "home").mkdir(exist_ok=True)
    return run_in(root, root / "home", argv)


STRATEGIES = {"check": lambda root: check_args(), "bands": bands_args,
              "table": lambda root: table_args(), "history": history_args,
              "review": review_args, "speed": lambda root: speed_args()}


def test_every_subcommand_is_driven():
    assert {m.__name__.rsplit(".", 1)[-1] for m in COMMANDS} == set(STRATEGIES)


@pytest.mark.parametrize("command", sorted(STRATEGIES))
@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_statuses_mean_one_thing(place, monkeypatch, command, data):
    import flashbench.review

    def reached(*args, **kwargs):
        raise Reached

    monkeypatch.setattr(flashbench.review, "run_review", reached)
    argv = data.draw(STRATEGIES[command](place), label="argv")
    _user_files(place)
    try:
        status, out, err = run(place, argv)
    except Reached:
        return  # review got past every check to the measuring
    assert status in (0, 1, 2), (argv, status, err)
    assert "internal error" not in err and "Traceback" not in err, (argv, err)
    if status == 2:
        lines = [line for line in err.splitlines() if "warning:" not in line]
        assert len(lines) == 1 and ("error" in lines[0] or (  # or check's, docs/check.md
            "no case judged the kernels named" in lines[0] and "NOTHING JUDGED" in out
            or "unjudged" in out)), (argv, err)
    if "--force" not in argv:
        for name in ("bands.json", "review.md", "report.md"):
            assert (place / "mine" / name).read_text() == USER_TEXT, (argv, name)


def test_an_internal_error_is_3_with_its_traceback_saved(monkeypatch, capsys):
    """A failure inside a library (a numpy broadcast, pandas' ambiguous truth value) is
    flashbench's, not the user's: exit 3, "internal error", and the traceback's file."""
    import numpy as np

    from flashbench.cli import table

    def broken(args):
        return np.ones(3) + np.ones(4)  # ValueError raised by numpy, not a refusal

    monkeypatch.setattr(table, "run", broken)
    assert main(["table", "fa3"]) == 3
    err = capsys.readouterr().err
    assert "internal error" in err and err.count("\n") == 1
    path = err.rsplit("traceback saved to ", 1)[1].strip()
    assert "operands could not be broadcast" in open(path).read()
    os.unlink(path)
