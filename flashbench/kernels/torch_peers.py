"""torch's own attention, as peers of flashbench's kernel.

Peers: naive (S and P materialised in q's dtype), sdpa (``kernel=None``: torch's own
choice; "flash", "efficient", "cudnn", "math": pinned with ``sdpa_kernel``) and flex
(``flex_attention`` under ``torch.compile``). Every function takes torch tensors
q [B, H, Nq, d], k [B, Hkv, Nk, d], v [B, Hkv, Nk, dv] (Hkv dividing H) with causal
masking bottom-right aligned (torch's ``is_causal`` is top-left aligned). Two callables
per peer, as the registry (:mod:`flashbench.backends`) uses them: ``*_output``, the bare
op, o only (what timings call); ``*_attention``, (o, lse) for accuracy checks, o = 0 and
lse = -inf on rows that see no key, the LSE the op's own where it returns one, else
:func:`reference_lse` (never timed). Variants: ``window``, ``softcap``, ``sinks``
keywords, or a Variant passed as ``causal``; a case a peer does not take raises
:class:`BackendUnavailable` with the reason. Each peer's masks, GQA, LSE and variants:
docs/backends.md (the table, "flex on a CPU"), docs/variants.md ("What runs where").
"""

from __future__ import annotations

import functools
import math
import warnings

import torch
import torch.nn.functional as F

from flashbench.inputs.variant import Variant, variant_of
from flashbench.kernels.validate import BackendUnavailable, expand_kv, validate_tensors

__all__ = ["visible", "reference_lse", "naive_output", "naive_attention", "SDPA_KERNELS",
           "sdpa_output", "sdpa_attention", "sdpa_unavailable", "flex_output",
           "flex_attention_lse", "flex_unavailable"]

# flashbench's name -> attribute of torch.nn.attention.SDPBackend
SDPA_KERNELS = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
                "cudnn": "CUDNN_ATTENTION", "math": "MATH"}
_GPU_ONLY = {"efficient", "cudnn"}  # torch has no CPU implementation of these two
_HAS_ENABLE_GQA = "enable_gqa" in (F.scaled_dot_product_attention.__doc__ or "")  # torch >= 2.5


def visible(nq: int, nk: int, device, variant: Variant | None = None) -> torch.Tensor:
    """Bool [Nq, Nk], True where query i may see key j: under ``variant``'s mask, None
    meaning the causal one (j <= i + Nk - Nq)."""
    hidden = (Variant(causal=True) if variant is None else variant).hidden(nq, nk)
    if hidden is None:
        return torch.ones(nq, nk, dtype=torch.bool, device=device)
    return torch.from_numpy(~hidden).to(device)


def _scale(q, scale):
    return 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale


def _scores(q, k, scale, causal, dtype, sink_tensor=None):
    """Scaled scores in ``dtype``, softcapped and masked (``causal``: a bool or a Variant);
    with sinks, the sink logits appended as a last column (to drop after the softmax): from
    ``sink_tensor`` where given (a tensor the caller passed as sinks: autograd reaches it)."""
    variant = variant_of(causal)
    s = _scaled_product(q.to(dtype), k.to(dtype), scale)
    if variant.softcap is not None:
        s = variant.softcap * torch.tanh(s / variant.softcap)
    if variant.masked:
        s = s.masked_fill(~visible(q.shape[-2], k.shape[-2], q.device, variant), float("-inf"))
    if variant.sinks is not None:
        variant.sink_logits(q.shape[1])  # [H]: checked against q's heads
        sink = (torch.tensor(variant.sinks, dtype=dtype, device=q.device)
                if sink_tensor is None else sink_tensor.to(dtype=dtype, device=q.device))
        s = torch.cat([s, sink[:, None, None].expand(*s.shape[:-1], 1)], dim=-1)
    return s


def _scaled_product(q, k, scale: float) -> torch.Tensor:
    """scale x q k^T rounded once to the dtype, as the standard model stores S (baddbmm's
    alpha scales the accumulator): ``(q @ k^T) * scale`` rounded it twice in bf16 and fp16,
    and a row read 2.5-4.4x the standard model's error on about 1 input in 300 (a red team,
    2026-12-06). q [..., Nq, d] and k [..., Nk, d] with the same leading dims."""
    lead = q.shape[:-2]
    n = math.prod(lead)  # not -1: an empty sequence (0 rows) leaves it ambiguous
    q3, k3 = q.reshape(n, *q.shape[-2:]), k.reshape(n, *k.shape[-2:])
    out = q3.new_empty(q3.shape[0], q3.shape[1], k3.shape[1])
    return torch.baddbmm(out, q3, k3.transpose(1, 2), beta=0.0, alpha=scale).reshape(
        *lead, q3.shape[1], k3.shape[1])


