"""error_stats and the baseline rule."""

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from flashbench.accuracy import baseline_rule, error_stats, judge


def test_error_stats_values_by_hand():
    ref = np.array([1.0, -2.0, 0.0, 4.0])
    out = np.array([1.5, -2.0, 0.01, 3.0])
    s = error_stats(out, ref, "fp16")
    assert s["max_abs"] == 1.0
    assert s["rmse"] == pytest.approx(np.sqrt((0.25 + 0 + 1e-4 + 1) / 4))
    rms = np.sqrt((1 + 4 + 0 + 16) / 4)
    tau = 0.1 * rms  # 0.229..: the zero reference element is judged against tau
    rel = np.array([0.5, 0.0, 0.01 / tau, 0.25])
    assert s["rel_max"] == pytest.approx(rel.max())
    assert s["rel_p50"] == pytest.approx(np.percentile(rel, 50))
    assert s["max_abs_eps"] == pytest.approx(1.0 / 2**-10)
    assert s["count"] == 4 and s["nonfinite_mismatch"] == 0


def test_relative_error_does_not_blow_up_near_zero():
    ref = np.array([1e-300, 1.0, -1.0])
    out = ref + 1e-8
    assert error_stats(out, ref)["rel_max"] < 1e-6


def test_nonfinite_reference_must_be_matched_exactly():
    ref = np.array([-np.inf, 1.0])
    ok = error_stats(np.array([-np.inf, 1.0]), ref)
    assert ok["max_abs"] == 0 and ok["nonfinite_mismatch"] == 0 and ok["count"] == 1
    bad = error_stats(np.array([0.0, 1.0]), ref)
    assert bad["nonfinite_mismatch"] == 1 and bad["max_abs"] == np.inf
    nan = error_stats(np.array([np.nan, 1.0]), np.array([2.0, 1.0]))
    assert nan["nonfinite_mismatch"] == 1 and nan["rmse"] == np.inf


def test_accepts_torch_and_bfloat16():
    ref = np.array([1.0, 2.0])
    t = torch.tensor([1.0, 2.5], dtype=torch.bfloat16)
    b = np.array([1.0, 2.5], dtype=ml_dtypes.bfloat16)
    assert error_stats(t, ref)["max_abs"] == error_stats(b, ref)["max_abs"] == 0.5


def test_shape_mismatch_is_an_error():
    with pytest.raises(ValueError, match="same shape"):
        error_stats(np.zeros(3), np.zeros(4))


def test_baseline_rule():
    v = baseline_rule(3e-3, 1e-3, "bf16")  # floor = 2**-7 / 4
    assert v.passed and v.ratio == pytest.approx(3.0) and v.floor == 2**-9
    assert not baseline_rule(5e-3, 1e-3, "bf16").passed
    assert baseline_rule(2e-3, 1e-3, "fp16").passed
    assert not baseline_rule(2.3e-3, 1e-3, "fp16").passed  # 2.3e-3 > 2e-3 + 2.4e-4
    assert baseline_rule(0.0, 0.0, "fp32").ratio == 0.0
    assert baseline_rule(1e-9, 0.0, "fp32").ratio == np.inf


def test_judge_covers_o_and_lse():
    ref = (np.zeros((2, 3)), np.zeros(2))
    std = (np.full((2, 3), 1e-3), np.full(2, 1e-3))
    good = (np.full((2, 3), 1e-3), np.full(2, 1e-3))
    bad_lse = (np.full((2, 3), 1e-3), np.full(2, 1e-2))
    assert judge(good, std, ref, "fp16")["lse"]["verdict"].passed
    j = judge(bad_lse, std, ref, "fp16")
    assert j["o"]["verdict"].passed and not j["lse"]["verdict"].passed


def test_fp8_floor_is_that_of_bf16_output():
    """fp8 kernels write O in bf16: the floor is bf16's eps/4 (FlashAttention's fwd_atol
    on its bf16 fp8 reference), not e4m3's 2**-3 / 4 that would pass almost anything."""
    v = baseline_rule(3e-3, 1e-3, "fp8")
    assert v.floor == 2**-9 and v.passed  # 3e-3 <= 2e-3 + 1.95e-3
    assert not baseline_rule(4.5e-3, 1e-3, "fp8").passed  # 4.5e-3 > 3.95e-3
    assert baseline_rule(4.5e-3, 1e-3, "fp8", floor=2.0**-3 / 4).passed  # e4m3's floor would


def test_nonfinite_kernel_error_always_fails_and_ratio_is_never_nan():
    inf, nan = float("inf"), float("nan")
    for kernel, standard in ((inf, inf), (inf, 1e-3), (inf, 0.0), (nan, inf), (nan, 1e-3)):
        v = baseline_rule(kernel, standard, "fp16")
        assert not v.passed and v.ratio == inf, (kernel, standard, v)
    # the standard overflowed, the kernel did not: it passes; with no fallback yardstick
    # given there is no honest ratio (NaN, yardstick "none"), never a "perfect" 0
    v = baseline_rule(1e-3, inf, "fp16")
    assert v.passed and np.isnan(v.ratio) and v.yardstick == "none"
    with pytest.raises(ValueError, match="standard_error"):
        baseline_rule(1e-3, nan, "fp16")
    with pytest.raises(ValueError, match="kernel_error"):
        baseline_rule(-1.0, 1e-3, "fp16")


