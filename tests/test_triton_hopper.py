"""The Hopper variants of the forward (flashbench.kernels.triton_hopper), interpreted on CPU
tensors (compiled on a GPU): each against the float64 reference by the baseline rule and the
band rule, and bitwise against today's kernel on the same tiles (same recurrence, same
block order); the persistent grid over tile counts that do not divide its programs."""

import functools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import flashbench
from flashbench import reference as R
from flashbench.accuracy import error_stats, judge
from flashbench.kernels import configs, triton_forward, triton_hopper
from flashbench.kernels.launch import Config, planning
from flashbench.numerics import standard_model

TORCH = {"fp16": torch.float16, "bf16": torch.bfloat16}


def qkv(B, H, nq, nk, d, seed=0, dtype=torch.float16, device="cpu", hkv=None):
    g = torch.Generator().manual_seed(seed)
    hk = H if hkv is None else hkv
    return tuple(torch.randn(B, h, n, d, generator=g, dtype=torch.float64).to(device, dtype)
                 for h, n in ((H, nq), (hk, nk), (hk, nk)))


def cfg(bm, bn):
    return Config.of(num_warps=4, num_stages=2, BLOCK_M=bm, BLOCK_N=bn)


def np64(*ts):
    return tuple(t.detach().cpu().double().numpy() for t in ts)


@pytest.mark.parametrize("kernel", triton_hopper.VARIANTS)
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("shape,causal", [((1, 2, 129, 129, 64), True),
                                          ((2, 1, 100, 200, 32), False),
                                          ((1, 2, 200, 77, 16), True)])  # rows that see nothing
def test_variant_meets_baseline_and_band_rules(kernel, dtype, shape, causal, device):
    q, k, v = qkv(*shape, seed=1, dtype=TORCH[dtype], device=device)
    o, lse, _ = triton_hopper.forward(q, k, v, causal=causal, kernel=kernel,
                                      config=cfg(32, 64) if device == "cuda" else None,
                                      tiles=(32, 64))
    assert o.dtype == q.dtype and o.shape == q.shape and lse.shape == q.shape[:3]
    q64, k64, v64 = np64(q, k, v)
    ref = R.attention(q64, k64, v64, causal=causal)
    j = judge((o, lse), standard_model(q64, k64, v64, dtype, causal=causal), ref, dtype)
    assert j["o"]["verdict"].passed, j["o"]["verdict"]
    assert j["lse"]["verdict"].passed, j["lse"]["verdict"]
    band = flashbench.tolerance(dtype, k.shape[-2], causal=causal, nq=q.shape[-2])
    assert error_stats(o, ref[0])["max_abs"] <= band
    blind = np.isneginf(ref[1])
    assert np.all(o.float().cpu().numpy()[blind] == 0)
    assert np.all(np.isneginf(lse.cpu().numpy()[blind]))


@settings(max_examples=12, deadline=None)
@given(nq=st.integers(1, 70), nk=st.integers(1, 70), d=st.sampled_from([16, 32]),
       causal=st.booleans(), dtype=st.sampled_from(["fp16", "bf16"]),
       bm=st.sampled_from([16, 32]), bn=st.sampled_from([16, 32]), group=st.sampled_from([1, 2]),
       kernel=st.sampled_from(triton_hopper.VARIANTS), seed=st.integers(0, 2**16))
def test_property_variant_is_bitwise_todays_kernel(nq, nk, d, causal, dtype, bm, bn, group,
                                                   kernel, seed, device):
    """Same tiles, same (m, l) recurrence and block order: the same bits as triton_forward
    (the overlap variant reorders only when a block's QK^T is issued; the warp-specialised
    one masks every block, which changes no unmasked score)."""
    q, k, v = qkv(2, 2 * group, nq, nk, d, seed=seed, dtype=TORCH[dtype], device=device,
                  hkv=2)
    o, lse, _ = triton_hopper.forward(q, k, v, causal=causal, kernel=kernel,
                                      config=cfg(bm, bn) if device == "cuda" else None,
                                      tiles=(bm, bn))
    ro, rlse, _ = triton_forward.forward(q, k, v, causal=causal, config=cfg(bm, bn))
    assert torch.equal(o, ro)
    assert torch.equal(lse, rlse)


@functools.cache
def _todays_kernel(causal):
    """Today's kernel on the persistent-grid case: the same for every program count."""
    q, k, v = qkv(1, 5, 80, 80, 16, seed=3)
    return triton_forward.forward(q, k, v, causal=causal, config=cfg(16, 16))[:2]


@pytest.mark.parametrize("programs", [1, 2, 5, 64])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_persistent_grid_computes_every_tile_once(programs, causal, monkeypatch):
    """5 heads x 5 query blocks = 25 tiles over programs that do not divide them (and more
    programs than tiles): every output row written, equal to today's kernel."""
    monkeypatch.setattr(triton_hopper, "INTERPRETER_PROGRAMS", programs)
    q, k, v = qkv(1, 5, 80, 80, 16, seed=3)
    o, lse, _ = triton_hopper.forward(q, k, v, causal=causal, kernel="persistent",
                                      tiles=(16, 16))
    ro, rlse = _todays_kernel(causal)
    assert torch.equal(o, ro) and torch.equal(lse, rlse)


