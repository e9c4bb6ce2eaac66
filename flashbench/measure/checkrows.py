"""What a speed judge checks of each timed output beyond its rows' numbers: which query rows
(:func:`checked_rows`) and the returned LSE's form (:func:`lse_fault`).
:mod:`flashbench.measure.speed`'s parts, re-exported there."""

from __future__ import annotations

import numpy as np

from flashbench.timed.guard import WRONG

__all__ = ["CHECK_ROWS", "MOST_ROWS", "checked_rows", "lse_fault"]

CHECK_ROWS = 8  # query rows per input checked against the float64 reference, at least
MOST_ROWS = 64  # ... and at most (checked_rows: enough that a run checks every row)


def checked_rows(rng, n: int, decks: dict, contents: int = 0):
    """The rows of n a judge checks on one input: the next of a deck of all n shuffled by
    its own entropy (``decks``: the judge's, by n), so that a run checks every row once
    before any twice: ceil(n / ``contents``) (the run's distinct inputs judged), at least
    :data:`CHECK_ROWS` and at most :data:`MOST_ROWS` (8 rows drawn afresh an input left a
    kernel wrong on one row of 256 PASS 3 runs of 3, over 33 calls: a probe, 2026-12-07;
    dealt 8 an input from a deck, 1 run of 3); and the
    first and last, where partial blocks lie (halving the last row PASSed 5 runs in 6: a red
    team); sorted, int64."""
    per = min(MOST_ROWS, max(CHECK_ROWS, -(-n // contents) if contents else 0))
    deck = decks.setdefault(n, [])
    while len(deck) < min(n, per):
        deck += rng.permutation(n).tolist()
    drawn, decks[n] = deck[:per], deck[per:]
    return np.unique(np.concatenate([drawn, [0, n - 1]] if n else [drawn])).astype(np.int64)


def lse_fault(out, want: tuple, zero_rows) -> tuple[str, str] | None:
    """(WRONG, why) when a timed call's return value is a pair whose LSE is not a floating
    tensor of shape ``want``, holds NaN, or +inf or -inf on a row whose o is not all zeros
    (a row that sees no key has o = 0 and LSE -inf: DESIGN.md; or FlashAttention's +inf);
    None for o alone or an LSE that passes. ``zero_rows()``: o's all-zero rows, as the LSE."""
    import torch

    if not isinstance(out, tuple | list):
        return None
    if len(out) != 2:
        return WRONG, f"returned a {type(out).__name__} of {len(out)} item(s); expected o or " \
                      "(o, lse)"
    lse = out[1]
    if lse is None:
        return None
    if (type(lse) is not torch.Tensor or not lse.is_floating_point()
            or tuple(lse.shape) != tuple(want)):
        got = (f"a {lse.dtype} tensor {tuple(lse.shape)}" if isinstance(lse, torch.Tensor)
               else f"a {type(lse).__name__}")
        return WRONG, f"lse is {got}, expected a floating tensor {tuple(want)}"
    x = lse.detach().float()
    said = [f"{int(n.sum())} {what}" for n, what in (
        (torch.isnan(x), "NaN"), (torch.isinf(x) & ~zero_rows().to(x.device),
                                  "+inf or -inf on rows whose o is not zero")) if n.any()]
    return (WRONG, f"lse holds {' and '.join(said)} (only a row that sees no key, o = 0 there, "
            "has an infinite LSE: -inf, or FlashAttention's +inf)") if said else None