def reference_lse(q, k, v, causal: bool = False, scale: float | None = None) -> torch.Tensor:
    """fp32 log-sum-exp [B, H, Nq] of the scaled, masked scores, computed in float64 from
    q, k as given (grouped k expanded) and rounded once to fp32: the stand-in LSE of an op
    that returns none (shown for information, never judged). Deterministic: an fp32
    logsumexp varied with BLAS threading (1 run in 4 read 3.6e-5 instead of 5.8e-7 off
    the float64 LSE); float64's own variation (~1e-16) is far below fp32's rounding."""
    k, _ = expand_kv(q, k, v)
    return torch.logsumexp(_scores(q, k, _scale(q, scale), causal, torch.float64),
                           dim=-1).float()


def _zero_blind_rows(o, lse):
    """Rows that see no key: o = 0 (the lse is already -inf)."""
    return torch.where(torch.isneginf(lse)[..., None], torch.zeros((), dtype=o.dtype,
                       device=o.device), o)


def _with_lse(o, q, k, v, causal, scale):
    lse = reference_lse(q, k, v, causal, scale)
    return _zero_blind_rows(o, lse), lse


# -- naive ---------------------------------------------------------------------------


def naive_output(q, k, v, causal: bool = False, scale: float | None = None,
                 window=(-1, -1), softcap=None, sinks=None):
    """Materialised attention in the input dtype: S and P stored in q's dtype (o only);
    differentiable in ``sinks`` too where they are a tensor (dsinks)."""
    return _naive(q, k, v, variant_of(causal, window, softcap, sinks), scale,
                  sinks if isinstance(sinks, torch.Tensor) else None)


def _naive(q, k, v, variant, scale, sink_t):
    k, v = expand_kv(q, k, v)
    p = torch.softmax(_scores(q, k, _scale(q, scale), variant, q.dtype, sink_t), dim=-1)
    if _blind_rows(variant, q.shape[-2], k.shape[-2]):  # their softmax is NaN: o = 0 there
        p = torch.nan_to_num(p, nan=0.0)  # (timed in speed, which read NaN as wrong)
    return torch.matmul(p[..., :k.shape[-2]], v)


def _blind_rows(variant, nq: int, nk: int) -> bool:
    """Whether some query row sees no key (and no sink): only the first or the last rows
    can (Variant.key_range)."""
    if variant.sinks is not None or not variant.masked or nq == 0:
        return False
    return any(lo >= hi for lo, hi in (variant.key_range(nq, nk, 0, 1),
                                       variant.key_range(nq, nk, nq - 1, nq)))


def naive_attention(q, k, v, causal: bool = False, scale: float | None = None,
                    window=(-1, -1), softcap=None, sinks=None):
    """:func:`naive_output` and the separate fp32 LSE."""
    variant = variant_of(causal, window, softcap, sinks)
    validate_tensors(q, k, v, gqa=True, causal=variant.causal)
    o = _naive(q, k, v, variant, scale, sinks if isinstance(sinks, torch.Tensor) else None)
    return _with_lse(o, q, k, v, variant, scale)


# -- scaled_dot_product_attention -----------------------------------------------------


def _sdpa_variant(causal, window, softcap, sinks) -> Variant:
    """The variant SDPA can run: a window (explicit mask); a softcap or sinks are refused."""
    variant = variant_of(causal, window, softcap, sinks)
    if variant.softcap is not None or variant.sinks is not None:
        raise BackendUnavailable("not applicable: torch's scaled_dot_product_attention takes "
                                 "no softcap or sinks")
    return variant


@functools.lru_cache(maxsize=64)
def _variant_mask(variant: Variant, nq: int, nk: int, device: str):
    """A window's boolean mask, materialised once per variant, shape and device."""
    return visible(nq, nk, device, variant)


def _sdpa_kwargs(q, k, causal, scale):
    kw = {"scale": scale}
    if k.shape[1] != q.shape[1]:
        kw["enable_gqa"] = True
    nq, nk = q.shape[-2], k.shape[-2]
    variant = variant_of(causal)
    causal = variant.causal
    if variant.window != (-1, -1):
        kw["attn_mask"] = _variant_mask(variant, nq, nk, str(q.device))
    elif causal and nq == nk:
        kw["is_causal"] = True
    elif causal and nq > nk and q.device.type == "cuda":
        # torch's lower-right bias gave the memory-efficient CUDA kernel (and torch's own
        # choice, which took it) wrong rows when Nq > Nk: max abs error 2.8 against the
        # float64 reference on an H200, torch 2.11. The mask, materialised, is exact.
        kw["attn_mask"] = _lower_right_mask(nq, nk, str(q.device))
    elif causal:
        kw["attn_mask"] = _lower_right(nq, nk)
    return kw


