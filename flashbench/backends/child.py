"""The worker process's side: a user's function called on the requests of the harness.

Every way a call can end becomes a reply: a result (checked like any backend's output,
:func:`flashbench.backends.outputs.checked_output`, and copied to the CPU), or
``{"failed": why}`` for an exception of any kind (``SystemExit`` and
``KeyboardInterrupt`` raised by the kernel included), inputs changed in place, or an
output that is not a valid result. See :mod:`flashbench.backends.worker`.
"""

from __future__ import annotations

import os

import torch

from flashbench.backends.outputs import checked_output, modified_inputs, snapshot
from flashbench.inputs.variant import variant_of
from flashbench.kernels.checks import BackendFailed, BackendUnavailable, expand_kv

__all__ = ["Server", "raised"]


def raised(exc: BaseException) -> str:
    """One sentence for an exception a user's code raised (or exited with)."""
    if isinstance(exc, SystemExit):
        return f"called sys.exit({exc.code!r})"
    return f"raised {type(exc).__name__}: {exc}" if str(exc) else f"raised {type(exc).__name__}"


class Server:
    """Answers describe / forward / grads requests for the function ``spec``."""

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

    def _call(self, q, k, v, causal, scale, **variant):
        kwargs = {"causal": causal} if scale is None else {"causal": causal, "scale": scale}
        return self.fn(q, k, v, **kwargs, **variant)

    def _forward(self, r: dict) -> dict:
        self._load()
        q, k, v = (r[n].to(self.device) for n in "qkv")
        saved = snapshot(q, k, v)
        variant = r.get("variant") or {}  # window, softcap, sinks it declared taking
        out = self._call(q, k, v, r["causal"], r["scale"], **variant)
        changed = modified_inputs((q, k, v), saved)
        if changed is not None:
            raise BackendFailed(changed)
        mask = variant_of(r["causal"], **variant) if variant else r["causal"]
        o, lse = checked = checked_output(out, q, k, v, mask, r["scale"])
        own = lse.detach().cpu().clone() if checked.own_lse else None
        return {"o": o.detach().cpu().clone(), "lse": own}

    def _grads(self, r: dict) -> dict:
        self._load()
        leaves = [r[n].to(self.device).requires_grad_(True) for n in "qkv"]
        do = r["do"].to(self.device)
        saved = snapshot(*leaves, do)
        q, k, v = leaves
        if r["expand"]:
            k, v = expand_kv(q, k, v)
        out = self._call(q, k, v, r["causal"], None)
        o = out[0] if isinstance(out, tuple | list) else out
        if not isinstance(o, torch.Tensor) or not o.requires_grad:
            what = "not differentiable" if isinstance(o, torch.Tensor) else "not a tensor"
            raise BackendFailed(f"declares flashbench_differentiable but its o is {what}")
        grads = torch.autograd.grad(o, leaves, do.to(o.dtype), allow_unused=True)
        changed = modified_inputs((*leaves, do), saved)
        if changed is not None:
            raise BackendFailed(changed)
        if any(g is None for g in grads):
            raise BackendFailed("its o does not depend on all of q, k, v (autograd)")
        return {"grads": [g.detach().cpu().clone() for g in grads]}
