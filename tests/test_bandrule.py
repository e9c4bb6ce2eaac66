"""The band rule: the pure rule, the case bands it reads, and both rules in the check."""

import json
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashbench import numerics
from flashbench.accuracy import error_stats
from flashbench.accuracy.bandrule import (
    BAND_MULTIPLIER,
    EDGE_FLOOR,
    band_rule,
    multipliers,
    rules_disagree,
)
from flashbench.bands import cache as band_cache
from flashbench.bands import case as case_bands
from flashbench.bands.case import case_band, measure_case_band
from flashbench.inputs import Shape, make_qkv
from flashbench.inputs.precision import PRECISIONS
from flashbench.measure import Case
from flashbench.measure.bandjudge import CaseBands, combine

EDGES = {"max_abs": 4e-4, "rmse": 5e-5, "abs_p99": 1.5e-4, "abs_p50": 3e-5}


def stats(scale):
    return {k: v * scale for k, v in EDGES.items()}


@given(st.floats(0, 50), st.sampled_from(["o", "lse", "dq", "dk", "dv"]),
       st.sampled_from(["normal", "outliers", "large-logits"]))
def test_ratio_scales_with_the_error_and_passes_at_one(scale, tensor, dist):
    v = band_rule(stats(scale), EDGES, tensor, dist)
    m = multipliers(tensor, dist)
    expected = max(scale * EDGES[s] / (m[s] * EDGES[s]) for s in m)
    assert v.ratio == pytest.approx(expected)
    assert v.passed == (v.ratio <= 1)
    assert v.ratios[v.stat] == v.ratio and set(v.ratios) == set(m)


def test_a_shifted_distribution_fails_though_its_max_is_inside():
    """RMSE 2x the band's (every element worse), max unchanged: the band rule sees it."""
    kernel = dict(EDGES, rmse=2 * EDGES["rmse"])
    v = band_rule(kernel, EDGES, "o")
    assert not v.passed and v.stat == "rmse"
    assert v.ratio == pytest.approx(2 / BAND_MULTIPLIER["normal"]["o"]["rmse"])


def test_a_percentile_edge_is_floored_at_a_sixteenth_of_the_max():
    """A mostly exact tensor (p99 of its error 0): the edge is max/16, not 0."""
    edges = dict(EDGES, abs_p99=0.0, rmse=0.0)
    v = band_rule(dict(EDGES, abs_p99=1e-6, rmse=1e-6), edges, "dv")
    assert v.edges["abs_p99"] == EDGE_FLOOR * EDGES["max_abs"] and v.passed


def test_non_finite_kernel_error_fails_and_nan_is_an_error():
    assert band_rule(stats(math.inf), EDGES, "o").ratio == math.inf
    assert not band_rule(stats(math.inf), EDGES, "o").passed
    with pytest.raises(ValueError, match="kernel rmse of o.*NaN"):
        band_rule(dict(EDGES, rmse=math.nan), EDGES, "o")
    with pytest.raises(ValueError, match="band edge abs_p99 of lse"):
        band_rule(EDGES, dict(EDGES, abs_p99=math.nan), "lse")
    with pytest.raises(ValueError, match="band edge max_abs"):
        band_rule(EDGES, dict(EDGES, max_abs=math.inf), "o")
    with pytest.raises(ValueError, match="tensor must be one of"):
        band_rule(EDGES, EDGES, "p")
    with pytest.raises(ValueError, match="dist must be one of"):
        band_rule(EDGES, EDGES, "o", "uniform")
    with pytest.raises(ValueError, match="lack"):
        band_rule({"rmse": 1.0}, EDGES, "o")


def test_the_disagreement_line_names_the_failing_rule():
    fail = band_rule(stats(3), EDGES, "o")
    line = rules_disagree("o", True, 1.4, 2.0, fail)
    assert line.startswith("band rule FAIL, baseline rule PASS") and "O " in line
    ok = band_rule(stats(0.5), EDGES, "o")
    assert rules_disagree("o", False, 2.5, 2.0, ok).startswith("baseline rule FAIL")
    assert rules_disagree("o", True, 1.0, 2.0, ok) is None
    both = combine({"o": (1.4, True), "lse": (0.5, True)},
                   {"o": fail, "lse": band_rule(stats(0.5), EDGES, "lse")}, 2.0)
    assert both["passed"] is False and both["baseline_passed"] and not both["band_passed"]
    assert both["disagreement"].startswith("band rule FAIL")


