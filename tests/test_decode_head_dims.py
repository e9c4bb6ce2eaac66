"""Decode at the head dims real models use (issue 37): padded d, dv != d, and the absorbed
MLA form (DeepSeek's d = 576, dv = 512, one kv head, V = k_cache[..., :dv]) in the float64
reference, the precision models and the Triton decode kernel (interpreted on CPU: small)."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from flashbench.inputs.kvcache import make_decode, value_cache
from flashbench.kernels import triton_decode as TD
from flashbench.numerics import split_decode_model, standard_decode_model
from flashbench.reference import decode_attention, decode_partials


def torch_of(x, dtype, device):
    return None if x is None else torch.from_numpy(np.asarray(x)).to(device, dtype)


def n64(t):
    return t.detach().cpu().double().numpy()


@pytest.mark.parametrize("page", [None, 16])
def test_reference_absorbed_form_is_v_as_the_first_dv_columns(page):
    q, k, _, lens, table = make_decode(2, 8, 1, 2, 72, [20, 33], page_size=page, seed=2)
    o, lse = decode_attention(q, k, None, lens, table, causal=True, dv=64)
    want = decode_attention(q, k, k[..., :64].copy(), lens, table, causal=True)
    assert o.shape == (2, 2, 8, 64)
    np.testing.assert_array_equal(o, want[0])
    np.testing.assert_array_equal(lse, want[1])
    o_s, lse_s = decode_attention(q, k, None, lens, table, causal=True, dv=64, num_splits=3)
    np.testing.assert_allclose(o_s, o, rtol=0, atol=1e-13)
    parts = decode_partials(q, k, None, lens, table, num_splits=2, causal=True, dv=64)
    assert parts[0].shape == (2, 2, 8, 2, 64)
    for model in (split_decode_model, standard_decode_model):
        mo, ml = model(q, k, None, lens, table, dtype="bf16", causal=True, dv=64)
        assert mo.shape == (2, 2, 8, 64) and ml.shape == (2, 8, 2)


@pytest.mark.parametrize("v,dv,match", [
    (None, None, "needs dv"),
    (None, 72, "dv=72 must be below k_cache's head dim d=72"),
    ("v", 32, "dv=32 differs from v_cache's head dim 72"),
])
def test_value_cache_names_the_mismatch(v, dv, match):
    q, k, vc, lens, _ = make_decode(1, 2, 1, 1, 72, [5])
    with pytest.raises(ValueError, match=match):
        value_cache(k, vc if v else None, dv)
    with pytest.raises(ValueError, match=match):
        decode_attention(q, k, vc if v else None, lens, dv=dv)


@pytest.mark.parametrize("H,Hkv,d,dv,absorbed,page,splits,dtype", [
    (16, 1, 576, 512, True, 32, 3, "fp32"),  # MLA, paged, split and merged
    (80, 1, 576, 512, True, None, 1, "bf16"),  # 80 heads: two 64-row blocks per kv head
    (8, 2, 80, 80, False, None, 2, "fp32"),  # a padded width
    (4, 2, 192, 128, False, 64, 2, "bf16"),  # dv != d
])
def test_triton_decode_takes_the_new_head_dims(H, Hkv, d, dv, absorbed, page, splits, dtype,
                                               device):
    dt = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    q, k, v, lens, table = make_decode(2, H, Hkv, 1, d, [40, 75], page_size=page, seed=4,
                                       dv=dv)
    tq, tk = torch_of(q, dt, device), torch_of(k, dt, device)
    tv = None if absorbed else torch_of(v, dt, device)
    seqlens, tt = torch_of(lens, torch.int32, device), torch_of(table, torch.int32, device)
    o, lse, info = TD.decode_forward(tq, tk, tv, seqlens, tt, causal=True, num_splits=splits,
                                     dv=dv)
    assert o.shape == (2, 1, H, dv) and o.dtype == dt and info.num_splits == splits
    assert info.block_m == (64 if H > 64 else 16)
    q64, k64 = n64(tq), n64(tk)
    ref_o, ref_lse = decode_attention(q64, k64, None if absorbed else n64(tv), lens, table,
                                      causal=True, dv=dv)
    assert np.abs(n64(lse) - ref_lse).max() <= 1e-5 * np.abs(ref_lse).max()
    if dtype == "fp32":
        assert np.abs(n64(o) - ref_o).max() <= 1e-5
    else:  # the split-decode model with the kernel's blocks: within a few bf16 ulps
        model, _ = split_decode_model(q64, k64, None if absorbed else n64(tv), lens, table,
                                      "bf16", causal=True, num_splits=splits,
                                      block=info.config.kwargs["BLOCK_N"], dv=dv)
        assert np.abs(n64(o) - model.astype(np.float64)).max() <= 4 * 2**-8


@pytest.mark.parametrize("d,dv,v,match", [
    (576, 512, "v", "head dim d=576 exceeds 256.*absorbed MLA decode"),
    (84, 84, "v", "head dim d=84 is not a multiple of 8"),
    (576, 200, None, "d=576, dv=200: the absorbed decode takes .* tail d - dv a multiple"),
    (1088, 1024, None, "d=1088, dv=1024: the absorbed decode takes dv a multiple of 8 up to "
     "512"),
])
def test_triton_decode_bad_head_dims_one_line(d, dv, v, match):
    q, k, vc, lens, _ = make_decode(1, 2, 1, 1, d, [4], dv=dv)
    args = [torch.from_numpy(x).float() for x in (q, k)]
    with pytest.raises(ValueError, match=match) as err:
        TD.triton_decode(args[0], args[1], torch.from_numpy(vc).float() if v else None,
                         torch.tensor([4]), dv=dv)
    assert "\n" not in str(err.value)


def test_decode_backends_take_the_absorbed_form_as_a_view():
    """Every decode backend takes the absorbed MLA case given as v_cache = k_cache[..., :dv]
    (a view): the peers gather it, the Triton kernel sees the view and reads the columns
    once (its absorbed path); all equal the float64 absorbed decode to fp32 accuracy."""
    from flashbench.backends.decode import get_decode_backend

    q, k, _, lens, table = make_decode(2, 16, 1, 1, 576, [40, 75], page_size=16, seed=4,
                                       dv=512)
    ref = decode_attention(q, k, None, lens, table, causal=True, dv=512)[0]
    tq, tk = (torch.from_numpy(x).float() for x in (q, k))
    seqlens, tt = torch.from_numpy(lens).int(), torch.from_numpy(table).int()
    assert TD._leading_columns(tk, tk[..., :512]) and not TD._leading_columns(
        tk, tk[..., :512].clone())
    for name in ("torch-naive", "torch-sdpa", "triton"):
        out = get_decode_backend(name)(tq, tk, tk[..., :512], seqlens, tt, causal=True)
        o = out.o if hasattr(out, "o") else out[0]
        assert o.shape == (2, 1, 16, 512) and np.abs(n64(o) - ref).max() <= 1e-5, name


def test_the_gpu_session_plans_the_head_dims_and_the_absorbed_decode():
    """The quick GPU plan holds the forward at d = 80, 96, 192/128 (fixed config, one
    compilation each) and the absorbed MLA decode; mla_bytes counts each cache row once.
    In this process: the plan's lines are what ``--plan`` prints (its subprocess, the
    command end to end: test_gpu_bench.py)."""
    from tools.gpu import bench as gpu_bench
    from tools.gpu import decode as gpu_decode

    sigs = [x for x in gpu_bench.record_plan(True).lines() if x.startswith("signature ")]
    for dims in ("D_QK=80, D_V=80", "D_QK=96, D_V=96", "D_QK=192, D_V=128"):
        assert any("attn_fwd" in x and dims in x for x in sigs), dims
    assert any("decode_split" in x and "ABSORBED=True" in x and "D_QK=576" in x for x in sigs)
    assert gpu_decode.mla_bytes(16, 8192) == 2 * (16 * 8192 * 576 + 16 * 128 * (576 + 512))


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_decode_plan_shapes_are_those_of_the_drawn_inputs(data):
    """The decode plan lays out its check cases' tensors without drawing them
    (tools/gpu/decode.check_shapes): the shapes decode_inputs draws, for contiguous and
    paged caches, ragged lengths (0 included), GQA and a value head dim of its own."""
    from flashbench.measure.decode import DecodeCase, decode_inputs
    from tools.gpu import decode as gpu_decode

    B = data.draw(st.integers(1, 3))
    Hkv = data.draw(st.sampled_from([1, 2]))
    d = data.draw(st.sampled_from([8, 16]))
    case = DecodeCase(B, Hkv * data.draw(st.integers(1, 2)), Hkv, data.draw(st.integers(1, 2)),
                      d, tuple(data.draw(st.lists(st.integers(0, 40), min_size=B, max_size=B))),
                      data.draw(st.sampled_from([None, 4, 16])), causal=False,
                      dv=data.draw(st.sampled_from([d, 8])))
    drawn = tuple(None if x is None else tuple(x.shape) for x in decode_inputs(case))
    assert gpu_decode.check_shapes(case) == drawn


@pytest.mark.parametrize("spec, words", [
    ("2x8/2x1x100:100,37:p16", "head dim d=100 is not a multiple of 8: the Triton decode "
                               "takes d and dv multiples of 8 from 8 to 256"),
    ("2x8/2x1x320:100,37:p16", "head dim d=320 exceeds 256"),
    ("1x4/1x1x100/96:40:mla", "the absorbed decode takes dv a multiple of 8"),
    # a probe: ":p3" read the kernel's own ValueError as a FAIL of flashbench's kernel
    ("1x1x1x16:8:p3", "page_size=3: the Triton decode's key block of 64 keys"),
    ("1x1x1x160:8:p48", "page_size=48: the Triton decode's key block of 32 keys"),
    ("1x4/1x1x576/512:40:p24:mla", "page_size=24: the Triton decode's key block of 32")])
def test_the_triton_decodes_skip_names_its_own_rule(spec, words):
    """A probe: a plain d = 100 decode case read "head dim d=100 is not one it takes (8, 16,
    ..., 760, 768)", a list that takes the absorbed form's widths for the plain form's (its
    d up to 256): the Triton decode's skip is its own rule, in check and speed alike."""
    from flashbench.backends.decode import get_decode_backend
    from flashbench.measure.decode import DecodeCase

    triton = get_decode_backend("triton")
    case = DecodeCase.parse(spec)
    reason = triton.case_unavailable(case, "fp32")
    assert reason is not None and words in reason and "768" not in reason.split("(")[0], reason
    assert ", 760, 768" not in reason
    for taken in ("2x8/2x1x96:100,37:p16", "1x1x1x16:8:p128", "1x1x1x160:8:p8",
                  "1x4/1x1x576/512:40:p64:mla"):
        assert triton.case_unavailable(DecodeCase.parse(taken), "fp32") is None, taken
