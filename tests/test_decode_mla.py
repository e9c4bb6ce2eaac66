"""``check --decode`` at d/dv and in DeepSeek's absorbed MLA form (issue 37): the case's
text ``d/dv`` and ``:mla``, its inputs (V a view of K's first dv columns), both rules against
the float64 reference's ``v=None`` form and the split model's band at the case's own d/dv,
a kernel that misreads the absorbed V FAILs, pairs the Triton decode cannot take skip with
their one line, and the CLI. Cases are small: the Triton kernel runs interpreted here."""

import dataclasses

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from flashbench import numerics, reference
from flashbench.accuracy import error_stats
from flashbench.backends import decode as decode_backends
from flashbench.bands.case import SEED0
from flashbench.bands.decode import decode_band_key, measure_decode_band
from flashbench.bands.measure import caller_inputs
from flashbench.cli import main
from flashbench.inputs.precision import get_precision
from flashbench.measure.decode import (
    DecodeCase,
    decode_bytes,
    decode_inputs,
    handed_decode,
    measure_decode,
    run_decode_check,
)

MLA = "1x4/1x1x576/512:64:p16:mla"  # DeepSeek's widths, 4 heads over one latent kv head


def test_mla_case_text():
    case = DecodeCase.parse(MLA)
    assert (case.d, case.dv, case.absorbed, case.Hkv, case.page_size) == (576, 512, True, 1, 16)
    assert case.spec() == MLA
    plain = DecodeCase.parse("2x4/2x1x192/128:40,75")
    assert (plain.d, plain.dv, plain.absorbed) == (192, 128, False)
    # d == dv keeps the text (and so the band keys and asv series) it had
    assert DecodeCase.parse("4x8/2x4x64:1000,517,64,4:p64").spec() == "4x8/2x4x64:1000,517,64,4:p64"
    assert DecodeCase(1, 2, 1, 1, 64, (5,)).dv == 64
    # the suffixes in either order (a probe: ":mla:p16" was refused by its order alone)
    assert DecodeCase.parse("1x4/1x1x576/512:64:mla:p16") == case


@settings(max_examples=60, deadline=None)
@given(b=st.integers(1, 3), hkv=st.integers(1, 4), group=st.integers(1, 4),
       nq=st.integers(1, 4), d=st.integers(1, 600), dv=st.integers(1, 600),
       absorbed=st.booleans(), page=st.sampled_from([None, 16, 64]), data=st.data())
def test_case_text_round_trips(b, hkv, group, nq, d, dv, absorbed, page, data):
    lens = tuple(data.draw(st.lists(st.integers(0, 300), min_size=b, max_size=b)))
    if absorbed and dv >= d:
        with pytest.raises(ValueError, match="needs dv < d"):
            DecodeCase(b, hkv * group, hkv, nq, d, lens, page, dv=dv, absorbed=True)
        return
    case = DecodeCase(b, hkv * group, hkv, nq, d, lens, page, dv=dv, absorbed=absorbed)
    assert DecodeCase.parse(case.spec()) == case


@pytest.mark.parametrize("spec,match", [
    ("1x16/1x1x576:256:p64:mla", "needs d/dv with dv < d"),
    ("1x16/1x1x512/576:256:mla", "needs dv < d .* got d=512, dv=576"),
    ("1x16/1x1x576/512:256:p16:mla:p64", "a page size given twice"),
    ("1x16/1x1x576/512:256:mla:mla", r"BxH\[/Hkv\]xNqxd\[/dv\]:L1,L2,...\[:pPAGE\]\[:mla\]"),
    ("1x16/1x1x576/0:256", "dv must be an int >= 1, got 0"),
])
def test_bad_mla_cases_one_line(spec, match):
    with pytest.raises(ValueError, match=match) as err:
        DecodeCase.parse(spec)
    assert "\n" not in str(err.value)