def test_bad_input_to_the_bands_is_a_clear_error():
    shape = Shape(1, 1, 32, 32, 16)
    with pytest.raises(ValueError, match="dtype must be one of"):
        case_band(shape, "normal", False, "fp12")
    with pytest.raises(ValueError, match="fp64 has no band"):
        case_band(shape, "normal", False, "fp64")
    with pytest.raises(ValueError, match="no backward model"):
        case_band(shape, "normal", False, "fp8", grad=True)
    with pytest.raises(ValueError, match="dist must be one of"):
        case_band(shape, "uniform", False, "fp16")
    with pytest.raises(ValueError, match="cannot be measured in memory"):
        case_band(Shape(1, 1, 16, 1 << 26, 64), "normal", False, "fp16")
    with pytest.raises(ValueError, match="too large to measure"):
        case_band(Shape(64, 64, 1 << 16, 1 << 16, 256), "normal", False, "fp16")


def test_a_case_outside_the_table_is_measured_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("FLASHBENCH_CACHE", str(tmp_path))
    monkeypatch.setattr(band_cache, "_MEMO", {})
    shape = Shape(1, 2, 24, 40, 16, Hkv=1)
    band = case_band(shape, "outliers", True, "bf16")
    assert band["source"] == "measured" and band["seeds"] == case_bands.band_seeds(shape) == 171
    edges = band["edges"]["o"]
    assert edges["max_abs"] == max(band["per_seed"]["o"]["max_abs"]) > 0
    assert list(tmp_path.glob("bands/*.json"))  # written to the disk cache
    monkeypatch.setattr(band_cache, "_MEMO", {})
    monkeypatch.setattr(case_bands, "measure_case_band", None)  # must not measure again
    assert case_band(shape, "outliers", True, "bf16")["edges"] == band["edges"]


def test_the_shipped_table_is_what_a_measurement_gives():
    """A shipped band equals a fresh measurement of the same case (same seeds), to 1e-2:
    the gradients' fp32 matmuls go through the BLAS, whose kernel for the processor picks
    the reduction order (the table was made on an AMD EPYC; on an Intel Xeon, numpy
    2.4.6's OpenBLAS moved dk's abs_p99 by 0.34 % and the max_abs edges not at all)."""
    shape = Shape(1, 2, 256, 256, 64)
    shipped = case_band(shape, "normal", True, "fp16", grad=True)
    assert shipped["source"] == "table"
    fresh = measure_case_band(shape, "normal", True, "fp16", grad=True)
    for tensor in ("dq", "dk", "dv"):
        for stat, value in shipped["edges"][tensor].items():
            assert fresh["edges"][tensor][stat] == pytest.approx(value, rel=1e-2)


def _defect_case(defect, dtype="fp16", n=4096):
    from tools import defects

    case = Case(Shape(1, 1, 256, n, 64), "normal", False)
    q, k, v = make_qkv(case.shape, case.dist, 0)
    out = defects.kernel(q, k, v, dtype, defect=defect)
    return case, (q, k, v), out


def test_the_issues_fp16_accumulator_passes_2x_and_fails_the_band():
    """The issue's kernel: O accumulator kept in fp16 between key blocks, N = 4096."""
    from flashbench import reference
    from flashbench.accuracy import judge

    case, qkv, out = _defect_case("acc_low")
    base = judge(out, numerics.standard_model(*qkv, "fp16"), reference.attention(*qkv), "fp16")
    assert base["o"]["verdict"].passed and base["lse"]["verdict"].passed
    band = CaseBands(case, qkv).judge(PRECISIONS["fp16"], out, ("o", "lse"))
    assert not band["o"].passed and band["o"].ratio > 1.5
    _, _, good = _defect_case(None)
    assert all(v.passed for v in CaseBands(case, qkv).judge(PRECISIONS["fp16"], good, ("o", "lse")).values())


@pytest.mark.parametrize("defect", ["acc_low", "p_coarse", "pv_twice", "rescale_low", "l_low",
                                    "scale_low"])
