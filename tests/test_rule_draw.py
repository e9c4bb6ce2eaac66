"""Where the baseline rule is a draw, the band rule judges alone (bandjudge.combine's
``model``: the flash model's own record). A red team (2026-12-06): `check --shape 1x1x2x16 --seed 2 --only k:good` FAILed
the run (exit 1) on the flash model's own gradient record (dk 8.63x the standard's, limit
3x) while every kernel passed: at a few values the rule's max is a draw (docs/check.md).
A wrong kernel at that size still FAILs, by the band rule."""

from __future__ import annotations

import json
import textwrap

import pytest

from flashbench.accuracy.bandrule import BandVerdict
from flashbench.measure.bandjudge import DRAW, combine


def _band(passed: bool) -> BandVerdict:
    ratio = 0.5 if passed else 3.0
    return BandVerdict(tensor="o", ratio=ratio, passed=passed, stat="rmse",
                       ratios={"rmse": ratio}, kernel={"rmse": 1e-7}, edges={"rmse": 2e-7},
                       multipliers={"rmse": 1.4})


@pytest.mark.parametrize("base_ok,band_ok", [(True, True), (True, False), (False, False)])
def test_the_models_record_is_forgiven_only_where_the_baseline_alone_fails(base_ok, band_ok):
    rules = combine({"o": (1.0 if base_ok else 5.0, base_ok)}, {"o": _band(band_ok)}, 2.0,
                    "fp32", model=True)
    assert rules["passed"] is (base_ok and band_ok) and "baseline_draw" not in rules


@pytest.mark.parametrize("drawn", [True, False])
def test_a_baseline_fail_of_the_models_own_record_is_not_counted(drawn):
    rules = combine({"o": (5.0, False)}, {"o": _band(True)}, 2.0, "fp32", model=drawn)
    assert rules["passed"] is drawn and rules["baseline_passed"] is False
    assert rules.get("baseline_draw", False) is drawn
    assert rules["disagreement"].startswith(DRAW) is drawn


def _check(capsys, *args):
    """``flashbench check --json *args`` through the CLI's main in this process (a user's
    kernel in its worker process, as ever; python and torch's import spared): (exit status,
    the report, or the output where it is none)."""
    from flashbench.cli import main

    capsys.readouterr()
    code = main(["check", "--json", *args])
    out, err = capsys.readouterr()
    return code, json.loads(out) if out.startswith("{") else out + err


def test_the_red_teams_tiny_case_passes_and_says_which_rule_judged(capsys):
    code, report = _check(capsys, "--shape", "1x1x2x16", "--seed", "2", "--no-backends")
    assert code == 0, report
    rows = report["gradients"]
    drawn = [r for r in rows if r.get("baseline_draw")]
    assert drawn and all(r["passed"] and r["baseline_passed"] is False for r in drawn)
    assert all(r["disagreement"].startswith(DRAW) for r in drawn)


def test_a_wrong_kernel_at_that_size_still_fails(user_module, capsys):
    user_module("k", textwrap.dedent("""
        import math, torch
        def scaled(q, k, v, causal=False, scale=None):
            s = 1.5 / math.sqrt(q.shape[-1])  # the wrong scale
            return torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=causal, scale=s), None
    """))
    code, report = _check(capsys, "--shape", "1x1x2x16", "--seed", "2", "--only", "k:scaled",
                          "--pass", "fwd", "--dtype", "fp32")
    assert code == 1, report
    rows = [r for r in report["backends"] if r.get("backend") == "k:scaled"]
    assert rows and not any(r["passed"] for r in rows)
    assert not any(r.get("baseline_draw") for r in rows)


def test_a_kernel_is_never_forgiven_by_the_flash_models_draw():
    """A review (2026-12-06) of the first form, which forgave any kernel where the flash
    model failed too: at 1x2x1024x2x64 causal (1,022 of 1,024 rows see no key: their exact
    zeros dilute the band's statistics) the model's own gradients with one dq element 30x
    its max error off PASSed (baseline ratio 100x, band 0.43). The flash model's record is
    judged by its band; a kernel keeps the fallback alone (within 3x the model's error)."""
    import functools

    import numpy as np

    from flashbench import numerics, reference
    from flashbench.inputs.precision import get_precision
    from flashbench.inputs.problem import Shape, make_qkv
    from flashbench.measure.backward import _grad_accuracy, grad_output
    from flashbench.measure.bandjudge import CaseBands
    from flashbench.measure.records import Case, private

    case = Case(Shape(1, 2, 1024, 2, 64), "normal", True)
    q, k, v, do = private(*make_qkv(case.shape, case.dist, 0), grad_output(case.shape, 0))
    kw = case.kwargs(0)
    ref = reference.attention_grad(q, k, v, do, **kw)[:3]
    bands = CaseBands(case, (q, k, v, do), grad=True, seed=0)
    prec = get_precision("fp32")
    std = numerics.standard_model_grad(q, k, v, do, prec, **kw)[:3]
    flash = functools.cache(lambda: numerics.flash_model_grad(q, k, v, do, prec, **kw)[:3])
    model = _grad_accuracy(case, "flash_model", prec, flash(), std, ref, flash, bands=bands)
    assert model.baseline_passed is False and model.passed and model.baseline_draw
    grads = [np.array(g, np.float64) for g in flash()]
    grads[0][0, 0, -1, 5] += 30 * np.abs(flash()[0] - ref[0]).max()
    kernel = _grad_accuracy(case, "k:one-off", prec, grads, std, ref, flash, bands=bands)
    assert kernel.band_passed and not kernel.baseline_passed  # what the draw forgave
    assert not kernel.passed and not kernel.baseline_draw
