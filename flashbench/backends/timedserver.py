"""The timed protocol's side of a kernel's worker (:mod:`flashbench.measure.speedworker`):
prepare / fill / stage / run / collect / null / fetch, a mixin of
:class:`flashbench.backends.child.Server` (which loads the function). Imported by the worker
before any kernel's module loads: the clocks and copies it uses are captured then.
"""

from __future__ import annotations

import contextlib
import ctypes
import os

import torch

from flashbench.backends.declared import DECODE, FORWARD, call_decode, call_forward, call_varlen
from flashbench.kernels.validate import BackendUnavailable, expand_kv
from flashbench.timed import commit, guard, threads  # clocks captured before any user module loads

__all__ = ["TimedServer"]

# before any kernel's module loads (_load_slot, _collect): a kernel may rebind any
# of these names (a module that set torch.equal to say True wrote into k unseen)
_MEMMOVE, _COPY, _EQUAL, _ADD = ctypes.memmove, torch.Tensor.copy_, torch.equal, torch.add
_PLAIN = getattr(torch._C, "DisableTorchFunction", None)  # no __torch_function__ mode either


def _same(x, src) -> bool:
    """The worker's buffer ``x`` holds the harness's page ``src`` (the import-time ops)."""
    with _PLAIN() if _PLAIN is not None else contextlib.nullcontext():
        if x.device.type != "cpu":
            host = torch.empty_like(src)
            _COPY(host, x)
            x = host
        return _EQUAL(x, src)


def _moved(names: tuple, j: int) -> str:
    name = names[j] if j < len(names) else f"argument {j + 1}"
    return (f"{name}'s storage moved by a call (its data no longer where it was handed: "
            "Tensor.share_memory_(), which torch.multiprocessing applies to a tensor it "
            "sends, or set_()), so later inputs would not reach it: hand another process a "
            f"copy ({name}.clone())")


