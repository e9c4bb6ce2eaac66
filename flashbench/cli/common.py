"""Helpers shared by the subcommands: argument types and JSON output."""

from __future__ import annotations

import argparse
import math

from flashbench.inputs import Shape


def parse_shape(text: str) -> Shape:
    """``BxHxNxd`` or ``BxHxNqxNkxd`` (H may be ``H/Hkv``), e.g. 1x8x4096x64 -> Shape."""
    try:
        return Shape.parse(text.replace(",", "x").replace(":", "x"))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def jsonable(x):
    """Floats that JSON cannot hold (inf, nan) become the strings 'inf', '-inf', 'nan'."""
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, dict):
        return {k: jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [jsonable(v) for v in x]
    return x
