"""What a backend must return, checked before its numbers are judged.

A backend (flashbench's, torch's or a user's) returns ``o`` or ``(o, lse)``: o a torch
tensor [B, H, Nq, dv] in q's dtype (float64 for the reference; [B, Nq, H, dv] for a
decode backend, :func:`checked_decode_output`), lse (optional) a floating tensor
[B, H, Nq], the natural-log log-sum-exp of the scaled, masked scores. A missing LSE gets
a stand-in (:func:`flashbench.kernels.torch_peers.reference_lse`) and the result says so
(:class:`BackendOutput`, ``own_lse`` False): the kernel is then judged on o alone.

For finite inputs the float64 reference is finite everywhere, so any inf or NaN in o is
a failure, as is a NaN or +inf LSE, or a -inf LSE on a row that sees some key. Each
failure is a :class:`BackendFailed` whose message says what was wrong; so is a call that
changes its inputs (:func:`guarded`). The contract: docs/backends.md; why outputs are
checked: docs/check.md ("The kernel under test is untrusted code").
"""

from __future__ import annotations

import torch

from flashbench.inputs.variant import variant_of
from flashbench.kernels.torch_decode import decode_lse
from flashbench.kernels.torch_peers import reference_lse
from flashbench.kernels.validate import TORCH_DTYPES, BackendFailed, BackendUnavailable, a_type

__all__ = ["BackendOutput", "checked_output", "checked_packed_output", "checked_decode_output",
           "snapshot", "modified_inputs", "guarded", "raised", "INPUTS_MODIFIED", "finite",
           "fp8_o"]

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
    return a_type(x)


def _unpack(out):
    if isinstance(out, torch.Tensor):
        return out, None
    if isinstance(out, tuple | list) and len(out) == 2:
        return out[0], out[1]
    raise BackendFailed(f"returned {_describe(out)}; expected o or (o, lse) torch tensors")


def snapshot(*tensors) -> list:
    """Private copies of a call's input tensors (detached; None stays None), for
    :func:`modified_inputs`."""
    return [None if t is None else t.detach().clone() for t in tensors]


def modified_inputs(given, saved, names=("q", "k", "v", "do")) -> str | None:
    """None when every tensor of ``given`` still equals its copy in ``saved`` (bit for bit,
    NaN equal to NaN), else the failure: :data:`INPUTS_MODIFIED` and which ones."""
    changed = [n for n, a, b in zip(names, given, saved, strict=False)
               if a is not None and (a.shape != b.shape or a.dtype != b.dtype
                                     or not torch.equal(_bits(a), _bits(b)))]
    return f"{INPUTS_MODIFIED} ({', '.join(changed)})" if changed else None


def raised(exc: BaseException) -> str:
    """One sentence for an exception a backend raised (or a user's code exited with)."""
    if isinstance(exc, SystemExit):
        return f"called sys.exit({exc.code!r})"
    return f"raised {type(exc).__name__}: {exc}" if str(exc) else f"raised {type(exc).__name__}"


def guarded(call, tensors: dict):
    """``call()``'s return value; BackendFailed when it raises (:func:`raised`) or changes
    any of ``tensors`` ({name: tensor or None}, its inputs; compared bit for bit with
    copies taken before the call: :data:`INPUTS_MODIFIED` and their names)."""
    saved = snapshot(*tensors.values())
    try:
        out = call()
    except (BackendUnavailable, BackendFailed):
        raise
    except Exception as exc:
        raise BackendFailed(raised(exc)) from exc
    changed = modified_inputs(tuple(tensors.values()), saved, tuple(tensors))
    if changed is not None:
        raise BackendFailed(changed)
    return out


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8)


def _odd(x: torch.Tensor, what: str) -> None:
    """BackendFailed for a tensor flashbench cannot read values from: sparse or other
    non-strided layouts, the meta device (no values), a tensor subclass (its values can be
    computed when read, and a worker cannot send it: torch refused to unpickle one)."""
    if type(x) is not torch.Tensor:
        raise BackendFailed(f"returned {what} as a {type(x).__module__}.{type(x).__qualname__}"
                            ", not a plain torch.Tensor (a subclass can compute when it is "
                            "read; return torch.Tensor values)")
    if x.layout != torch.strided:
        raise BackendFailed(f"returned {what} as a {x.layout} tensor; expected a dense "
                            "(strided) torch tensor")
    if x.device.type not in ("cpu", "cuda"):
        raise BackendFailed(f"returned {what} on the {x.device.type} device; expected it on "
                            "the CPU or the inputs' device (a tensor with values)")


