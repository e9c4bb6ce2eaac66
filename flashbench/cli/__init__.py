"""Command line: ``flashbench check | history | review | ...``.

One module per subcommand (``flashbench.cli.check``, ...), each with
``add_parser(subparsers)`` and ``run(args) -> exit status``; the list is
:data:`COMMANDS`. This module assembles them and owns the error handling of every
subcommand, so that a status means one thing everywhere:

- 0 and 1 are the subcommand's own answers (review: 0 nothing regressed, 1 something
  regressed; check: 0 pass, 1 fail); 2 is "could not decide" (review);
- bad arguments or input (argparse errors, ValueError, TypeError): one line on stderr,
  exit 2, no traceback;
- the tool itself failed (OSError such as an unwritable output, a git, asv, npm or
  worker failure: subprocess errors and RuntimeError): one line on stderr, exit 3;
- a closed output pipe (``--json | head``): quietly exit 3;
- SIGINT / SIGTERM: one line, exit 128 + the signal number (130, 143);
- anything else is a bug: its traceback, then exit 3 (never 1, which means "regressed").
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import traceback

from flashbench.cli import bands, check, history, review, table
from flashbench.cli.common import Parser, jsonable, parse_shape

__all__ = ["main", "build_parser", "parse_shape", "jsonable", "COMMANDS", "BAD_INPUT", "ERROR"]

COMMANDS = (check, history, review, table, bands)
BAD_INPUT, ERROR = 2, 3


def build_parser() -> Parser:
    p = Parser(prog="flashbench", description=__doc__.splitlines()[0])
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


def main(argv=None) -> int:
    name = "flashbench"
    try:
        args = build_parser().parse_args(argv)  # bad arguments: one line, SystemExit(2)
        name = f"flashbench {args.command}"
        status = args.func(args)
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
        print(f"{name}: error: {_line(exc)}", file=sys.stderr)
        return BAD_INPUT
    except (OSError, subprocess.SubprocessError, RuntimeError) as exc:
        print(f"{name}: failed: {_line(exc)}", file=sys.stderr)
        return ERROR
    except Exception:
        traceback.print_exc()
        print(f"{name}: internal error (a bug: please report the traceback above)",
              file=sys.stderr)
        return ERROR


if __name__ == "__main__":
    sys.exit(main())
