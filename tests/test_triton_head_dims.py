"""The Triton kernels at the head dims real models use (issue 37): every d that is a multiple
of 8 up to 256 (padded to a compiled width with masked columns) and dv != d, forward,
backward and FP8, against the float64 reference and the precision models. Interpreted on
CPU (``device`` fixture: compiled on a GPU); problems kept small (N <= 96, few heads)."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from flashbench import reference as R
from flashbench.accuracy import error_stats
from flashbench.inputs.precision import get_precision
from flashbench.kernels import headdim, triton_backward, triton_forward
from flashbench.kernels import triton_fp8 as F
from flashbench.kernels.launch import Config
from flashbench.numerics import flash_model
from flashbench.numerics import fp8 as M

TORCH = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# widths that pad (8 -> 16, 24 -> 32, 40/56 -> 64, 80/96/112 -> 128, 160/192/224 -> 256)
PADDED = [8, 24, 40, 56, 80, 96, 112, 160, 192, 224]


def tiles(bm=32, bn=32):
    return Config.of(num_warps=4, num_stages=2, BLOCK_M=bm, BLOCK_N=bn)


def qkv(B, H, Hkv, nq, nk, d, dv, seed=0, dtype=torch.float32, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, h, n, w, generator=g, dtype=torch.float64).to(device, dtype)
                 for h, n, w in ((H, nq, d), (Hkv, nk, d), (Hkv, nk, dv)))


def np64(*ts):
    return tuple(t.detach().cpu().double().numpy() for t in ts)


def expanded(q, k, v):
    g = q.shape[1] // k.shape[1]
    return q, np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)


def test_widths_and_constexprs():
    assert headdim.HEAD_DIMS == tuple(range(8, 257, 8))
    assert [headdim.kernel_width(d) for d in (8, 16, 24, 80, 96, 128, 192, 256)] == [
        16, 16, 32, 128, 128, 128, 256, 256]
    assert headdim.kernel_width(8, least=32) == 32  # fp8 dots reduce over 32
    assert headdim.config_width(192, 128) == 256 and headdim.config_width(64, 128) == 128
    c = headdim.dim_constexprs(192, 128)
    assert (c["HEAD_DIM"], c["HEAD_DIM_V"], c["PAD_QK"], c["PAD_V"]) == (256, 128, True, False)
    assert not any(headdim.dim_constexprs(d)[k] for d in headdim.KERNEL_WIDTHS
                   for k in ("PAD_QK", "PAD_V"))  # compiled widths keep unmasked code


@settings(max_examples=12, deadline=None)
@given(d=st.sampled_from(PADDED), dv=st.sampled_from([None, 16, 24, 64, 128]),
       nq=st.integers(1, 70), nk=st.integers(1, 70), causal=st.booleans(),
       group=st.sampled_from([1, 2]), seed=st.integers(0, 99))
def test_property_fp32_forward_any_head_dim(d, dv, nq, nk, causal, group, seed, device):
    """fp32 at padded widths and dv != d: the float64 reference to fp32 accuracy; rows
    that see no key give O = 0 exactly; O has dv columns."""
    dv = d if dv is None else dv
    q, k, v = qkv(1, 2 * group, 2, nq, nk, d, dv, seed, device=device)
    o, lse, _ = triton_forward.forward(q, k, v, causal=causal, config=tiles())
    assert o.shape == (1, 2 * group, nq, dv) and lse.shape == (1, 2 * group, nq)
    ro, rl = R.attention(*expanded(*np64(q, k, v)), causal=causal)
    so, sl = error_stats(o, ro), error_stats(lse, rl)
    assert so["nonfinite_mismatch"] == 0 and so["max_abs"] <= 2e-5, so
    assert sl["nonfinite_mismatch"] == 0 and sl["max_abs"] <= 2e-5, sl
    assert np.all(o.cpu().numpy()[np.isneginf(rl)] == 0)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("d,dv", [(80, 80), (96, 96), (192, 128), (40, 40)])
def test_low_precision_forward_matches_the_flash_model(d, dv, dtype, device):
    q, k, v = qkv(1, 2, 1, 48, 80, d, dv, seed=3, dtype=TORCH[dtype], device=device)
    o, lse, used = triton_forward.forward(q, k, v, causal=True, config=tiles(32, 16))
    q64, k64, v64 = expanded(*np64(q, k, v))
    model = flash_model(q64, k64, v64, dtype, block=16, causal=True)
    assert error_stats(o, model[0])["max_abs"] <= 4 * get_precision(dtype).eps
    assert error_stats(lse, model[1])["max_abs"] <= 1e-5


@pytest.mark.parametrize("d,dv", [(80, 80), (192, 128), (24, 40)])
def test_padding_equals_explicit_zero_columns(d, dv, device):
    """A padded width computes what the compiled width computes on inputs padded with zero
    columns, bit for bit: the masked columns add exact zeros, so padding cannot change a
    correct kernel's error (docs/bands.md, "Head dims")."""
    q, k, v = qkv(1, 2, 2, 40, 56, d, dv, seed=5, dtype=torch.bfloat16, device=device)
    w, wv = headdim.kernel_width(d), headdim.kernel_width(dv)

    def pad(t, width):
        return torch.nn.functional.pad(t, (0, width - t.shape[-1]))

    o, lse, _ = triton_forward.forward(q, k, v, causal=True, config=tiles())
    o_w, lse_w, _ = triton_forward.forward(pad(q, w), pad(k, w), pad(v, wv), causal=True,
                                       scale=d ** -0.5, config=tiles())
    assert torch.equal(o, o_w[..., :dv]) and torch.equal(lse, lse_w)


