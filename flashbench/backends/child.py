"""The worker process's side: a user's function called on the requests of the harness.

Every way a call can end becomes a reply: a result (checked like any backend's output,
:func:`flashbench.backends.outputs.checked_output` / ``checked_decode_output``, and
copied to the CPU), or ``{"failed": why}`` for an exception of any kind (``SystemExit``
and ``KeyboardInterrupt`` raised by the kernel included), inputs changed in place, an
output that is not a valid result, or a function called as what it is not (a forward
request to a decode function, or the reverse). See :mod:`flashbench.backends.worker`.
"""

from __future__ import annotations

import contextlib
import ctypes
import os

import torch

from flashbench.backends.declared import (
    DECODE,
    DECODE_INPUTS,
    FORWARD,
    as_declared,
    call_decode,
    call_forward,
    call_varlen,
    check_kind,
)
from flashbench.backends.outputs import (
    checked_decode_output,
    checked_output,
    checked_packed_output,
    guarded,
    modified_inputs,
    raised,
    snapshot,
)
from flashbench.inputs.variant import variant_of
from flashbench.kernels.validate import BackendFailed, BackendUnavailable, expand_kv
from flashbench.timed import commit, guard, threads  # clocks captured before any user module loads

__all__ = ["Server", "raised"]

# before any kernel's module loads (Server._load_slot, _collect): a kernel may rebind any
# of these names (a module that set torch.equal to say True wrote into k unseen)
_MEMMOVE, _COPY, _EQUAL = ctypes.memmove, torch.Tensor.copy_, torch.equal
_PLAIN = getattr(torch._C, "DisableTorchFunction", None)  # no __torch_function__ mode either


def _same(x, src) -> bool:
    """The worker's buffer ``x`` holds the harness's page ``src`` (the import-time ops)."""
    with _PLAIN() if _PLAIN is not None else contextlib.nullcontext():
        if x.device.type != "cpu":
            host = torch.empty_like(src)
            _COPY(host, x)
            x = host
        return _EQUAL(x, src)


def _reply(checked) -> dict:
    """o and (when the function's own) lse of a checked output, as CPU copies."""
    o, lse = checked
    return {"o": o.detach().cpu().clone(),
            "lse": lse.detach().cpu().clone() if checked.own_lse else None}


