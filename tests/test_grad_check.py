"""Gradient records (flashbench.measure.backward) and the check's gradient tables."""

import json

import numpy as np
import pytest

from flashbench.accuracy import GRAD_FACTOR
from flashbench.cli import main
from flashbench.cli.check_tables import render_tables
from flashbench.inputs import Shape
from flashbench.measure import backward as MG
from flashbench.measure.records import Case, Unavailable
from flashbench.measure.run import overall_passed, run_check

SMALL = Case(Shape(1, 2, 40, 48, 16), "normal", True)


def test_records_for_the_model_and_every_differentiable_backend():
    recs = MG.measure_gradients(SMALL, ["fp32", "bf16", "fp64"],
                                ["flash_model", "torch-naive", "reference", "triton"])
    got = {(r.kernel, r.dtype) for r in recs}
    # fp64 has no standard backward to judge against (it is the reference); the
    # float64 NumPy reference backend is not differentiable: no record for either
    assert got == {(k, d) for k in ("flash_model", "torch-naive", "triton")
                   for d in ("fp32", "bf16")}
    for r in recs:
        for g in MG.GRADS:
            kernel, std = getattr(r, g)["max_abs"], getattr(r, f"{g}_standard")["max_abs"]
            assert getattr(r, f"{g}_ratio") == pytest.approx(kernel / std)
            assert 0 < kernel < (1e-5 if r.dtype == "fp32" else 0.1)
        assert r.passed
        assert r.peer == (r.kernel == "torch-naive")
    row = recs[0].as_dict()
    json.dumps(row)  # JSON-ready
    assert row["case"] == SMALL.label() and {"dq", "dk_ratio", "passed"} <= set(row)


def test_a_wrong_backward_fails_the_rule(monkeypatch):
    real = MG.numerics.flash_model_grad

    def off_by_a_bit(q, k, v, do, dtype, **kw):
        dq, dk, dv = real(q, k, v, do, dtype, **kw)
        return dq, dk, (np.asarray(dv, dtype=np.float64) * 1.05).astype(dv.dtype)

    monkeypatch.setattr(MG.numerics, "flash_model_grad", off_by_a_bit)
    (rec,) = MG.measure_gradients(SMALL, ["bf16"], ["flash_model"])
    assert not rec.passed and rec.dv_ratio > GRAD_FACTOR
    assert rec.dq_ratio <= GRAD_FACTOR and rec.dk_ratio <= GRAD_FACTOR


def test_the_interpreter_limit_applies_to_the_triton_backward(monkeypatch):
    import flashbench.measure.records as records

    monkeypatch.setattr(records, "INTERPRETER_LIMIT", 100)
    recs = MG.measure_gradients(SMALL, ["fp16"], ["triton"])
    assert len(recs) == 1 and isinstance(recs[0], Unavailable)
    assert "interpreter" in recs[0].reason


def test_grad_exactness_is_relative_to_the_gradients_scale():
    q, k, v = (np.random.default_rng(0).standard_normal((1, 2, n, 16)) for n in (30, 50, 50))
    do = MG.grad_output(Shape(1, 2, 30, 50, 16))
    from flashbench import reference

    ref = reference.attention_grad(q, k, v, do, causal=True)
    recs = MG.backward_exactness(Case(Shape(1, 2, 30, 50, 16), causal=True), q, k, v, do, ref,
                                 7)
    assert [r.what for r in recs] == ["dq", "dk", "dv"]
    scale = max(np.abs(g).max() for g in ref)
    for r in recs:
        assert r.passed and r.scale == scale and r.rel == pytest.approx(r.max_abs / scale)
        assert r.rel <= 1e-12


def test_grad_output_is_seeded_and_apart_from_the_inputs():
    s = Shape(1, 2, 8, 8, 4, dv=3)
    a, b = MG.grad_output(s, 0), MG.grad_output(s, 0)
    assert a.shape == (1, 2, 8, 3) and np.array_equal(a, b)
    assert not np.array_equal(a, MG.grad_output(s, 1))


def test_default_gradient_cases_are_small_and_cover_gqa_and_nq_ne_nk():
    cases = MG.default_backward_cases()
    assert {c.causal for c in cases} == {False, True}
    assert any(c.shape.Hkv and c.shape.Nq != c.shape.Nk for c in cases)
    assert all(c.shape.B * c.shape.H * c.shape.Nq * c.shape.Nk <= 2**18 for c in cases)


