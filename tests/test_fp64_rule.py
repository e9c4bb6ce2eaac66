"""At fp64 the same-dtype standard attention is the float64 reference's own arithmetic: its
error is 0 or a few ulp, a draw and no yardstick. ``check --dtype fp64`` FAILed the flash
model (correct by construction) on the default outliers cases and at large logits; the floor
at fp64 is now the exactness bound, 1e-12 x max(1, the largest |value|)."""

import json
import textwrap

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from flashbench.accuracy import judge
from flashbench.accuracy.rules import EXACT_TOL, baseline_rule, exact_floor
from flashbench.cli import main


@settings(max_examples=30, deadline=None)
@given(st.floats(-8, 8), st.integers(0, 2**31 - 1))
def test_within_the_exactness_bound_passes_at_fp64_and_an_fp32_error_fails(log_scale, seed):
    """An error at the exactness bound x 0.9 passes whatever the standard's; one of fp32's
    rounding (2^-24 of the largest value) fails, where the values' magnitude is over 1."""
    rng = np.random.default_rng(seed)
    ref = rng.standard_normal((2, 16, 8)) * 10.0 ** log_scale
    lse = rng.standard_normal((2, 16)) * 10.0 ** log_scale
    bound = exact_floor(ref)
    assert bound == EXACT_TOL * max(1.0, float(np.abs(ref).max()))
    near = ref + 0.9 * bound * np.sign(rng.standard_normal(ref.shape))
    lse_near = lse + 0.9 * exact_floor(lse)
    verdict = judge((near, lse_near), (ref, lse), (ref, lse), "fp64")
    assert verdict["o"]["verdict"].passed and verdict["lse"]["verdict"].passed
    off = ref * (1 + 2.0 ** -24)
    wrong = judge((off, lse), (ref, lse), (ref, lse), "fp64")["o"]["verdict"]
    assert wrong.passed == (float(np.abs(off - ref).max()) <= bound)
    if np.abs(ref).max() > 1:
        assert not wrong.passed


def test_the_baseline_rule_alone_floors_fp64_at_the_bound_of_unit_values():
    assert baseline_rule(0.9e-12, 0.0, "fp64").passed
    assert not baseline_rule(1.1e-12, 0.0, "fp64").passed
    assert baseline_rule(1e-12, 0.0, "fp32").floor == 2.0 ** -23 / 4  # fp32's, unchanged


def test_check_at_fp64_passes_the_flash_model_at_large_logits(capsys):
    """The case that FAILed: O 8.1e-14 against the standard's 8.9e-16 (91.5x), scores near
    5,000 that a 7-key block's matrix product rounds otherwise than the whole one."""
    rc = main(["check", "--shape", "1x4x200x96", "--seed", "3", "--dist", "large-logits",
               "--causal", "on", "--pass", "fwd", "--block", "7", "--no-backends", "--dtype",
               "fp64", "--json", "--quiet"])
    (row,) = json.loads(capsys.readouterr().out)["dtypes"]
    assert rc == 0 and row["passed"], row
    assert row["o_ratio"] > 2  # the 2x rule alone would have failed it


FP64 = textwrap.dedent('''
    import torch
    from flashbench.kernels.torch_peers import naive_attention


    def fp32_inside(q, k, v, causal=False):
        o, lse = naive_attention(q.float(), k.float(), v.float(), causal)
        return o.to(q.dtype), lse.to(q.dtype)
    fp32_inside.flashbench_dtypes = ("fp64",)


    def honest(q, k, v, causal=False):
        return naive_attention(q, k, v, causal)
    honest.flashbench_dtypes = ("fp64",)
''')


def test_a_kernel_that_computes_in_fp32_fails_fp64_and_an_honest_one_passes(user_module,
                                                                               capsys):
    user_module("fbf64", FP64)
    rc = main(["check", "--shape", "1x2x128x32", "--dist", "outliers", "--causal", "on",
               "--pass", "fwd", "--dtype", "fp64", "--only", "fbf64:fp32_inside",
               "fbf64:honest", "--json", "--quiet"])
    report = json.loads(capsys.readouterr().out)
    rows = {r["backend"]: r for r in report["backends"]}
    assert rc == 1 and all(r["passed"] for r in report["dtypes"]), report["dtypes"]
    assert not rows["fbf64:fp32_inside"]["passed"], rows["fbf64:fp32_inside"]
    assert rows["fbf64:honest"]["passed"], rows["fbf64:honest"]


def test_a_module_that_does_not_import_fails_at_fp64_for_that_reason(capsys):
    """A failing backend declares every dtype: --dtype fp64 said "takes fp32, fp16, bf16,
    not fp64" of a module that did not import (exit 2, nothing judged)."""
    rc = main(["check", "--shape", "1x2x64x32", "--causal", "off", "--pass", "fwd", "--dtype",
               "fp64", "--only", "fbnothere_64:fn", "--json", "--quiet"])
    (row,) = json.loads(capsys.readouterr().out)["backends"]
    assert rc == 1 and not row["passed"], row
    assert row["failed"].startswith("cannot import fbnothere_64:fn"), row


def test_a_pass_under_the_floor_beside_an_exact_standard_reads_so(capsys):
    """A probe (2026-12-07) read "2x LSE fp64 inf of 2 (floor)" of a PASS: infinitely over
    its limit. The standard's LSE error is exactly 0 at fp64; the line says the error is
    under the floor."""
    rc = main(["check", "--shape", "1x4x256x64", "--causal", "off", "--pass", "fwd",
               "--dtype", "fp64", "--no-backends"])
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("  flash_model")]
    assert rc == 0 and lines and all(" inf of " not in x for x in lines), lines
    assert any(x.endswith("2x LSE fp64 under the floor") for x in lines), lines
