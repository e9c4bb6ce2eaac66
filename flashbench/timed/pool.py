"""The pool of a timed run's inputs: slots built before the clock, refilled in place.

Every slot's contents come from a content seed drawn from the run's seed, so a checker
rebuilds any call's inputs; between rounds half the slots get new contents at the same
address (a cache keyed on a pointer or ``id()`` returns stale data); a round hands out the
returning contents first, then the new ones. A slot's late arguments (a backward's dO) are
drawn after its call's setup ran (:meth:`Pool.arm`). Each slot's contents are fingerprinted
when filled, and compared before they are written over and after the calls, so that a
kernel writing into its inputs is named (:meth:`Pool.modified`), not only through the wrong
outputs it causes later. A worker's pool is the harness's, in pages both map
(:mod:`flashbench.timed.shared`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Pool", "fingerprint", "names_for", "NAMES", "CHUNK"]

# a slot's arguments by what the pool feeds (the names :meth:`Pool.modified` says)
NAMES = {"fwd": ("q", "k", "v"), "grad": ("q", "k", "v", "do"),
         "varlen": ("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k"),
         "decode": ("q", "k_cache", "v_cache", "cache_seqlens", "block_table")}


def names_for(direction: str, varlen: bool = False) -> tuple:
    """The argument names of a pool feeding ``direction`` (fwd, bwd, fwdbwd, decode)."""
    if varlen:
        return NAMES["varlen"]
    return NAMES.get(direction, NAMES["grad"])


def _overwrite(dst, src) -> None:
    """dst's contents become src's, at dst's address (torch tensor or numpy array; None, an
    absent argument such as a contiguous cache's block table, stays None)."""
    if dst is None:
        return
    if hasattr(dst, "copy_"):
        dst.copy_(src)
    else:
        dst[...] = src


CHUNK = 1 << 20  # words summed at a time: the fingerprint's memory, 8 MiB of int64 at most


def fingerprint(x) -> tuple | None:
    """The dtype, shape and two integer sums of an array's bits (its words, and its words
    weighted by their position), None for what is not an array: any write that changes a
    value, or moves one (a transpose in place, two rows swapped), changes them but by a
    collision. Summed a chunk at a time, so it costs a read of the array and a few MiB
    (a copy of the pool would double its memory)."""
    if x is None or not hasattr(x, "shape"):
        return None
    if hasattr(x, "element_size"):  # a torch tensor, on its own device
        import torch

        words = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
        flat = x.detach().reshape(-1).view(words[x.element_size()]) if x.is_contiguous() \
            else x.detach().contiguous().reshape(-1).view(words[x.element_size()])
        total, weighted = 0, 0
        for i in range(0, flat.numel(), CHUNK):
            w = flat[i:i + CHUNK].to(torch.int64)
            at = torch.arange(i, i + len(w), device=w.device, dtype=torch.int64)
            total += int(w.sum())
            weighted += int((w * (at % 65521 + 1)).sum())
        return str(x.dtype), tuple(x.shape), total, weighted
    flat = np.ascontiguousarray(x).reshape(-1)
    flat = flat.view(f"u{flat.itemsize}") if flat.itemsize in (1, 2, 4, 8) else flat
    total, weighted = 0, 0
    for i in range(0, flat.size, CHUNK):
        w = flat[i:i + CHUNK].astype(np.uint64)
        total += int(w.sum(dtype=np.uint64))
        weighted += int((w * (np.arange(i, i + len(w), dtype=np.uint64) % 65521 + 1))
                        .sum(dtype=np.uint64))
    return str(x.dtype), tuple(x.shape), total, weighted


