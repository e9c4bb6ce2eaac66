"""torch's attention as peers of the decode kernel: the KV cache gathered, then attended.

Layouts of :mod:`flashbench.inputs.kvcache`; every peer returns o [B, Nq, H, dv] in q's
dtype. torch has no paged op, so a peer gathers each sequence's pages into a padded
[B, Hkv, capacity, d] copy (:func:`gather_cache`, part of its timed cost) and masks the
keys each row sees (:func:`visible_keys`: ragged, bottom-right causal); rows that see no
key get o = 0. naive: scores and softmax in q's dtype; sdpa: the boolean mask and
``enable_gqa``; flex: compiled ``flex_attention`` with a block mask from cache_seqlens.
An op's missing LSE is the forward's stand-in (:func:`decode_lse`: float64, rounded to
fp32).
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

from flashbench.kernels.validate import BackendUnavailable

__all__ = ["gather_cache", "visible_keys", "decode_lse", "naive_decode", "sdpa_decode",
           "flex_decode", "with_lse"]


def gather_cache(cache: torch.Tensor, block_table: torch.Tensor | None) -> torch.Tensor:
    """[B, Hkv, capacity, d]: a contiguous cache's view, or the pages each sequence's table
    lists, in order (pages past its length included: the mask hides them; -1 padding reads
    page 0)."""
    if block_table is None:
        return cache.transpose(1, 2)
    B, pages = block_table.shape
    g = cache[block_table.clamp_min(0).long()]  # [B, pages, page_size, Hkv, d]
    return g.reshape(B, pages * cache.shape[1], *cache.shape[2:]).transpose(1, 2)


def visible_keys(cache_seqlens: torch.Tensor, nq: int, capacity: int, causal: bool):
    """Bool [B, 1, Nq, capacity]: key j visible to query i of sequence b iff j < len_b and,
    with causal, j <= len_b - Nq + i."""
    lens = cache_seqlens.long()[:, None, None, None]
    j = torch.arange(capacity, device=lens.device)[None, None, None, :]
    seen = j < lens
    if causal:
        i = torch.arange(nq, device=lens.device)[None, None, :, None]
        seen = seen & (j <= lens - nq + i)
    return seen


def _scale(q, scale):
    return 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale


def _prepared(q, k_cache, v_cache, cache_seqlens, block_table, causal):
    k, v = gather_cache(k_cache, block_table), gather_cache(v_cache, block_table)
    return q.transpose(1, 2), k, v, visible_keys(cache_seqlens, q.shape[1], k.shape[2], causal)


def decode_lse(q, k_cache, v_cache, cache_seqlens, block_table=None, causal=False, scale=None):
    """The stand-in LSE [B, H, Nq]: float64 logsumexp of the scaled, masked scores, rounded
    once to fp32 (-inf for rows that see no key)."""
    qh, k, _, seen = _prepared(q, k_cache, v_cache, cache_seqlens, block_table, causal)
    k = k.repeat_interleave(qh.shape[1] // k.shape[1], dim=1)
    s = torch.matmul(qh.double(), k.double().transpose(-1, -2)) * _scale(q, scale)
    return torch.logsumexp(s.masked_fill(~seen, float("-inf")), dim=-1).float()


def _finish(o, seen):
    """o [B, H, Nq, dv] -> [B, Nq, H, dv], rows that see no key set to 0."""
    blind = ~seen.any(dim=-1, keepdim=True)  # [B, 1, Nq, 1]
    return torch.where(blind, torch.zeros((), dtype=o.dtype, device=o.device), o).transpose(1, 2)


def naive_decode(q, k_cache, v_cache, cache_seqlens, block_table=None, causal=False, scale=None):
    """Materialised decode in q's dtype (o only)."""
    qh, k, v, seen = _prepared(q, k_cache, v_cache, cache_seqlens, block_table, causal)
    g = qh.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    s = torch.matmul(qh, k.transpose(-1, -2)) * _scale(q, scale)
    p = torch.softmax(s.masked_fill(~seen, float("-inf")), dim=-1)
    return _finish(torch.matmul(p, v), seen)


def sdpa_decode(q, k_cache, v_cache, cache_seqlens, block_table=None, causal=False, scale=None):
    """SDPA on the gathered cache with the ragged (and causal) mask (o only)."""
    qh, k, v, seen = _prepared(q, k_cache, v_cache, cache_seqlens, block_table, causal)
    kw = {"enable_gqa": True} if k.shape[1] != qh.shape[1] else {}
    o = F.scaled_dot_product_attention(qh, k, v, attn_mask=seen, scale=scale, **kw)
    return _finish(o, seen)


@functools.cache
def _compiled_flex():
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


def flex_decode(q, k_cache, v_cache, cache_seqlens, block_table=None, causal=False, scale=None):
    """Compiled flex_attention on the gathered cache, its block mask from cache_seqlens."""
    from torch.nn.attention.flex_attention import create_block_mask

    qh, k, v, seen = _prepared(q, k_cache, v_cache, cache_seqlens, block_table, causal)
    lens = cache_seqlens.long()
    nq = qh.shape[2]

    def mask(b, h, q_idx, kv_idx):
        ok = kv_idx < lens[b]
        return ok & (kv_idx <= lens[b] - nq + q_idx) if causal else ok

    try:
        block_mask = create_block_mask(mask, qh.shape[0], None, nq, k.shape[2],
                                       device=str(q.device))
        o = _compiled_flex()(qh, k, v, block_mask=block_mask, scale=scale,
                             enable_gqa=k.shape[1] != qh.shape[1])
    except Exception as exc:  # torch.compile could not build this case
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise BackendUnavailable(f"torch.compile could not build flex_attention for this "
                                 f"decode case on {q.device.type}: {first[:200]}") from None
    return _finish(o, seen)


def with_lse(fn):
    """An accuracy callable from a peer's o-only op: (o, the stand-in LSE)."""

    @functools.wraps(fn)
    def both(q, k_cache, v_cache, cache_seqlens, block_table=None, causal=False, scale=None):
        o = fn(q, k_cache, v_cache, cache_seqlens, block_table, causal, scale)
        return o, decode_lse(q, k_cache, v_cache, cache_seqlens, block_table, causal, scale)

    return both