class TimedServer:
    """The timed requests (``self.timing``: their state, prepare to fetch)."""

    def _prepare(self, r: dict) -> dict:
        """The timed protocol's first step (:mod:`flashbench.measure.speedworker`): the pool's
        slots mapped from the harness's file (``r["shared"]``, :mod:`flashbench.timed.shared`:
        the harness makes and writes every input), untimed calls on the slots
        ``r["warmup"]``. Then ``fill`` (the given slots' inputs copied into the worker's own
        buffers), ``stage`` (their calls readied, outside the clock), ``fill`` of a
        backward's dO (written by the harness after the stage), ``run`` (the calls, the
        device synchronised before the reply; the harness times the round trip),
        ``collect``, ``null`` (the same round trip with no work) and ``fetch``. On a CPU the
        reply says where the worker's own buffers lie (``places``: per slot, per argument,
        [address, bytes]; the harness reads them back), and a run's inputs are posted with
        its request, the harness's clock running (``posted``: :meth:`_take`,
        :mod:`flashbench.timed.placed`)."""
        from flashbench.timed.attention import NoBackward, pass_call
        from flashbench.timed.shared import attach

        direction, variant = r.get("direction", "fwd"), self._variant(r)
        if direction == "decode":
            fn = self._fn(DECODE)
            setup, call = None, lambda *a: call_decode(fn, *a, r["causal"])
        elif r.get("varlen"):  # a packed batch, its forward (speed --varlen)
            fn, longest = self._packed_fn(), (max(r["varlen"]), max(r["varlen_k"]))
            setup, call = None, lambda q, k, v, cu_q, cu_k: call_varlen(
                fn, q, k, v, cu_q, cu_k, r["causal"], longest=longest, **variant)
        elif direction == "fwd":  # k, v as the harness made them: expanded where no GQA
            fn = self._fn(FORWARD)
            setup, call = None, lambda q, k, v: call_forward(fn, q, k, v, r["causal"],
                                                             **variant)
        else:  # gradients of the Hkv-head k, v; expanded in the graph without GQA
            fn, gqa = self._fn(FORWARD), self._load()["gqa"]
            setup, call = pass_call(lambda q, k, v: call_forward(
                fn, q, *(expand_kv(q, k, v) if not gqa else (k, v)), r["causal"], **variant),
                direction)
        shared = attach(r["shared"])
        self.timing = t = {
            "shared": shared, "call": call, "setup": setup, "late": r.get("late", 0),
            "slots": [tuple(None if x is None else x.to(self.device, copy=True) for x in s)
                      for s in shared],  # the worker's own copies: _load_slot
            "staged": [], "outputs": [], "own_s": [], "faults": {}, "ran": [],
            "direction": direction, "names": tuple(r.get("names") or ())}
        try:
            for i in r["warmup"]:
                self._load_slot(i, 0, None)
                call(*self._ready(i))
        except NoBackward as exc:
            raise BackendUnavailable(str(exc)) from None
        self._sync()
        t["kept"] = guard.Kept(t["faults"])
        t["at"] = [[None if x is None else x.data_ptr() for x in slot] for slot in t["slots"]]
        places = [[None if x is None else [x.data_ptr(), x.nbytes] for x in slot]
                  for slot in t["slots"]] if self.device.type == "cpu" else None
        return {"device": self.device.type, "places": places}

    def _load_slot(self, i: int, start: int, stop: int | None) -> None:
        """The slot's arguments [start:stop] copied from the harness's pages into the
        worker's own buffers (same addresses every time; on a GPU, the device's). Read in
        place, inputs the harness had just written came from its core's cache: an honest
        backward ran 12-18% slower than on inputs the worker made itself, a forward's median
        0.6-5 ms against 0.5-0.8 ms, by where the scheduler put the two processes. On a
        CPU by ``ctypes.memmove``, taken before any kernel's module loaded: a kernel that
        wrapped ``Tensor.copy_`` attended each new input as it was copied (on a GPU by the
        ``Tensor.copy_`` of import time, with no ``__torch_function__`` mode; a dispatcher
        mode still sees it: docs/speed.md)."""
        t, cpu = self.timing, self.device.type == "cpu"
        for dst, src in list(zip(t["slots"][i], t["shared"][i], strict=True))[start:stop]:
            if dst is not None and cpu:  # bytes moved: no torch op a kernel could hook
                _MEMMOVE(dst.data_ptr(), src.data_ptr(), src.nbytes)
            elif dst is not None:  # to the device: torch's own copy, as it was at import
                with _PLAIN() if _PLAIN is not None else contextlib.nullcontext():
                    _COPY(dst, src)

    def _ready(self, i: int) -> tuple:
        """Slot i's call arguments: setup's (a backward's forward) on all but the late ones
        (dO), which follow as they are (written by the harness after this)."""
        t = self.timing
        args = t["slots"][i]
        if t["setup"] is None:
            return args
        n = len(args) - t["late"]
        return (*t["setup"](*args[:n]), *args[n:])

    def _flush(self, n: int) -> None:
        """``n`` L2 flushes, each synchronised (on a GPU; nothing on a CPU)."""
        flush = guard.l2_flusher(self.device.type) if n > 0 else None
        for _ in range(n if flush is not None else 0):
            flush()
            self._sync()

    def _sync(self) -> None:
        if self.device.type == "cuda":
            guard._CLOCKS["torch.cuda.synchronize"][2]()

    def _stage(self, r: dict) -> dict:
        """The calls of the slots ``r["slots"]`` readied (the harness chose them: its pool
        decides the order; their contents come with the fills, or posted with the run)."""
        t = self.timing
        for i in r["slots"]:
            t["staged"].append((i, self._ready(i)))
        self._sync()
        return {"staged": len(t["staged"])}

    def _fill(self, r: dict) -> dict:
        """The inputs of the slots ``r["slots"]`` copied in (:meth:`_load_slot`): all but
        the late ones before the stage, a backward's dO (``r["late"]``) after it, once the
        harness has written it. A request of its own: its CPU is weighed against copying."""
        t = self.timing
        for i in r["slots"]:
            n = len(t["slots"][i]) - t["late"]
            self._load_slot(i, n, None) if r.get("late") else self._load_slot(i, 0, n)
        self._sync()
        return {}

    def _run(self, r: dict) -> dict:
        """The staged calls, each timed on this process's own clock too (the harness's
        cross-check: a figure below the harness's own is a tampered clock). Nothing else runs
        between the calls: the threads alive after them are the harness's to watch, the
        outputs checked, copied and released by :meth:`_collect`, a request of its own."""
        t, own = self.timing, []
        self._take(r)
        # L2 cold as the harness's own timer: a flush before each call, and as many flushes
        # as the empty requests make (a run may hold fewer calls than k)
        self._flush(r.get("flushes", 0) - len(t["staged"]))
        tasks = guard.thread_census()[1]
        for slot, args in t["staged"]:
            self._flush(1)
            t0 = guard._PERF()
            out = t["call"](*args)
            self._sync()
            own.append(guard._PERF() - t0)
            t["ran"].append((out, slot))
            del out
        # inside the round trip, and in this clock's figure too: the harness's counts the
        # wait, and a wait longer than the calls read as a slowed clock
        t0 = guard._PERF()
        threads.joined(tasks)
        if own:
            own[-1] += guard._PERF() - t0
        # the threads still alive now: the harness watches them (threads.ThreadWatch)
        t["staged"] = []
        t["own_s"] += own
        # each output committed at this reply (timed.commit): on a CPU where it lies, which
        # the harness reads; else its bits summed inside the harness's clock, as many sums
        # as an empty request's
        ran = t["ran"][len(t["ran"]) - len(own):]
        if r.get("where"):
            return {"own_s": own, "where": [commit.where(out) for out, _ in ran]}
        if ran and r.get("sums") and t.get("blank") is None:  # padding asked for (a GPU)
            t["blank"] = commit.blank(ran[-1][0], self.device)
        sums = self._sums([out for out, _ in ran], r.get("sums", 0) - len(ran))
        return {"own_s": own, "sums": sums}

    def _sums(self, outs: list, blanks: int) -> list:
        """The outputs' sums and ``blanks`` more calls' (:func:`flashbench.timed.commit.
        blank`: an empty request's, a run's of fewer calls than k, as the harness asked)."""
        blank = (self.timing or {}).get("blank")
        return commit.checksums_of(outs + [blank] * max(blanks, 0) if blank else outs)[
            :len(outs)]

    def _collect(self, r: dict) -> dict:
        """The last run's outputs checked (structure), copied and the kernel's buffers
        released (:class:`flashbench.timed.guard.Kept`), as the in-process guard does: kept
        until the fetch, they made the next calls take fresh pages inside the clock. The
        worker's own copies of a call's inputs (:meth:`_load_slot`) compared with the
        harness's pages, which the harness reads itself (:meth:`flashbench.timed.pool.
        Pool.modified`); where it placed them (``r["placed"]``) it reads them back itself."""
        t = self.timing
        for out, slot in t["ran"]:
            t["outputs"].append(t["kept"].keep(out, t["slots"][slot]))
            names = t["names"]
            for j, (x, at) in enumerate(zip(t["slots"][slot], t["at"][slot], strict=True)):
                if x is not None and x.data_ptr() != at:  # a probe: q.share_memory_() read
                    t["faults"].setdefault(guard.MODIFIED, _moved(names, j))  # "changed"
            pairs = zip(t["slots"][slot], t["shared"][slot], strict=True)
            for j, (x, src) in enumerate(() if r.get("placed") else pairs):
                if x is not None and not _same(x, src):
                    name = names[j] if j < len(names) else f"argument {j + 1}"
                    t["faults"].setdefault(guard.MODIFIED, f"{name} changed by a call "
                                           "(compared with the harness's copy after it)")
        t["ran"] = []
        return {}

    def _take(self, r: dict) -> None:
        """A posted request's inputs (``r["posted"]``: slots, their arguments from
        ``r["start"]``), written into the pages by the harness before it sent the request,
        its clock running, copied in now (:meth:`_load_slot`): inside the clock, in a run
        and in an empty request alike. Then, on a CPU, this CPU yielded once, in every run
        and empty request: the harness, preempted as the request woke this process, runs
        to its wait on the reply (before, it waited for a CPU while the calls ran and took
        one mid-call: an honest 2-thread sdpa's own clock read 1.12x torch's in-process row
        posted, 1.01x filled, at 1x4x512x64 fp32, 8 alternating runs; yielding, 0.99x
        against 1.02x: studies/posting_price)."""
        if r.get("posted") is not None:
            for i in r["posted"]:
                self._load_slot(i, r.get("start", 0), None)
            self._sync()
        if self.device.type == "cpu":
            os.sched_yield()

    def _warm(self, r: dict) -> dict:
        """On a CPU, torch's threads kept busy for ``r["s"]`` seconds (at most 0.05) just
        before each run and empty request, outside their clock (a forward's inputs are not
        here yet: they are posted with the run; a backward's q, k, v are, its forward staged
        untimed already): a vector add over torch's pool, again and again, with no
        ``__torch_function__`` mode.
        A worker idle between its requests lets its CPUs sleep, and on this virtual machine
        a 2-thread call's first milliseconds after that ran slow: an honest sdpa as a user's
        kernel read a median 13x torch's in-process row at 0.27 ms a call and 1.9x at 1.6
        ms, kept busy 1.7x and 1.08x (runs alternating, 2026-12-06: docs/speed.md)."""
        t = self.timing
        if self.device.type != "cpu" or t is None:
            return {}
        if t.get("warm") is None:
            n = 2**15 * max(8, 2 * torch.get_num_threads())
            t["warm"] = (torch.ones(n), torch.empty(n))
        x, out = t["warm"]
        end = guard._PERF() + min(float(r.get("s", 0.0)), 0.05)
        with _PLAIN() if _PLAIN is not None else contextlib.nullcontext():
            while guard._PERF() < end:
                _ADD(x, x, out=out)
        return {}

    def _null(self, r: dict) -> dict:
        """An empty request; ``flushes``: the L2 flushes (each synchronised) a run request
        of that many calls makes on a GPU, so that its round trip less this one is the calls'
        alone."""
        self._take(r)
        self._flush(r.get("flushes", 0))
        self._sums([], r.get("sums", 0))
        if r.get("sync"):
            self._sync()
        return {}

    def _fetch(self, r: dict) -> dict:
        """CPU copies of the outputs (None where a structural check failed), this process's
        own times and the faults it saw (the calls' contents: the harness's own record)."""
        t = self.timing
        faults, outputs, direction = t["faults"], [], t["direction"]
        patched = guard.tampered_clocks()
        if patched:
            faults.setdefault(guard.CLOCK, f"{', '.join(patched)} replaced during the run")
        self._collect(r)
        for kept in t["outputs"]:
            if not guard.Kept.clean(kept):  # its structural fault is in faults already
                outputs.append(None)
                continue
            out = guard.Kept.output(kept)  # a forward's (o, lse): both, judged there
            items = tuple(out) if isinstance(out, tuple | list) else (out,)
            lse_slot = direction in ("fwd", "decode") and len(items) == 2  # (o, None): o alone
            if not all(isinstance(o, torch.Tensor) or (o is None and lse_slot and j == 1)
                       for j, o in enumerate(items)):
                bad = next(o for j, o in enumerate(items) if not isinstance(o, torch.Tensor)
                           and not (o is None and lse_slot and j == 1))
                faults.setdefault(guard.WRONG, f"returned {type(bad).__name__}, not a tensor")
                outputs.append(None)
                continue
            copies = [None if o is None else o.detach().cpu().clone() for o in items]
            outputs.append(copies if direction not in ("fwd", "decode") else (
                tuple(copies) if isinstance(out, tuple | list) else copies[0]))
        self.timing = None
        return {"own_s": t["own_s"], "outputs": outputs, "faults": faults,
                "device": self.device.type}