def test_each_defect_adds_error(defect):
    """Against the reference of the rounded inputs, each defect's O or LSE RMSE exceeds the
    correct kernel's by >= 10% (pv_twice, the smallest, is about 20%)."""
    from flashbench import reference
    from flashbench.bands.measure import caller_inputs

    _, qkv, good = _defect_case(None, n=512)
    _, _, bad = _defect_case(defect, n=512)
    ref = reference.attention(*(caller_inputs("fp16", x) for x in qkv))
    grew = [error_stats(bad[i], ref[i])["rmse"] / error_stats(good[i], ref[i])["rmse"]
            for i in (0, 1)]
    assert max(grew) > 1.1


def test_the_check_renders_both_rules_and_names_the_failing_one():
    from flashbench.cli.check_tables import render_tables
    from flashbench.measure.run import overall_passed, run_check

    case = Case(Shape(1, 2, 1024, 1024, 64), "normal", False)  # a default case: in the table
    report = run_check([case], dtypes=["fp16"], backward_cases=())
    row = report["dtypes"][0]
    assert row["passed"] and row["band_passed"] and row["o_band_ratio"] <= 1
    assert row["band"]["o"]["source"] == "table" and report["passed"]
    text = render_tables(report)
    assert "O band" in text and "RESULT: PASS" in text
    row.update(passed=False, band_passed=False, o_band_ratio=3.2,
               disagreement="band rule FAIL, baseline rule PASS: O rmse ...")
    report["passed"] = overall_passed(report)
    text = render_tables(report)
    assert "FAIL (band)" in text and "band rule FAIL, baseline rule PASS: O rmse" in text
    assert "RESULT: FAIL" in text


def test_history_plots_both_rules_and_knows_their_limits(tmp_path):
    from flashbench.history.plots import plot_rule_ratios
    from flashbench.history.suites import rule_limit
    from flashbench.history.summaries import error_bands

    assert rule_limit("o_band_ratio") == 1.0 and rule_limit("dv_band_ratio") == 1.0
    assert rule_limit("o_baseline_ratio") == 2.0
    base = {"kernel": "triton", "dtype": "fp16", "causal": False}

    def frame(values, metric):
        n = len(values)
        return pd.DataFrame({"machine": "m", "cpu": "c", "env": "e",
                             "commit": [f"{i:040d}" for i in range(n)],
                             "date": pd.date_range("2026-01-01", periods=n, tz="UTC"),
                             "file": [f"f{i}" for i in range(n)],
                             "benchmark": f"a.TrackAccuracy.track_{metric}",
                             "params": "kernel='triton', dtype='fp16', causal=False",
                             "type": "track", "unit": "ratio", "value": values,
                             "status": "ok"} | {k: [v] * n for k, v in base.items()})

    df = pd.concat([frame([0.5, 0.6, 1.4], "o_baseline_ratio"),
                    frame([0.8, 0.8, 2.9], "o_band_ratio")], ignore_index=True)
    assert plot_rule_ratios(df, tmp_path / "rules.png") and (tmp_path / "rules.png").stat().st_size
    row = error_bands(df).iloc[0]
    assert row["o_band"] == 2.9 and row["o_ratio"] == 1.4
    assert not plot_rule_ratios(df.iloc[:0], tmp_path / "none.png")
    assert np.isfinite(row["o_ratio"])


def test_the_asv_tracks_record_the_band_ratio():
    from benchmarks.bench_accuracy import TrackAccuracy
    from benchmarks.bench_grad import TrackGradAccuracy
    from flashbench.measure.backward import measure_gradients
    from flashbench.measure.forward import measure_accuracy
    from flashbench.measure.records import LSE_NOT_RETURNED, Accuracy

    assert TrackAccuracy.track_o_band_ratio.unit == "ratio"
    case = Case(Shape(1, 2, 256, 256, 64), "normal", True)
    rec = measure_accuracy(case, ["bf16"], ["flash_model"])[0]
    suite, args = TrackAccuracy(), ({}, "flash_model", "bf16", True, "s", "normal")
    suite.rec = rec
    assert suite.track_o_band_ratio(*args) == rec.o_band_ratio <= 1
    assert suite.track_lse_band_ratio(*args) == rec.lse_band_ratio
    suite.rec = Accuracy(case, "mine:fn", "fp32", o={}, lse=None, o_standard={}, lse_standard={},
                         o_ratio=1.0, lse_ratio=None, passed=True, lse_note=LSE_NOT_RETURNED)
    # an LSE the kernel does not return is not applicable: NaN (asv records an exception
    # raised in a track as a failure)
    assert math.isnan(suite.track_lse_band_ratio(*args))
    with pytest.raises(NotImplementedError, match="not recorded"):
        suite.track_o_band_ratio(*args)
    grad = TrackGradAccuracy()
    grad.rec = measure_gradients(case, ["fp16"], ["flash_model"])[0]
    assert grad.track_dv_band_ratio({}, "flash_model", "fp16", True, "s", "normal") \
        == grad.rec.dv_band_ratio <= 1


