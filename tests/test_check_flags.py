"""The class behind issue 36's wrong verdicts: every ``check`` flag combination (hypothesis
over the parser, in process, the measuring mocked) exits 0/1 with every variant asked for in
what runs, or 2 with one line on stderr, never 3; every subcommand's numeric options turn
huge, tiny and non-finite values into one-line errors (exit 2)."""

import contextlib
import io
import json
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flashbench.cli import main

HUGE = "99999999999999999999"
NUMBERS = ["0", "1", "-1", "-2", "5", "30", "1e-300", "1e308", "1e400", "nan", "inf", "-inf",
           HUGE, "x", ""]


def _opt(flag, values):
    return st.one_of(st.just([]), st.sampled_from(values).map(lambda v: [f"{flag}={v}"]))


FLAGS = st.tuples(
    _opt("--shape", ["1x2x16x16", "1x2/1x16x24x16", "1x2x16x16/8", "0x1x1x1", HUGE + "x1x4x16",
                     "1x2x16"]),
    _opt("--window", ["4,0", "-1,2", "0,0", HUGE + ",0", "-2,0", "3", "a,b"]),
    _opt("--softcap", NUMBERS),
    st.sampled_from([[], ["--sinks"]]),
    _opt("--varlen", ["30,40", "0,0", "lognormal:16:1000:3", "lognormal:1e300:1:3",
                      "uniform:1-5:3", "uniform:1-" + HUGE + ":2", HUGE, "3,-1"]),
    st.sampled_from([[], ["--variants"]]),
    st.sampled_from([[], ["--decode"]]),
    _opt("--decode-case", ["1x2x1x16:8", "1x2x1x16:0,0", "1x2x1x16:8:p" + HUGE,
                           "1x2x1x16:" + HUGE, "2x4/2x1x16:8,3:p16"]),
    _opt("--block", NUMBERS),
    _opt("--kv-heads", ["1", "2", "0", HUGE]),
    _opt("--seed", ["0", "3", "-1", HUGE]),
    _opt("--timeout", NUMBERS),
    st.sampled_from([["--causal", "off"], ["--causal", "on"], []]),
    st.sampled_from([[], ["--pass", "fwd"], ["--pass", "bwd"], ["--pass", "x"]]),
)


def _run(argv, captured):
    """main(argv) with the measuring replaced by a recorder: (status, stderr)."""
    def forward(cases, **kw):
        captured["cases"], captured["kw"] = cases, kw
        return {"passed": True}

    def decode(cases, *a, **kw):
        captured["decode"] = cases
        return {"passed": True}

    err = io.StringIO()
    with mock.patch("flashbench.measure.run.run_check", forward), \
            mock.patch("flashbench.cli.check._render", lambda r, saved, tables: ("ok", None)), \
            mock.patch("flashbench.measure.decode.run_decode_check", decode), \
            mock.patch("flashbench.cli.decode.render_decode", lambda r: "ok"), \
            contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            status = main(argv)
        except SystemExit as exc:
            status = exc.code
    return status, err.getvalue()


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(FLAGS)
def test_every_check_flag_combination_runs_what_it_asked_for_or_is_refused(flags):
    argv = ["check", "--quiet", "--dtype", "fp32", "--dist", "normal", "--no-backends",
            *(a for group in flags for a in group)]
    captured = {}
    status, err = _run(argv, captured)
    assert status in (0, 1, 2), (argv, status, err)
    if status == 2:
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, (argv, err)
        return
    given_ = " ".join(argv)
    if "decode" in captured:  # a decode check reads none of the forward options
        assert not any(f in given_ for f in ("--window", "--softcap", "--sinks", "--varlen",
                                             "--variants", "--block", "--shape", "--pass"))
        return
    cases, kw = captured["cases"], captured["kw"]
    assert cases
    assert kw["forward"] is ("--pass bwd" not in given_)  # --pass: what was asked for
    assert ("--pass fwd" not in given_) or kw["backward_cases"] == ()
    if "--variants" in given_:
        return  # its own set, refused with any variant flag (asserted by the status above)
    for case in cases:  # every variant asked for is in every case that runs
        if "--window=" in given_:
            assert case.window is not None and case.window != (-1, -1) or "-1,-1" in given_
        if "--softcap=" in given_:
            assert case.softcap is not None
        if "--sinks" in given_:
            assert case.sinks
        if "--varlen=" in given_:
            assert case.varlen


def _numeric_options():
    import argparse

    from flashbench.cli import build_parser

    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                for opt in sub._actions:
                    kind = getattr(opt.type, "__name__", "")
                    if opt.option_strings and kind in ("number", "positive_int", "seed", "int", "block",
                                                       "_block", "softcap", "window"):
                        yield name, opt.option_strings[-1]


NEEDS = {"review": ["HEAD", "HEAD"], "table": ["fa3"]}


@pytest.mark.parametrize("command, option", sorted(set(_numeric_options())))
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e400", "-" + HUGE, "x"])
def test_every_numeric_option_refuses_non_numbers_in_one_line(command, option, value):
    """Parsed only (nothing runs): exit 2 with one line naming the option's problem."""
    from flashbench.cli import build_parser

    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exc:
        build_parser().parse_args([command, f"{option}={value}", *NEEDS.get(command, [])])
    assert exc.value.code == 2 and len(err.getvalue().strip().splitlines()) == 1, err.getvalue()


