"""Every subcommand meets bad arguments the same way: exit status 2, exactly one line on
stderr, no traceback, and nothing written outside ``.asv/`` (and the named output).

A hypothesis test drives :func:`flashbench.cli.main` in a throw-away clone with
generated bad arguments: for every subcommand in ``COMMANDS`` (found by introspecting
the parser, so a new subcommand is covered without editing this file) values that its
options cannot parse, choices it does not offer, unknown options, options without
their value; and, for the subcommands that take them, values that parse but mean
nothing (``--factor nan``, an unresolvable revision, a machine name that is a path, a
results folder that does not exist, ...). A few cases run as real processes too, and
the error statuses of the tool itself (3) are checked apart.
"""

import argparse
import contextlib
import io
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flashbench.cli import COMMANDS, build_parser, main

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cli")
    repo = tmp / "repo"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True)
    home = tmp / "home"
    home.mkdir()
    return repo, home


def _subparsers():
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


SUBPARSERS = _subparsers()


def _typed_options(sub):
    """(option string, action) of every option that needs a value."""
    return [(a.option_strings[0], a) for a in sub._actions
            if a.option_strings and a.nargs not in (0, "?", "*")
            and not isinstance(a, argparse._HelpAction)]


CANDIDATES = ["x", "", "1,5", "0x", "1e", "1.5", "nan", "inf", "-inf", "-1", "0", "1e400",
              "axb", "1x2", "1x1x0x16", "(", "[a", "a{2,1}", "../x", "a/b", "..", "-x"]


def _refuses(kind, value) -> bool:
    try:
        kind(value)
    except (argparse.ArgumentTypeError, ValueError, TypeError):
        return True
    return False


def _unparsable(action):
    """Values this option's parser refuses (checked here, by calling its type), or None."""
    if action.choices is not None:
        bad = [v for v in ("no-such-choice", "", "*") if v not in action.choices]
    elif action.type in (None, str):
        return None
    else:
        bad = [v for v in CANDIDATES if _refuses(action.type, v)]
    return st.sampled_from(bad) if bad else None


def _semantic(command):
    """Values that parse but that the subcommand must refuse (command-specific)."""
    if command == "review":
        return st.sampled_from([
            ["--factor", "nan"], ["--factor", "inf"], ["--factor", "1"], ["--factor", "-2"],
            ["--factor", "1e400"], ["--acc-tol", "nan"], ["--acc-tol", "-0.1"],
            ["--budget", "0"], ["--budget", "inf"], ["--budget", "nan"],
            ["--results", "/nonexistent/results"], ["origin/mian"], ["HEAD", "no-such-rev"],
            ["--machine", "../../../somewhere"], ["--bench", "("], ["--jobs", "2"],
            ["--jobs", "100000", "--threads", "1"]])
    if command == "check":
        return st.sampled_from([["--block", "0", "--quiet"], ["--block", "-3", "--quiet"],
                                ["--shape", "1x1x0x16"]])
    if command == "history":
        return st.sampled_from([["/nonexistent/results"]])
    return st.nothing()


@st.composite
def bad_arguments(draw):
    command = draw(st.sampled_from(sorted(SUBPARSERS)))
    sub = SUBPARSERS[command]
    options = [(opt, a, _unparsable(a)) for opt, a in _typed_options(sub)]
    options = [(opt, a, s) for opt, a, s in options if s is not None]
    kinds = ["unknown-option", "missing-value"] + (["unparsable"] if options else [])
    kinds += ["semantic"] if command in ("review", "check", "history") else []
    kind = draw(st.sampled_from(kinds))
    if kind == "unknown-option":
        return [command, draw(st.sampled_from(["--no-such-option", "--factorr", "-Z"]))]
    if kind == "missing-value":
        opts = [opt for opt, _ in _typed_options(sub)]
        if not opts:
            return [command, "--no-such-option"]
        return [command, draw(st.sampled_from(opts))]
    if kind == "unparsable":
        opt, action, values = draw(st.sampled_from(options))
        return [command, f"{opt}={draw(values)}"]
    return [command, *draw(_semantic(command))]


def _snapshot(*folders):
    """{path: (size, mtime)} of every file outside .git/ and .asv/."""
    out = {}
    for folder in folders:
        for dirpath, dirnames, filenames in os.walk(folder):
            dirnames[:] = [d for d in dirnames if d not in (".git", ".asv")]
            for f in filenames:
                p = os.path.join(dirpath, f)
                st_ = os.stat(p)
                out[p] = (st_.st_size, st_.st_mtime_ns)
    return out


class Ran(BaseException):
    """Not an Exception: no ``except Exception`` in the command can swallow it."""


def _alarm(signum, frame):
    raise Ran("a command ran for a minute instead of refusing its arguments")