def test_a_gross_band_failure_is_called_a_wrong_result_not_a_precision_loss():
    """Failed before: a wrong scale (7.7e6x the band's edge) was 'likely the O accumulator
    kept in the dtype'; a rounding defect's FAIL keeps its likely causes."""
    from flashbench.accuracy.bandrule import GROSS, likely_cause

    assert "beyond any rounding point" in likely_cause("o", 7.7e6)
    for defect in (311, 2289, 2717, 553, 36_690):  # docs/check.md's precision defects
        assert likely_cause("o", defect).startswith("likely the O accumulator")
    assert likely_cause("o", GROSS / 2).startswith("likely the O accumulator")
    assert likely_cause("o") == likely_cause("o", None)


def test_a_16_bit_fail_far_past_the_edge_names_a_wrong_result_beside_the_roundings():
    """A red team (2026-12-06): 16 of 192 q.k columns dropped read 617x the O band's edge,
    a 1/sqrt(dv) scale 538x, both "likely the O accumulator kept in the dtype..." alone:
    past 100x a logic error is as likely as a rounding point, and is named too."""
    from flashbench.accuracy.bandrule import AMBIGUOUS, likely_cause

    for ratio in (617, 538, 36_690):
        text = likely_cause("o", ratio, "bf16")
        assert text.startswith("likely the O accumulator"), text
        assert f"at {ratio:.3g}x the edge it may as well be a wrong result" in text, text
    assert "wrong result" not in likely_cause("o", AMBIGUOUS / 2, "bf16")
    assert "wrong result" not in likely_cause("lse", 3.0, "fp16")
    # past the 61x of the standard's max error the precision defects reach, a wrong result
    # first (a probe: q.k over 64 of 192 columns in bf16, 98x the standard's and 201x the
    # edge, read "likely the O accumulator")
    text = likely_cause("o", 201, "bf16", standard_ratio=98.47)
    assert text.startswith("98.5x the same-dtype standard's max error, past the 80x") and \
        "likely a wrong result" in text, text
    assert likely_cause("lse", 900, "bf16", standard_ratio=61.28).startswith("likely the ")


@pytest.mark.parametrize("tensor", ["o", "lse", "dq", "dk", "dv"])
def test_at_fp32_no_kept_in_the_dtype_cause_is_named(tensor):
    """At fp32 the flash model keeps everything in fp32: "kept in the dtype" cannot be the
    cause, yet every FAIL read so before. An fp32 FAIL names the narrower roundings inside a
    kernel (tf32, fp16 accumulators: 1,410x the edge) and, past 100x, a wrong result beside
    them (a sink left out of an fp32 LSE read 22,702x); past GROSS it is a wrong result."""
    from flashbench.accuracy.bandrule import GROSS, likely_cause

    for dtype in ("fp32", "fp64"):
        for ratio in (1.2, 1_410, 22_702):
            said = likely_cause(tensor, ratio, dtype)
            assert "tf32" in said and "fp16 or bf16" in said and "kept in the dtype" \
                not in said and "wrong result" in said, said
        assert "beyond any rounding point" in likely_cause(tensor, 2 * GROSS, dtype)
        # past 100x the ratio is said, a wrong result first (an LSE off by 0.01: 23,345x
        # read "about 1.1-1.5x the band's edge", a probe 2026-12-07)
        said = likely_cause(tensor, 23_345, dtype)
        assert said.startswith("at 2.33e+04x the band's edge a wrong result"), said
        assert "1.1-1.5x" not in said
        assert "1.1-1.5x" in likely_cause(tensor, 1.3, dtype)
    assert "tf32" not in likely_cause(tensor, 22_702, "bf16")
    # a newcomer's textbook fp32 kernel (P = exp(S - LSE), 1.48-1.57x the edge) read the
    # exp(S - LSE) form as the last of four causes: near the edge it is named first
    # (O's alone: that form does not touch the LSE, and is the backward's own form)
    near = likely_cause(tensor, 1.5, "fp32")
    assert near.startswith("likely P = exp(S - LSE) with an fp32") is (tensor == "o"), near
    assert likely_cause(tensor, 3.0, "fp32").startswith("likely a narrower rounding")
    # an infinite ratio is said in words (a probe read "infx its band's edge")
    said = likely_cause(tensor, float("inf"), "bf16")
    assert said.startswith("an infinite error (a value finite where the true one is -inf") \
        and "infx" not in said, said