def test_all_nan_kernel_fails_where_the_fp16_standard_overflows():
    """Issue 16, item 4: fp16 scores near 7e4 overflow the standard model (its S is
    rounded to fp16: inf - inf = NaN in the softmax), so its error is inf; a kernel
    that returns all NaN used to pass with ratio NaN. It must fail, ratio inf."""
    from flashbench.numerics import standard_model
    from flashbench.reference import attention

    q = np.array([[[300.0, 0.0], [0.0, 1.0]]])  # row 0 scores 9e4 and 0: beyond fp16's 65504
    k = np.array([[[300.0, 0.0], [0.0, 1.0], [1.0, 1.0]]])
    v = np.array([[[1.0], [2.0], [3.0]]])
    ref = attention(q, k, v, scale=1.0)
    assert np.all(np.isfinite(ref[0])) and np.all(np.isfinite(ref[1]))
    with np.errstate(over="ignore", invalid="ignore"):  # the overflow is the point
        std = standard_model(q, k, v, "fp16", scale=1.0)
    kernel = (np.full_like(ref[0], np.nan), np.full_like(ref[1], np.nan))
    j = judge(kernel, std, ref, "fp16")
    assert j["o"]["standard"]["max_abs"] == np.inf  # the standard model did overflow
    for part in ("o", "lse"):
        verdict = j[part]["verdict"]
        assert not verdict.passed and verdict.ratio == np.inf


def test_where_the_standard_overflowed_the_ratio_is_against_the_fallback():
    """Finding 7: kernel / inf = 0 read as "perfect" in history. The kernel still passes
    (it is more accurate than the overflowing standard), its ratio is taken against the
    fallback (the same-dtype flash model's error) and the verdict names it."""
    inf = float("inf")
    v = baseline_rule(1e-3, inf, "fp16", fallback_error=5e-4)
    assert v.passed and v.ratio == pytest.approx(2.0) and v.yardstick == "flash_model"
    v = baseline_rule(1e-2, inf, "fp16", fallback_error=1e-3)  # 10x the flash model: passes
    assert v.passed and v.ratio == pytest.approx(10.0)
    assert baseline_rule(1e-3, 1e-3, "fp16", fallback_error=5e-4).yardstick == "standard"
    v = baseline_rule(inf, inf, "fp16", fallback_error=5e-4)  # non-finite kernel: fails
    assert not v.passed and v.ratio == inf
    assert baseline_rule(1e-3, inf, "fp16", fallback_error=inf).yardstick == "none"


def _overflowing_fp16_problem():
    """q k^T * scale of 9e4 in row 0 (beyond fp16's 65504): the fp16 standard model's S
    overflows (inf - inf = NaN in its softmax); the flash model's fp32 S does not."""
    q = np.zeros((1, 1, 2, 16))
    k = np.zeros((1, 1, 3, 16))
    q[..., 0, 0], k[..., 0, 0] = 600.0, 600.0  # 3.6e5 * 0.25 = 9e4
    q[..., 1, 1], k[..., 1, 1], k[..., 2, :2] = 1.0, 1.0, 1.0
    v = np.arange(48, dtype=np.float64).reshape(1, 1, 3, 16) / 48
    return q, k, v


def test_judge_uses_the_fallback_only_where_the_standard_overflowed():
    from flashbench.numerics import flash_model, standard_model
    from flashbench.reference import attention

    q, k, v = _overflowing_fp16_problem()
    ref = attention(q, k, v)
    with np.errstate(over="ignore", invalid="ignore"):
        std = standard_model(q, k, v, "fp16")
    flash = flash_model(q, k, v, "fp16")
    calls = []

    def fallback():
        calls.append(1)
        return flash

    j = judge(flash, std, ref, "fp16", fallback=fallback)
    assert j["o"]["standard"]["max_abs"] == np.inf
    for part in ("o", "lse"):
        verdict = j[part]["verdict"]
        assert verdict.passed and verdict.yardstick == "flash_model" and verdict.ratio == 1.0
    assert calls  # asked for where the standard overflowed
    calls.clear()
    fine = standard_model(q / 10, k / 10, v, "fp16")  # no overflow: the fallback is not asked
    assert judge(fine, fine, attention(q / 10, k / 10, v), "fp16",
                 fallback=fallback)["o"]["verdict"].yardstick == "standard"
    assert not calls


def test_accuracy_records_name_the_yardstick_where_the_standard_overflowed():
    """Through measure_accuracy: the flash model's record reads ratio 1 against itself
    (it was 0), names the yardstick, passes; the check table says "(vs flash_model)"."""
    from flashbench.cli.check_tables import judge_cells
    from flashbench.inputs import Shape
    from flashbench.measure.forward import measure_accuracy
    from flashbench.measure.records import Case

    q, k, v = _overflowing_fp16_problem()
    with np.errstate(over="ignore", invalid="ignore"):
        (rec,) = measure_accuracy(Case(Shape(1, 1, 2, 3, 16)), ["fp16"], ["flash_model"],
                                  inputs=(q, k, v))
    assert rec.o_standard["max_abs"] == np.inf
    assert rec.passed and rec.o_ratio == 1.0 and rec.lse_ratio == 1.0
    assert rec.yardsticks == {"o": "flash_model", "lse": "flash_model"}
    row = rec.as_dict()
    assert "1.00 (vs flash_model)" in judge_cells(row)


