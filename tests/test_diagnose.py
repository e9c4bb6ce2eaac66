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


def _explicit(q, k, v, visible, score=lambda s: s):
    """Attention written out: ``visible(i, j)`` the mask of query i and key j (bottom-right
    indices of the whole case), ``score`` the map of the scaled scores; rounded to bf16."""
    nq, nk = q.shape[-2], k.shape[-2]
    s = score(np.einsum("...qd,...kd->...qk", q, k) * q.shape[-1] ** -0.5)
    s = np.where(visible(np.arange(nq)[:, None], np.arange(nk)[None, :]), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return _bf16(p / p.sum(-1, keepdims=True) @ v)


def _tail_wrong(name, q, k, v, kw):
    nq, nk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    diag = nk - nq  # bottom-right: query i's last key is i + diag
    if name == "dropped, causal":
        return _explicit(q, k, v, lambda i, j: (j <= i + diag) & (j < nk // 64 * 64))
    if name == "dropped":
        return _explicit(q, k, v, lambda i, j: j < nk // 64 * 64)
    if name == "unmasked":  # zero-padded K and V to 256 keys, the padding unmasked
        pad = [(0, 0)] * (k.ndim - 2) + [(0, 256 - nk), (0, 0)]
        return _explicit(q, np.pad(k, pad), np.pad(v, pad), lambda i, j: j >= 0)
    if name.startswith("q.k block"):
        return _explicit(q[..., :64], k[..., :64], v, lambda i, j: j <= i + diag,
                         score=lambda s: s * (64 / d) ** 0.5)
    if name.startswith("O block"):
        o = _bf16(reference.attention(q, k, v, **kw)[0])
        o[..., 64:] = 0.0
        return o
    if name == "softcap before scale":
        return _explicit(q, k, v, lambda i, j: j >= 0,
                         score=lambda s: 5.0 * np.tanh(s * d ** 0.5 / 5.0) * d ** -0.5)
    if name == "window + 1":
        return _explicit(q, k, v, lambda i, j: (j <= i + diag) & (j >= i + diag - 33))
    left_out = {"no softcap": "softcap", "no sinks": "sinks", "no window": "window"}[name]
    return _bf16(reference.attention(q, k, v, **{x: y for x, y in kw.items()
                                                 if x != left_out})[0])


def _planted(shape: str, kw: dict, dtype: str, seed: int, planter, wrong: str):
    """(what diagnose says of ``planter(wrong, q, k, v, kw)``'s O, (q, k, v), the float64
    (o, lse), the same-dtype standard's (o, lse), its max O error)."""
    q, k, v = make_qkv(Shape.parse(shape), "normal", seed)
    ref = reference.attention(q, k, v, **kw)
    std = numerics.standard_model(q, k, v, dtype, **kw)
    o_std = float(np.max(np.abs(std[0] - ref[0])))
    said = diagnose(dense_candidates(q, k, v, kw), (planter(wrong, q, k, v, kw), None), ref,
                    o_std)
    return said, (q, k, v), ref, std, o_std


SINKS = np.array([0.5, 2.0])
TAILS = {  # name: (shape, keywords, what diagnose says)
    "dropped, causal": ("1x2x100x300x64", {"causal": True}, "keys 256 to 299 of Nk = 300 "
                        "left out (a loop over key blocks of 64 or 128"),
    "dropped": ("1x2x96x200x64", {"causal": False}, "keys 192 to 199 of Nk = 200 left out"),
    "unmasked": ("1x2x96x200x64", {"causal": False}, "keys past Nk = 200 left unmasked up "
                 "to 256 (the last block of 64 or 128 keys)"),
    "q.k block": ("1x2x96x160x80", {"causal": True}, "summed over the first 64 of d = 80"),
    "O block": ("1x2x96x160x96", {"causal": True}, "O's columns past the first 64 of dv = 96"),
    # a probe: 64 of 192 columns (only 128, the largest block, was tried) and of a
    # power-of-two d (no block tried) read "likely the O accumulator" in bf16
    "q.k block of 192": ("1x2x96x160x192/128", {"causal": True},
                         "summed over the first 64 of d = 192"),
    "q.k block of 128": ("1x2x96x160x128", {"causal": True},
                         "summed over the first 64 of d = 128"),
    "O block of 128": ("1x2x96x160x128", {"causal": True},
                       "O's columns past the first 64 of dv = 128"),
    "no softcap": ("1x2x96x160x64", {"causal": False, "softcap": 5.0}, "no softcap"),
    "softcap before scale": ("1x2x96x160x64", {"causal": False, "softcap": 5.0},
                             "the softcap applied before the 1/sqrt(d) scale"),
    "no sinks": ("1x2x96x160x64", {"causal": True, "sinks": SINKS}, "the sinks left out"),
    "no window": ("1x2x96x160x64", {"causal": True, "window": (32, 0)}, "no sliding window"),
    "window + 1": ("1x2x96x160x64", {"causal": True, "window": (32, 0)},
                   "a window of (33, 0), not (32, 0): one key more on the left"),
}


@pytest.mark.parametrize("wrong", sorted(TAILS))
def test_a_partial_block_a_head_dim_block_or_a_variant_gone_wrong_is_named(wrong):
    """Each planted bug written out by hand (an explicit mask or map of the scores), in
    bf16: the tail of a partial key block dropped or unmasked, q.k or O cut to a head-dim
    block of 64, the variant left out, a softcap before the scale, a window one key wide."""
    shape, kw, words = TAILS[wrong]
    said, (q, k, v), ref, std, o_std = _planted(shape, kw, BF16, 3, _tail_wrong, wrong)
    assert said is not None and words in said, said
    assert diagnose(dense_candidates(q, k, v, kw), (_bf16(ref[0]), None), ref, o_std) is None
    # the standard model in bf16 (a precision loss, no wrong semantics) names none either
    assert diagnose(dense_candidates(q, k, v, kw), std, ref, o_std) is None


def test_a_decode_kernels_head_dim_block_is_named():
    """A probe: a decode kernel summing q.k over 64 of d = 80 columns FAILed with no cause
    named, where the forward check names it (decode tried no head-dim block)."""
    from flashbench.measure.decode import DecodeCase, case_reference, decode_inputs
    from flashbench.measure.seqdiagnose import decode_candidates

    case = DecodeCase.parse("2x8/2x4x80:100,37:p16")
    inputs = decode_inputs(case)
    ref = case_reference(case, inputs)
    q, k, v, lens, table = inputs
    wrong = reference.decode_attention(q[..., :64], k[..., :64], v, lens, table,
                                       causal=case.causal, scale=80 ** -0.5)
    std = numerics.standard_decode_model(*inputs, dtype=BF16, causal=case.causal, dv=case.dv)
    o_std = float(np.max(np.abs(std[0] - ref[0])))
    candidates = decode_candidates(inputs, case.causal, case.dv, case.absorbed)
    said = diagnose(candidates, (_bf16(wrong[0]), None), ref, o_std)
    assert said is not None and "scores q.k summed over the first 64 of d = 80" in said, said
    assert diagnose(candidates, std, ref, o_std) is None


def test_a_decode_kernel_that_drops_each_sequences_partial_block_is_named():
    from flashbench.measure.decode import DecodeCase, case_reference, decode_inputs
    from flashbench.measure.seqdiagnose import decode_candidates

    case = DecodeCase.parse("3x4x1x64:300,77,150:p16")
    inputs = decode_inputs(case)
    ref = case_reference(case, inputs)
    q, k, v, lens, table = inputs
    assert (np.asarray(lens) % 32).any(), lens  # a partial block to drop
    wrong = reference.decode_attention(q, k, v, np.asarray(lens) // 32 * 32, table)
    std = numerics.standard_decode_model(*inputs, dtype=BF16, causal=case.causal, dv=case.dv)
    o_std = float(np.max(np.abs(std[0] - ref[0])))
    said = diagnose(decode_candidates(inputs, case.causal, case.dv, case.absorbed),
                    (_bf16(wrong[0]), None), ref, o_std)
    assert said is not None and "each sequence's last keys left out (12 of 300 in sequence " \
        "0, 13 of 77 in sequence 1, 22 of 150 in sequence 2: a loop over key blocks of 32 " \
        "that ends one block early)" in said, said
    assert diagnose(decode_candidates(inputs, case.causal, case.dv, case.absorbed),
                    (_bf16(ref[0]), None), ref, o_std) is None


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
    from flashbench.measure.seqdiagnose import decode_candidates

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
    # lengths alike: no sequence is "the longest" (a probe read that at 100,100,100)
    said = worst_decode_sequence(longest, ref, std, [100, 100, 100])
    assert "not a precision loss" in said and "the longest sequence" not in said, said
    # beside an empty sequence (no keys, no error) nothing is said "alone"
    empty = ref.copy()
    empty[0] += 0.3
    empty[1:] = ref[1:]
    said = worst_decode_sequence(empty[:2], ref[:2], std[:2], [77, 0])
    assert said is not None and "wrong result" not in said, said


def _packed(lengths_q, lengths_k, h=2, d=64, seed=0):
    """A packed batch [total, H, d] and its offsets, drawn per row."""
    rng = np.random.default_rng(seed)
    cu, cu_k = (np.concatenate([[0], np.cumsum(x)]) for x in (lengths_q, lengths_k))
    q, k, v = (rng.standard_normal((n, h, d)) for n in (cu[-1], cu_k[-1], cu_k[-1]))
    return q, k, v, cu, cu_k


VARLEN = {  # name: (query lengths, key lengths, causal, what diagnose says)
    "one sequence": ((70, 100, 40), (70, 100, 40), True,
                     "the packed batch attended as one sequence"),
    "offsets of q": ((70, 100, 40), (90, 130, 60), False,
                     "the queries' offsets (cu_seqlens_q) used for the keys too"),
    "top-left": ((70, 100, 40), (90, 130, 60), True, "aligned top-left in each sequence"),
    "tail": ((70, 100, 40), (90, 130, 60), False, "each sequence's last keys left out (26 "
             "of 90 in sequence 0, 2 of 130 in sequence 1, 28 of 60 in sequence 2: a loop "
             "over key blocks of 32 that ends one block early)"),
    "dv scale": ((70, 100, 40), (70, 100, 40), True, "1/sqrt(dv) = 1/sqrt(64)"),
}


@pytest.mark.parametrize("wrong", sorted(VARLEN))
def test_a_packed_kernels_wrong_semantics_is_named(wrong):
    """A packed batch's own mistakes (the pack as one sequence, the queries' offsets for
    the keys) and the dense ones per sequence, each written out with an explicit mask."""
    from flashbench.measure.seqdiagnose import varlen_candidates
    from flashbench.reference.varlen import per_sequence

    lengths_q, lengths_k, causal, words = VARLEN[wrong]
    q, k, v, cu, cu_k = _packed(lengths_q, lengths_k, d=64 if wrong != "dv scale" else 96)
    if wrong == "dv scale":
        v = v[..., :64].copy()
    kw = {"causal": causal}
    ref = reference.varlen_attention(q, k, v, cu, cu_k, **kw)
    std = per_sequence(numerics.standard_model, q, k, v, cu, cu_k, dtype=BF16, **kw)
    o_std = float(np.max(np.abs(std[0] - ref[0])))

    def each(fn, cq=cu, ck=cu_k):  # fn(q_b, k_b, v_b) [n, H, d] -> o_b, sequence by sequence
        o = np.zeros((q.shape[0], q.shape[1], v.shape[-1]))
        for a, b, c, e in zip(cq, cq[1:], ck, ck[1:], strict=False):
            o[a:b] = fn(q[a:b], k[c:e], v[c:e])
        return _bf16(o)

    def explicit(qb, kb, vb, visible, scale=None):
        s = np.einsum("qhd,khd->hqk", qb, kb) * (scale or qb.shape[-1] ** -0.5)
        i, j = np.arange(len(qb))[:, None], np.arange(len(kb))[None, :]
        s = np.where(visible(i, j, len(qb), len(kb)), s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        return np.einsum("hqk,khd->qhd", p / p.sum(-1, keepdims=True), vb)

    bottom_right = (lambda i, j, n, m: j <= i + m - n) if causal else (lambda i, j, n, m: j >= 0)
    if wrong == "one sequence":
        out = _bf16(explicit(q, k, v, bottom_right))
    elif wrong == "offsets of q":
        out = each(lambda qb, kb, vb: explicit(qb, kb, vb, bottom_right), ck=cu)
    elif wrong == "top-left":
        out = each(lambda qb, kb, vb: explicit(qb, kb, vb, lambda i, j, n, m: j <= i))
    elif wrong == "tail":
        out = each(lambda qb, kb, vb: explicit(qb, kb, vb,
                                                lambda i, j, n, m: j < m // 32 * 32))
    else:
        out = each(lambda qb, kb, vb: explicit(qb, kb, vb, bottom_right, scale=64 ** -0.5))
    said = diagnose(varlen_candidates(q, k, v, cu, cu_k, kw), (out, None), ref, o_std)
    assert said is not None and words in said, said
    for right in ((_bf16(ref[0]), None), std):
        assert diagnose(varlen_candidates(q, k, v, cu, cu_k, kw), right, ref, o_std) is None


def _probe_wrong(name, q, k, v, kw):
    """The 2026-12-07 probe's kernels, written out (bf16)."""
    nq, nk = q.shape[-2], k.shape[-2]
    diag = nk - nq
    if name == "keys to Nq":  # the key loop bounded by Nq, the bottom-right mask kept
        return _explicit(q, k, v, lambda i, j: (j < nq) & ((j <= i + diag) if kw["causal"]
                                                            else (j >= 0)))
    if name == "diagonal + 1, Nq = 2":
        return _explicit(q, k, v, lambda i, j: j <= i + diag + 1)
    if name == "strict diagonal, Nq = 1":
        return _explicit(q, k, v, lambda i, j: j < i + diag)
    if name == "top-left, Nq > Nk":
        return _explicit(q, k, v, lambda i, j: j <= i)
    if name == "window top-left":
        return _explicit(q, k, v, lambda i, j: (j <= i) & (j >= i - 32))
    if name == "sinks left out, past 256 rows":
        return _bf16(reference.attention(q, k, v, causal=True)[0])
    if name == "GQA map and scores in bf16":  # fp32: the map, and S rounded to bf16
        wrong = np.arange(q.shape[-3]) % k.shape[-3]
        s = _bf16(np.einsum("...qd,...kd->...qk", q, k[..., wrong, :, :]) * q.shape[-1] ** -0.5)
        s = np.where(np.arange(nk)[None, :] <= np.arange(nq)[:, None] + diag, s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        return (p / p.sum(-1, keepdims=True) @ v[..., wrong, :, :]).astype(np.float32)
    raise AssertionError(name)


PROBE = {  # name: (shape, keywords, dtype, every part of what diagnose says)
    "keys to Nq": ("1x2x256x300x64", {"causal": True}, BF16, [
        "keys 256 to 299 of Nk = 300 left out (a loop over key blocks of 64 or 128 that ends "
        "one block early, or a key loop bounded by the queries' length Nq = 256)"]),
    "diagonal + 1, Nq = 2": ("1x2x2x300x64", {"causal": True}, BF16, [
        "no causal mask, or (the same here) the causal diagonal one key late"]),
    "strict diagonal, Nq = 1": ("1x2x1x257x64", {"causal": True}, BF16, [
        "the causal diagonal one key early", "or (the same here) key 256 of Nk = 257 left "
        "out (a loop over key blocks of 16 or 32 or 64 or 128 that ends one block early, or "
        "a key count one short)"]),
    "top-left, Nq > Nk": ("1x2x300x100x64", {"causal": True}, BF16, [
        "a causal mask aligned top-left (query i sees keys up to i), not bottom-right (up to "
        "i - (Nq - Nk) = i - 200"]),
    "window top-left": ("1x2x100x300x64", {"causal": True, "window": (32, 0)}, BF16, [
        "a causal mask aligned top-left"]),
    "sinks left out, past 256 rows": ("1x2x300x64", {"causal": True, "sinks": SINKS}, BF16,
                                      ["the sinks left out"]),
    "GQA map and scores in bf16": ("1x4/2x256x64", {"causal": True}, "fp32", [
        "its O is nearest attention with grouped-query heads mapped h % Hkv", "a second "
        "defect"]),
}


@pytest.mark.parametrize("wrong", sorted(PROBE))
def test_the_probes_kernels_are_named_for_what_they_do(wrong):
    """A probe (2026-12-07): a key loop bounded by Nq read "a loop that ends one block
    early"; a diagonal one key late at Nq = 2 read "no causal mask" alone; one key short,
    a block bug; top-left masks at Nq > Nk or with a window and sinks left out past the
    256 rows tried were not named; a second defect beside a GQA map was hidden."""
    shape, kw, dtype, parts = PROBE[wrong]
    said = _planted(shape, kw, dtype, 5, _probe_wrong, wrong)[0]
    assert said is not None and all(p in said for p in parts), said
    if not any("second defect" in p for p in parts):
        assert "second defect" not in said, said


def test_sinks_left_out_of_the_lse_alone_are_named():
    q, k, v = make_qkv(Shape.parse("1x2x128x64"), "normal", 1)
    kw = {"causal": True, "sinks": SINKS}
    ref = reference.attention(q, k, v, **kw)
    std = numerics.standard_model(q, k, v, BF16, **kw)
    o_std, lse_std = (float(np.max(np.abs(a - b))) for a, b in zip(std, ref, strict=True))
    lse = reference.attention(q, k, v, causal=True)[1]  # its O right, its LSE sinkless
    said = diagnose(dense_candidates(q, k, v, kw), (_bf16(ref[0]) + 0.05, lse), ref, o_std,
                    lse_std)
    assert said is not None and "its LSE matches the true LSE without the sink term" in said


DECODE_WRONG = {  # name: (case, what the kernel does to the reference's call, words)
    "h % Hkv": ("2x8/2x1x64:300,77:p16", "hmod", "grouped-query heads mapped h % Hkv"),
    "no cache offset": ("2x4x4x64:300,77:p16", "offset", "a causal mask without the cache's "
                        "offset (new token i sees keys up to i, not up to cache_seqlens - 4 "
                        "+ i)"),
    "read past the length": ("2x4x1x64:300,77", "unmasked", "keys past each sequence's "
                             "length read on to the end of its last block of"),
    "one short": ("3x4x1x64:257,129,17:p16", "short", "each sequence's last keys left out (1 "
                  "of 257 in sequence 0, 1 of 129 in sequence 1, 1 of 17 in sequence 2: a loop "
                  "over key blocks of 16 that ends one block early, or a key count one short "
                  "(cache_seqlens - 1, or a causal diagonal one key early))"),
}


@pytest.mark.parametrize("wrong", sorted(DECODE_WRONG))
def test_a_decode_kernels_map_offset_and_length_bugs_are_named(wrong):
    from flashbench.measure.decode import DecodeCase, case_reference, decode_inputs
    from flashbench.measure.seqdiagnose import decode_candidates

    spec, how, words = DECODE_WRONG[wrong]
    case = DecodeCase.parse(spec)
    inputs = decode_inputs(case)
    ref = case_reference(case, inputs)
    q, k, v, lens, table = inputs
    lens = np.asarray(lens)
    if how == "hmod":
        h = np.arange(q.shape[2]) % k.shape[-2]
        k, v = k[..., h, :], v[..., h, :]
    elif how == "offset":
        lens = np.full_like(lens, q.shape[1])
    elif how == "unmasked":  # a contiguous cache's stale entries up to a block of 64
        lens = np.minimum(-(-lens // 64) * 64, k.shape[1])
    else:
        lens = lens - 1
    wrong_o = reference.decode_attention(q, k, v, lens, table, causal=case.causal)[0]
    std = numerics.standard_decode_model(*inputs, dtype=BF16, causal=case.causal, dv=case.dv)
    o_std = float(np.max(np.abs(std[0] - ref[0])))
    said = diagnose(decode_candidates(inputs, case.causal, case.dv, case.absorbed),
                    (_bf16(wrong_o), None), ref, o_std)
    assert said is not None and words in said, said


def test_a_packed_kernel_reading_into_the_next_sequence_is_named():
    from flashbench.measure.seqdiagnose import varlen_candidates
    from flashbench.reference.varlen import per_sequence

    q, k, v, cu, cu_k = _packed((30, 17, 25), (45, 17, 9), seed=2)
    kw = {"causal": False}
    ref = reference.varlen_attention(q, k, v, cu, cu_k, **kw)
    std = per_sequence(numerics.standard_model, q, k, v, cu, cu_k, dtype="fp32", **kw)
    o_std = float(np.max(np.abs(std[0] - ref[0])))
    out = np.zeros_like(ref[0])
    for a, b, c, n in zip(cu, cu[1:], cu_k, np.diff(cu_k), strict=False):
        stop = min(c + -(-n // 16) * 16, k.shape[0])  # on to its block of 16's end
        o = reference.attention(*(x.transpose(1, 0, 2) for x in (q[a:b], k[c:stop],
                                                                  v[c:stop])))[0]
        out[a:b] = o.transpose(1, 0, 2)
    said = diagnose(varlen_candidates(q, k, v, cu, cu_k, kw), (out.astype(np.float32), None),
                    ref, o_std)
    assert said is not None and "each sequence's keys read on to the end of its last block " \
        "of 16 (no length mask: the next sequence's keys in its softmax)" in said, said


def test_a_window_side_read_unbounded_is_named_so_and_an_int32_side_is_no_crash():
    """A review (2026-12-07): a right bound of 0 read as -1 (no bound) was named "a window of
    (8, -1), not (8, 0): one key fewer on the right", the opposite; a side at int32's
    largest ended the check (Variant refuses one more)."""
    q, k, v = make_qkv(Shape.parse("1x2x96x160x64"), "normal", 4)
    kw = {"causal": False, "window": (8, 0)}
    ref = reference.attention(q, k, v, **kw)
    std = numerics.standard_model(q, k, v, BF16, **kw)
    o_std = float(np.max(np.abs(std[0] - ref[0])))
    wrong = _bf16(reference.attention(q, k, v, causal=False, window=(8, -1))[0])
    said = diagnose(dense_candidates(q, k, v, kw), (wrong, None), ref, o_std)
    assert said is not None and "the window's right bound left out (unbounded), not 0" in said
    assert "one key fewer" not in said, said
    kw = {"causal": False, "window": (2**31 - 1, 4)}
    ref = reference.attention(q, k, v, **kw)
    off = _bf16(ref[0]) + 0.1
    assert diagnose(dense_candidates(q, k, v, kw), (off, None), ref, o_std) is None


def test_offsets_below_the_diagonal_are_written_with_their_sign():
    q, k, v = make_qkv(Shape.parse("1x2x300x100x64"), "normal", 2)
    words = [w for w, *_ in dense_candidates(q, k, v, {"causal": True})]
    late = next(w for w in words if "one key late" in w)
    assert "= i - 199)" in late and "+ -" not in " ".join(words), words


def test_a_packed_top_left_mask_is_named_where_sequences_have_more_queries_than_keys():
    from flashbench.measure.seqdiagnose import varlen_candidates
    from flashbench.reference.varlen import per_sequence

    q, k, v, cu, cu_k = _packed((40, 90), (90, 40), seed=6)
    kw = {"causal": True}
    ref = reference.varlen_attention(q, k, v, cu, cu_k, **kw)
    std = per_sequence(numerics.standard_model, q, k, v, cu, cu_k, dtype=BF16, **kw)
    o_std = float(np.max(np.abs(std[0] - ref[0])))
    out = np.zeros_like(ref[0])
    for a, b, c, e in zip(cu, cu[1:], cu_k, cu_k[1:], strict=False):
        n, m = b - a, e - c  # query i sees keys 0..i, written out
        s = np.einsum("qhd,khd->hqk", q[a:b], k[c:e]) * q.shape[-1] ** -0.5
        s = np.where(np.arange(m)[None, :] <= np.arange(n)[:, None], s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        out[a:b] = np.einsum("hqk,khd->qhd", p / p.sum(-1, keepdims=True), v[c:e])
    said = diagnose(varlen_candidates(q, k, v, cu, cu_k, kw), (_bf16(out), None), ref, o_std)
    assert said is not None and "aligned top-left in each sequence" in said, said


@pytest.mark.parametrize("scale, words", [(1.0, "no 1/sqrt(d) scale (a scale of 1)"),
                                          (1 / 64, "a scale of 1/d = 1/64 (the square root "
                                                   "left out)")])
def test_a_forgotten_scale_or_square_root_is_named_in_fp32(scale, words):
    """A newcomer's fp32 kernels: a scale of 1 read "explains 100.0% of its error ... 19x
    the same-dtype standard's error: a second defect" (its larger scores round coarser:
    no second defect); a scale of 1/d was named by no candidate."""
    q, k, v = make_qkv(Shape.parse("1x2x128x64"), "normal", 2)
    ref = reference.attention(q, k, v, causal=False)
    std = numerics.standard_model(q, k, v, "fp32", causal=False)
    o_std = float(np.max(np.abs(std[0] - ref[0])))
    q32, k32, v32 = (x.astype(np.float32) for x in (q, k, v))
    s = (q32 @ k32.swapaxes(-1, -2)) * np.float32(scale)
    p = np.exp(s - s.max(-1, keepdims=True))
    o = ((p / p.sum(-1, keepdims=True)) @ v32).astype(np.float64)
    said = diagnose(dense_candidates(q, k, v, {"causal": False}), (o, None), ref, o_std)
    assert said is not None and words in said, said
    assert "100.0%" not in said and "100.00%" not in said, said
    if "nearest" in said:
        assert "that semantics' own rounding (larger scores round coarser), or a second " \
            "defect" in said, said