def finite(x: torch.Tensor) -> torch.Tensor:
    """``torch.isfinite(x)``, fp8 included (torch has no isfinite for float8 types)."""
    return torch.isfinite(x.float() if x.is_floating_point() and x.element_size() == 1 else x)


def _nonfinite(x: torch.Tensor) -> int:
    return int(x.numel() - finite(x).sum().item())


def checked_output(out, q, k, v, causal: bool = False, scale: float | None = None,
                   out_dtype: str | None = None, own_lse: bool = True) -> BackendOutput:
    """(o, lse) from a backend's return value ``out`` for inputs q, k, v, as a
    :class:`BackendOutput`; BackendFailed when it is not a valid result (module
    docstring). ``causal``: a bool or a :class:`~flashbench.inputs.variant.Variant` (which
    rows see no key). ``out_dtype``: precision name of o when it is not q's dtype (the
    float64 reference). ``own_lse``: False for a backend whose returned LSE is itself a
    stand-in (torch's ops return none); an ``out`` of o alone is never its own."""
    return _checking(_checked, out, q, k, v, causal, scale, out_dtype, own_lse)


def _checking(check, *args) -> BackendOutput:
    """``check(*args)``; an exception other than BackendFailed is a FAIL too."""
    try:
        return check(*args)
    except BackendFailed:
        raise
    except Exception as exc:  # an output odd in a way not foreseen: that kernel's FAIL
        raise BackendFailed(f"returned an output flashbench could not check: "
                            f"{type(exc).__name__}: {exc}") from exc


def fp8_o(q_dtype, o_dtype) -> bool:
    """Whether o in ``o_dtype`` answers fp8 inputs: bf16, as FlashAttention-3's FP8 forward
    writes it (docs/fp8.md; a probe's FA3-style kernel FAILed "expected float8_e4m3fn")."""
    return o_dtype == torch.bfloat16 and q_dtype in (torch.float8_e4m3fn, torch.float8_e5m2)


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
    if o.dtype != dtype and not (out_dtype is None and fp8_o(q.dtype, o.dtype)):
        raise BackendFailed(f"returned o in {o.dtype}; expected {dtype} (q's dtype"
                            + ("; or torch.bfloat16, FlashAttention-3's" if fp8_o(
                                q.dtype, torch.bfloat16) else "") + ")")
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
    if all(bool(finite(t).all()) for t in (q, k, v)):
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
        if k.shape[-2] == 0 and variant.sinks is None:  # no key at all (a packed Q:0)
            sees_nothing[:] = True
        seen = ("every row (with sinks each row sees its sink)" if variant.sinks is not None
                else "rows that see keys")
        lse = _lse_finite_where_seen(lse, sees_nothing, seen)
    return BackendOutput(o, lse, own_lse)


def _lse_finite_where_seen(lse, blind, seen: str = "rows that see keys"):
    """The LSE, where it is finite on every row that sees a key and -inf or +inf on each
    that sees none (+inf: FlashAttention's own convention there, its kernels' ``sum == 0 ?
    INFINITY``; read as the float64 reference's -inf); else BackendFailed, NaN anywhere and
    a non-finite value on a row that sees a key counted and named apart (a length-0
    sequence's +inf read "on rows that see keys": a red team)."""
    on_seen = ~torch.isfinite(lse) & ~blind
    on_blind = torch.isnan(lse) & blind
    parts = ([f"{int(on_seen.sum())} on {seen} (the float64 reference is finite there)"]
             if bool(on_seen.any()) else []) + (
        [f"{int(on_blind.sum())} NaN on rows that see no key (the float64 reference is -inf "
         "there)"] if bool(on_blind.any()) else [])
    if parts:
        raise BackendFailed("returned non-finite LSE value(s): " + "; ".join(parts))
    plus = torch.isposinf(lse) & blind
    return torch.where(plus, -torch.inf, lse) if bool(plus.any()) else lse


def checked_packed_output(out, q, k, v, cu_q, cu_k, causal=False, scale=None) -> BackendOutput:
    """(o [total_q, H, dv], lse [H, total_q]) from a packed call's return value: each sequence
    checked as :func:`checked_output` checks a batch of one (shape, dtype, finiteness, an LSE
    of -inf only on rows that see no key; the stand-in LSE where none was returned);
    BackendFailed naming the sequence otherwise."""
    return _checking(_checked_packed, out, q, k, v, cu_q, cu_k, causal, scale)


