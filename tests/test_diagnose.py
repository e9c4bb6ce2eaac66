"""A FAIL's cause found by trying it (flashbench.measure.diagnose): each plausible wrong
semantics, computed and rounded as a bf16 kernel would return it, is named; a correct
output or another defect names none. A probe (2026-12-07): a 1/sqrt(dv) scale at 192/128
in bf16 read "likely the O accumulator"."""

from __future__ import annotations

import math
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flashbench import numerics, reference
from flashbench.cli import main
from flashbench.inputs import Shape, make_qkv
from flashbench.measure.diagnose import dense_candidates, diagnose

BF16 = "bf16"


def _bf16(x):
    import ml_dtypes

    return np.asarray(x).astype(ml_dtypes.bfloat16).astype(np.float64)


def _case(shape: str, causal: bool, seed: int = 0):
    q, k, v = make_qkv(Shape.parse(shape), "normal", seed)
    kw = {"causal": causal}
    ref = reference.attention(q, k, v, **kw)
    std = numerics.standard_model(q, k, v, BF16, **kw)
    o_std = float(np.max(np.abs(std[0] - ref[0])))
    lse_std = float(np.max(np.abs(std[1] - ref[1])))
    return q, k, v, kw, ref, o_std, lse_std


def _wrong(name: str, q, k, v, kw):
    """(o, lse) of attention under the wrong semantics ``name``, rounded to bf16."""
    d, dv, nq, h, hkv = q.shape[-1], v.shape[-1], q.shape[-2], q.shape[-3], k.shape[-3]
    if name == "dv":
        out = reference.attention(q, k, v, **kw, scale=1 / math.sqrt(dv))
    elif name == "padded":
        out = reference.attention(q, k, v, **kw, scale=1 / math.sqrt(1 << (d - 1).bit_length()))
    elif name == "unscaled":
        out = reference.attention(q, k, v, **kw, scale=1.0)
    elif name == "top-left":
        out = reference.attention(q, k[..., :nq, :], v[..., :nq, :], **kw)
    elif name == "no mask":
        out = reference.attention(q, k, v, causal=False)
    elif name == "gqa":
        wrong = np.arange(h) % hkv
        out = reference.attention(q, k[..., wrong, :, :], v[..., wrong, :, :], **kw)
    elif name == "log2":
        o, lse = reference.attention(q, k, v, **kw)
        out = (o, lse / math.log(2))
    return _bf16(out[0]), _bf16(out[1])


NAMED = {"dv": "1/sqrt(dv) = 1/sqrt(128)", "padded": "d = 80 padded to 128",
         "unscaled": "no 1/sqrt(d) scale", "top-left": "aligned top-left",
         "no mask": "no causal mask", "gqa": "h % Hkv", "log2": "LSE in base 2"}
# two of them past the 256 query rows and one batch element the candidates are computed on
SHAPES = {"dv": "1x2x96x160x192/128", "padded": "1x4/2x96x160x80", "unscaled": "1x2x96x96x64",
          "top-left": "2x2x300x500x32", "no mask": "1x2x96x96x64", "gqa": "2x4/2x300x300x32",
          "log2": "1x2x96x96x64"}


@pytest.mark.parametrize("wrong", sorted(NAMED))
def test_each_wrong_semantics_is_named_and_a_correct_output_is_not(wrong):
    q, k, v, kw, ref, o_std, lse_std = _case(SHAPES[wrong], causal=True)
    said = diagnose(dense_candidates(q, k, v, kw), _wrong(wrong, q, k, v, kw), ref, o_std,
                     lse_std)
    assert said is not None and NAMED[wrong] in said, said
    right = (_bf16(ref[0]), _bf16(ref[1]))
    assert diagnose(dense_candidates(q, k, v, kw), right, ref, o_std, lse_std) is None


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10**6), nq=st.integers(16, 80), extra=st.integers(0, 64),
       d=st.sampled_from([32, 48, 64, 80]), causal=st.booleans())