@functools.lru_cache(maxsize=64)
def _lower_right_mask(nq: int, nk: int, device: str):
    """The bottom-right causal mask, materialised once per shape and device (timed calls
    reuse it rather than build it inside the timing)."""
    return torch.ones(nq, nk, dtype=torch.bool, device=device).tril(nk - nq)


@functools.lru_cache(maxsize=256)
def _lower_right(nq: int, nk: int):
    """torch's bottom-right causal bias (its warning that rows seeing no key come out
    NaN when Nq > Nk is known: the accuracy callables set those rows to 0)."""
    from torch.nn.attention.bias import causal_lower_right

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Lower right causal bias", UserWarning)
        return causal_lower_right(nq, nk)


def _sdpa_call(q, k, v, causal, scale, kernel):
    if k.shape[1] != q.shape[1] and not _HAS_ENABLE_GQA:  # torch < 2.5: no grouped K/V
        k, v = expand_kv(q, k, v)
    kw = _sdpa_kwargs(q, k, causal, scale)
    if kernel is None:
        return F.scaled_dot_product_attention(q, k, v, **kw)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(getattr(SDPBackend, SDPA_KERNELS[kernel])):
        return F.scaled_dot_product_attention(q, k, v, **kw)


def sdpa_output(q, k, v, causal: bool = False, scale: float | None = None,
                kernel: str | None = None, window=(-1, -1), softcap=None, sinks=None):
    """torch.nn.functional.scaled_dot_product_attention, o only (what is timed).

    ``kernel``: None lets torch choose; "flash", "efficient", "cudnn" or "math" pins
    that kernel (``sdpa_kernel``). Raises :class:`BackendUnavailable` with torch's
    reason where the pinned kernel does not take this case.
    """
    causal = _sdpa_variant(causal, window, softcap, sinks)
    try:
        return _sdpa_call(q, k, v, causal, scale, kernel)
    except RuntimeError as exc:
        if kernel is None or "No available kernel" not in str(exc):
            raise
    # torch warns its reasons on the failed call: repeat it with the warnings recorded
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            _sdpa_call(q, k, v, causal, scale, kernel)
        except RuntimeError:
            pass
    raise BackendUnavailable(_refusal(caught, q, kernel))


def _refusal(caught, q, kernel) -> str:
    """One sentence from torch's warnings about a kernel it did not use."""
    why = [str(w.message).split(" (Triggered internally")[0].strip() for w in caught]
    # on a GPU torch also says why each kernel the pin turned off was not used ("...
    # has been runtime disabled"): that is the pin, not the pinned kernel's reason
    why = [w for w in why if w and not w.endswith("kernel not used because:")
           and "runtime disabled" not in w]
    detail = why[0] if why else "no reason given"
    if "GPU" not in detail and q.device.type != "cuda" and kernel in _GPU_ONLY:
        detail += " (this kernel needs a CUDA GPU)"
    return f"torch's {kernel} SDPA kernel does not take this case: {detail}"


def sdpa_attention(q, k, v, causal: bool = False, scale: float | None = None,
                   kernel: str | None = None, window=(-1, -1), softcap=None, sinks=None):
    """:func:`sdpa_output` and the separate fp32 LSE (SDPA returns none); torch's
    warnings about a pinned kernel it cannot use become the reason, not noise."""
    causal = _sdpa_variant(causal, window, softcap, sinks)
    validate_tensors(q, k, v, gqa=True, causal=causal.causal)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            o = _sdpa_call(q, k, v, causal, scale, kernel)
        except RuntimeError as exc:
            if kernel is None or "No available kernel" not in str(exc):
                raise
            raise BackendUnavailable(_refusal(caught, q, kernel)) from None
    return _with_lse(o, q, k, v, causal, scale)


@functools.cache
def sdpa_unavailable(kernel: str) -> str | None:
    """None when torch can run its ``kernel`` SDPA kernel on this machine, else why.

    CPU torch has flash and math kernels; efficient and cudnn exist only for CUDA. On
    a GPU each pinned kernel is probed once with a small fp16 call.
    """
    if kernel not in SDPA_KERNELS:
        raise ValueError(f"kernel must be one of {sorted(SDPA_KERNELS)}, got {kernel!r}")
    if not torch.cuda.is_available():
        if kernel in _GPU_ONLY:
            return "needs a CUDA GPU (no GPU here)"
        device = "cpu"
    else:
        device = "cuda"
    x = torch.zeros(1, 2, 64, 64, dtype=torch.float16, device=device)
    try:
        sdpa_output(x, x, x, kernel=kernel)
    except BackendUnavailable as exc:
        where = "this GPU" if device == "cuda" else "this CPU (no GPU here)"
        return f"torch {torch.__version__} cannot run it on {where}: {exc}"
    return None


