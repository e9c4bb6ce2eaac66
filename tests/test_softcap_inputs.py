"""A softcap's case draws q and k scaled so that the cap bends the scores
(flashbench.inputs.problem.softcap_gain): on N(0, 1) inputs a bf16 kernel that skipped a
cap of 50 (Gemma 2's) and returned O alone PASSed check (causal, band O 0.85 of 1) and
speed (a probe, 2026-12-08)."""

import json
import textwrap

import numpy as np
import pytest
import torch

from flashbench.bands.case import variant_fingerprint
from flashbench.cli import main
from flashbench.inputs import Shape, make_qkv
from flashbench.inputs.problem import make_varlen_qkv, softcap_gain
from flashbench.measure import Case
from flashbench.timed.attention import attention_maker, grad_maker, varlen_maker

KERNELS = textwrap.dedent('''
    import torch

    def _attention(q, k, v, causal, softcap):
        s = (q.float() @ k.float().transpose(-1, -2)) * q.shape[-1] ** -0.5
        if softcap is not None:
            s = softcap * torch.tanh(s / softcap)
        if causal:
            n, m = s.shape[-2:]
            s = s.masked_fill(torch.ones(n, m, dtype=torch.bool).triu(m - n + 1),
                              float("-inf"))
        return (torch.softmax(s, -1) @ v.float()).to(q.dtype)

    def honest(q, k, v, causal=False, scale=None, softcap=None):
        return _attention(q, k, v, causal, softcap)

    def capless(q, k, v, causal=False, scale=None, softcap=None):
        return _attention(q, k, v, causal, None)

    for _f in (honest, capless):
        _f.flashbench_variants = ("softcap",)
''')


@pytest.mark.parametrize("cap, gain", [(None, 1.0), (2.0, 1.0), (4.0, 1.0), (30.0, 7.5 ** 0.5),
                                       (50.0, 12.5 ** 0.5)])
def test_the_gain_makes_the_scores_std_a_quarter_of_the_cap(cap, gain):
    assert softcap_gain(cap) == pytest.approx(gain, rel=1e-15)
    assert softcap_gain(cap, "large-logits") == 1.0  # its scores are larger still
    shape = Shape(1, 2, 64, 80, 32)
    q0, k0, v0 = make_qkv(shape, "normal", 3)
    q, k, v = make_qkv(shape, "normal", 3, softcap=cap)
    np.testing.assert_array_equal(q, q0 * gain)  # the same draws, q and k scaled, v not
    np.testing.assert_array_equal(k, k0 * gain)
    np.testing.assert_array_equal(v, v0)
    assert Case(shape, softcap=cap).qkv(3)[0].tolist() == q.tolist()
    packed = make_varlen_qkv((5, 7), shape, "normal", 3, softcap=cap)
    np.testing.assert_array_equal(packed[0], make_varlen_qkv((5, 7), shape, "normal", 3)[0]
                                  * gain)


def test_speeds_pools_scale_as_checks_cases():
    shape = Shape(1, 2, 64, 64, 32)
    for maker in (attention_maker, grad_maker):
        plain, capped = maker(shape, "fp32"), maker(shape, "fp32", softcap=50.0)
        a, b = plain(4), capped(4)
        torch.testing.assert_close(b[0], a[0] * 12.5 ** 0.5, rtol=1e-6, atol=0)
        torch.testing.assert_close(b[1], a[1] * 12.5 ** 0.5, rtol=1e-6, atol=0)
        assert torch.equal(b[2], a[2]) and all(torch.equal(x, y) for x, y in zip(a[3:], b[3:], strict=True))
    p, c = varlen_maker((5, 9), shape, "fp32")(2), varlen_maker((5, 9), shape, "fp32",
                                                               softcap=30.0)(2)
    torch.testing.assert_close(c[0], p[0] * 7.5 ** 0.5, rtol=1e-6, atol=0)
    assert torch.equal(c[2], p[2])


def test_a_softcap_band_measured_on_the_old_inputs_is_measured_anew(monkeypatch):
    fingerprint = getattr(variant_fingerprint, "__wrapped__", variant_fingerprint)  # cached
    before = fingerprint()
    monkeypatch.setattr("flashbench.bands.case.softcap_gain", lambda c, dist="normal": 1.0)
    assert fingerprint() != before


def test_check_fails_a_bf16_kernel_that_skips_a_cap_of_50(user_module, capsys):
    user_module("fbcapin", KERNELS)
    rc = main(["check", "--json", "--quiet", "--shape", "1x2x256x64", "--dtype", "bf16",
               "--causal", "on", "--softcap", "50", "--pass", "fwd",
               "--only", "fbcapin:honest", "fbcapin:capless"])
    rows = {r["backend"]: r for r in json.loads(capsys.readouterr().out)["backends"]}
    assert rows["fbcapin:honest"]["passed"], rows["fbcapin:honest"]
    bad = rows["fbcapin:capless"]
    assert rc == 1 and not bad["passed"] and not bad["band_passed"]
    assert bad["o_band_ratio"] > 10, bad["o_band_ratio"]  # 43.8 here; 0.85 on N(0, 1) inputs
    assert "no softcap" in bad["diagnosis"], bad["diagnosis"]


def test_speed_fails_an_fp16_kernel_that_skips_a_cap_of_100(user_module, capsys):
    user_module("fbcapsp", KERNELS)
    rc = main(["speed", "--quiet", "--json", "--seed", "5", "--dtype", "fp16", "--shape",
               "1x2x256x64", "--softcap", "100", "--samples", "10",
               "--only", "fbcapsp:honest", "fbcapsp:capless"])
    rows = {r["backend"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["fbcapsp:honest"]["status"] == "PASS", rows["fbcapsp:honest"]["failures"]
    bad = rows["fbcapsp:capless"]
    assert rc == 1 and bad["status"] == "FAIL", bad
    # it PASSed on N(0, 1) inputs; 5.5x the standard's error on the scaled ones (a cap of
    # 50 in bf16 is about the bf16 standard's own error: docs/variants.md)
    assert bad["failures"]["wrong"].startswith("off the float64 reference of softcap=100"), \
        bad["failures"]


@pytest.mark.parametrize("cap", [None, 30.0, 50.0])
def test_a_sink_weighs_beside_a_capped_case_too(cap):
    """The sinks are drawn beside the row's log-sum-exp (inputs.sink_logits): log(Nk) + 1/2
    for N(0, 1) scores, a draw of capped scores under a softcap, whose case scales q and k:
    beside those the first sinks weighed 1e-7 at a cap of 30 (a fresh-eyes review,
    2026-12-08), and skipping them could not fail. A median share of 5-8% here."""
    import scipy.special

    case = Case(Shape(1, 4, 256, 1024, 64), "normal", sinks=True, softcap=cap)
    (q, k, _), kw = case.qkv(0), case.kwargs(0)
    s = np.einsum("bhqd,bhkd->bhqk", q, k) / 8
    s = s if cap is None else cap * np.tanh(s / cap)
    lse = scipy.special.logsumexp(s, -1)
    share = 1 / (1 + np.exp(lse - kw["sinks"][None, :, None]))
    assert 0.02 < np.median(share) < 0.2, np.median(share)
