"""Registry of attention backends: each a plain :class:`~.record.Backend` record, with a
reason when it cannot run (re-exported by :mod:`flashbench.backends`).

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
from functools import partial

import torch

from flashbench import reference
from flashbench.backends import user
from flashbench.backends.outputs import BackendOutput
from flashbench.backends.record import TORCH_FLOATS, VARIANTS, Backend, always_available
from flashbench.inputs.problem import Shape
from flashbench.kernels import torch_peers as tp
from flashbench.kernels.headdim import HEAD_DIMS, head_dims_problem

__all__ = ["BACKENDS", "per_sequence", "TRITON_HEAD_DIMS", "TRITON_FP8_HEAD_DIMS",
           "SDPA_GPU_DTYPES", "SDPA_GQA", "get_backend", "available_backends", "resolve_backends"]

# every d (and dv) the Triton kernels take, padded to a compiled width (kernels.headdim)
TRITON_HEAD_DIMS = TRITON_FP8_HEAD_DIMS = HEAD_DIMS


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


def per_sequence(dense, q, k, v, cu_q, cu_k, causal=False, scale=None, **variant):
    """A packed batch through a dense backend callable, one call per sequence (what a packed
    batch costs without a varlen kernel: the torch peers' packed path; the float64 side's is
    :func:`flashbench.reference.varlen.per_sequence`). ``dense`` returns o or (o, lse); so
    does this: o [total_q, H, dv], lse [H, total_q]. An empty sequence has no rows; one with
    queries and no key (``check --varlen 6:0``) gives them O = 0 and LSE = -inf, as the
    reference does without sinks (no dense op takes zero keys)."""
    from flashbench.inputs.variant import check_cu_pair
    from flashbench.reference.varlen import sequences

    outs, lses, own = [], [], True
    for qs, ks in sequences(*check_cu_pair(cu_q, cu_k, q.shape[0], k.shape[0])):
        if qs.start == qs.stop:
            continue
        if ks.start == ks.stop and not variant.get("sinks"):
            n = int(qs.stop - qs.start)
            outs.append(q.new_zeros((n, q.shape[1], v.shape[-1])))
            lses.append(n)  # its rows' LSE: -inf, made once the others' are known
            continue
        out = dense(*(t[s].transpose(0, 1).unsqueeze(0) for t, s in ((q, qs), (k, ks), (v, ks))),
                    causal=causal, scale=scale, **variant)
        o, lse = out if isinstance(out, tuple) else (out, None)
        own = own and getattr(out, "own_lse", True)  # a stand-in stays one (never judged)
        outs.append(o[0].transpose(0, 1))
        lses.append(None if lse is None else lse[0])
    o = torch.cat(outs) if outs else q.new_zeros((0, q.shape[1], v.shape[-1]))
    if any(x is None for x in lses):
        return o
    lses = [torch.full((q.shape[1], x), float("-inf"), device=q.device) if isinstance(x, int)
            else x for x in lses]
    lse = torch.cat(lses, dim=-1) if lses else q.new_zeros((q.shape[1], 0))
    return BackendOutput(o, lse, own)


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
    from flashbench.kernels import triton_forward as triton_fwd

    return getattr(triton_fwd, "INTERPRET", not torch.cuda.is_available())


def _triton_fp8(q, k, v, causal=False, scale=None):
    from flashbench.kernels.triton_fp8 import triton_attention_fp8

    return triton_attention_fp8(q, k, v, causal=causal, scale=scale)


def _triton_fp8_output(q, k, v, causal=False, scale=None):
    """What speed times: on e4m3 inputs (its pool's, quantised before the clock, as
    FlashAttention-3's benchmarks give them) the FP8 forward with per-tensor descales of 1
    (they reached the quantising path, which refuses e4m3: every fp8 row "raised", a probe
    2026-12-07); on wider ones, quantised first."""
    if q.dtype == torch.float8_e4m3fn:
        from flashbench.kernels.triton_fp8 import forward_fp8

        one = torch.ones((), dtype=torch.float32, device=q.device)
        return forward_fp8(q, k, v, one, one, one, causal=causal, scale=scale)[0]
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
        always_available if kernel is None else partial(tp.sdpa_unavailable, kernel),
        timed=partial(tp.sdpa_output, kernel=kernel), peer=True, devices=devices,
        gqa=kernel in SDPA_GQA, differentiable=True, origin="torch",
        default_on=("cpu", "cuda") if kernel is None else ("cuda",),
        gpu_dtypes=SDPA_GPU_DTYPES.get(kernel), variants=("window",), grad_variants=("window",),
        varlen=partial(per_sequence, partial(tp.sdpa_attention, kernel=kernel)),
        varlen_timed=partial(per_sequence, partial(tp.sdpa_output, kernel=kernel)))


BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in (
        Backend("reference", _reference, "float64 NumPy one-shot reference",
                ("fp64", *TORCH_FLOATS), devices=("cpu",), lse="the reference's own (float64)",
                own_lse=True, out_dtype="fp64", variants=VARIANTS, varlen=_reference_varlen),
        Backend("torch-naive", tp.naive_attention, "S and P materialised in the input dtype",
                TORCH_FLOATS, timed=tp.naive_output, peer=True, gqa=False,
                differentiable=True, origin="torch", variants=VARIANTS, grad_variants=VARIANTS,
                dsinks=True),
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
                grad_variants=VARIANTS, varlen=_triton_varlen, varlen_grad=True, dsinks=True),
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
