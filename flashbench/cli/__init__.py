"""Command line: ``flashbench check | history | review``.

One module per subcommand (``flashbench.cli.check``, ...), each with
``add_parser(subparsers)`` and ``run(args) -> exit status``; this module assembles
them and turns bad input into one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import sys

from flashbench.cli import check, history, review
from flashbench.cli.common import jsonable, parse_shape

__all__ = ["main", "build_parser", "parse_shape", "jsonable"]

COMMANDS = (check, history, review)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="flashbench", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, TypeError) as exc:  # bad input: one clear line, exit 2
        parser.exit(2, f"flashbench {args.command}: error: {exc}\n")


if __name__ == "__main__":
    sys.exit(main())
