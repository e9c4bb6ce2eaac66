"""The worker process's side: a user's function called on the requests of the harness.

Every way a call can end becomes a reply: a result (checked like any backend's output,
:func:`flashbench.backends.outputs.checked_output` / ``checked_decode_output``, and
copied to the CPU), or ``{"failed": why}`` for an exception of any kind (``SystemExit``
and ``KeyboardInterrupt`` raised by the kernel included), inputs changed in place, an
output that is not a valid result, or a function called as what it is not (a forward
request to a decode function, or the reverse). See :mod:`flashbench.backends.worker`.
"""

from __future__ import annotations

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
from flashbench.backends.timedserver import TimedServer  # its clocks: before any user module
from flashbench.inputs.variant import variant_of
from flashbench.kernels.validate import BackendFailed, BackendUnavailable, expand_kv

__all__ = ["Server", "raised"]

def _reply(checked) -> dict:
    """o and (when the function's own) lse of a checked output, as CPU copies."""
    o, lse = checked
    return {"o": o.detach().cpu().clone(),
            "lse": lse.detach().cpu().clone() if checked.own_lse else None}


class Server(TimedServer):
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
