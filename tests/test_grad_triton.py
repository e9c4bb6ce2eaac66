"""The Triton backward under the interpreter (no GPU here): autograd, accuracy, masks, GQA,
strides, repeatability, and the compile plan."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import flashbench
from flashbench import numerics as M
from flashbench import reference as R
from flashbench.accuracy import error_stats, gradient_rule
from flashbench.kernels import triton_backward
from flashbench.kernels.launch import planning

TORCH = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def inputs(B, H, Hkv, nq, nk, d, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)

    def draw(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)

    return draw(B, H, nq, d), draw(B, Hkv, nk, d), draw(B, Hkv, nk, d), draw(B, H, nq, d)


def triton_grads(q, k, v, do, causal, scale=None):
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    o, lse = flashbench.triton_attention(*leaves, causal=causal, scale=scale)
    assert o.requires_grad and not lse.requires_grad  # LSE is a non-differentiable output
    o.backward(do)
    return [t.grad for t in leaves]


def np64(*ts):
    return [t.detach().double().numpy() for t in ts]


@pytest.fixture(params=[(128, 128), (16, 32), (32, 16)], ids=["tiles128", "m16n32", "m32n16"])
def tiles(request, monkeypatch):
    """The default interpreter tiles, and small unequal ones that cross many block edges."""
    bm, bn = request.param
    monkeypatch.setattr(triton_backward, "INTERPRETER_BLOCK_M", bm)
    monkeypatch.setattr(triton_backward, "INTERPRETER_BLOCK_N", bn)
    return request.param


SHAPES = [  # B, H, Hkv, Nq, Nk, d
    (1, 1, 1, 1, 1, 16),
    (2, 3, 3, 17, 17, 16),
    (1, 2, 2, 129, 129, 64),
    (1, 2, 2, 17, 129, 32),  # Nq < Nk
    (2, 1, 1, 100, 40, 32),  # Nq > Nk: causal rows 0..59 see nothing
    (1, 4, 2, 70, 70, 128),  # grouped-query
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_fp32_gradients_match_fp64_within_1e_5(shape, causal, tiles):
    q, k, v, do = inputs(*shape)
    grads = triton_grads(q, k, v, do, causal)
    ref = R.attention_grad(*np64(q, k, v, do), causal=causal)
    for name, g, r, x in zip("qkv", grads, ref, (q, k, v), strict=True):
        assert g.dtype == torch.float32 and g.shape == x.shape
        st_ = error_stats(g, r)
        assert st_["nonfinite_mismatch"] == 0, name
        assert st_["max_abs"] <= 1e-5, (name, st_["max_abs"])
    nq, nk = shape[3], shape[4]
    if causal and nq > nk:  # rows that see no key: dq exactly 0
        assert torch.all(grads[0][:, :, : nq - nk] == 0)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("shape,causal", [((1, 2, 2, 129, 129, 64), True),
                                          ((2, 1, 1, 100, 300, 64), False),
                                          ((1, 4, 2, 200, 77, 16), True),
                                          ((1, 1, 1, 256, 256, 128), False)])
def test_low_precision_meets_the_gradient_rule(dtype, shape, causal):
    q, k, v, do = inputs(*shape, seed=1, dtype=TORCH[dtype])
    grads = triton_grads(q, k, v, do, causal)
    q64, k64, v64, do64 = np64(q, k, v, do)
    ref = R.attention_grad(q64, k64, v64, do64, causal=causal)
    std = M.standard_model_grad(q64, k64, v64, do64, dtype, causal=causal)
    for name, g, s, r in zip("qkv", grads, std, ref, strict=True):
        assert g.dtype == TORCH[dtype]
        verdict = gradient_rule(error_stats(g, r)["max_abs"], error_stats(s, r)["max_abs"], dtype)
        assert verdict.passed, (f"d{name}", verdict)


@settings(max_examples=8, deadline=None)
@given(nq=st.integers(1, 70), nk=st.integers(1, 70), hkv=st.sampled_from([1, 2]),
       group=st.sampled_from([1, 3]), causal=st.booleans(),
       d=st.sampled_from([16, 32]), seed=st.integers(0, 2**16))
def test_fp32_property_over_shapes(nq, nk, hkv, group, causal, d, seed):
    triton_backward.INTERPRETER_BLOCK_M, triton_backward.INTERPRETER_BLOCK_N = 16, 32
    try:
        q, k, v, do = inputs(1, hkv * group, hkv, nq, nk, d, seed=seed)
        grads = triton_grads(q, k, v, do, causal)
    finally:
        triton_backward.INTERPRETER_BLOCK_M = triton_backward.INTERPRETER_BLOCK_N = 128
    ref = R.attention_grad(*np64(q, k, v, do), causal=causal)
    for g, r in zip(grads, ref, strict=True):
        assert np.isfinite(g.numpy()).all()
        np.testing.assert_allclose(g.numpy(), r, rtol=0, atol=1e-5)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_grouped_query_equals_the_expanded_computation(dtype):
    q, k, v, do = inputs(1, 6, 2, 50, 45, 32, seed=3, dtype=TORCH[dtype])
    dq, dk, dv = triton_grads(q, k, v, do, causal=True)
    ek, ev = (t.repeat_interleave(3, dim=1) for t in (k, v))
    edq, edk, edv = triton_grads(q, ek, ev, do, causal=True)
    assert torch.equal(dq, edq)  # dq: the same arithmetic per query head
    # dk, dv: the grouped kernel sums the group's heads in fp32 and rounds once
    for g, e in ((dk, edk), (dv, edv)):
        summed = e.double().reshape(1, 2, 3, *e.shape[2:]).sum(dim=2)
        tol = 1e-6 if dtype == "fp32" else 3 * 2.0**-8 * summed.abs().max().item()
        np.testing.assert_allclose(g.double().numpy(), summed.numpy(), rtol=0, atol=tol)


def test_two_runs_give_identical_bits():
    """No atomics: every gradient element is summed by one program in one order."""
    q, k, v, do = inputs(2, 4, 2, 77, 93, 32, seed=5, dtype=torch.float16)
    first = triton_grads(q, k, v, do, causal=True)
    second = triton_grads(q, k, v, do, causal=True)
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a.view(torch.int16), b.view(torch.int16))


def test_any_strides_and_an_expanded_do(tiles):
    """Transposed layouts (BNHD storage viewed as BHND) and a dO with stride 0, as
    ``o.sum().backward()`` makes, give the same gradients as contiguous tensors."""
    q, k, v, _ = inputs(1, 2, 2, 40, 33, 16, seed=7)
    qt, kt, vt = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))
    assert not qt.is_contiguous()
    do = torch.ones(1, 1, 1, 1).expand(1, 2, 40, 16)
    a = triton_grads(qt, kt, vt, do, causal=True)
    b = triton_grads(q, k, v, do.contiguous(), causal=True)
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x, y)
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    flashbench.triton_attention(*leaves, causal=True)[0].sum().backward()
    for x, y in zip(b, (t.grad for t in leaves), strict=True):
        assert torch.equal(x, y)


@pytest.mark.parametrize("scale", [0.0, -0.3, 2.0])
def test_any_finite_scale(scale):
    q, k, v, do = inputs(1, 2, 2, 20, 30, 16, seed=9)
    grads = triton_grads(q, k, v, do, causal=True, scale=scale)
    ref = R.attention_grad(*np64(q, k, v, do), causal=True, scale=scale)
    for g, r in zip(grads, ref, strict=True):
        np.testing.assert_allclose(g.numpy(), r, rtol=0, atol=1e-5)
    if scale == 0.0:
        assert torch.all(grads[0] == 0) and torch.all(grads[1] == 0)


@pytest.mark.parametrize("d", [16, 32, 64, 128, 256])
def test_every_head_dim(d):
    q, k, v, do = inputs(1, 1, 1, 20, 24, d, seed=d)
    grads = triton_grads(q, k, v, do, causal=True)
    ref = R.attention_grad(*np64(q, k, v, do), causal=True)
    for g, r in zip(grads, ref, strict=True):
        np.testing.assert_allclose(g.numpy(), r, rtol=0, atol=1e-5)


def test_bad_do_is_refused():
    q, k, v, do = inputs(1, 1, 1, 8, 8, 16)
    o, lse, _ = flashbench.kernels.triton_forward.forward(q, k, v)
    with pytest.raises(ValueError, match="do must match o"):
        triton_backward.backward(q, k, v, o, lse, do[..., :4, :])
    with pytest.raises(ValueError, match="do must match o"):
        triton_backward.backward(q, k, v, o, lse, do.half())
    with pytest.raises(TypeError, match="do must be a torch.Tensor"):
        triton_backward.backward(q, k, v, o, lse, do.numpy())


def test_the_compile_plan_holds_the_backward_kernels():
    """A backward on meta tensors records its three kernels' compilations (fixed configs)."""
    from flashbench.measure.timing import pass_fn

    def meta(*shape):
        return torch.empty(*shape, device="meta", dtype=torch.bfloat16)

    with planning() as plan:
        pass_fn(flashbench.triton_attention, meta(2, 32, 4096, 128), meta(2, 8, 4096, 128),
                meta(2, 8, 4096, 128), True, "bwd", name="triton")()
    kernels = [c.kernel for c in plan.compiles]
    for name in ("attn_bwd_preprocess", "attn_bwd_dkdv", "attn_bwd_dq"):
        assert kernels.count(name) == 1, kernels
    assert {c.config for c in plan.compiles if c.kernel == "attn_bwd_dkdv"} == {
        triton_backward.backward_config("dkdv", 128, torch.bfloat16)}


