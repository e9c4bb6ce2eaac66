"""torch's own attention, as peers of the Triton kernel.

Both take q [B, H, Nq, d], k [B, H, Nk, d], v [B, H, Nk, dv] torch tensors and return
(o [B, H, Nq, dv] in q's dtype, lse [B, H, Nq] float32), with bottom-right causal
alignment and the fully-masked-row convention of the reference (o = 0, lse = -inf).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from flashbench.kernels.checks import check_tensors
from flashbench.streaming import causal_mask


def visible(nq: int, nk: int, device) -> torch.Tensor:
    """Bool [Nq, Nk], True where query i may see key j (j <= i + Nk - Nq)."""
    hidden = causal_mask(nq, nk)
    if hidden is None:
        return torch.ones(nq, nk, dtype=torch.bool, device=device)
    return torch.from_numpy(~hidden).to(device)


def _scores(q, k, scale, causal, dtype):
    s = torch.matmul(q.to(dtype), k.to(dtype).transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(~visible(q.shape[-2], k.shape[-2], q.device), float("-inf"))
    return s


def _lse(q, k, scale, causal):
    """fp32 log-sum-exp of the scaled, masked scores (computed from fp32 q, k)."""
    return torch.logsumexp(_scores(q, k, scale, causal, torch.float32), dim=-1)


def _zero_blind_rows(o, lse):
    """Rows that see no key: o = 0 (the lse is already -inf)."""
    return torch.where(torch.isneginf(lse)[..., None], torch.zeros((), dtype=o.dtype,
                       device=o.device), o)


def naive_attention(q, k, v, causal: bool = False, scale: float | None = None):
    """Materialised attention in the input dtype: S and P stored in q's dtype."""
    check_tensors(q, k, v)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = _scores(q, k, scale, causal, q.dtype)
    p = torch.softmax(s, dim=-1)
    o = torch.matmul(p, v)
    lse = _lse(q, k, scale, causal)
    return _zero_blind_rows(o, lse), lse


def sdpa_output(q, k, v, causal: bool = False, scale: float | None = None):
    """The bare torch.nn.functional.scaled_dot_product_attention call: o only (what is timed).

    Causal with Nq == Nk uses ``is_causal`` (torch's fused kernels); with Nq != Nk an
    explicit bottom-right mask, since torch's ``is_causal`` is top-left aligned.
    """
    nq, nk = q.shape[-2], k.shape[-2]
    if causal and nq == nk:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    if causal:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=visible(nq, nk, q.device),
                                              scale=scale)
    return F.scaled_dot_product_attention(q, k, v, scale=scale)


def sdpa_attention(q, k, v, causal: bool = False, scale: float | None = None):
    """torch's SDPA (:func:`sdpa_output`) plus the LSE from a separate fp32 logsumexp."""
    check_tensors(q, k, v)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    o = sdpa_output(q, k, v, causal, scale)
    lse = _lse(q, k, scale, causal)
    return _zero_blind_rows(o, lse), lse
