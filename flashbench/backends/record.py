"""What an attention implementation is, as data: the :class:`Backend` record (and the
:class:`Implementation` fields it shares with decode's), and the names every backend speaks
(:data:`TORCH_FLOATS`, :data:`VARIANTS`). A leaf of the package: the registry
(:mod:`.registry`), users' functions (:mod:`.user`, :mod:`.declared`) and decode
(:mod:`.decode`) import it, and it imports none of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from flashbench.backends.outputs import checked_output, guarded
from flashbench.inputs.precision import CHECK_DTYPES
from flashbench.inputs.problem import Shape
from flashbench.inputs.variant import Variant, variant_kwargs, variant_of
from flashbench.kernels.validate import (
    TORCH_DTYPES,
    BackendUnavailable,
    expand_kv,
    precision_name,
    validate_tensors,
)

__all__ = ["TORCH_FLOATS", "VARIANTS", "Implementation", "Backend", "always_available", "never"]

# what torch's attention ops take: the precisions judged by default that are stored in a
# torch dtype of their own (fp32, fp16, bf16; tf32 is fp32 storage, a compute mode)
TORCH_FLOATS = tuple(n for n in CHECK_DTYPES
                     if n in TORCH_DTYPES and precision_name(TORCH_DTYPES[n]) == n)
VARIANTS = ("window", "softcap", "sinks")  # what a backend may declare it takes


def always_available() -> str | None:
    """An ``unavailable`` that never finds a reason: the implementation runs anywhere."""
    return None


def never() -> bool:
    """An ``interpreted`` / ``ran_interpreted`` that is always False."""
    return False


@dataclass(frozen=True)
class Implementation:
    """The fields every implementation record opens with (forward :class:`Backend`,
    :class:`flashbench.backends.decode.DecodeBackend`), in this order."""

    name: str
    fn: Callable
    description: str
    dtypes: tuple[str, ...]
    unavailable: Callable[[], str | None] = always_available
    interpreted: Callable[[], bool] = never
    timed: Callable | None = None
    peer: bool = False

    @property
    def timed_fn(self) -> Callable:
        return self.fn if self.timed is None else self.timed

    def dtype_refusal(self, dtype: str) -> str | None:
        """Why it does not take ``dtype`` (None where it does); a user's function's says how
        to declare more."""
        if dtype in self.dtypes:
            return None
        return f"takes {', '.join(self.dtypes)}, not {dtype}" + (
            " (a function of yours declares more: fn.flashbench_dtypes)"
            if getattr(self, "origin", None) == "user" else "")


@dataclass(frozen=True)
class Backend(Implementation):
    """One attention implementation, as data.

    ``fn``: the accuracy callable ``(q, k, v, causal=False, scale=None) -> (o, lse)``.
    ``dtypes``: precision names it takes (:mod:`flashbench.inputs.precision`).
    ``unavailable()``: None when it can run on this machine, else the reason in one
    sentence (a hardware reason says "GPU").
    ``interpreted()``: True when it runs under an interpreter (its time means nothing).
    ``timed``: the bare op timings call (same signature, o only; None means ``fn``).
    ``peer``: torch's implementations, judged for information only; flashbench's own
    kernel and users' kernels count in the check's verdict.
    ``head_dims``: the head dims it takes, d and dv each (None: any). ``limits(shape)``: any other
    reason it cannot run a shape (None: it can).
    ``devices``: where it runs ("cpu", "cuda"). ``gqa``: takes k, v with Hkv < H heads
    itself (else :meth:`prepare` expands them). ``differentiable``: autograd flows
    through ``timed`` to q, k, v. ``lse``: where the accuracy callable's LSE comes from;
    ``own_lse``: whether that is the op's own (True) or a stand-in (False: not judged).
    ``origin``: "flashbench", "torch" or "user". ``out_dtype``: the precision of o
    when it is not q's. ``inputs``: the precision of the tensors the accuracy callable
    is given when it is not the dtype judged (fp8 kernels get fp32 and quantise them).
    """

    head_dims: tuple[int, ...] | None = None
    limits: Callable[[Shape], str | None] | None = None
    devices: tuple[str, ...] = ("cpu", "cuda")
    gqa: bool = True
    differentiable: bool = False
    lse: str = "stand-in: float64 logsumexp rounded to fp32"
    own_lse: bool = False
    origin: str = "flashbench"
    out_dtype: str | None = None  # precision of o; None: q's
    inputs: str | None = None  # precision of the tensors it is given; None: the dtype judged
    default_on: tuple[str, ...] = ("cpu", "cuda")  # where `flashbench check` runs it unasked
    gpu_dtypes: tuple[str, ...] | None = None  # what it takes on a GPU when less than dtypes
    variants: tuple[str, ...] = ()  # which of VARIANTS it takes (keywords of fn and timed)
    grad_variants: tuple[str, ...] = ()  # which of them its backward takes
    # its backward gives the sinks' gradient: given sinks as a float32 [H] tensor that
    # requires grad, autograd reaches it (flashbench's Triton, torch-naive; a user's function
    # declares flashbench_dsinks = True); otherwise a case with sinks judges dq, dk, dv alone
    dsinks: bool = False
    # packed variable-length batches: (q [total_q, H, d], k, v [total_k, Hkv, d], cu_seqlens_q,
    # cu_seqlens_k, causal=, **variant) -> (o [total_q, H, dv], lse [H, total_q]); None: none
    varlen: Callable | None = None
    varlen_grad: bool = False  # whether torch.autograd runs through ``varlen`` (its backward)
    # the bare packed op, o only (what ``flashbench speed --varlen`` times); None: ``varlen``
    # itself (its lse is the op's own, no stand-in computed inside the timed call)
    varlen_timed: Callable | None = None

    def not_applicable(self, variant: Variant | None, grad: bool = False,
                       packed: bool = False) -> str | None:
        """None when it (``grad``: its backward) takes ``variant`` (window, softcap, sinks)
        and, ``packed``, a packed batch; else why not: a backend never runs without a
        variant it was asked for, nor pads a packed batch."""
        missing = [] if variant is None else variant.missing(
            self.grad_variants if grad else self.variants)
        if missing:
            return f"not applicable: its {'backward' if grad else 'forward'} takes no " \
                   f"{' or '.join(missing)}"
        if packed and grad and self.varlen is not None and not self.varlen_grad \
                and self.grads is not None:  # a user's function with a backward
            return ("not judged: flashbench judges the packed (varlen) backward of its own "
                    "kernels and torch's only, not yet a user function's (docs/backends.md)")
        if packed and not (self.varlen_grad if grad else self.varlen is not None):
            return f"not applicable: {'its backward' if grad else 'it'} takes no packed " \
                   "(varlen) batch"
        return None
    # (q, k, v, do, causal) -> (dq, dk, dv) where the gradients are computed elsewhere (a
    # user's function: in its worker process); None: autograd through ``timed`` here
    grads: Callable | None = None
    # whether its calls ran a Triton kernel under the interpreter (a user's function, seen
    # by its worker): a FAIL in bf16 / fp8 then names the interpreter as the likely cause
    ran_interpreted: Callable[[], bool] = never

    def unavailable_for(self, shape: Shape | None = None, dtype: str | None = None) -> str | None:
        """None when it can run ``shape`` in ``dtype`` here, else the reason (one sentence)."""
        reason = self.unavailable()
        if reason is not None:
            return reason
        if dtype is not None and dtype not in self.dtypes:
            return self.dtype_refusal(dtype)
        if (dtype is not None and self.gpu_dtypes is not None and dtype not in self.gpu_dtypes
                and self.device("cpu").type == "cuda"):
            return f"takes {', '.join(self.gpu_dtypes)} on a GPU, not {dtype}"
        if shape is None:
            return None
        for name, dim in (("d", shape.d), ("dv", shape.head_dim_v)):  # each a head dim it takes
            if self.head_dims is not None and dim not in self.head_dims:  # (dv: 64/40 was
                return (f"head dim {name}={dim} is not one it takes "  # called, and failed)
                        f"({', '.join(map(str, self.head_dims))})")
        return None if self.limits is None else self.limits(shape)

    def device(self, given) -> torch.device:
        """Where it runs inputs given on ``given``: CUDA when the backend runs there and a
        GPU is present, else the CPU."""
        given = torch.device(given)
        if given.type == "cuda" and "cuda" in self.devices:
            return given
        if "cuda" in self.devices and torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("cpu")

    def prepare(self, q, k, v, device=None):
        """(q, k, v) as ``timed`` takes them: on ``device`` (None: :meth:`device`), and k, v
        expanded to H heads for a backend without its own grouped-query support. Timings
        call it in setup, so neither copy is timed."""
        dev = self.device(q.device) if device is None else torch.device(device)
        q, k, v = (t.to(dev) for t in (q, k, v))
        if not self.gqa:
            k, v = expand_kv(q, k, v)
        return q, k, v

    def __call__(self, q, k, v, causal: bool = False, scale: float | None = None,
                 dtype: str | None = None, variant: Variant | None = None):
        """(o, lse) for accuracy checks, validated (:func:`checked_output`); a call that
        changes its q, k or v fails ("modified its inputs in place": they are compared
        with copies taken before the call).

        ``dtype``: for a backend with ``inputs``, the precision it computes in (None: its
        first); every other backend computes in q's dtype. ``variant``: a
        :class:`~flashbench.inputs.variant.Variant` whose window, softcap and sinks are
        passed as keywords (causal stays ``causal``); :class:`BackendUnavailable` where
        the backend does not declare them (:meth:`not_applicable`).

        Raises :class:`BackendUnavailable` (it cannot run here or this shape, with the
        reason) or :class:`BackendFailed` (it ran and gave no valid result); inputs that
        are wrong whatever the backend raise TypeError/ValueError as usual.
        """
        reason = self.unavailable()
        if reason is not None:
            raise BackendUnavailable(f"backend {self.name!r} is unavailable: {reason}")
        validate_tensors(q, k, v, gqa=True)
        shape = Shape(q.shape[0], q.shape[1], q.shape[2], k.shape[2], q.shape[3],
                      dv=v.shape[3], Hkv=k.shape[1])
        if self.inputs is None or dtype is None:
            dtype = precision_name(q.dtype) if self.inputs is None else self.dtypes[0]
        reason = self.unavailable_for(shape, dtype) or self.not_applicable(variant)
        if reason is not None:
            raise BackendUnavailable(reason)
        q, k, v = self.prepare(q, k, v)
        extra = variant_kwargs(variant)
        out = guarded(lambda: self.fn(q, k, v, causal=causal, scale=scale, **extra),
                      {"q": q, "k": k, "v": v})
        mask = causal if variant is None else variant_of(causal, **extra)
        return checked_output(out, q, k, v, mask, scale, self.out_dtype, self.own_lse)