def run_in(repo, home, argv):
    """main(argv) in ``repo`` with HOME=home; (status, stdout, stderr)."""
    old_cwd, old_home = os.getcwd(), os.environ.get("HOME")
    out, err = io.StringIO(), io.StringIO()
    old_handler = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(60)
    try:
        os.chdir(repo)
        os.environ["HOME"] = str(home)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = main(argv)
            except SystemExit as exc:
                status = exc.code
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old_handler)
        os.chdir(old_cwd)
        if old_home is None:
            os.environ.pop("HOME", None)
        else:
            os.environ["HOME"] = old_home
    return status, out.getvalue(), err.getvalue()


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(argv=bad_arguments())
def test_bad_arguments_exit_2_with_one_line_and_write_nothing(clone, argv):
    repo, home = clone
    before = _snapshot(repo, home)
    status, out, err = run_in(repo, home, argv)
    assert status == 2, (argv, status, out, err)
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0], (argv, err)
    assert "Traceback" not in err and "error" in lines[0], (argv, err)
    assert _snapshot(repo, home) == before, argv


# check validates --block after its first progress line: --quiet keeps stderr to the error
@pytest.mark.parametrize("argv", [[], ["no-such-command"], ["review", "--factor", "nan"],
                                  ["review", "--bench", "("], ["review", "--machine", "../x"],
                                  ["check", "--block", "0", "--quiet"], ["check", "--seed", "x"]])
def test_real_process_bad_arguments(clone, argv):
    repo, home = clone
    r = subprocess.run([sys.executable, "-m", "flashbench.cli", *argv], cwd=repo,
                       capture_output=True, text=True, env={**os.environ, "HOME": str(home)},
                       timeout=300)
    assert r.returncode == 2, r
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr and not r.stdout


def test_every_subcommand_is_covered():
    assert {m.__name__.rsplit(".", 1)[-1] for m in COMMANDS} <= set(SUBPARSERS)
    assert {"check", "history", "review"} <= set(SUBPARSERS)


# ------------------------------------------------------------------ the tool's own failures


def test_an_output_into_a_missing_folder_is_refused_before_any_work(clone):
    """The user named a folder that does not exist: bad input (2), before measuring."""
    repo, home = clone
    status, out, err = run_in(repo, home, ["review", "--output", "/nonexistent/dir/x.md"])
    assert status == 2 and err.count("\n") == 1 and "does not exist" in err
    assert "Traceback" not in err


def test_an_output_under_a_file_says_it_is_a_file(tmp_path, capsys):
    """A probe: `--save existing.txt/sub` read "folder .../existing.txt does not exist"."""
    (tmp_path / "existing.txt").write_text("x")
    status = main(["check", "--shape", "1x1x8x16", "--no-backends", "--dtype", "fp32",
                   "--quiet", "--save", str(tmp_path / "existing.txt" / "sub")])
    err = capsys.readouterr().err
    assert status == 2 and "existing.txt is a file, not a folder" in err, err


def test_outside_a_project_is_refused(tmp_path, clone):
    _, home = clone
    status, _, err = run_in(tmp_path, home, ["review"])
    assert status == 2 and "not inside a git repository" in err and err.count("\n") == 1


def test_failures_map_to_their_statuses(monkeypatch, capsys):
    from flashbench.cli import review as review_cli

    def fail(exc):
        def run(args):
            raise exc
        return run

    cases = [(BrokenPipeError(), 3, ""), (OSError("disk full"), 3, "failed: disk full"),
             (subprocess.CalledProcessError(1, ["asv"]), 3, "failed"),
             (RuntimeError("asv run wrote no results"), 3, "failed: asv run"),
             (ValueError("bad\nvalue"), 3, "internal error"),  # not raised by flashbench
             # a dependency missing (torch in a Python without it): the install, not a bug
             (ModuleNotFoundError("No module named 'torch'", name="torch"), 3,
              "failed: this Python cannot import 'torch', which flashbench needs"),
             (ModuleNotFoundError("no flashbench.x", name="flashbench.x"), 3, "internal error"),
             (KeyboardInterrupt(), 130, "interrupted (SIGINT)")]
    for exc, status, text in cases:
        monkeypatch.setattr(review_cli, "run", fail(exc))
        monkeypatch.setattr(sys.stdout, "fileno", lambda: os.open(os.devnull, os.O_WRONLY))
        assert main(["review"]) == status, exc
        err = capsys.readouterr().err
        assert (text in err) if text else err == ""
        assert err.count("\n") <= 1 and "Traceback" not in err
    from flashbench.inputs import Shape

    monkeypatch.setattr(review_cli, "run", lambda args: Shape.parse("bad\nshape"))
    assert main(["review"]) == 2  # a refusal flashbench raised itself: bad input
    assert "error:" in capsys.readouterr().err


