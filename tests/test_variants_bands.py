"""The band rule with the attention variants: a case's band is measured with its window,
softcap or sinks (never a plain band), keyed and cached by them; a correct kernel passes both
rules under each variant, and a worse one (an fp16 O accumulator, a softcap computed in
fp16) fails the band rule while the baseline (2x) rule passes it."""

import json

import numpy as np
import pytest

from flashbench import numerics, reference
from flashbench.accuracy import error_stats, judge
from flashbench.bands import cache as band_cache
from flashbench.bands import case as case_bands
from flashbench.bands.case import SEED0, band_key, case_band, measure_case_band
from flashbench.bands.measure import caller_inputs
from flashbench.inputs import Shape, make_qkv
from flashbench.inputs.precision import PRECISIONS
from flashbench.measure import Case
from flashbench.measure.bandjudge import CaseBands

VARIANTS = {"window": dict(causal=True, window=(512, 0)), "softcap": dict(softcap=30.0),
            "softcap=5": dict(softcap=5.0), "sinks": dict(sinks=True)}


def test_the_band_runs_the_flash_model_with_the_variant():
    """Seed SEED0's statistics are the flash model's with the window, softcap and sinks
    (drawn as the check's case draws them) against the reference with them."""
    shape = Shape(1, 2, 40, 56, 16)
    band = measure_case_band(shape, "normal", True, "bf16", seeds=2, window=(7, 0),
                             softcap=4.0, sinks=True)
    q, k, v = (caller_inputs("bf16", x) for x in make_qkv(shape, "normal", SEED0))
    import scipy.special

    capped = 4.0 * np.tanh(np.random.default_rng(SEED0 + 3).standard_normal(56) / 4.0)
    kw = {"causal": True, "window": (7, 0), "softcap": 4.0,  # (a gain of 1 at softcap 4)
          "sinks": np.random.default_rng(SEED0 + 2).standard_normal(2)
          + scipy.special.logsumexp(capped) - 2.5}  # beside a draw of 56 capped scores
    case = Case(shape, "normal", True, window=(7, 0), softcap=4.0, sinks=True)
    np.testing.assert_array_equal(case.kwargs(SEED0)["sinks"], kw["sinks"])
    out = numerics.flash_model(q, k, v, "bf16", **kw)
    ref = reference.attention(q, k, v, **kw)
    for i, t in enumerate(("o", "lse")):
        assert band["per_seed"][t]["rmse"][0] == error_stats(out[i], ref[i])["rmse"]
    plain = measure_case_band(shape, "normal", True, "bf16", seeds=2)
    assert plain["per_seed"]["o"]["rmse"] != band["per_seed"]["o"]["rmse"]
    assert band["key"] == "bf16|B=1 H=2 Nq=40 Nk=56 d=16|normal|causal|fwd|" \
                          "window=(7,0) softcap=4.0 sinks"


def test_a_variants_band_is_keyed_and_cached_by_it_never_the_plain_one(tmp_path, monkeypatch):
    monkeypatch.setenv("FLASHBENCH_CACHE", str(tmp_path))
    monkeypatch.setattr(band_cache, "_MEMO", {})
    shape = Shape(1, 1, 24, 40, 16)
    plain = band_key(shape, "normal", False, "fp16")
    assert plain == "fp16|B=1 H=1 Nq=24 Nk=40 d=16|normal|full|fwd"  # as shipped
    assert band_key(shape, "normal", False, "fp16", softcap=30.0) != \
        band_key(shape, "normal", False, "fp16", softcap=30.5)
    # a table holding the plain band of this case: the variant's band is not read from it
    table = tmp_path / "table.json"
    table.write_text(json.dumps({"version": 1, "bands": {plain: {"seeds": 1, "edges": {}}}}))
    assert case_band(shape, "normal", False, "fp16", table=table)["source"] == "table"
    capped = case_band(shape, "normal", False, "fp16", table=table, softcap=30.0)
    assert capped["source"] == "measured" and capped["key"] == plain + "|softcap=30.0"
    assert len(list(tmp_path.glob("bands/*.json"))) == 1  # on disk, under its own name
    monkeypatch.setattr(band_cache, "_MEMO", {})

    def measured(*args, **kwargs):
        raise LookupError("measured")

    monkeypatch.setattr(case_bands, "measure_case_band", measured)
    again = case_band(shape, "normal", False, "fp16", table=table, softcap=30.0)
    assert again["edges"] == capped["edges"]  # from the disk cache, not measured
    with pytest.raises(LookupError):  # sinks: another key, in no cache: measured
        case_band(shape, "normal", False, "fp16", table=table, sinks=True)