# -- flex_attention -------------------------------------------------------------------

FLEX_RECOMPILE_LIMIT = 64  # one compilation per (shape, dtype, causal); more than dynamo's 8


@functools.cache
def flex_unavailable() -> str | None:
    """None when torch.nn.attention.flex_attention exists and can be compiled here."""
    try:
        from torch.nn.attention import flex_attention  # noqa: F401
    except ImportError as exc:
        return f"torch {torch.__version__} has no flex_attention ({exc})"
    if not torch.cuda.is_available():
        import shutil

        if not any(shutil.which(c) for c in ("c++", "g++", "clang++")):
            return ("torch.compile builds flex_attention for CPU with a C++ compiler, and none "
                    "is on PATH (no GPU here either)")
    return None


@functools.cache
def _compiled_flex():
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


@functools.lru_cache(maxsize=64)
def _block_mask(variant: Variant, nq: int, nk: int, device: str):
    """flex's block mask of the variant's ``mask_mod`` (causal bottom-right, window)."""
    from torch.nn.attention.flex_attention import create_block_mask

    return create_block_mask(functools.partial(variant.mask_mod, nq=nq, nk=nk), None, None,
                             nq, nk, device=device)


def _flex_variant(causal, window, softcap, sinks) -> Variant:
    variant = variant_of(causal, window, softcap, sinks)
    if variant.sinks is not None:
        raise BackendUnavailable("not applicable: flex_attention's score_mod and mask_mod "
                                 "express no sink (a term of the denominator without a key)")
    return variant


def _softcap_mod(c: float):
    def softcap(score, b, h, q_idx, kv_idx):
        return c * torch.tanh(score / c)

    return softcap


def _flex_call(q, k, v, causal, scale, lse: bool):
    kw = {"scale": scale, "enable_gqa": k.shape[1] != q.shape[1]}
    variant = variant_of(causal)
    if variant.masked:
        kw["block_mask"] = _block_mask(variant, q.shape[-2], k.shape[-2], str(q.device))
    if variant.softcap is not None:
        kw["score_mod"] = _softcap_mod(variant.softcap)
    if lse:
        try:
            from torch.nn.attention.flex_attention import AuxRequest
        except ImportError:  # torch < 2.9
            kw["return_lse"] = True
        else:
            kw["return_aux"] = AuxRequest(lse=True)
    patch = {"recompile_limit": FLEX_RECOMPILE_LIMIT, "fail_on_recompile_limit_hit": True}
    config = torch._dynamo.config
    patch = {k_: v_ for k_, v_ in patch.items() if hasattr(config, k_)}
    try:
        with config.patch(**patch):
            out = _compiled_flex()(q, k, v, **kw)
    except Exception as exc:  # torch.compile could not build this case
        if type(exc).__name__ not in ("InductorError", "BackendCompilerFailed",
                                      "LoweringException", "NotImplementedError",
                                      "FailOnRecompileLimitHit", "Unsupported"):
            raise
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BackendUnavailable(f"torch.compile could not build flex_attention for this "
                                 f"case on {q.device.type}: {first[:200]}") from None
    if lse:
        o, aux = out
        return o, getattr(aux, "lse", aux)
    return out


def flex_output(q, k, v, causal: bool = False, scale: float | None = None,
                window=(-1, -1), softcap=None, sinks=None):
    """Compiled flex_attention, o only (what is timed)."""
    return _flex_call(q, k, v, _flex_variant(causal, window, softcap, sinks), scale, lse=False)


def flex_attention_lse(q, k, v, causal: bool = False, scale: float | None = None,
                       window=(-1, -1), softcap=None, sinks=None):
    """Compiled flex_attention with its own LSE on a GPU; on CPU (inductor builds no LSE
    output there) the timed output and the separate fp32 LSE."""
    causal = _flex_variant(causal, window, softcap, sinks)
    validate_tensors(q, k, v, gqa=True, causal=causal.causal)
    if q.device.type == "cuda":
        o, lse = _flex_call(q, k, v, causal, scale, lse=True)
        return _zero_blind_rows(o, lse), lse.float()
    return _with_lse(flex_output(q, k, v, causal, scale), q, k, v, causal, scale)