def test_a_band_fail_as_large_as_the_standard_models_names_the_materialised_form_first():
    """A red team (2026-12-06): FlashAttention's own reference backward (autograd through
    softmax in the dtype: the standard model's form, its 3x ratios about 1.00) FAILed the
    band (right: more error than a flash kernel) and was told to look for a dQ accumulator
    kept in the dtype, which it has not. A 16-bit max error within 0.85-1.2x the standard
    model's names the materialised form first; a flash kernel's usual ratios do not."""
    from flashbench.accuracy.bandrule import likely_cause

    assert "materialised form" in likely_cause("dq", 1.15, "bf16", 1.0)
    assert "materialised form" not in likely_cause("dq", 1.15, "bf16", 0.6)
    assert "materialised form" not in likely_cause("dq", 1.15, "fp32", 1.0)
    assert "wrong result" in likely_cause("dq", 1e6, "bf16", 1.0)


def test_a_16_bit_fail_far_over_the_standards_error_leads_with_a_wrong_result():
    """A probe (2026-12-07): all-zero bf16 gradients (196x the standard backward's max
    error, band 274x) read "likely the dQ accumulator kept in the dtype"; the defect
    table's precision losses reach 61x the standard's."""
    from flashbench.accuracy.bandrule import likely_cause

    text = likely_cause("dq", 274.0, "bf16", 196.0)
    assert text.startswith("196x the same-dtype standard's max error") and "wrong result" in text
    assert likely_cause("dq", 274.0, "bf16", 61.0).startswith("likely the dQ accumulator")


@pytest.mark.parametrize("garbage, why", [("[1, 2]", "not a band"), ("{oops", "Expecting"),
                                          ('{"key": "other", "edges": {}}',
                                           "another case's band"),
                                          # a probe: a NaN edge read as the user's bad input
                                          ('{"key": "k", "edges": {"o": {"max_abs": NaN}}}',
                                           "edge max_abs of o is nan, not a finite number"),
                                          ('{"key": "k", "edges": {"o": {"rmse": -1}}}',
                                           "edge rmse of o is -1"),
                                          ('{"key": "k", "edges": {"o": {"rmse": "1"}}}',
                                           "edge rmse of o is '1'"),
                                          ('{"key": "k", "edges": {"o": 3}}',
                                           "edges of o are no statistics")])
def test_an_unreadable_band_cache_entry_is_said_and_measured_again(tmp_path, monkeypatch,
                                                                   capsys, garbage, why):
    """A probe: a list in the band cache ended check with a traceback (AttributeError);
    garbage was measured again without a word. Said on stderr, measured, replaced."""
    monkeypatch.setenv("FLASHBENCH_CACHE", str(tmp_path))
    monkeypatch.setattr(band_cache, "_MEMO", {})
    band = {"key": "k", "edges": {"o": {"max_abs": 1.0}}}
    path = band_cache._cache_file("k", 3, "p")
    path.parent.mkdir(parents=True)
    path.write_text(garbage)
    assert band_cache.cached_band("k", 3, lambda: "p", lambda: band) == band
    err = capsys.readouterr().err
    assert f"the band cache entry {path} is unreadable (" in err and why in err
    assert json.loads(path.read_text()) == band  # replaced by the measurement
    monkeypatch.setattr(band_cache, "_MEMO", {})
    assert band_cache.cached_band("k", 3, lambda: "p", lambda: 1 / 0) == band  # read back
    assert not capsys.readouterr().err