def test_a_tile_never_reads_or_writes_another_heads_rows():
    """Descriptors span [B*H*N, d]: a ragged tile's extra rows are the next head's. An inf
    in head 1's values past head 0's keys must not reach head 0, and head 0's last tile
    must not overwrite head 1's first rows."""
    q, k, v = qkv(1, 2, 40, 40, 16, seed=4)
    v[0, 1, :8] = float("inf")  # the rows a 64-key tile of head 0 reads past its 40 keys
    for kernel in triton_hopper.VARIANTS:
        o, lse, _ = triton_hopper.forward(q, k, v, kernel=kernel, tiles=(64, 64))
        assert torch.isfinite(o[0, 0]).all(), kernel
        ro, _, _ = triton_forward.forward(q, k, v, config=cfg(64, 64))
        assert torch.equal(o[0, 0], ro[0, 0]), kernel


def test_triton_fwd_forward_selects_a_variant_by_name():
    q, k, v = qkv(1, 2, 33, 47, 16, seed=5)
    got = triton_forward.forward(q, k, v, causal=True, kernel="overlap", config=cfg(16, 32))
    want = triton_hopper.forward(q, k, v, causal=True, kernel="overlap", tiles=(16, 32))
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    with pytest.raises(ValueError, match="takes no allow_tf32 or variant"):
        triton_forward.forward(q.float(), k.float(), v.float(), allow_tf32=True, kernel="tma")


@pytest.mark.parametrize("mutate,exc,match", [
    (lambda q, k, v: (q.float(), k.float(), v.float()), TypeError, "dtype torch.float32"),
    (lambda q, k, v: (q[..., :8], k[..., :8], v[..., :8]), ValueError, "head dim"),
    (lambda q, k, v: (q, k, v[..., :8].contiguous()), ValueError, "dv=8"),
])
def test_bad_inputs_raise(mutate, exc, match):
    q, k, v = mutate(*qkv(1, 2, 8, 8, 16))
    with pytest.raises(exc, match=match):
        triton_hopper.forward(q, k, v)


def test_unknown_kernel_and_config_raise():
    q, k, v = qkv(1, 1, 8, 8, 16)
    with pytest.raises(ValueError, match="kernel must be one of"):
        triton_hopper.forward(q, k, v, kernel="cutlass")
    with pytest.raises(ValueError, match="config must be None, 'fixed' or a Config"):
        triton_hopper.forward(q, k, v, config="best")


def test_kernel_names_are_plain_and_the_plan_counts_two_configs_each():
    """ptxas special-cases kernel names containing "cutlass": none of ours; each variant's
    autotune space is its two candidates (the compile budget of the GPU window)."""
    assert all("cutlass" not in kern.name for kern in triton_hopper.KERNELS.values())
    q = torch.empty(2, 16, 4096, 128, device="meta", dtype=torch.bfloat16)
    with planning() as plan:
        for kernel in triton_hopper.VARIANTS:
            for causal in (False, True):
                triton_hopper.forward(q, q, q, causal=causal, kernel=kernel)
    assert len(plan) == 4 * 2 * 2
    ws = {c.config for c in plan.compiles if c.kernel == "attn_fwd_ws"}
    assert ws == set(configs.variant_candidates(128, torch.bfloat16, "ws"))
    assert {c.kernel for c in plan.compiles} == {f"attn_fwd_{n}" for n in triton_hopper.VARIANTS}


def test_offline_sm90_compile_uses_tma_and_warp_specialises_the_ws_variant():
    """Compiled for sm_90 here (Triton's ptxas): the descriptors are TMA copies, both dots
    wgmma, nothing spills; attn_fwd_ws's key loop is warp-specialised (a producer and two
    consumer warpgroups: 12 warps from num_warps=4, registers split by setmaxnreg) and
    attn_fwd_tma's is not."""
    pytest.importorskip("triton.backends.nvidia")
    from flashbench.kernels.offline import compile_plan

    q = torch.empty(1, 2, 256, 64, device="meta", dtype=torch.bfloat16)
    with planning() as plan:
        for kernel in ("tma", "ws"):
            triton_hopper.forward(q, q, q, kernel=kernel, config=cfg(128, 64))
    tma, ws = compile_plan(plan, say=lambda msg: None)
    for r in (tma, ws):
        assert r.error is None, r.error
        assert r.tma_ops > 0 and r.wgmma_ops > 0 and r.mma_sync_ops == 0
        assert r.spill_bytes in (0, None)
    assert (tma.warps, tma.setmaxnreg) == (4, 0)
    assert ws.warps == 12 and ws.setmaxnreg > 0
