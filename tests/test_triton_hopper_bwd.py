"""The Hopper variant of the backward's dK/dV kernel (flashbench.kernels.triton_hopper_backward),
interpreted on CPU tensors: the gradient rule against float64, the same bits as today's
backward on the same tiles, no row of another head read, and its sm_90 compilation."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from flashbench import reference as R
from flashbench.accuracy import judge_gradient
from flashbench.kernels import triton_backward, triton_forward
from flashbench.kernels.launch import planning
from flashbench.numerics import standard_model_grad

TORCH = {"fp16": torch.float16, "bf16": torch.bfloat16}


def tensors(B, H, hkv, nq, nk, d, seed=0, dtype=torch.float16):
    g = torch.Generator().manual_seed(seed)
    q, k, v, do = (torch.randn(B, h, n, d, generator=g, dtype=torch.float64).to(dtype)
                   for h, n in ((H, nq), (hkv, nk), (hkv, nk), (H, nq)))
    return q, k, v, do


def grads(q, k, v, do, causal, kernel=None):
    o, lse, _ = triton_forward.forward(q, k, v, causal=causal)
    return triton_backward.backward(q, k, v, o, lse, do, causal=causal, kernel=kernel)


@pytest.fixture
def small_tiles(monkeypatch):
    monkeypatch.setattr(triton_backward, "INTERPRETER_BLOCK_M", 16)
    monkeypatch.setattr(triton_backward, "INTERPRETER_BLOCK_N", 32)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_tma_dkdv_meets_the_gradient_rule(dtype, causal, small_tiles):
    q, k, v, do = tensors(1, 4, 2, 70, 90, 32, seed=1, dtype=TORCH[dtype])
    got = grads(q, k, v, do, causal, kernel="tma")
    q64, k64, v64, do64 = (t.double().numpy() for t in (q, k, v, do))
    ke, ve = (np.repeat(t, 2, axis=1) for t in (k64, v64))
    ref = list(R.attention_grad(q64, ke, ve, do64, causal=causal))
    std = list(standard_model_grad(q64, ke, ve, do64, dtype, causal=causal))
    for i in (1, 2):  # the grouped heads' sums, as the kernel's dk, dv
        ref[i] = ref[i].reshape(1, 2, 2, 90, 32).sum(axis=2)
        std[i] = std[i].reshape(1, 2, 2, 90, 32).sum(axis=2)
    for name, g, s, r in zip(("dq", "dk", "dv"), got, std, ref, strict=True):
        verdict = judge_gradient(g, s, r, dtype)["verdict"]
        assert verdict.passed, (name, verdict)


@settings(max_examples=10, deadline=None)
@given(nq=st.integers(1, 60), nk=st.integers(1, 60), d=st.sampled_from([16, 32]),
       causal=st.booleans(), dtype=st.sampled_from(["fp16", "bf16"]),
       group=st.sampled_from([1, 2]), seed=st.integers(0, 2**16))
def test_property_tma_dkdv_is_bitwise_todays_backward(nq, nk, d, causal, dtype, group, seed):
    """Same tiles, same block order and rounding points: every block masked and rows past a
    head zeroed change no bit of dq, dk, dv."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(triton_backward, "INTERPRETER_BLOCK_M", 16)
        mp.setattr(triton_backward, "INTERPRETER_BLOCK_N", 32)
        q, k, v, do = tensors(2, 2 * group, 2, nq, nk, d, seed=seed, dtype=TORCH[dtype])
        o, lse, _ = triton_forward.forward(q, k, v, causal=causal)
        want = triton_backward.backward(q, k, v, o, lse, do, causal=causal)
        got = triton_backward.backward(q, k, v, o, lse, do, causal=causal, kernel="tma")
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a, b)


def test_a_query_tile_never_reads_another_heads_rows(small_tiles):
    """Q and dO descriptors span [B*H*Nq, d]: a tile past head 0's 40 rows reads head 1's;
    an inf there must not reach head 0's kv head (GQA off: head 0 owns kv head 0)."""
    q, k, v, do = tensors(1, 2, 2, 40, 40, 16, seed=2)
    o, lse, _ = triton_forward.forward(q, k, v)
    q2, do2 = q.clone(), do.clone()
    q2[0, 1, :8] = float("inf")
    do2[0, 1, :8] = float("inf")
    got = triton_backward.backward(q2, k, v, o, lse, do2, kernel="tma")
    want = triton_backward.backward(q, k, v, o, lse, do, kernel="tma")
    assert torch.equal(got[1][0, 0], want[1][0, 0]) and torch.equal(got[2][0, 0], want[2][0, 0])


def test_the_variant_refuses_what_it_does_not_do():
    q, k, v, do = tensors(1, 1, 1, 8, 8, 16)
    o, lse, _ = triton_forward.forward(q, k, v)
    for kw in ({"kernel": "ws"}, {"kernel": "tma", "window": (4, 0)},
               {"kernel": "tma", "softcap": 5.0}):
        with pytest.raises(ValueError, match="kernel must be None or 'tma'"):
            triton_backward.backward(q, k, v, o, lse, do, **kw)


def test_offline_sm90_compile_uses_tma_without_spills():
    pytest.importorskip("triton.backends.nvidia")
    from flashbench.kernels.offline import compile_plan

    q = torch.empty(1, 2, 256, 128, device="meta", dtype=torch.bfloat16)
    lse = torch.empty(1, 2, 256, device="meta", dtype=torch.float32)
    with planning() as plan:
        triton_backward.backward(q, q, q, q, lse, q, causal=True, kernel="tma")
    (r,) = [x for x in compile_plan(plan, say=lambda m: None) if "attn_bwd_dkdv_tma" in x.line]
    assert r.error is None, r.error
    assert r.tma_ops > 0 and r.wgmma_ops > 0 and r.mma_sync_ops == 0
    assert r.spill_bytes in (0, None)
