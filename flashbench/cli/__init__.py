"""Command line: ``flashbench check | history | review | ...``.

One module per subcommand (``flashbench.cli.check``, ...), each with
``add_parser(subparsers)`` and ``run(args) -> exit status``; the list is :data:`COMMANDS`.
This module assembles them and owns the error handling of every subcommand, so that a
status means one thing everywhere: 0 and 1 are the subcommand's own answers; 2 is input
flashbench refused itself (argparse errors; a ValueError or TypeError from a ``raise`` in
its own code), or review's "could not decide"; 3 is the tool's own failure (OSError,
subprocess errors, RuntimeError, a dependency that cannot be imported), a bug ("internal
error", any other exception: never 1) or, quietly, a closed output pipe; SIGINT / SIGTERM
give 128 + the signal number. Each
error but the closed pipe is one line on stderr, no traceback; every 3 but the closed pipe
saves its traceback to a file and names it (:func:`save_traceback`). The contract in
full: docs/check.md ("Exit statuses, every subcommand").
"""

from __future__ import annotations

import linecache
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback

from flashbench.cli import bands, check, history, review, speed, table
from flashbench.cli.common import Parser, jsonable, parse_shape
from flashbench.infra.interrupts import signals_raise

__all__ = ["main", "build_parser", "parse_shape", "jsonable", "COMMANDS", "BAD_INPUT", "ERROR",
           "save_traceback"]

COMMANDS = (check, history, review, table, bands, speed)
BAD_INPUT, ERROR = 2, 3


DESCRIPTION = ("flashbench keeps attention kernels honest: exactness against a float64 "
               "reference, accuracy per dtype, speed and accuracy history from asv results, "
               "and a review of a change before it merges.")
EPILOG = ("Run 'flashbench COMMAND --help' for a command's options. Exit status: 0 and 1 "
          "are the command's answer (pass / fail), 2 bad input, 3 flashbench's own "
          "failure. Guide: README.md and the docs/ folder.")


def build_parser() -> Parser:
    """The ``flashbench`` parser: plain-words help (no reStructuredText markup), one
    subparser per :data:`COMMANDS` entry."""
    p = Parser(prog="flashbench", description=DESCRIPTION, epilog=EPILOG)
    sub = p.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    return p


def _line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _quiet_stdout() -> None:
    """After a broken pipe: point stdout at /dev/null so the exit flush stays silent."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def save_traceback(exc: BaseException, name: str) -> str:
    """Write ``exc``'s traceback to a new file under the temporary folder; its path (or
    why it could not be written)."""
    try:
        folder = os.path.join(tempfile.gettempdir(), "flashbench-tracebacks")
        os.makedirs(folder, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        fd, path = tempfile.mkstemp(dir=folder, suffix=".txt",
                                    prefix=f"{name.replace(' ', '-')}-{stamp}-")
        with os.fdopen(fd, "w") as f:
            f.write(f"{name} {' '.join(sys.argv[1:])}\n\n")
            f.writelines(traceback.format_exception(exc))
        return f"traceback saved to {path}"
    except OSError as err:
        return f"the traceback could not be saved: {err}"


def _raised_by_flashbench(exc: BaseException) -> bool:
    """True when flashbench raised ``exc`` on purpose: the innermost frame is in the
    flashbench package and its line is a ``raise`` statement (a refusal of bad input),
    not an operation that failed there or inside numpy, pandas, torch."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    filename = tb.tb_frame.f_code.co_filename
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not os.path.abspath(filename).startswith(package + os.sep):
        return False
    return linecache.getline(filename, tb.tb_lineno).lstrip().startswith("raise")


def main(argv=None) -> int:
    name = "flashbench"
    try:
        args = build_parser().parse_args(argv)  # bad arguments: one line, SystemExit(2)
        name = f"flashbench {args.command}"
        with signals_raise():  # SIGTERM as SIGINT: workers stopped, one line, 143 (a probe:
            status = args.func(args)  # check's orphaned worker held the caller's pipe)
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        _quiet_stdout()
        return ERROR
    except KeyboardInterrupt as exc:
        signum = getattr(exc, "signum", signal.SIGINT)
        print(f"{name}: interrupted ({signal.Signals(signum).name})", file=sys.stderr)
        return 128 + int(signum)
    except (ValueError, TypeError) as exc:
        if not _raised_by_flashbench(exc):
            return _internal(name, exc)
        print(f"{name}: error: {_line(exc)}", file=sys.stderr)
        return BAD_INPUT
    except (OSError, subprocess.SubprocessError, RuntimeError) as exc:
        print(f"{name}: failed: {_line(exc)} ({save_traceback(exc, name)})", file=sys.stderr)
        return ERROR
    except ModuleNotFoundError as exc:
        if (exc.name or "flashbench").partition(".")[0] == "flashbench":
            return _internal(name, exc)  # a module of flashbench's own: a bug
        print(f"{name}: failed: this Python cannot import {exc.name!r}, which flashbench needs "
              "(install flashbench with its dependencies: bash scripts/setup.sh, README.md) "
              f"({save_traceback(exc, name)})", file=sys.stderr)
        return ERROR
    except Exception as exc:
        return _internal(name, exc)


def _internal(name: str, exc: BaseException) -> int:
    print(f"{name}: internal error (a bug in flashbench, not your input: please report it): "
          f"{type(exc).__name__}: {_line(exc)}; {save_traceback(exc, name)}", file=sys.stderr)
    return ERROR


if __name__ == "__main__":
    sys.exit(main())
