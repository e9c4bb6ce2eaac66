"""Where the baseline rule is a draw, the band rule judges alone (bandjudge.combine's
``draw``). A red team (2026-12-06): `check --shape 1x1x2x16 --seed 2 --only k:good` FAILed
the run (exit 1) on the flash model's own gradient record (dk 8.63x the standard's, limit
3x) while every kernel passed: at a few values the rule's max is a draw (docs/check.md).
A wrong kernel at that size still FAILs, by the band rule."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from flashbench.accuracy.bandrule import BandVerdict
from flashbench.measure.bandjudge import DRAW, combine


def _band(passed: bool) -> BandVerdict:
    ratio = 0.5 if passed else 3.0
    return BandVerdict(tensor="o", ratio=ratio, passed=passed, stat="rmse",
                       ratios={"rmse": ratio}, kernel={"rmse": 1e-7}, edges={"rmse": 2e-7},
                       multipliers={"rmse": 1.4})


def _never():
    raise AssertionError("draw asked where the rules do not disagree that way")


@pytest.mark.parametrize("base_ok,band_ok", [(True, True), (True, False), (False, False)])
def test_draw_is_asked_only_where_the_baseline_alone_fails(base_ok, band_ok):
    rules = combine({"o": (1.0 if base_ok else 5.0, base_ok)}, {"o": _band(band_ok)}, 2.0,
                    "fp32", draw=_never)
    assert rules["passed"] is (base_ok and band_ok) and "baseline_draw" not in rules


@pytest.mark.parametrize("drawn", [True, False])
def test_a_baseline_fail_the_model_shares_is_not_counted(drawn):
    rules = combine({"o": (5.0, False)}, {"o": _band(True)}, 2.0, "fp32", draw=lambda: drawn)
    assert rules["passed"] is drawn and rules["baseline_passed"] is False
    assert rules.get("baseline_draw", False) is drawn
    assert rules["disagreement"].startswith(DRAW) is drawn


def _check(tmp_path, *args):
    r = subprocess.run([sys.executable, "-m", "flashbench.cli", "check", "--json", *args],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    return r.returncode, json.loads(r.stdout) if r.stdout.startswith("{") else r


def test_the_red_teams_tiny_case_passes_and_says_which_rule_judged(tmp_path):
    code, report = _check(tmp_path, "--shape", "1x1x2x16", "--seed", "2", "--no-backends")
    assert code == 0, report
    rows = report["gradients"]
    drawn = [r for r in rows if r.get("baseline_draw")]
    assert drawn and all(r["passed"] and r["baseline_passed"] is False for r in drawn)
    assert all(r["disagreement"].startswith(DRAW) for r in drawn)


def test_a_wrong_kernel_at_that_size_still_fails(tmp_path):
    (tmp_path / "k.py").write_text(textwrap.dedent("""
        import math, torch
        def scaled(q, k, v, causal=False, scale=None):
            s = 1.5 / math.sqrt(q.shape[-1])  # the wrong scale
            return torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=causal, scale=s), None
    """))
    code, report = _check(tmp_path, "--shape", "1x1x2x16", "--seed", "2", "--only",
                          "k:scaled", "--pass", "fwd", "--dtype", "fp32")
    assert code == 1, report
    rows = [r for r in report["backends"] if r.get("backend") == "k:scaled"]
    assert rows and not any(r["passed"] for r in rows)
    assert not any(r.get("baseline_draw") for r in rows)