@pytest.mark.parametrize("d,dv,dtype", [(80, 80, "fp32"), (192, 128, "fp32"),
                                        (96, 96, "bf16"), (24, 8, "fp32")])
def test_backward_any_head_dim_matches_the_reference(d, dv, dtype, device):
    q, k, v = qkv(1, 4, 2, 40, 72, d, dv, seed=7, dtype=TORCH[dtype], device=device)
    do = torch.randn(1, 4, 40, dv, generator=torch.Generator().manual_seed(8),
                     dtype=torch.float64).to(device, TORCH[dtype])
    o, lse, _ = triton_forward.forward(q, k, v, causal=True)
    grads = triton_backward.backward(q, k, v, o, lse, do, causal=True)
    ref = R.attention_grad(*np64(q, k, v, do), causal=True)
    bound = 4e-6 if dtype == "fp32" else 2e-2  # relative to the gradient's largest entry
    for g, r, x in zip(grads, ref, (q, k, v), strict=True):
        assert g.shape == x.shape and g.dtype == x.dtype
        assert error_stats(g, r)["max_abs"] <= bound * np.abs(r).max()


@pytest.mark.parametrize("d,dv", [(80, 80), (192, 128), (8, 8)])
def test_fp8_forward_any_head_dim_matches_the_fp8_model(d, dv, device):
    """The FP8 forward at padded widths (>= 32) and dv != d: the fp8 flash model with the
    same blocks to a small fraction of the model's own error."""
    q, k, v = qkv(1, 2, 2, 48, 64, d, dv, seed=9, device=device)
    o, lse = F.triton_attention_fp8(q, k, v, causal=True, config=tiles(32, 32))
    assert o.shape == (1, 2, 48, dv) and o.dtype == torch.bfloat16
    q64, k64, v64 = np64(q, k, v)
    model = M.flash_fp8(q64, k64, v64, "fp8", block=32, block_q=32, causal=True)
    ref = R.attention(q64, k64, v64, causal=True)
    got = o.float().cpu().numpy()
    own = error_stats(np.asarray(model[0], np.float32), ref[0])["rmse"]
    assert error_stats(got, np.asarray(model[0], np.float32))["rmse"] <= 0.1 * own + 2**-12
    assert error_stats(lse, model[1])["max_abs"] <= 1e-5 * np.abs(ref[1]).max()


@pytest.mark.parametrize("d,dv,match", [
    (81, 81, "head dim d=81 is not a multiple of 8"),
    (264, 264, "head dim d=264 exceeds 256.*absorbed MLA decode"),
    (128, 260, "head dim dv=260 exceeds 256"),
    (64, 12, "head dim dv=12 is not a multiple of 8"),
])
def test_bad_head_dims_say_which_in_one_line(d, dv, match):
    q, k, v = qkv(1, 1, 1, 4, 4, d, dv)
    for call in (lambda: triton_forward.forward(q, k, v),
                 lambda: F.triton_attention_fp8(q, k, v)):
        with pytest.raises(ValueError, match=match) as err:
            call()
        assert "\n" not in str(err.value)


def test_variants_and_packed_batches_take_the_new_head_dims(device):
    """A causal window with a softcap and sinks at d = 80, dv = 64, and a packed batch at
    192/128 with its backward: the float64 reference to fp32 accuracy."""
    from flashbench.kernels.triton_variants import triton_varlen_attention, variant_forward

    q, k, v = qkv(1, 2, 2, 40, 60, 80, 64, seed=11, device=device)
    o, _, _ = variant_forward(q, k, v, True, window=(16, 0), softcap=20.0, sinks=[0.5, -0.5])
    ro, _ = R.attention(*np64(q, k, v), causal=True, window=(16, 0), softcap=20.0,
                        sinks=np.array([0.5, -0.5]))
    assert o.shape == (1, 2, 40, 64) and error_stats(o, ro)["max_abs"] <= 2e-5
    cu = np.array([0, 17, 47, 56])
    g = torch.Generator().manual_seed(12)
    qp, kp = (torch.randn(56, 2, 192, generator=g).to(device).requires_grad_()
              for _ in range(2))
    vp = torch.randn(56, 2, 128, generator=g).to(device).requires_grad_()
    o, _ = triton_varlen_attention(qp, kp, vp, cu, cu, causal=True)
    o.sum().backward()
    ro = R.varlen_attention(*np64(qp, kp, vp), cu, cu, causal=True)[0]
    assert o.shape == (56, 2, 128) and error_stats(o, ro)["max_abs"] <= 2e-5
    assert qp.grad.shape == qp.shape and vp.grad.shape == vp.shape
