"""Command-line plumbing every entry point shares: the parser whose error is one line on
stderr with exit status 2, and the integer argument types (``flashbench``'s subcommands in
:mod:`flashbench.cli`, ``python -m flashbench.site``)."""

from __future__ import annotations

import argparse

__all__ = ["Parser", "positive_int", "seed", "int_at_least"]


class Parser(argparse.ArgumentParser):
    """argparse with one line of error on stderr (exit status 2), not usage + error."""

    def error(self, message: str):
        text = " ".join(str(message).split())
        self.exit(2, f"{self.prog}: error: {text} (see {self.prog} --help)\n")


def int_at_least(lo: int, what: str, hi: int | None = None):
    """An argparse type: an integer >= ``lo`` (and <= ``hi`` where given; ``what``: its
    name in errors)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < lo or (hi is not None and value > hi):
            within = f">= {lo}" if hi is None else f"from {lo} to {hi:,}"
            raise argparse.ArgumentTypeError(f"must be an integer {within}, got {text!r}")
        return value

    parse.__name__ = what
    return parse


# every subcommand's counts: --threads, --seeds, --n, --kv-heads, ...: an integer >= 1
positive_int = int_at_least(1, "positive_int")
# a random seed: an integer >= 0 (numpy's generators take no negative seed)
seed = int_at_least(0, "seed")