def test_check_report_and_tables():
    report = run_check([Case(Shape(1, 1, 24, 24, 16))], dtypes=["fp16"], backends=["triton"],
                       backward_cases=[SMALL])
    assert report["passed"] and report["grad_cases"] == [SMALL.label()]
    assert [r["what"] for r in report["grad_exactness"]] == ["dq", "dk", "dv"]
    assert {r["kernel"] for r in report["gradients"]} == {"flash_model", "triton"}
    text = render_tables(report)
    assert "4. Backward exactness in float64" in text
    assert "5. Gradients against the float64 ones, and the gradient rule" in text
    assert "3 x the same-dtype standard backward's + floor" in text
    assert "dq ratio" in text and "triton" in text.split("5. Gradients")[1]
    json.dumps(report)


def test_default_gradient_cases_are_named_in_the_output(monkeypatch):
    monkeypatch.setattr(MG, "default_backward_cases", lambda: [SMALL])
    import flashbench.measure.run as run

    monkeypatch.setattr(run, "default_backward_cases", lambda: [SMALL])
    report = run_check([Case(Shape(1, 1, 24, 24, 16), causal=True)], dtypes=["bf16"])
    assert report["grad_cases"] == [SMALL.label()]
    assert "default gradient cases" in render_tables(report)
    # a check without causal cases takes no causal gradient case
    report = run_check([Case(Shape(1, 1, 24, 24, 16))], dtypes=["bf16"])
    assert report["grad_cases"] == []


def test_a_failing_gradient_fails_the_check_unless_a_peer():
    ok = {"exactness": [{"passed": True}], "dtypes": [{"passed": True}], "backends": []}
    assert overall_passed(ok | {"gradients": [{"passed": False, "peer": True}]})
    assert overall_passed(ok | {"gradients": [{"skipped": "interpreter"}]})
    assert not overall_passed(ok | {"gradients": [{"passed": False, "peer": False}]})
    assert not overall_passed(ok | {"grad_exactness": [{"passed": False}]})


def test_cli_judges_gradients_on_the_shapes_given(capsys):
    rc = main(["check", "--shape", "1x4/2x40x24x16", "--dtype", "fp32", "--causal", "on",
               "--dist", "normal", "--backend", "triton", "--json", "--quiet"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0 and report["grad_cases"] == ["normal B=1 H=4 Hkv=2 Nq=40 Nk=24 d=16 causal"]
    triton = [r for r in report["gradients"] if r["kernel"] == "triton"]
    assert triton and all(r[g]["max_abs"] <= 1e-5 for r in triton for g in MG.GRADS)


def test_where_the_standard_backward_overflowed_ratios_are_against_the_flash_model():
    """Finding 7 for gradients: fp16 scores of 9e4 overflow the standard backward (error
    inf). A finite kernel passes; its ratios are against the same-dtype flash model
    backward (the flash model reads 1, the Triton backward about 1), never 0."""
    q, k, v = np.zeros((1, 1, 2, 16)), np.zeros((1, 1, 3, 16)), np.zeros((1, 1, 3, 16))
    q[..., 0, 0], k[..., 0, 0] = 600.0, 600.0  # 3.6e5 * 0.25 = 9e4 > 65504
    q[..., 1, 1], k[..., 1, 1], k[..., 2, :2] = 1.0, 1.0, 1.0
    v[...] = np.arange(48).reshape(1, 1, 3, 16) / 48
    do = np.random.default_rng(1).standard_normal((1, 1, 2, 16))
    with np.errstate(over="ignore", invalid="ignore"):
        recs = MG.measure_gradients(Case(Shape(1, 1, 2, 3, 16)), ["fp16"],
                                    ["flash_model", "triton"], inputs=(q, k, v, do),
                                    band_rule=False)  # hand-made inputs: not the band's
    by = {r.kernel: r for r in recs}
    assert by["flash_model"].dq_standard["max_abs"] == np.inf  # it did overflow
    for r in recs:
        assert r.passed and r.yardsticks and set(r.yardsticks.values()) == {"flash_model"}
        for g in MG.GRADS:
            if g in r.yardsticks:
                assert 0 < getattr(r, f"{g}_ratio") < GRAD_FACTOR, (r.kernel, g)
    assert all(by["flash_model"].__dict__[f"{g}_ratio"] == 1.0 for g in by["flash_model"].yardsticks)
    assert "(vs flash_model)" in render_tables(
        {"meta": {"seed": 0, "block": 64, "date": ""}, "exactness": [], "dtypes": [],
         "backends": [], "grad_cases": ["x"], "grad_exactness": [],
         "gradients": [r.as_dict() for r in recs], "passed": True})