def test_bad_variant_input_to_the_bands_is_a_clear_error():
    shape = Shape(1, 1, 32, 32, 16)
    with pytest.raises(ValueError, match="softcap must be finite and > 0"):
        case_band(shape, "normal", False, "fp16", softcap=0.0)
    with pytest.raises(ValueError, match="window must be"):
        case_band(shape, "normal", False, "fp16", window=(-2, 0))
    with pytest.raises(TypeError, match="sinks must be a bool"):
        case_band(shape, "normal", False, "fp16", sinks=np.zeros(1))


def _judged(name, defect, dtype="fp16", n=1024):
    """(baseline verdicts, band verdicts) of the tests' independent kernel with ``defect`` on
    the variant's case (256 query rows, N keys, d = 64, seed 0)."""
    from tools import defects

    case = Case(Shape(1, 1, 256, n, 64), "normal", **VARIANTS[name])
    q, k, v = case.qkv(0)  # a softcap's scaled as the band's
    kw, prec = case.kwargs(0), PRECISIONS[dtype]
    out = defects.kernel(q, k, v, dtype, defect=defect, **kw)
    base = judge(out, numerics.standard_model(q, k, v, prec, **kw),
                 reference.attention(q, k, v, **kw), prec)
    band = CaseBands(case, (q, k, v)).judge(prec, out, ("o", "lse"))
    assert all(v["source"] == "measured" for v in (b.as_dict() for b in band.values()))
    return {t: base[t]["verdict"] for t in ("o", "lse")}, band


@pytest.mark.parametrize("name", list(VARIANTS))
def test_under_each_variant_a_correct_kernel_passes_and_an_fp16_accumulator_fails_the_band(
        name):
    """The tests' FlashAttention-2 kernel (written apart from the flash model: block 128,
    exp2) passes both rules; with its O accumulator kept in fp16 between key blocks it
    stays within 2x the standard's error but leaves the band (O ratio 1.2-1.5 here)."""
    base, band = _judged(name, None)
    assert all(v.passed for v in base.values()) and all(v.passed for v in band.values())
    base, band = _judged(name, "acc_low")
    assert all(v.passed for v in base.values())
    assert not band["o"].passed and band["o"].ratio > 1.1


@pytest.mark.parametrize("name", ["softcap", "softcap=5"])
def test_a_softcap_computed_in_fp16_passes_2x_and_fails_the_band(name):
    """The score stored in fp16 and each op of the cap rounded to fp16 (as plain attention
    does): its LSE error is the standard's (2x ratio 1.00) and tens of band edges."""
    base, band = _judged(name, "cap_low")
    assert all(v.passed for v in base.values())
    assert not band["lse"].passed and band["lse"].ratio > 10 and not band["o"].passed