def test_absorbed_inputs_are_one_cache():
    case = DecodeCase.parse(MLA)
    q, k, v, lens, table = inputs = decode_inputs(case, 3)
    assert k.shape[-1] == 576 and v.shape[-1] == 512 and np.shares_memory(k, v)
    np.testing.assert_array_equal(v, k[..., :512])
    tq, tk, tv, tlens, ttable = handed_decode(get_precision("bf16"), inputs)
    assert tv.data_ptr() == tk.data_ptr() and tv.shape[-1] == 512  # a view, as FlashMLA's
    # bytes: each cached row's 576 columns once (V is their first 512), q read, o written
    assert decode_bytes(case, 2) == 2 * (64 * 576 + 4 * (576 + 512))
    assert decode_bytes(dataclasses.replace(case, absorbed=False), 2) == 2 * (
        64 * (576 + 512) + 4 * (576 + 512))


def test_mla_band_is_measured_at_576_512():
    """The band's first seed is the split model against the reference's absorbed form on
    the case's own 576-wide cache: recomputed here by hand, equal."""
    case = DecodeCase.parse(MLA)
    band = measure_decode_band(case, "bf16", seeds=2)
    assert band["key"] == decode_band_key(case, "bf16") and "576/512" in band["key"]
    q, k, _, lens, table = decode_inputs(case, SEED0)
    qb, kb = (caller_inputs("bf16", x) for x in (q, k))
    ref = reference.decode_attention(qb, kb, None, lens, table, causal=True, dv=512)
    out = numerics.split_decode_model(qb, kb, None, lens, table, "bf16", causal=True,
                                      num_splits=4, dv=512)
    assert band["per_seed"]["o"]["rmse"][0] == error_stats(out[0], ref[0])["rmse"]
    plain = measure_decode_band(DecodeCase.parse("1x4/1x1x64:64:p16"), "bf16", seeds=2)
    assert band["per_seed"]["o"]["rmse"] != plain["per_seed"]["o"]["rmse"]


def test_mla_check_passes_by_both_rules(monkeypatch, tmp_path):
    monkeypatch.setenv("FLASHBENCH_CACHE", str(tmp_path))
    report = run_decode_check([DecodeCase.parse(MLA)], ["bf16"], ["triton", "torch-sdpa"])
    assert report["passed"]
    what = [r["what"] for r in report["exactness"]]
    assert "absorbed (v=None, dv) vs V = K[..., :dv] copied (bit for bit)" in what
    rows = {r["kernel"]: r for r in report["rows"]}
    assert set(rows) == {"split_model", "triton", "torch-sdpa"}
    for row in rows.values():
        assert row["case"] == f"{MLA} normal causal" and row["passed"]
        own_lse = {"o", "lse"} if row["kernel"] != "torch-sdpa" else {"o"}  # a peer's: O
        assert set(row["band_rule"]) == own_lse and row["band_passed"]


def _misread(q, k_cache, v_cache, cache_seqlens, block_table=None, causal=False, scale=None):
    """torch's decode, but V taken as K's LAST dv columns: a kernel misreading the form."""
    from flashbench.kernels import torch_decode as td

    return td.sdpa_decode(q, k_cache, k_cache[..., -v_cache.shape[-1]:], cache_seqlens,
                          block_table, causal=causal, scale=scale)


def test_a_kernel_misreading_the_absorbed_v_fails(monkeypatch, tmp_path):
    monkeypatch.setenv("FLASHBENCH_CACHE", str(tmp_path))
    peer = decode_backends.DECODE_BACKENDS["torch-sdpa"]
    bad = dataclasses.replace(peer, name="misread", fn=decode_backends.td.with_lse(_misread),
                              peer=False, origin="test")
    monkeypatch.setitem(decode_backends.DECODE_BACKENDS, "misread", bad)
    (model, rec) = measure_decode(DecodeCase.parse(MLA), ["bf16"], ["split_model", "misread"])
    assert model.passed and not rec.passed and rec.o_ratio > 10