class Server:
    """Answers describe / forward / grads / decode requests for the function ``spec``."""

    def __init__(self, spec: str):
        self.spec = spec
        self.fn = None
        self.error: str | None = None
        self.launches = None
        if os.environ.get("TRITON_INTERPRET") == "1":
            try:
                from flashbench.kernels.interpreter import patch_interpreter

                self.launches = patch_interpreter()
            except ImportError:  # no triton here: nothing to patch
                pass
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.timing: dict | None = None  # the timed protocol's state, prepare to fetch

    def _load(self) -> dict:
        from flashbench.backends.declared import load

        if self.fn is None and self.error is None:
            try:
                self.fn, self.declared = load(self.spec)
            except BackendFailed as exc:
                self.error = str(exc)
            except BaseException as exc:  # noqa: BLE001 - the module's own code at import
                self.error = f"cannot import {self.spec}: {raised(exc)}"
        if self.error is not None:
            raise BackendFailed(self.error)
        return self.declared

    def handle(self, request: dict) -> dict:
        seen = self.launches.count if self.launches is not None else 0
        try:
            reply = getattr(self, "_" + request["op"])(request)
        except BackendUnavailable as exc:
            reply = {"unavailable": str(exc)}
        except BackendFailed as exc:
            reply = {"failed": str(exc)}
        except BaseException as exc:  # noqa: BLE001 - sys.exit, KeyboardInterrupt: a FAIL
            reply = {"failed": raised(exc)}
        launched = self.launches is not None and self.launches.count > seen
        return {**reply, "interpreted": launched}

    def _describe(self, request: dict) -> dict:
        return dict(self._load())

    def _fn(self, kind: str):
        """The function, when it was declared ``kind``; BackendFailed otherwise."""
        check_kind(self.spec, self._load()["kind"], kind)
        return self.fn

    def _tensors(self, r: dict, names) -> dict:
        """{name: the request's tensor on this worker's device, or None}: fresh per call."""
        return {n: None if r.get(n) is None else r[n].to(self.device) for n in names}

    def _variant(self, r: dict, grad: bool = False) -> dict:
        """The request's variant keywords as the function takes them (:func:`as_declared`)."""
        return as_declared(self._load(), r.get("variant"), self.device, grad)

    def _forward(self, r: dict) -> dict:
        fn = self._fn(FORWARD)
        t = self._tensors(r, "qkv")
        variant = self._variant(r)
        out = guarded(lambda: call_forward(fn, *t.values(), r["causal"], r["scale"],
                                           **variant), t)
        given = r.get("variant") or {}  # the mask from the request, not from what fn held
        mask = variant_of(r["causal"], **given) if given else r["causal"]
        return _reply(checked_output(out, *t.values(), mask, r["scale"]))

    def _packed_fn(self):
        """The function, when it declared a packed path (flashbench_varlen)."""
        fn = self._fn(FORWARD)
        if not self._load()["varlen"]:
            raise BackendFailed(f"{self.spec} declares no packed path (flashbench_varlen = "
                                "True)")
        return fn

    def _varlen(self, r: dict) -> dict:
        fn = self._packed_fn()
        t = self._tensors(r, ("q", "k", "v", "cu_q", "cu_k"))
        variant = self._variant(r)
        out = guarded(lambda: call_varlen(fn, *t.values(), r["causal"], r["scale"],
                                          **variant), t)
        given = r.get("variant") or {}
        mask = variant_of(r["causal"], **given) if given else r["causal"]
        checked = checked_packed_output(out, *t.values(), mask, r["scale"])
        return {**_reply(checked), "stand_in": None if checked.own_lse else
                checked[1].detach().cpu().clone()}

    def _decode(self, r: dict) -> dict:
        fn = self._fn(DECODE)
        t = self._tensors(r, DECODE_INPUTS)
        out = guarded(lambda: call_decode(fn, *t.values(), r["causal"], r["scale"]), t)
        return _reply(checked_decode_output(out, *t.values(), r["causal"], r["scale"]))

    def _prepare(self, r: dict) -> dict:
        """The timed protocol's first step (:mod:`flashbench.measure.speedworker`): the pool's
        slots mapped from the harness's file (``r["shared"]``, :mod:`flashbench.timed.shared`:
        the harness makes and writes every input), untimed calls on the slots
        ``r["warmup"]``. Then ``fill`` (the given slots' inputs copied into the worker's own
        buffers), ``stage`` (their calls readied, outside the clock), ``fill`` of a
        backward's dO (written by the harness after the stage), ``run`` (the calls, the
        device synchronised before the reply; the harness times the round trip),
        ``collect``, ``null`` (the same round trip with no work) and ``fetch``."""
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
        return {"device": self.device.type}

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
        decides the order, and it wrote their contents just before this request)."""
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
        Pool.modified`)."""
        t = self.timing
        for out, slot in t["ran"]:
            t["outputs"].append(t["kept"].keep(out, t["slots"][slot]))
            names = t["names"]
            for j, (x, src) in enumerate(zip(t["slots"][slot], t["shared"][slot],
                                             strict=True)):
                if x is not None and not _same(x, src):
                    name = names[j] if j < len(names) else f"argument {j + 1}"
                    t["faults"].setdefault(guard.MODIFIED, f"{name} changed by a call "
                                           "(compared with the harness's copy after it)")
        t["ran"] = []
        return {}

    def _null(self, r: dict) -> dict:
        """An empty request; ``flushes``: the L2 flushes (each synchronised) a run request
        of that many calls makes on a GPU, so that its round trip less this one is the calls'
        alone."""
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

    def _grads(self, r: dict) -> dict:
        fn = self._fn(FORWARD)
        leaves = [r[n].to(self.device).requires_grad_(True) for n in "qkv"]
        do = r["do"].to(self.device)
        saved = snapshot(*leaves, do)
        q, k, v = leaves
        if r["expand"]:
            k, v = expand_kv(q, k, v)
        variant = self._variant(r, grad=bool(r.get("dsinks")))
        sinks = variant.get("sinks")
        wrt = [*leaves, sinks] if isinstance(sinks, torch.Tensor) and sinks.requires_grad \
            else leaves
        out = call_forward(fn, q, k, v, r["causal"], **variant)
        o = out[0] if isinstance(out, tuple | list) else out
        if not isinstance(o, torch.Tensor) or not o.requires_grad:
            what = "not differentiable" if isinstance(o, torch.Tensor) else "not a tensor"
            raise BackendFailed(f"declares flashbench_differentiable but its o is {what}")
        grads = torch.autograd.grad(o, wrt, do.to(o.dtype), allow_unused=True)
        changed = modified_inputs((*leaves, do), saved)
        if changed is not None:
            raise BackendFailed(changed)
        if any(g is None for g in grads[:3]):
            raise BackendFailed("its o does not depend on all of q, k, v (autograd)")
        if len(grads) > 3 and grads[3] is None:
            raise BackendFailed("it declares flashbench_dsinks but its o does not depend on "
                                "the sinks tensor it was given (autograd)")
        return {"grads": [g.detach().cpu().clone() for g in grads]}
