"""The default check's cases reach the edges a kernel gets wrong first. A red team
(2026-12-06): a kernel that aligned its causal mask top-left, and one that gave every batch
element batch 0's K and V, PASSed `flashbench check` with its six square, one-batch default
cases (`--only k:topleft k:batch0 --pass fwd`, exit 0)."""

from __future__ import annotations

import json
import textwrap

from flashbench.measure.forward import default_cases

KERNELS = textwrap.dedent("""
    import torch
    from torch.nn.functional import scaled_dot_product_attention as sdpa
    def topleft(q, k, v, causal=False, scale=None):  # torch's is_causal: top-left aligned
        return sdpa(q, k, v, is_causal=causal, scale=scale), None
    def batch0(q, k, v, causal=False, scale=None):
        k, v = k[:1].expand_as(k), v[:1].expand_as(v)
        nq, nk = q.shape[-2], k.shape[-2]
        mask = torch.ones(nq, nk, dtype=torch.bool).tril(nk - nq) if causal else None
        return sdpa(q, k, v, attn_mask=mask, scale=scale), None
""")


def test_a_default_case_has_batches_groups_unequal_lengths_and_ragged_blocks():
    edge = [c for c in default_cases() if c.shape.B > 1]
    assert edge, "no default case with more than one batch element"
    s = edge[0].shape
    assert edge[0].causal and s.kv_heads < s.H and s.Nq < s.Nk
    assert s.Nq % 64 and s.Nk % 64 and s.Nq % 16 and s.Nk % 16  # no block divides them


def test_the_edge_case_fails_a_top_left_mask_and_batch_zeros_keys(user_module, capsys):
    """`flashbench check` through the CLI's main in this process (the kernels in their
    worker processes, as ever; python and torch's import spared)."""
    from flashbench.cli import main

    user_module("k", KERNELS)
    s = next(c for c in default_cases() if c.shape.B > 1).shape
    rc = main(["check", "--json", "--shape", s.spec(), "--causal", "on", "--dtype", "fp32",
               "--pass", "fwd", "--only", "k:topleft", "k:batch0"])
    out, err = capsys.readouterr()
    assert rc == 1, out[-2000:] + err
    rows = {row["backend"]: row for row in json.loads(out)["backends"]}
    assert set(rows) == {"k:topleft", "k:batch0"}
    assert not rows["k:topleft"]["passed"] and not rows["k:batch0"]["passed"]