@dataclass
class Pool:
    """Slots of call arguments (tuples of tensors or arrays) for timed calls.

    ``make(content_seed)`` builds one slot's arguments; every content has its own seed, drawn
    from ``seed`` (the run's), so a checker rebuilds the exact inputs of any call from
    :attr:`seeds`. ``size`` >= 2 slots. ``names``: the arguments' names in what
    :meth:`modified` says (default q, k, v, then by position).
    """

    make: Callable[[int], tuple]
    size: int
    seed: int
    names: tuple = NAMES["fwd"]
    # ``late(seed) -> tensors``: a slot's last arguments (a backward's dO), written by
    # :meth:`arm` after its call's setup (the forward) ran, never before: see arm
    late: Callable[[int], tuple] | None = None
    slots: list = field(default_factory=list, init=False)
    seeds: list = field(default_factory=list, init=False)  # seed of each slot's content now

    def __post_init__(self):
        if self.size < 2:
            raise ValueError(f"a pool needs at least 2 slots, got {self.size}")
        self._rng = np.random.default_rng(self.seed)
        self.prints: list = []  # each slot's fingerprints, taken when it was filled
        for _ in range(self.size):
            s = self._draw()
            self.slots.append(self.make(s))
            self.seeds.append(s)
            self.prints.append(self._prints(self.slots[-1]))
        self._order: list[int] = []
        self._last = -1
        self.rounds = 0
        self.used = [False] * self.size  # whether a slot's contents went to a call already
        # filled in this round's refill and not yet handed out: new contents, made in the
        # request of their own calls (a worker's kernel never sees them before: ``salt``)
        self.fresh = [False] * self.size
        self.pending: set = set()  # slots this round refills, not filled yet
        self.unarmed: set = set()  # slots refilled whose late arguments are not drawn yet
        self.late_n = 0 if self.late is None else len(self.late(0))
        self.changed: dict[str, int] = {}  # writes into inputs found before a refill
        self.checked = 0  # used slots compared before a refill
        self.private = False  # its slots reach no kernel: another reader counts the writes

    @staticmethod
    def _prints(slot) -> list:
        return [fingerprint(x) for x in slot]

    def _draw(self, rng=None) -> int:
        return int((self._rng if rng is None else rng).integers(0, 2**62))

    def _new_round(self) -> None:
        """Half the slots chosen for new contents, filled when the calls reach them
        (:meth:`refill`); the others' contents return first, in a random order."""
        if self.rounds:
            self.pending = {int(i) for i in self._rng.choice(self.size, max(1, self.size // 2),
                                                              replace=False)}
        perm = [int(i) for i in self._rng.permutation(self.size)]
        seen = [i for i in perm if i not in self.pending]  # returning contents, then new
        new = [i for i in perm if i in self.pending]
        first = seen or new
        if first[0] == self._last:  # never one slot twice in a row
            if len(first) > 1:
                first[0], first[1] = first[1], first[0]
            else:
                seen, new = new, seen
        self._order = seen + new
        self.rounds += 1

    def _kind(self, i: int) -> tuple:
        return i in self.pending, self.used[i], self.fresh[i]

    def left_in_round(self) -> int:
        """Calls before the next refill: arguments readied ahead of that many calls are
        still the contents their seeds say when the calls run."""
        return len(self._order) or self.size

    def largest_group(self) -> int:
        """The most calls a request can hold after the first round (:meth:`left_in_group`):
        its returning contents or its new ones, half the slots each, rounded up. A worker's
        k stops there: empty requests padded to more calls than a run holds (posted inputs,
        L2 flushes) only added noise (k 23 for runs of 2 calls: a memo's hits read above
        the roofline floor, 2026-12-06)."""
        return -(-self.size // 2)

    def left_in_group(self) -> int:
        """Calls before the next new round, the switch from returning contents to new ones,
        or slots not filled yet: a request of that many is all one kind, so that a contents
        cache's hits are not averaged with its misses, and no call waits on a fill."""
        if not self._order:
            self._new_round()
        first = self._kind(self._order[0])
        return next((n for n, i in enumerate(self._order) if self._kind(i) != first),
                    len(self._order))

    def refill(self, salt: int | None = None, upto: int | None = None) -> None:
        """Start the next round where this one is spent, and fill the next slots where they
        are due for new contents: ``upto`` of them (None: all that are due), their seeds
        drawn with the harness's ``salt`` (None: from the pool's own seed). A worker's pool
        is refilled by the harness's request just before the request of the calls that use
        the new contents, so that no call's new contents exist in the worker before it."""
        if not self._order:
            self._new_round()
        if self._order[0] not in self.pending:  # returning contents go first
            return
        rng = None if salt is None else np.random.default_rng([self.seed, salt])
        due = [i for i in self._order if i in self.pending]
        due = due[:len(due) if upto is None else max(0, upto)]
        made = [(i, s, self.make(s)) for i, s in ((i, self._draw(rng)) for i in due)]
        late = self.late_n  # drawn by arm, after the setup of the slot's call
        for i, s, args in made:  # made first, then written: the writes follow each other
            self._check(i)
            early = len(args) - late
            for j, (dst, src) in enumerate(zip(self.slots[i], args, strict=True)):
                if j < early:
                    _overwrite(dst, src)
                elif dst is not None:
                    dst.zero_() if hasattr(dst, "zero_") else dst.fill(0)
            self.seeds[i], self.used[i], self.fresh[i] = s, False, True
            self.prints[i] = self._prints(self.slots[i])
            self.pending.discard(i)
            if late:
                self.unarmed.add(i)

    def arm(self, salt: int | None, slots) -> None:
        """The late arguments (:attr:`late`) of ``slots`` where they are not drawn yet,
        from the harness's ``salt`` (None: the pool's own seed): a slot's content seed
        becomes (its seed, the late arguments' seed). Called after the calls' setup ran (a
        backward's forward), so that nothing the setup ran could see what the timed call
        will get (a forward that found dO precomputed the gradients: PASS, ~2x over sdpa,
        2026-12-05)."""
        due = [i for i in slots if i in self.unarmed]
        if not due:
            return
        rng = None if salt is None else np.random.default_rng([self.seed, salt, 1])
        made = [(i, d, self.late(d)) for i, d in ((i, self._draw(rng)) for i in due)]
        for i, d, args in made:
            for dst, src in zip(self.slots[i][-self.late_n:], args, strict=True):
                _overwrite(dst, src)
            self.seeds[i] = (self.seeds[i], d)
            self.prints[i] = self._prints(self.slots[i])
            self.unarmed.discard(i)

    def _check(self, i: int) -> None:
        """A used slot's inputs compared with their fingerprints before they are written
        over (a write into an input found then is counted in :meth:`modified`)."""
        if not self.used[i] or self.private:
            return
        for j, (x, was) in enumerate(zip(self.slots[i], self.prints[i], strict=True)):
            if fingerprint(x) != was:
                name = self.names[j] if j < len(self.names) else f"argument {j + 1}"
                self.changed[name] = self.changed.get(name, 0) + 1
        self.checked += 1

    def upcoming(self, n: int) -> list[int]:
        """The slots of the next ``n`` calls as the round's order stands (a refill changes
        their contents, not the order; fewer where the round ends first)."""
        return self._order[:n]

    def next_is_new(self) -> bool:
        """Whether the next call's contents were filled for it in this round's refill and
        never handed to a call (a request of :meth:`left_in_group` calls is all one kind)."""
        return bool(self._order) and self.fresh[self._order[0]]

    def next(self) -> tuple[int, int, tuple]:
        """(slot, content seed, arguments) of the next call; refills happen here (or in
        :meth:`refill`), never inside a timed window."""
        self.refill()
        i = self._order.pop(0)
        self._last, self.used[i], self.fresh[i] = i, True, False
        return i, self.seeds[i], self.slots[i]

    def modified(self, how: str | None = None) -> str | None:
        """None when every slot handed to a call still holds the contents it was filled
        with (fingerprints: :func:`fingerprint`), else which arguments changed, in words
        (read after the timed calls, outside the clock); ``how``: how they were compared
        where another reader counted them (:attr:`private`: :attr:`changed`, :attr:`checked`)."""
        changed, used = dict(self.changed), self.checked + (0 if self.private else
                                                            sum(self.used))
        for i, slot in enumerate(self.slots):
            if not self.used[i] or self.private:  # counted by another reader alone
                continue
            for j, (x, was) in enumerate(zip(slot, self.prints[i], strict=True)):
                if fingerprint(x) != was:
                    name = self.names[j] if j < len(self.names) else f"argument {j + 1}"
                    changed[name] = changed.get(name, 0) + 1
        if not changed:
            return None
        which = ", ".join(f"{name} in {n} of {used}" for name, n in changed.items())
        return (f"{which} pool inputs handed to its calls since they were filled ("
                + (how or "each fingerprinted when filled, compared after the timed calls")
                + ")")
