"""Timed calls the code under test cannot fake: the input pool (:mod:`.pool`), the guarded
timer and the structural checks of each timed output (:mod:`.guard`), and the attention
inputs a pool is built from (:mod:`.attention`). Torch is imported only where a tensor is
made or checked. What the timer guarantees, and what it cannot: docs/speed.md."""

from flashbench.timed.guard import (
    CHECKS,
    Batch,
    Pool,
    structural,
    tampered_clocks,
    thread_census,
    timed_calls,
)

__all__ = ["CHECKS", "Batch", "Pool", "structural", "tampered_clocks", "thread_census",
           "timed_calls"]