def test_closed_pipe_is_quiet(clone):
    """``flashbench ... | head`` closing the pipe: status 3, nothing on stderr."""
    repo, home = clone
    r, w = os.pipe()
    os.close(r)
    proc = subprocess.run([sys.executable, "-m", "flashbench.cli", "check", "--shape", "1x1x8x16",
                           "--dtype", "fp32", "--no-backends", "--json", "--quiet"], cwd=repo,
                          stdout=w, stderr=subprocess.PIPE, text=True,
                          env={**os.environ, "HOME": str(home)}, timeout=120)
    os.close(w)
    assert proc.returncode == 3 and proc.stderr == ""


@pytest.mark.parametrize("command", [
    ["check", "--shape", "1x1x16x16", "--dtype", "fp32", "--causal", "off", "--pass", "fwd",
     "--only", "hang:kernel", "--timeout", "120"],
    ["speed", "--shape", "1x1x64x16", "--only", "hang:kernel", "--timeout", "120"],
    ["bands", "--dtype", "fp16", "--n", "64", "--seeds", "2", "--kernels", "hang:kernel",
     "--quiet"]], ids=["check", "speed", "bands"])
def test_sigterm_stops_a_run_as_sigint_does(tmp_path, command):
    """A probe, 2026-12-07: SIGTERM (timeout(1), a CI step's end) killed check, speed and
    bands with no line, and the worker running a user's hanging kernel lived on, orphaned,
    holding the caller's stderr: `communicate()` waited until it was killed by hand. Now
    exit 143, one line, the worker ended, the pipes closed."""
    started = tmp_path / "started"
    (tmp_path / "hang.py").write_text(
        "import time\n\n\ndef kernel(q, k, v, causal=False, **kw):\n"
        f"    open({str(started)!r}, 'w').close()\n    time.sleep(10000)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(tmp_path), str(Path(__file__).resolve().parents[1])])}
    proc = subprocess.Popen([sys.executable, "-m", "flashbench.cli", *command],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=tmp_path)
    try:
        for _ in range(1200):  # the kernel runs: its worker is up
            if started.exists() or proc.poll() is not None:
                break
            __import__("time").sleep(0.1)
        assert started.exists(), proc.communicate(timeout=60)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)  # no orphan holds the pipes
    finally:
        proc.kill()
    assert proc.returncode == 143, err
    assert err.strip().splitlines()[-1] == f"flashbench {command[0]}: interrupted (SIGTERM)"
    left = []  # processes still in the run's folder (its workers inherit the cwd)
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/cwd") == str(tmp_path):
                left.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" "))
    assert not left, left


def test_an_unwritable_save_keeps_the_result_on_stdout(capsys, monkeypatch):
    """A probe, 2026-12-07: check --save and review --output wrote their file before
    printing, so a file that could not be written (/proc/version as root, a full disk) lost
    the whole run's result: exit 3, stdout empty. The result is printed first; then the
    failure, one line, exit 3."""
    from flashbench.cli import review as review_cli
    from flashbench.review.model import Review

    def no_room(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("flashbench.cli.output.write_atomically", no_room)
    status = main(["check", "--shape", "1x1x8x16", "--no-backends", "--dtype", "fp32",
                   "--causal", "off", "--quiet", "--save", "/tmp/never-written.txt"])
    out, err = capsys.readouterr()
    assert status == 3 and "RESULT: PASS" in out and "NOT saved" in out, (out, err)
    assert err.strip().splitlines()[-1].startswith(
        "flashbench check: failed: the tables were not saved to /tmp/never-written.txt")

    monkeypatch.setattr("flashbench.review.run_review",
                        lambda opts, log: Review("b", "h", "m", "c", "same-run", 1.1, 0.0))
    monkeypatch.setattr(review_cli, "write_atomically", no_room)
    status = main(["review", "main", "HEAD", "--output", "/tmp/never-written.md"])
    out, err = capsys.readouterr()
    assert status == 3 and out.strip(), (out, err)
    assert "failed: the report was not saved to" in err and "No space left" in err


def test_a_shape_given_twice_runs_once_with_a_warning(capsys, tmp_path):
    """A probe: a repeated --shape ran (and tabled) twice with nothing said, where a
    repeated --dtype is run once with a warning."""
    import json

    rows = []
    for shapes in (["--shape", "1x1x8x16"], ["--shape", "1x1x8x16", "--shape", "1x1x8x16"]):
        status = main(["check", *shapes, "--no-backends", "--dtype", "fp32", "--causal",
                       "off", "--json", "--quiet", "--save", str(tmp_path / "t.txt")])
        out, err = capsys.readouterr()
        assert status == 0, err
        rows.append(len(json.loads(out)["exactness"]))
    assert "--shape 1x1x8x8x16 given more than once; measured once" in err
    assert rows[0] == rows[1] > 0, rows