def test_fixed_configs_fit_hoppers_shared_memory():
    from flashbench.kernels.configs import HOPPER_SMEM_BYTES

    for table, kernel in ((triton_backward.DKDV_CONFIGS, "dkdv"), (triton_backward.DQ_CONFIGS, "dq")):
        assert {d for _, d in table} == {16, 32, 64, 128, 256}
        for (width, d), cfg in table.items():
            assert triton_backward.smem_bytes(kernel, cfg, d, width) <= HOPPER_SMEM_BYTES


def test_interpreted_bf16_rounding_is_to_nearest_even():
    """The interpreter's fp32 -> bf16 cast truncates; the kernels' own rounding under the
    interpreter (``round_bf16``) matches torch's (and the GPU's) round-to-nearest-even."""
    import triton.language as tl

    from flashbench.kernels.launch import Config, TritonKernel

    def kernel(X, Y, TRUNC, N: tl.constexpr):
        offs = tl.arange(0, N)
        x = tl.load(X + offs)
        tl.store(Y + offs, triton_backward.round_bf16(x))
        tl.store(TRUNC + offs, x.to(tl.bfloat16).to(tl.float32))

    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, generator=g) * torch.logspace(-6, 6, 256)
    x[:4] = torch.tensor([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8 + 2**-12), float("inf")])
    y, trunc = torch.empty_like(x), torch.empty_like(x)
    TritonKernel(kernel, name="round_bf16").launch(lambda m: (1,), (x, y, trunc), dict(N=256),
                                                   device="cpu", config=Config.of())
    assert torch.equal(y, x.to(torch.bfloat16).float())
    assert not torch.equal(trunc, y)  # what the workaround is for
