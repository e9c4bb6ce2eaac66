"""The Triton kernel under the interpreter (no GPU here): accuracy, masks, strides, errors."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import flashbench
from flashbench import reference as R
from flashbench.accuracy import error_stats, judge
from flashbench.kernels import triton_fwd
from flashbench.numerics import flash_model, standard_model
from flashbench.precision import get_precision

TORCH = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def qkv(B, H, nq, nk, d, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, H, n, d, generator=g, dtype=torch.float64).to(dtype)
                 for n in (nq, nk, nk))


def ref_of(q, k, v, causal):
    return R.attention(*(t.double().numpy() for t in (q, k, v)), causal=causal)


@pytest.fixture(params=[128, 16], ids=["block128", "block16"])
def block(request, monkeypatch):
    """The default interpreter tile, and a small one that crosses many block edges."""
    monkeypatch.setattr(triton_fwd, "INTERPRETER_BLOCK", request.param)
    return request.param


SHAPES = [  # B, H, Nq, Nk, d
    (1, 1, 1, 1, 16),
    (2, 3, 17, 17, 16),
    (1, 2, 129, 129, 64),
    (1, 2, 17, 129, 64),  # Nq < Nk
    (2, 1, 129, 40, 32),  # Nq > Nk: causal rows 0..88 see nothing
    (1, 1, 70, 70, 128),
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_fp32_matches_fp64_reference(shape, causal, block):
    q, k, v = qkv(*shape)
    o, lse = flashbench.triton_attention(q, k, v, causal=causal)
    ro, rlse = ref_of(q, k, v, causal)
    assert o.dtype == torch.float32 and lse.dtype == torch.float32
    assert o.shape == q.shape and lse.shape == q.shape[:3]
    so, sl = error_stats(o, ro), error_stats(lse, rlse)
    assert so["nonfinite_mismatch"] == 0 and sl["nonfinite_mismatch"] == 0
    assert so["max_abs"] <= 1e-5 and sl["max_abs"] <= 1e-5
    blind = np.isneginf(rlse)
    assert np.all(o.numpy()[blind] == 0)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("shape,causal", [((1, 2, 129, 129, 64), True),
                                          ((2, 1, 100, 300, 64), False),
                                          ((1, 2, 200, 77, 16), True),
                                          ((1, 1, 256, 256, 128), False)])
def test_low_precision_meets_baseline_rule_and_flash_model(dtype, shape, causal, block):
    q, k, v = qkv(*shape, seed=1, dtype=TORCH[dtype])
    out = flashbench.triton_attention(q, k, v, causal=causal)
    assert out[0].dtype == TORCH[dtype]
    q64, k64, v64 = (t.double().numpy() for t in (q, k, v))
    ref = R.attention(q64, k64, v64, causal=causal)
    std = standard_model(q64, k64, v64, dtype, causal=causal)
    j = judge(out, std, ref, dtype)
    assert j["o"]["verdict"].passed, j["o"]["verdict"]
    assert j["lse"]["verdict"].passed, j["lse"]["verdict"]
    model = flash_model(q64, k64, v64, dtype, block=block, causal=causal)
    eps = get_precision(dtype).eps
    assert error_stats(out[0], model[0])["max_abs"] <= 4 * eps
    assert error_stats(out[1], model[1])["max_abs"] <= 1e-5


def test_non_contiguous_inputs_use_strides():
    base = torch.randn(1, 40, 2, 64)  # [B, N, H, d] viewed as [B, H, N, d]
    q = base.transpose(1, 2)
    k = torch.randn(1, 2, 64, 90).transpose(-1, -2)  # d-stride != 1
    v = torch.randn(1, 2, 90, 128)[..., ::2]  # every other element
    assert not (q.is_contiguous() or k.is_contiguous() or v.is_contiguous())
    o, lse = flashbench.triton_attention(q, k, v, causal=True)
    o2, lse2 = flashbench.triton_attention(q.contiguous(), k.contiguous(), v.contiguous(),
                                           causal=True)
    assert torch.equal(o, o2) and torch.equal(lse, lse2)
    ro, _ = ref_of(q, k, v, True)
    assert error_stats(o, ro)["max_abs"] <= 1e-5


def test_repeated_calls_are_bitwise_identical():
    q, k, v = qkv(2, 2, 65, 65, 32, dtype=torch.float16)
    a = flashbench.triton_attention(q, k, v, causal=True)
    b = flashbench.triton_attention(q, k, v, causal=True)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_scale_argument():
    q, k, v = qkv(1, 1, 20, 30, 16)
    o, lse = flashbench.triton_attention(q, k, v, scale=0.05)
    ro, rlse = R.attention(*(t.double().numpy() for t in (q, k, v)), scale=0.05)
    assert error_stats(o, ro)["max_abs"] <= 1e-5 and error_stats(lse, rlse)["max_abs"] <= 1e-5


@settings(max_examples=12)
@given(nq=st.integers(1, 70), nk=st.integers(1, 70), d=st.sampled_from([16, 32]),
       causal=st.booleans(), dtype=st.sampled_from(["fp32", "fp16", "bf16"]),
       seed=st.integers(0, 99))
def test_property_masks_and_tails(nq, nk, d, causal, dtype, seed):
    triton_fwd.INTERPRETER_BLOCK, saved = 16, triton_fwd.INTERPRETER_BLOCK
    try:
        q, k, v = qkv(1, 2, nq, nk, d, seed=seed, dtype=TORCH[dtype])
        o, lse = flashbench.triton_attention(q, k, v, causal=causal)
    finally:
        triton_fwd.INTERPRETER_BLOCK = saved
    ro, rlse = ref_of(q, k, v, causal)
    sl = error_stats(lse, rlse)
    assert sl["nonfinite_mismatch"] == 0 and sl["max_abs"] <= 1e-4
    assert error_stats(o, ro)["max_abs"] <= 8 * get_precision(dtype).eps


@pytest.mark.parametrize("mutate,exc,match", [
    (lambda q, k, v: (q.double(), k.double(), v.double()), TypeError, "float64"),
    (lambda q, k, v: (q, k.half(), v), TypeError, "share one dtype"),
    (lambda q, k, v: (q[0], k[0], v[0]), ValueError, r"4-D \[B, H, N, d\]"),
    (lambda q, k, v: (q[..., :24], k[..., :24], v[..., :24]), ValueError, "head dim d=24"),
    (lambda q, k, v: (q, k[..., :16], v), ValueError, "share head dim"),
    (lambda q, k, v: (q, k, v[:, :, :3]), ValueError, "share Nk"),
    (lambda q, k, v: (q, k, v[..., :16]), ValueError, "dv=16"),
    (lambda q, k, v: (q, k[:, :1], v[:, :1]), ValueError, "share B and H"),
    (lambda q, k, v: (q.numpy(), k, v), TypeError, "q must be a torch.Tensor"),
    (lambda q, k, v: (q.to("meta"), k.to("meta"), v.to("meta")), ValueError, "CPU tensors"),
])
def test_bad_inputs_raise(mutate, exc, match):
    q, k, v = qkv(1, 2, 8, 8, 32)
    with pytest.raises(exc, match=match):
        flashbench.triton_attention(*mutate(q, k, v))


def test_tf32_only_for_fp32():
    q, k, v = qkv(1, 1, 8, 8, 16, dtype=torch.float16)
    with pytest.raises(ValueError, match="allow_tf32"):
        flashbench.triton_attention(q, k, v, allow_tf32=True)


def test_nan_input_propagates_instead_of_looking_like_a_blind_row():
    q, k, v = qkv(1, 1, 8, 8, 16)
    q[0, 0, 3, 0] = float("nan")
    o, lse = flashbench.triton_attention(q, k, v)
    assert torch.isnan(o[0, 0, 3]).all() and torch.isnan(lse[0, 0, 3])
    assert torch.isfinite(o[0, 0, :3]).all()
    with np.errstate(all="ignore"):
        ro, rlse = ref_of(q, k, v, False)
    assert np.isnan(ro[0, 0, 3]).all() and np.isnan(rlse[0, 0, 3])