def test_the_asv_variant_suite_records_the_band_ratio():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.bench_variants import TrackVariantAccuracy
    from flashbench.measure.forward import measure_accuracy
    from flashbench.measure.varlen import measure_varlen

    suite, args = TrackVariantAccuracy(), ({}, "flash_model", "fp16", "softcap=30", "s")
    suite.rec = measure_accuracy(Case(Shape(1, 2, 64, 64, 32), softcap=30.0), ["fp16"],
                                 ["flash_model"])[0]
    assert suite.track_o_band_ratio(*args) == suite.rec.o_band_ratio <= 1
    assert suite.track_lse_band_ratio(*args) == suite.rec.lse_band_ratio <= 1
    suite.rec = measure_varlen(Case(Shape(1, 2, 64, 64, 32), varlen=(20, 7)), ["fp16"],
                               ["flash_model"])[0]
    assert suite.track_o_band_ratio(*args) == suite.rec.o_band_ratio <= 1
    suite.rec = measure_varlen(Case(Shape(1, 2, 64, 64, 32), varlen=(20, 7)), ["fp16"],
                               ["flash_model"], band_rule=False)[0]
    assert np.isnan(suite.track_o_band_ratio(*args))  # no band: not applicable


def test_a_packed_batch_is_judged_by_the_band_of_its_own_lengths():
    """A varlen case's band is the flash model per sequence on packed draws of the same
    lengths: the tests' correct kernel passes it; with an fp16 O accumulator it passes the
    2x rule and fails the band."""
    from flashbench.measure.varlen import varlen_inputs
    from flashbench.reference.varlen import per_sequence
    from tools import defects

    case = Case(Shape(1, 1, 1024, 1024, 64), "normal", varlen=(1024, 900))
    q, k, v, cu, _ = varlen_inputs(case, 0)
    prec = PRECISIONS["fp16"]
    ref = reference.varlen_attention(q, k, v, cu, cu)
    std = per_sequence(numerics.standard_model, q, k, v, cu, cu, dtype=prec)
    bands = CaseBands(case, (q, k, v))
    assert bands.band(prec)["key"].endswith("|varlen=1024,900")
    for defect, inside in ((None, True), ("acc_low", False)):
        out = per_sequence(defects.kernel, q, k, v, cu, cu, dtype="fp16", defect=defect)
        assert all(j["verdict"].passed for j in judge(out, std, ref, prec).values())
        verdicts = bands.judge(prec, out, ("o", "lse"))
        assert all(v.passed for v in verdicts.values()) is inside, verdicts["o"].ratio


def test_a_change_to_the_code_that_measures_a_band_measures_it_anew(tmp_path, monkeypatch):
    """A red team (2026-12-08): a head that changed the flash model at softcaps of 10 and
    more (the models' fingerprint runs a softcap of 3) read base's cached band. The disk
    cache is keyed by the measuring code's bytes too (bands.case.source_fingerprint)."""
    import shutil
    from pathlib import Path

    band_case = case_bands
    root = Path(band_case.__file__).resolve().parents[1]
    copy = tmp_path / "flashbench"
    for package in ("numerics", "inputs", "reference", "accuracy", "bands"):
        shutil.copytree(root / package, copy / package)
    before = band_case.source_fingerprint(copy)
    assert before == band_case.source_fingerprint(root)
    with open(copy / "numerics" / "forward.py", "a") as f:
        f.write("# a head's change\n")
    assert band_case.source_fingerprint.__wrapped__(copy) != before

    monkeypatch.setenv("FLASHBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(band_cache, "_MEMO", {})
    measured = []
    real = band_case.measure_case_band
    monkeypatch.setattr(band_case, "measure_case_band",
                        lambda *a, **k: measured.append(1) or real(*a, **k))
    shape = Shape(1, 1, 16, 24, 16)
    band_case.case_band(shape, "normal", False, "fp16", softcap=20.0)
    monkeypatch.setattr(band_cache, "_MEMO", {})
    band_case.case_band(shape, "normal", False, "fp16", softcap=20.0)  # from the disk
    assert len(measured) == 1
    monkeypatch.setattr(band_cache, "_MEMO", {})
    monkeypatch.setattr(band_case, "source_fingerprint", lambda root=None: "another head")
    band_case.case_band(shape, "normal", False, "fp16", softcap=20.0)
    assert len(measured) == 2
