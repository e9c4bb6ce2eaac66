"""What a backend must return, checked before its numbers are judged.

A backend (flashbench's, torch's or a user's) returns ``o`` or ``(o, lse)``:

- o: a torch tensor [B, H, Nq, dv] in q's dtype (float64 for the reference);
- lse (optional): a floating torch tensor [B, H, Nq], natural-log log-sum-exp of the
  scaled, masked scores; where it is missing, a stand-in fills it
  (:func:`flashbench.kernels.torch_peers.reference_lse`) and the result says so
  (:class:`BackendOutput`, ``own_lse`` False): the kernel is then judged on o alone.

For finite inputs the float64 reference is finite everywhere (o is a convex
combination of rows of v; a row that sees no key has o = 0), so any inf or NaN in o
is a failure, as is a NaN or +inf LSE, or a -inf LSE on a row that sees some key.
Each failure is a :class:`BackendFailed` whose message says what was wrong.
"""

from __future__ import annotations

import torch

from flashbench.inputs.variant import variant_of
from flashbench.kernels.checks import TORCH_DTYPES, BackendFailed
from flashbench.kernels.torch_peers import reference_lse

__all__ = ["BackendOutput", "checked_output", "snapshot", "modified_inputs", "INPUTS_MODIFIED"]

INPUTS_MODIFIED = "modified its inputs in place"


class BackendOutput(tuple):
    """``(o, lse)``, unpacked like any pair, and ``own_lse``: True when the LSE is the
    kernel's own, False when it is flashbench's stand-in (the op returned none)."""

    own_lse: bool

    def __new__(cls, o, lse, own_lse: bool):
        out = super().__new__(cls, (o, lse))
        out.own_lse = bool(own_lse)
        return out


def _describe(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"a {x.dtype} tensor of shape {tuple(x.shape)}"
    if isinstance(x, tuple | list):
        return f"a {type(x).__name__} of {len(x)} item(s)"
    return f"a {type(x).__name__}"


def _unpack(out):
    if isinstance(out, torch.Tensor):
        return out, None
    if isinstance(out, tuple | list) and len(out) == 2:
        return out[0], out[1]
    raise BackendFailed(f"returned {_describe(out)}; expected o or (o, lse) torch tensors")


def snapshot(*tensors) -> list:
    """Private copies of a call's input tensors (detached), for :func:`modified_inputs`."""
    return [t.detach().clone() for t in tensors]


def modified_inputs(given, saved, names=("q", "k", "v", "do")) -> str | None:
    """None when every tensor of ``given`` still equals its copy in ``saved`` (bit for bit,
    NaN equal to NaN), else the failure: :data:`INPUTS_MODIFIED` and which ones."""
    changed = [n for n, a, b in zip(names, given, saved, strict=False)
               if a.shape != b.shape or a.dtype != b.dtype
               or not torch.equal(_bits(a), _bits(b))]
    return f"{INPUTS_MODIFIED} ({', '.join(changed)})" if changed else None


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8)


def _odd(x: torch.Tensor, what: str) -> None:
    """BackendFailed for a tensor flashbench cannot read values from: sparse or other
    non-strided layouts, the meta device (no values), a tensor subclass's storage."""
    if x.layout != torch.strided:
        raise BackendFailed(f"returned {what} as a {x.layout} tensor; expected a dense "
                            "(strided) torch tensor")
    if x.device.type not in ("cpu", "cuda"):
        raise BackendFailed(f"returned {what} on the {x.device.type} device; expected it on "
                            "the CPU or the inputs' device (a tensor with values)")


def _nonfinite(x: torch.Tensor) -> int:
    return int(x.numel() - torch.isfinite(x).sum().item())


def checked_output(out, q, k, v, causal: bool = False, scale: float | None = None,
                   out_dtype: str | None = None, own_lse: bool = True) -> BackendOutput:
    """(o, lse) from a backend's return value ``out`` for inputs q, k, v, as a
    :class:`BackendOutput`; BackendFailed when it is not a valid result (module
    docstring). ``causal``: a bool or a :class:`~flashbench.inputs.variant.Variant` (which
    rows see no key). ``out_dtype``: precision name of o when it is not q's dtype (the
    float64 reference). ``own_lse``: False for a backend whose returned LSE is itself a
    stand-in (torch's ops return none); an ``out`` of o alone is never its own."""
    try:
        return _checked(out, q, k, v, causal, scale, out_dtype, own_lse)
    except BackendFailed:
        raise
    except Exception as exc:  # an output odd in a way not foreseen: that kernel's FAIL
        raise BackendFailed(f"returned an output flashbench could not check: "
                            f"{type(exc).__name__}: {exc}") from exc


def _checked(out, q, k, v, causal, scale, out_dtype, own_lse) -> BackendOutput:
    o, lse = _unpack(out)
    own_lse = own_lse and lse is not None
    B, H, nq = q.shape[:3]
    want = (B, H, nq, v.shape[-1])
    if not isinstance(o, torch.Tensor):
        raise BackendFailed(f"returned o as {_describe(o)}; expected a torch tensor {want}")
    _odd(o, "o")
    if tuple(o.shape) != want:
        raise BackendFailed(f"returned o of shape {tuple(o.shape)}; expected [B, H, Nq, dv] "
                            f"= {want}")
    dtype = q.dtype if out_dtype is None else TORCH_DTYPES[out_dtype]
    if o.dtype != dtype:
        raise BackendFailed(f"returned o in {o.dtype}; expected {dtype} (q's dtype)")
    if lse is None:
        lse = reference_lse(q, k.to(q.device), v.to(q.device), causal, scale)
    elif not isinstance(lse, torch.Tensor) or not lse.is_floating_point():
        raise BackendFailed(f"returned lse as {_describe(lse)}; expected a floating torch "
                            f"tensor {want[:3]}")
    else:
        _odd(lse, "lse")
    if tuple(lse.shape) != want[:3]:
        raise BackendFailed(f"returned lse of shape {tuple(lse.shape)}; expected [B, H, Nq] "
                            f"= {want[:3]}")
    if all(bool(torch.isfinite(t).all()) for t in (q, k, v)):
        bad = _nonfinite(o)
        if bad:
            raise BackendFailed(f"returned {bad} non-finite value(s) (inf or NaN) in o, of "
                                f"{o.numel()}, for finite inputs (the float64 reference is "
                                f"finite there)")
        sees_nothing = torch.zeros(nq, dtype=torch.bool, device=lse.device)
        variant = variant_of(causal)  # a bool, or a Variant (window, sinks)
        hidden = None if variant.sinks is not None else variant.hidden(nq, k.shape[-2])
        if hidden is not None:
            sees_nothing[torch.from_numpy(hidden.all(axis=1)).to(lse.device)] = True
        wrong = torch.isnan(lse) | torch.isposinf(lse) | (torch.isneginf(lse) & ~sees_nothing)
        if bool(wrong.any()):
            raise BackendFailed(f"returned {int(wrong.sum())} non-finite LSE value(s) on rows "
                                f"that see keys (the float64 reference is finite there)")
    return BackendOutput(o, lse, own_lse)