def test_another_defect_is_named_as_none_of_them(seed, nq, extra, d, causal):
    """A kernel that halves one row, or stores S and P in bf16, matches none of the
    candidates: nothing is named (a wrong name would send its author astray)."""
    q, k, v, kw, ref, o_std, lse_std = _case(f"1x2x{nq}x{nq + extra}x{d}", causal, seed)
    halved = _bf16(ref[0]).copy()
    halved[0, 1, nq // 2] *= 0.5
    assert diagnose(dense_candidates(q, k, v, kw), (halved, _bf16(ref[1])), ref, o_std,
                    lse_std) is None
    # a precision loss: the materialised form, S and P stored in bf16
    coarse = numerics.standard_model(q, k, v, BF16, **kw)
    assert diagnose(dense_candidates(q, k, v, kw), coarse, ref, o_std, lse_std) is None


SCALE_DV = textwrap.dedent('''
    import torch

    def attn(q, k, v, causal=False, scale=None):
        s = (q.float() @ k.float().transpose(-1, -2)) * v.shape[-1] ** -0.5
        if causal:
            nq, nk = s.shape[-2:]
            s = s.masked_fill(torch.ones(nq, nk, dtype=torch.bool).triu(nk - nq + 1),
                              float("-inf"))
        return (torch.softmax(s, -1) @ v.float()).to(q.dtype)

    attn.flashbench_dv = True
''')


def test_check_names_the_scale_of_an_mla_prefill_kernel(user_module, capsys):
    """The probe's command: before, "band rule FAIL on O: likely the O accumulator"."""
    user_module("fbscaledv", SCALE_DV)
    rc = main(["check", "--shape", "1x2x256x192/128", "--dtype", "bf16", "--causal", "on",
               "--only", "fbscaledv:attn", "--pass", "fwd", "--quiet"])
    out = capsys.readouterr().out
    assert rc == 1, out
    assert "its O matches attention with a scale of 1/sqrt(dv) = 1/sqrt(128)" in out, out
    assert "likely the O accumulator" not in out, out


def test_a_decode_kernels_mla_scale_is_named():
    """The probe's MLA decode kernel scaling by 1/sqrt(512), not 1/sqrt(576), read "likely
    the O accumulator" at 15x the standard's error in bf16."""
    from flashbench.measure.decode import DecodeCase, case_reference, decode_inputs
    from flashbench.measure.diagnose import decode_candidates

    case = DecodeCase.parse("1x8/1x1x576/512:96:p16:mla")
    inputs = decode_inputs(case)
    ref = case_reference(case, inputs)
    q, k, v, lens, table = inputs
    wrong = reference.decode_attention(q, k, None, lens, table, causal=case.causal,
                                       dv=case.dv, scale=512 ** -0.5)
    std = numerics.standard_decode_model(*inputs, dtype=BF16, causal=case.causal, dv=case.dv)
    o_std = float(np.max(np.abs(std[0] - ref[0])))
    said = diagnose(decode_candidates(inputs, case.causal, case.dv, case.absorbed),
                    (_bf16(wrong[0]), None), ref, o_std)
    assert said is not None and "1/sqrt(dv) = 1/sqrt(512), not 1/sqrt(d) = 1/sqrt(576)" in said
    assert diagnose(decode_candidates(inputs, case.causal, case.dv, case.absorbed),
                    (_bf16(ref[0]), None), ref, o_std) is None


def test_a_decode_fail_in_one_sequence_alone_is_said_a_wrong_result_there():
    """The probe's kernel reading a wrong page of sequence 0 (40x the standard's error)
    read "likely the O accumulator"; a precision loss spreads over every sequence, each in
    proportion to the standard's error there, and is not called one."""
    from flashbench.measure.decode import worst_decode_sequence

    rng = np.random.default_rng(0)
    ref = rng.standard_normal((3, 2, 4, 16))
    std = ref + np.array([1e-3, 3e-3, 1e-2])[:, None, None, None] * rng.standard_normal(
        ref.shape)
    lossy = ref + 3 * (std - ref)  # 3x the standard's error in every sequence
    said = worst_decode_sequence(lossy, ref, std, [1000, 64, 1])
    assert said.startswith("worst in sequence 3 of 3 (index 2, 1 cached keys)"), said
    assert "wrong result" not in said
    paged = _bf16(ref).copy()
    paged[1] += 0.3  # sequence 1 read another page
    said = worst_decode_sequence(paged, ref, std, [1000, 64, 1])
    assert said.startswith("worst in sequence 2 of 3") and "a wrong result in that " \
        "sequence (its pages, its length), not a precision loss" in said, said
    # the longest sequence alone off may also be a loss growing with length (a review)
    longest = _bf16(ref).copy()
    longest[0] += 0.3
    said = worst_decode_sequence(longest, ref, std, [1000, 64, 1])
    assert "a wrong result in that sequence" in said and "or a loss growing with length" \
        in said, said
    assert worst_decode_sequence(paged[:1], ref[:1], std[:1], [1000]) is None