def test_where_the_standard_is_exact_the_ratio_is_against_the_fallback():
    """A gradient that is exactly 0 (every row sees one key: dq = dk = 0) is exact in plain
    attention's backward and within rounding in a flash one: the fallback (the flash
    model's error) is the yardstick there, not a floor of 0 that fails every flash kernel."""
    v = baseline_rule(3e-9, 0.0, "fp32", factor=3.0, floor=0.0, fallback_error=2e-9)
    assert v.passed and v.ratio == pytest.approx(1.5) and v.yardstick == "flash_model"
    assert not baseline_rule(1e-8, 0.0, "fp32", factor=3.0, floor=0.0,
                             fallback_error=2e-9).passed  # 5x the flash model's: fails
    v = baseline_rule(1e-8, 0.0, "fp32", floor=0.0)  # no fallback given: as before
    assert not v.passed and v.ratio == float("inf") and v.yardstick == "standard"
    assert baseline_rule(0.0, 0.0, "fp32", fallback_error=2e-9).yardstick == "standard"


def test_a_one_key_window_judges_the_flash_models_gradients_against_themselves():
    from flashbench.accuracy import judge_gradient
    from flashbench.numerics import flash_model_grad, standard_model_grad
    from flashbench.reference import attention_grad

    rng = np.random.default_rng(0)
    q, k, v, do = (rng.standard_normal((1, 2, 48, 32)) for _ in range(4))
    ref = attention_grad(q, k, v, do, window=(0, 0))
    std = standard_model_grad(q, k, v, do, "fp32", window=(0, 0))
    flash = flash_model_grad(q, k, v, do, "fp32", window=(0, 0))
    for i in (0, 1):  # dq, dk: exactly 0 in float64 and in the standard backward
        assert not ref[i].any() and not std[i].any() and flash[i].any()
        j = judge_gradient(flash[i], std[i], ref[i], "fp32", fallback=flash[i])
        assert j["verdict"].passed and j["verdict"].yardstick == "flash_model"


def test_a_verdict_in_words_says_its_yardstick_and_limit_not_a_share_of_it():
    """speed's messages said "2.5x the baseline rule's limit" for a ratio of 2.5 to the
    standard's error: 1.25x the 2x rule's limit. The words now name the yardstick and the
    limit the ratio is read against."""
    from flashbench.accuracy import gradient_rule

    v = baseline_rule(2.5e-7, 1e-7, "fp32", floor=1e-9)
    assert not v.passed
    assert v.words() == ("2.5x the same-dtype standard's error 1e-07 (PASS iff at most 2x it "
                         "+ 1e-09)")
    tried = baseline_rule(7e-3, 1e-3, "bf16", floor=0.0, fallback_error=3e-3)
    assert not tried.passed and tried.words() == (
        "7x the same-dtype standard's error 0.001 (PASS iff at most 2x it + 0, or 2x the "
        "same-dtype flash model's error 0.003 + 0)")  # 5.9e-3 would pass: both limits said
    exact = gradient_rule(9.5e-7, 0.0, "fp32", floor=2.4e-7)  # a window (0, 0)'s dv
    assert exact.words() == ("the same-dtype standard's error is 0 (PASS iff at most 3x it + "
                             "2.4e-07)")
    rescued = gradient_rule(5e-7, 1e-7, "fp32", floor=0.0, fallback_error=2e-7)
    assert rescued.passed and rescued.yardstick == "flash_model"
    assert rescued.words().startswith("2.5x the same-dtype flash model's error 2e-07 (PASS "
                                      "iff at most 3x it")


@given(st.lists(st.one_of(st.floats(0, 10), st.just(float("inf"))), min_size=1, max_size=9),
       st.sampled_from([0, 10, 49.5, 50, 75, 99, 100]))
def test_percentiles_of_errors_with_inf_are_the_linear_interpolations_limit(values, q):
    """numpy's percentile of [1, inf] at 50 is NaN (its lerp: inf - inf) and warns; the
    helper's is inf, as a + t x (inf - a) is for t > 0, and the exact order statistic at
    t = 0 (a review caught "lower" reading 1 there)."""
    from flashbench.accuracy.metrics import percentiles

    x = np.sort(np.array(values))
    pos = q / 100 * (len(x) - 1)
    i, t = int(np.floor(pos)), pos - np.floor(pos)
    want = x[i] if t == 0 else (np.inf if np.isinf(x[i + 1]) else x[i] + t * (x[i + 1] - x[i]))
    got = percentiles(np.array(values), [q])[0]
    assert got == want or abs(got - want) <= 1e-12 * max(1.0, abs(want)), (values, q, got)
