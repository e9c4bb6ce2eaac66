"""Registry of attention backends: one signature, and a reason when one is unavailable.

Every backend is called as ``fn(q, k, v, causal=False, scale=None) -> (o, lse)`` on
torch tensors q [B, H, Nq, d], k [B, H, Nk, d], v [B, H, Nk, dv]; o has q's dtype
(float64 for ``reference``) and lse is [B, H, Nq] (float32; float64 for ``reference``).

=============  ==========================================================  =========
name           what it is                                                  devices
=============  ==========================================================  =========
reference      the float64 NumPy one-shot reference behind torch tensors   cpu
torch-naive    materialised S and softmax in the input dtype               cpu, cuda
torch-sdpa     torch.nn.functional.scaled_dot_product_attention            cpu, cuda
triton         flashbench's fused Triton kernel                            cuda; cpu
               (cpu: Triton interpreter, accuracy only, never timed)
=============  ==========================================================  =========
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass

import torch

from flashbench import reference
from flashbench.kernels.checks import check_tensors
from flashbench.kernels.torch_peers import naive_attention, sdpa_attention, sdpa_output

__all__ = ["Backend", "BACKENDS", "get_backend", "available_backends"]


@dataclass(frozen=True)
class Backend:
    """One attention implementation.

    ``dtypes``: precision names it accepts ("fp32", "fp16", "bf16", ...).
    ``unavailable()``: None when it can run here, else the reason in one sentence.
    ``interpreted()``: True when it runs under an interpreter (its time means nothing).
    ``peer``: True for implementations flashbench does not own (torch's): the check
    reports their baseline verdict but does not fail on it.
    ``timed``: what timings call (same signature; None means ``fn``). For torch-sdpa
    it is the bare torch call: SDPA does not return its LSE, and the separate
    logsumexp pass that ``fn`` adds for accuracy checks is not SDPA's cost.
    """

    name: str
    fn: Callable
    description: str
    dtypes: tuple[str, ...]
    unavailable: Callable[[], str | None]
    interpreted: Callable[[], bool] = lambda: False
    timed: Callable | None = None
    peer: bool = False

    @property
    def timed_fn(self) -> Callable:
        return self.fn if self.timed is None else self.timed

    def __call__(self, q, k, v, causal: bool = False, scale: float | None = None):
        reason = self.unavailable()
        if reason is not None:
            raise RuntimeError(f"backend {self.name!r} is unavailable: {reason}")
        return self.fn(q, k, v, causal=causal, scale=scale)


def _reference(q, k, v, causal=False, scale=None):
    check_tensors(q, k, v)
    o, lse = reference.attention(*(t.detach().cpu().double().numpy() for t in (q, k, v)),
                                 causal=causal, scale=scale)
    return torch.from_numpy(o), torch.from_numpy(lse)


def _triton(q, k, v, causal=False, scale=None):
    from flashbench.kernels.triton_fwd import triton_attention

    return triton_attention(q, k, v, causal=causal, scale=scale)


def _triton_unavailable() -> str | None:
    if importlib.util.find_spec("triton") is None:
        return "the triton package is not installed"
    return None


def _triton_interpreted() -> bool:
    from flashbench.kernels.triton_fwd import INTERPRET

    return INTERPRET


def _always() -> str | None:
    return None


BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in (
        Backend("reference", _reference, "float64 NumPy one-shot reference",
                ("fp64", "fp32", "fp16", "bf16"), _always),
        Backend("torch-naive", naive_attention, "materialised softmax in the input dtype",
                ("fp32", "fp16", "bf16"), _always, peer=True),
        Backend("torch-sdpa", sdpa_attention, "torch scaled_dot_product_attention",
                ("fp32", "fp16", "bf16"), _always, timed=sdpa_output, peer=True),
        Backend("triton", _triton, "flashbench fused Triton forward kernel",
                ("fp32", "fp16", "bf16"), _triton_unavailable, _triton_interpreted),
    )
}


def get_backend(name: str) -> Backend:
    """The backend called ``name``; ValueError listing the known names otherwise."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; known: {sorted(BACKENDS)}")
    return BACKENDS[name]


def available_backends() -> list[Backend]:
    """Backends that can run on this machine, in registry order."""
    return [b for b in BACKENDS.values() if b.unavailable() is None]
