"""Registry of attention backends: each a plain :class:`Backend` record, with a reason when
it cannot run.

Every backend is called as ``backend(q, k, v, causal=False, scale=None, **variant) ->
(o, lse)`` on torch tensors q [B, H, Nq, d], k [B, Hkv, Nk, d], v [B, Hkv, Nk, dv] (Hkv
dividing H); o is [B, H, Nq, dv] in q's dtype (float64 for ``reference``), lse
[B, H, Nq] float32. Causal masking is bottom-right aligned everywhere. Names:
``reference``, ``torch-naive``, ``torch-sdpa``, ``sdpa-flash``, ``sdpa-efficient``,
``sdpa-cudnn``, ``sdpa-math``, ``triton``, ``triton-fp8``, ``flex``; a user's function
joins as ``"package.module:function"`` or an entry point (:mod:`.user`). Each record says
its devices, dtypes, GQA, gradients and variants; ``fn`` returns (o, lse) for accuracy,
``timed`` the bare op. The table and the rules (stand-in LSE, not applicable, peers):
docs/backends.md, "The registry".
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch

from flashbench import reference
from flashbench.backends.outputs import checked_output, guarded
from flashbench.inputs.precision import CHECK_DTYPES
from flashbench.inputs.problem import Shape
from flashbench.inputs.variant import Variant, variant_kwargs, variant_of
from flashbench.kernels import torch_peers as tp
from flashbench.kernels.headdim import HEAD_DIMS, head_dims_problem
from flashbench.kernels.validate import (
    TORCH_DTYPES,
    BackendFailed,
    BackendUnavailable,
    expand_kv,
    precision_name,
    validate_tensors,
)

__all__ = ["Backend", "BACKENDS", "TRITON_HEAD_DIMS", "TRITON_FP8_HEAD_DIMS", "get_backend",
           "VARIANTS", "variant_kwargs", "available_backends", "resolve_backends",
           "BackendUnavailable", "BackendFailed"]

# what torch's attention ops take: the precisions judged by default that are stored in a
# torch dtype of their own (fp32, fp16, bf16; tf32 is fp32 storage, a compute mode)
TORCH_FLOATS = tuple(n for n in CHECK_DTYPES
                     if n in TORCH_DTYPES and precision_name(TORCH_DTYPES[n]) == n)
# every d (and dv) the Triton kernels take, padded to a compiled width (kernels.headdim)
TRITON_HEAD_DIMS = TRITON_FP8_HEAD_DIMS = HEAD_DIMS
VARIANTS = ("window", "softcap", "sinks")  # what a backend may declare it takes


def _always() -> str | None:
    return None


def _never() -> bool:
    return False


@dataclass(frozen=True)
class Implementation:
    """The fields every implementation record opens with (forward :class:`Backend`,
    :class:`flashbench.backends.decode.DecodeBackend`), in this order."""

    name: str
    fn: Callable
    description: str
    dtypes: tuple[str, ...]
    unavailable: Callable[[], str | None] = _always
    interpreted: Callable[[], bool] = _never
    timed: Callable | None = None
    peer: bool = False

    @property
    def timed_fn(self) -> Callable:
        return self.fn if self.timed is None else self.timed


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
    ``head_dims``: the head dims d it takes (None: any). ``limits(shape)``: any other
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
    # packed variable-length batches: (q [total_q, H, d], k, v [total_k, Hkv, d], cu_seqlens_q,
    # cu_seqlens_k, causal=, **variant) -> (o [total_q, H, dv], lse [H, total_q]); None: none
    varlen: Callable | None = None
    varlen_grad: bool = False  # whether torch.autograd runs through ``varlen`` (its backward)

    def not_applicable(self, variant: Variant | None, grad: bool = False) -> str | None:
        """None when it (``grad``: its backward) takes ``variant`` (window, softcap, sinks),
        else why not: a backend never runs without a variant it was asked for."""
        missing = [] if variant is None else variant.missing(
            self.grad_variants if grad else self.variants)
        return f"not applicable: its {'backward' if grad else 'forward'} takes no " \
               f"{' or '.join(missing)}" if missing else None
    # (q, k, v, do, causal) -> (dq, dk, dv) where the gradients are computed elsewhere (a
    # user's function: in its worker process); None: autograd through ``timed`` here
    grads: Callable | None = None
    # whether its calls ran a Triton kernel under the interpreter (a user's function, seen
    # by its worker): a FAIL in bf16 / fp8 then names the interpreter as the likely cause
    ran_interpreted: Callable[[], bool] = _never

    def unavailable_for(self, shape: Shape | None = None, dtype: str | None = None) -> str | None:
        """None when it can run ``shape`` in ``dtype`` here, else the reason (one sentence)."""
        reason = self.unavailable()
        if reason is not None:
            return reason
        if dtype is not None and dtype not in self.dtypes:
            return f"takes {', '.join(self.dtypes)}, not {dtype}"
        if (dtype is not None and self.gpu_dtypes is not None and dtype not in self.gpu_dtypes
                and self.device("cpu").type == "cuda"):
            return f"takes {', '.join(self.gpu_dtypes)} on a GPU, not {dtype}"
        if shape is None:
            return None
        if self.head_dims is not None and shape.d not in self.head_dims:
            return (f"head dim d={shape.d} is not one it takes "
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


def _reference(q, k, v, causal=False, scale=None, **variant):
    o, lse = reference.attention(*(t.detach().cpu().double().numpy() for t in (q, k, v)),
                                 causal=causal, scale=scale, **variant)
    return torch.from_numpy(o), torch.from_numpy(lse)


def _reference_varlen(q, k, v, cu_q, cu_k, causal=False, scale=None, **variant):
    o, lse = reference.varlen_attention(*(t.detach().cpu().double().numpy() for t in (q, k, v)),
                                        cu_q, cu_k, causal=causal, scale=scale, **variant)
    return torch.from_numpy(o), torch.from_numpy(lse)


def _triton_varlen(q, k, v, cu_q, cu_k, causal=False, scale=None, **variant):
    from flashbench.kernels.triton_variants import triton_varlen_attention

    return triton_varlen_attention(q, k, v, cu_q, cu_k, causal=causal, scale=scale, **variant)


def _triton(q, k, v, causal=False, scale=None, **variant):
    from flashbench.kernels.attention import triton_attention

    return triton_attention(q, k, v, causal=causal, scale=scale, **variant)


def _triton_output(q, k, v, causal=False, scale=None, **variant):
    return _triton(q, k, v, causal=causal, scale=scale, **variant)[0]


def _triton_unavailable() -> str | None:
    if importlib.util.find_spec("triton") is None:
        return "the triton package is not installed"
    from flashbench.kernels import launch

    if launch.interpreter_refused() and launch.default_interpreted():
        return (f"{launch.ENV_FORCE}=0 refuses Triton's interpreter, and without a GPU "
                "the kernel runs only interpreted")
    return None


def _triton_interpreted() -> bool:
    from flashbench.kernels import triton_forward

    return getattr(triton_forward, "INTERPRET", not torch.cuda.is_available())


def _triton_fp8(q, k, v, causal=False, scale=None):
    from flashbench.kernels.triton_fp8 import triton_attention_fp8

    return triton_attention_fp8(q, k, v, causal=causal, scale=scale)


def _triton_fp8_output(q, k, v, causal=False, scale=None):
    return _triton_fp8(q, k, v, causal=causal, scale=scale)[0]


def _triton_limits(shape: Shape) -> str | None:
    return head_dims_problem(shape.d, shape.head_dim_v, "the Triton kernel")


# Seen on an H200 (torch 2.11): the flash and cuDNN kernels refuse fp32 on a GPU, and
# only flash and math take k, v with fewer heads (enable_gqa); efficient and cuDNN say
# "both fused kernels require query, key and value to have the same num_heads".
SDPA_GPU_DTYPES = {"flash": ("fp16", "bf16"), "cudnn": ("fp16", "bf16")}
SDPA_GQA = (None, "flash", "math")


def _sdpa(kernel: str | None, description: str, devices=("cpu", "cuda")) -> Backend:
    name = "torch-sdpa" if kernel is None else f"sdpa-{kernel}"
    return Backend(
        name, partial(tp.sdpa_attention, kernel=kernel), description, TORCH_FLOATS,
        _always if kernel is None else partial(tp.sdpa_unavailable, kernel),
        timed=partial(tp.sdpa_output, kernel=kernel), peer=True, devices=devices,
        gqa=kernel in SDPA_GQA, differentiable=True, origin="torch",
        default_on=("cpu", "cuda") if kernel is None else ("cuda",),
        gpu_dtypes=SDPA_GPU_DTYPES.get(kernel), variants=("window",), grad_variants=("window",))


BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in (
        Backend("reference", _reference, "float64 NumPy one-shot reference",
                ("fp64", *TORCH_FLOATS), devices=("cpu",), lse="the reference's own (float64)",
                own_lse=True, out_dtype="fp64", variants=VARIANTS, varlen=_reference_varlen),
        Backend("torch-naive", tp.naive_attention, "S and P materialised in the input dtype",
                TORCH_FLOATS, timed=tp.naive_output, peer=True, gqa=False,
                differentiable=True, origin="torch", variants=VARIANTS, grad_variants=VARIANTS),
        _sdpa(None, "torch scaled_dot_product_attention, torch's own choice of kernel"),
        _sdpa("flash", "SDPA pinned to torch's flash kernel (sdpa_kernel FLASH_ATTENTION)"),
        _sdpa("efficient", "SDPA pinned to memory-efficient attention (EFFICIENT_ATTENTION)",
              ("cuda",)),
        _sdpa("cudnn", "SDPA pinned to cuDNN attention (CUDNN_ATTENTION)", ("cuda",)),
        _sdpa("math", "SDPA pinned to torch's math path (MATH)"),
        Backend("triton", _triton, "flashbench fused Triton kernel, forward and backward",
                TORCH_FLOATS,
                _triton_unavailable, _triton_interpreted,
                limits=_triton_limits, gqa=True, lse="the kernel's own (float32)",
                own_lse=True, timed=_triton_output, differentiable=True, variants=VARIANTS,
                grad_variants=VARIANTS, varlen=_triton_varlen, varlen_grad=True),
        Backend("triton-fp8", _triton_fp8, "flashbench's Triton FP8 forward (e4m3 q, k, v, "
                "FlashAttention-3's block quantisation and incoherent processing, bf16 o)",
                ("fp8",), _triton_unavailable, _triton_interpreted,
                limits=_triton_limits, gqa=True,
                lse="the kernel's own (float32)", own_lse=True, timed=_triton_fp8_output,
                out_dtype="bf16", inputs="fp32"),
        Backend("flex", tp.flex_attention_lse, "torch.compile(flex_attention), block mask "
                "for causal", TORCH_FLOATS, tp.flex_unavailable, timed=tp.flex_output,
                peer=True, gqa=True, differentiable=torch.cuda.is_available(),
                lse="the op's own on a GPU; the stand-in on CPU",
                own_lse=torch.cuda.is_available(), origin="torch", default_on=("cuda",),
                variants=("window", "softcap"), grad_variants=("window", "softcap")),
    )
}


def get_backend(name: str) -> Backend:
    """The backend called ``name``: a registry name, an entry point of the
    ``flashbench.backends`` group, or ``"package.module:function"`` (a user's function).
    ValueError listing the known names otherwise."""
    if name in BACKENDS:
        return BACKENDS[name]
    from flashbench.backends import user

    return user.find(name, BACKENDS)


def available_backends() -> list[Backend]:
    """Registry backends that can run on this machine, in registry order."""
    return [b for b in BACKENDS.values() if b.unavailable() is None]


def resolve_backends(values=()) -> list[str]:
    """The backend names a check runs for ``--backend`` values (in order, no repeats).

    A registry or entry-point name selects that backend; ``module:function`` adds a
    user's function. Without any name: every registry backend but ``reference`` whose
    ``default_on`` holds this machine's kind (unavailable ones are reported with their
    reason) and every installed entry point, plus the user functions given. ValueError
    for a value that is none of these.
    """
    from flashbench.backends import user

    names, specs = [], []
    for value in values:
        if ":" in value:
            user.parse_spec(value)
            specs.append(value)
        else:
            get_backend(value)  # ValueError listing the known names
            names.append(value)
    if not names:
        machine = "cuda" if torch.cuda.is_available() else "cpu"
        names = [n for n, b in BACKENDS.items() if n != "reference" and machine in b.default_on]
        names += user.entry_point_names(BACKENDS)
    return list(dict.fromkeys(names + specs))