def _checked_packed(out, q, k, v, cu_q, cu_k, causal, scale) -> BackendOutput:
    o, lse = _unpack(out)
    want = (q.shape[0], q.shape[1], v.shape[-1])
    if not isinstance(o, torch.Tensor) or tuple(o.shape) != want:
        raise BackendFailed(f"returned o as {_describe(o)}; expected [total_q, H, dv] = {want}")
    if lse is not None and (not isinstance(lse, torch.Tensor)
                            or tuple(lse.shape) != (want[1], want[0])):
        raise BackendFailed(f"returned lse as {_describe(lse)}; expected [H, total_q] = "
                            f"{(want[1], want[0])}")
    from flashbench.inputs.variant import check_cu_pair
    from flashbench.reference.varlen import sequences

    lses, cu = [], check_cu_pair(cu_q, cu_k, q.shape[0], k.shape[0])
    for i, (qs, ks) in enumerate(sequences(*cu)):
        dense = [t[s].transpose(0, 1)[None] for t, s in ((o, qs), (q, qs), (k, ks), (v, ks))]
        given = dense[0] if lse is None else (dense[0], lse[None, :, qs])
        try:
            lses.append(_checked(given, *dense[1:], causal, scale, None, True)[1][0])
        except BackendFailed as exc:
            raise BackendFailed(f"sequence {i + 1} of {len(cu[0]) - 1} (index {i}, packed "
                                f"rows {qs.start}-{qs.stop - 1}): {exc}") from None
    stand_in = q.new_zeros((want[1], 0), dtype=torch.float32)
    return BackendOutput(o, torch.cat(lses, dim=-1) if lses else stand_in, lse is not None)


def checked_decode_output(out, q, k_cache, v_cache, cache_seqlens, block_table, causal, scale,
                          own_lse: bool = True) -> BackendOutput:
    """(o, lse) from a decode backend's return value; BackendFailed when o is not a tensor
    [B, Nq, H, dv] in q's dtype, lse (when given) not [B, H, Nq], or either non-finite where
    the float64 reference is finite (an LSE of -inf only on rows that see no key)."""
    return _checking(_checked_decode, out, q, k_cache, v_cache, cache_seqlens, block_table,
                     causal, scale, own_lse)


def _checked_decode(out, q, k_cache, v_cache, cache_seqlens, block_table, causal, scale,
                    own_lse) -> BackendOutput:
    o, lse = (out, None) if isinstance(out, torch.Tensor) else (
        tuple(out) if isinstance(out, tuple | list) and len(out) == 2 else (None, None))
    B, nq, H, _ = q.shape
    want = (B, nq, H, v_cache.shape[-1])
    if not isinstance(o, torch.Tensor) or tuple(o.shape) != want or o.dtype != q.dtype:
        got = (f"a {o.dtype} tensor of shape {tuple(o.shape)}" if isinstance(o, torch.Tensor)
               else f"a {type(out).__name__}")
        raise BackendFailed(f"returned {got}; expected o [B, Nq, H, dv] = {want} in {q.dtype}, "
                            f"or (o, lse)")
    _odd(o, "o")
    own_lse = own_lse and lse is not None
    if lse is None:
        lse = decode_lse(q, k_cache, v_cache, cache_seqlens, block_table, causal, scale)
    elif not isinstance(lse, torch.Tensor) or tuple(lse.shape) != (B, H, nq):
        raise BackendFailed(f"returned lse that is not a tensor [B, H, Nq] = {(B, H, nq)}")
    else:
        _odd(lse, "lse")
    if all(bool(finite(t).all()) for t in (q, k_cache, v_cache)):
        if not bool(finite(o).all()):
            raise BackendFailed(f"returned {_nonfinite(o)} non-finite value(s) "
                                f"in o for finite inputs")
        lens = cache_seqlens.to(lse.device).long()[:, None, None]
        i = torch.arange(nq, device=lse.device)[None, None, :]
        blind = (lens == 0) | ((lens - nq + i < 0) if causal else torch.zeros_like(i, dtype=bool))
        lse = _lse_finite_where_seen(lse, blind.expand_as(lse))
    return BackendOutput(o, lse, own_lse)