@pytest.mark.parametrize("spec,why", [
    ("1x4/1x1x576/512:32", "head dim d=576 exceeds 256"),  # not absorbed: two caches
    ("1x4/1x1x576/500:32:mla", "head dims d=576, dv=500: the absorbed decode takes dv a "
     "multiple of 8"),
])
def test_pairs_the_triton_decode_cannot_take_skip_with_one_line(spec, why, monkeypatch,
                                                                tmp_path):
    monkeypatch.setenv("FLASHBENCH_CACHE", str(tmp_path))
    report = run_decode_check([DecodeCase.parse(spec)], ["fp32"], ["triton", "torch-sdpa"])
    rows = {r["kernel"]: r for r in report["rows"]}
    assert why in rows["triton"]["skipped"] and "\n" not in rows["triton"]["skipped"]
    assert rows["torch-sdpa"]["passed"] and report["passed"]


def test_dv_below_d_decode_check(monkeypatch, tmp_path):
    """DeepSeek's prefill pair 192/128 as a decode case (two caches): kernel and peer pass."""
    monkeypatch.setenv("FLASHBENCH_CACHE", str(tmp_path))
    report = run_decode_check([DecodeCase.parse("1x4/2x1x192/128:48:p16")], ["bf16"],
                              ["triton", "torch-sdpa"])
    assert report["passed"] and {r["kernel"] for r in report["rows"]} == {
        "split_model", "triton", "torch-sdpa"}
    assert all(r["band_passed"] for r in report["rows"])


def test_cli_runs_the_mla_case(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("FLASHBENCH_CACHE", str(tmp_path))
    rc = main(["check", "--decode", "--quiet", "--decode-case", MLA, "--causal", "on",
               "--dtype", "bf16", "--backend", "torch-sdpa"])
    out = capsys.readouterr().out
    assert rc == 0 and f"{MLA} normal causal" in out and "absorbed (v=None, dv)" in out
    rc = main(["check", "--decode", "--quiet", "--decode-case", "1x4/1x1x576:64:mla",
               "--dtype", "bf16"])
    err = capsys.readouterr().err
    assert rc == 2 and "needs d/dv with dv < d" in err and err.count("\n") == 1
    assert torch.get_default_dtype() == torch.float32


def test_mla_asv_track_skips_a_commit_without_the_form(monkeypatch):
    """bench_mla's case is this module's MLA text; a commit whose parser reads no d/dv or
    :mla skips every benchmark with the reason (never a failure); history reads the track
    as accuracy with the baseline rule's limit."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    try:
        from benchmarks import bench_mla
    finally:
        sys.path.pop(0)
    from flashbench.history.suites import accuracy_metric, rule_limit

    assert [DecodeCase.parse(c).spec() for c in bench_mla.CASES] == bench_mla.CASES
    assert all(DecodeCase.parse(c).absorbed for c in bench_mla.CASES)

    def old_parse(text, causal=True, dist="normal"):
        raise ValueError("decode case must be BxH[/Hkv]xNqxd:L1,L2,...[:pPAGE]")

    monkeypatch.setattr(DecodeCase, "parse", staticmethod(old_parse))
    track = bench_mla.TrackMLADecodeAccuracy()
    results = track.setup_cache()
    with pytest.raises(NotImplementedError, match="cannot read decode case 1x16/1x1x576/512"):
        track.setup(results, "triton", "bf16", bench_mla.CASES[0])
    name = "bench_mla.TrackMLADecodeAccuracy.track_o_baseline_ratio"
    assert accuracy_metric(name) == "o_baseline_ratio" and rule_limit("o_baseline_ratio") == 2


def test_a_bad_page_size_is_said_in_the_cases_own_words():
    """A probe, 2026-12-07: `:p0` read "DecodeCase.page_size must be an int >= 1", a
    class's field the user never wrote; now the case and its :pP."""
    with pytest.raises(ValueError, match=r"decode case '2x4x1x16:70,33:p0': :pP \(the page "
                                         r"size\) must be an int >= 1, got 0"):
        DecodeCase.parse("2x4x1x16:70,33:p0")
