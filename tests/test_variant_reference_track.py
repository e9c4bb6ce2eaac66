"""bench_variants.TrackVariantReference: the float64 reference under each variant and the
inputs each variant's case draws, against the suite's own (a red team, 2026-12-08: heads
that took the softcap's tanh in float32, or drew N(0, 1) q and k for a softcap case again,
read kernels' rows worse with nothing naming the truth or the inputs)."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.bench_variants import TrackVariantReference  # noqa: E402
from flashbench.history.suites import ACCURACY, rule_limit  # noqa: E402

SHAPE = "1x2x1024x1024x64"


def _errors() -> dict:
    return {name: r for (name, _), r in TrackVariantReference().setup_cache().items()}


def test_todays_reference_and_draws_read_the_floor():
    errors = _errors()
    assert set(errors) == {"causal window=(128,0)", "softcap=30", "sinks"}
    assert all(e == {"inputs": 0.01, "o": 0.01} for e in errors.values()), errors
    name = "bench_variants.TrackVariantReference.track_reference_o_exactness"
    assert ACCURACY.search(name)  # judged as the history's accuracy, against its limit 1
    assert rule_limit("reference_o_exactness") == 1.0


@pytest.mark.parametrize("patch, variant, what", [
    ("flashbench.inputs.problem.softcap_gain", "softcap=30", "inputs"),
    ("flashbench.measure.records.sink_logits", "sinks", "inputs"),
    ("flashbench.reference.attention", "softcap=30", "o")])
def test_a_head_that_moves_the_truth_or_the_draws_reads_past_the_limit(monkeypatch, patch,
                                                                      variant, what):
    import flashbench.reference

    real = flashbench.reference.attention
    fakes = {
        "flashbench.inputs.problem.softcap_gain": lambda c, dist="normal": 1.0,
        "flashbench.measure.records.sink_logits":
            lambda h, seed, keys, cap=None: np.random.default_rng(seed + 2).standard_normal(h),
        "flashbench.reference.attention":  # the softcap's tanh in float32, as a head's
            lambda q, k, v, **kw: (real(q, k, v, **kw)[0].astype(np.float32).astype(
                np.float64), real(q, k, v, **kw)[1]) if kw.get("softcap") else real(
                q, k, v, **kw)}
    monkeypatch.setattr(patch, fakes[patch])
    errors = _errors()
    assert errors[variant][what] > 1, errors
    assert all(e[w] == 0.01 for name, e in errors.items() for w in e
               if (name, w) != (variant, what)), errors