@pytest.mark.parametrize("argv", [
    ["table", "fa3", "--shape", "1x1x16x16", "--block", HUGE],
    ["table", "fa3", "--shape", "1x1x16x16", "--block-q", HUGE],
    ["check", "--block", HUGE],
    ["bands", "--n", HUGE], ["bands", "--seeds", HUGE, "--n", "64"],
    ["check", "--kv-heads", HUGE],
])
def test_huge_counts_are_one_line_errors(argv):
    """Before: table's --block / --block-q past int64 were exit 3 ("Maximum allowed
    dimension exceeded")."""
    status, err = _run(argv, {})
    assert status == 2 and len(err.strip().splitlines()) == 1, err


NARROW = '''
import torch


def fp16_only(q, k, v, causal=False, scale=None):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                            scale=scale)


fp16_only.flashbench_dtypes = ("fp16",)
'''


@pytest.mark.parametrize("how", ["--only", "--backend"])
def test_a_check_that_judged_none_of_the_kernels_named_exits_2(tmp_path, monkeypatch,
                                                                capsys, how):
    """A kernel declared for fp16 alone, named in an fp32 check: the flash model's PASS
    answers nothing asked; before, RESULT read PASS and the exit was 0. Named beside a
    kernel that is judged, it is a skip like any other (the answer is the judged one's)."""
    (tmp_path / "fbnarrow.py").write_text(NARROW)
    monkeypatch.syspath_prepend(str(tmp_path))
    base = ["check", "--shape", "1x2x32x16", "--causal", "off", "--pass", "fwd", "--quiet",
            "--save", str(tmp_path)]
    assert main([*base, "--dtype", "fp32", how, "fbnarrow:fp16_only"]) == 2
    out, err = capsys.readouterr()
    assert "RESULT: NOTHING JUDGED (exit 2)" in out and "takes fp16, not fp32" in err
    assert main([*base, "--dtype", "fp32", "--json", how, "fbnarrow:fp16_only"]) == 2
    report = json.loads(capsys.readouterr().out)
    assert report["unjudged"] == {"fbnarrow:fp16_only": "takes fp16, not fp32 (a function "
                                  "of yours declares more: fn.flashbench_dtypes)"}
    assert report["passed"] is None  # no verdict (it read true beside exit 2: a red team)
    assert main([*base, "--dtype", "fp16", how, "fbnarrow:fp16_only"]) == 0
    assert "RESULT: PASS" in capsys.readouterr().out
    # its gradients: not declared differentiable, which is said (it read "no case took it")
    assert main([*base, "--dtype", "fp16", "--pass", "bwd", how, "fbnarrow:fp16_only"]) == 2
    assert "fn.flashbench_differentiable = True" in capsys.readouterr().err
    both = [*base, "--dtype", "fp32", "--backend", "fbnarrow:fp16_only", "--backend",
            "torch-naive"]
    assert main(both) == 0
    assert "RESULT: PASS" in capsys.readouterr().out


def test_save_into_a_pipe_or_device_writes_into_it_and_leaves_it_one(tmp_path):
    """`check --save /dev/null` as root renamed the tables over the device (a temporary
    file, then os.replace): /dev/null became a file and every git command that read it as
    its config failed. A target that is not a regular file is written into."""
    import os
    import stat
    import threading

    fifo = tmp_path / "tables.fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()), daemon=True)
    reader.start()
    rc = main(["check", "--shape", "1x1x16x16", "--dtype", "fp32", "--no-backends",
               "--quiet", "--save", str(fifo)])
    reader.join(timeout=20)
    assert rc == 0 and stat.S_ISFIFO(fifo.stat().st_mode)
    assert got and "float64" in got[0] and not list(tmp_path.glob(".*.tmp"))


def test_backend_takes_several_names_as_only_does():
    """A newcomer: `check --backend mine:attn mine:attn_softmax` read "unrecognized
    arguments" (--backend had to be repeated) beside `--only A B`, which takes a list."""
    from flashbench.cli import build_parser

    parser = build_parser()
    for sub in ("check", "speed"):
        args = parser.parse_args([sub, "--backend", "a:f", "b:g", "--backend", "triton"])
        assert args.backend == ["a:f", "b:g", "triton"], sub
        assert parser.parse_args([sub]).backend == []  # the default list left alone


def test_save_overwrites_a_checks_tables_but_never_another_file(tmp_path, capsys):
    """A probe, 2026-12-07: `check --save precious.py` replaced a Python source with the
    tables, exit 0 (bands --json and history --out refuse such a file). A file that does
    not open with a check's tables is refused before the work (exit 2) and kept whole;
    the tables of an earlier check are written over, as the default file always was."""
    from flashbench.cli import main

    precious = tmp_path / "precious.py"
    precious.write_text("print('mine')\n")
    args = ["check", "--no-backends", "--shape", "1x1x8x16", "--dtype", "fp32", "--causal",
            "off", "--quiet"]
    assert main([*args, "--save", str(precious)]) == 2
    assert "holds no flashbench check tables" in capsys.readouterr().err
    assert precious.read_text() == "print('mine')\n"
    tables = tmp_path / "tables.txt"
    assert main([*args, "--save", str(tables)]) == 0
    first = tables.read_text()
    assert first.startswith("flashbench check") and main([*args, "--save", str(tables)]) == 0
