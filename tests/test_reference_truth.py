"""The float64 reference judged by a yardstick it does not provide (benchmarks'
TrackReference): a probe's head computing the reference in float32 read "better" or "same"
on every kernel's accuracy row, each measured against that reference."""

from __future__ import annotations

import numpy as np
import pytest

import flashbench.reference as reference
from benchmarks.bench_accuracy import TrackReference
from flashbench.review.rules import accuracy_rule, judge_accuracy


def _float32(attention):
    def degraded(q, k, v, **kw):
        cast = [np.asarray(x, np.float32).astype(np.float64) for x in (q, k, v)]
        return tuple(np.asarray(x, np.float32).astype(np.float64)
                     for x in attention(*cast, **kw))

    return degraded


@pytest.mark.parametrize("causal", [False, True])
def test_the_reference_reads_the_floor_and_a_float32_one_fails_its_rule(causal, monkeypatch):
    suite = TrackReference()
    shape = suite.params[1][0]
    results = suite.setup_cache()
    suite.setup(results, causal, shape)
    honest = (suite.track_reference_o_exactness(results, causal, shape),
              suite.track_reference_lse_exactness(results, causal, shape))
    assert honest == (TrackReference.FLOOR, TrackReference.FLOOR)
    monkeypatch.setattr(reference, "attention", _float32(reference.attention))
    results = suite.setup_cache()
    suite.setup(results, causal, shape)
    worse = (suite.track_reference_o_exactness(results, causal, shape),
             suite.track_reference_lse_exactness(results, causal, shape))
    assert min(worse) > 1000, worse  # float32's rounding: 3e4-5e4 x the tolerance
    for metric, base, head in zip(("reference_o_exactness", "reference_lse_exactness"),
                                  honest, worse, strict=True):
        verdict, reason, regression = judge_accuracy(base, head, [], 0.02,
                                                     accuracy_rule(metric))
        assert regression and "rule-fails" in reason, (verdict, reason)
        # an honest reference in another summation order stays on the floor: no verdict
        assert judge_accuracy(base, TrackReference.FLOOR, [], 0.02,
                              accuracy_rule(metric))[2] is False


@pytest.mark.parametrize("easier", ["zeros", "a tenth"])
def test_inputs_drawn_easier_fail_their_rule(easier, monkeypatch):
    """A head drawing easier inputs (zeros, a smaller spread) made every kernel's and the
    standard's errors smaller: every accuracy row "better", none worse."""
    import flashbench.inputs as inputs

    make = inputs.make_qkv

    def drawn(*args, **kw):
        q, k, v = make(*args, **kw)
        return tuple(np.zeros_like(x) if easier == "zeros" else x / 10 for x in (q, k, v))

    suite = TrackReference()
    shape = suite.params[1][0]
    results = suite.setup_cache()
    suite.setup(results, False, shape)
    assert suite.track_inputs_exactness(results, False, shape) == TrackReference.FLOOR
    monkeypatch.setattr(inputs, "make_qkv", drawn)
    results = suite.setup_cache()
    suite.setup(results, False, shape)
    value = suite.track_inputs_exactness(results, False, shape)
    assert value > 1e9, value
    assert judge_accuracy(TrackReference.FLOOR, value, [], 0.02,
                          accuracy_rule("inputs_exactness"))[2] is True


@pytest.mark.parametrize("broken", ["nan", "shape"])
def test_a_reference_of_nans_or_of_another_shape_is_infinitely_wrong(broken, monkeypatch):
    """A review: max(FLOOR, nan) is the floor: an all-NaN reference read 0.01, a pass."""
    def attention(q, k, v, **kw):
        o = np.full(q.shape, np.nan) if broken == "nan" else np.zeros(q.shape[:-1])
        return o, np.full(q.shape[:-1], np.nan)

    monkeypatch.setattr(reference, "attention", attention)
    suite = TrackReference()
    shape = suite.params[1][0]
    results = suite.setup_cache()
    suite.setup(results, True, shape)
    assert suite.track_reference_o_exactness(results, True, shape) == np.inf
    assert suite.track_reference_lse_exactness(results, True, shape) == np.inf


def test_a_commit_without_the_reference_skips():
    suite = TrackReference()
    with pytest.raises(NotImplementedError, match="no"):
        suite.setup({"missing": "no flashbench.reference here"}, False, suite.params[1][0])
