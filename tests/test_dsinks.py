"""The sinks' gradient (dsinks [H]) judged by `check --pass bwd --sinks`: flashbench's Triton,
torch-naive and a user's function that declares ``flashbench_dsinks`` give it, the gradient
rule judges it (3x the standard backward's error + :func:`flashbench.accuracy.sinks_floor`).

Before 2026-12-06 the check judged dq, dk and dv alone under sinks: a backward whose dsinks
was 1.5x the true one PASSed (docs/variants.md said so)."""

import json
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flashbench.accuracy import sinks_floor
from flashbench.backends.user import release
from flashbench.inputs import Shape
from flashbench.measure import backward as MG
from flashbench.measure.records import Case, Failed, Unavailable

USER = textwrap.dedent('''
    import torch
    from flashbench.kernels.torch_peers import naive_attention

    SEEN = []


    class _Scale(torch.autograd.Function):
        """The identity forward; the gradient times ``f`` backward (a wrong dsinks)."""

        @staticmethod
        def forward(ctx, x, f):
            ctx.f = f
            return x.view_as(x)

        @staticmethod
        def backward(ctx, g):
            return g * ctx.f, None


    def _attn(q, k, v, causal, sinks):
        return naive_attention(q.float(), k.float(), v.float(), causal, sinks=sinks)[0].to(
            q.dtype)


    def honest(q, k, v, causal=False, sinks=None):
        if not (isinstance(sinks, torch.Tensor) and sinks.dtype == torch.float32):
            raise TypeError(f"sinks arrived as {type(sinks).__name__}")
        return _attn(q, k, v, causal, sinks)


    def scaled(q, k, v, causal=False, sinks=None):
        return _attn(q, k, v, causal, _Scale.apply(sinks, 1.5))


    def detached(q, k, v, causal=False, sinks=None):
        return _attn(q, k, v, causal, sinks.detach())


    def numbers(q, k, v, causal=False, sinks=None):
        if not isinstance(sinks, tuple):
            raise TypeError(f"sinks arrived as {type(sinks).__name__}")
        return _attn(q, k, v, causal, sinks)


    def forward_sinks_only(q, k, v, causal=False, sinks=None):
        return _attn(q, k, v, causal, sinks)


    for f in (honest, scaled, detached, numbers, forward_sinks_only):
        f.flashbench_differentiable = True
        f.flashbench_gqa = True
        f.flashbench_variants = ("sinks",)
        f.flashbench_dsinks = True
    numbers.flashbench_dsinks = False
    forward_sinks_only.flashbench_grad_variants = ()
    not_a_bool = honest
''')

SHAPE = Shape(1, 2, 24, 40, 16)
CASE = Case(SHAPE, causal=True, sinks=True)


@pytest.fixture()
def user(tmp_path, monkeypatch):
    (tmp_path / "fb_dsinks.py").write_text(USER)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "fb_dsinks", raising=False)
    yield "fb_dsinks"
    release()


def _records(user, *names, dtypes=("fp32", "bf16")):
    return MG.measure_gradients(CASE, list(dtypes), [f"{user}:{n}" for n in names])


def test_a_declared_dsinks_arrives_as_a_tensor_and_an_honest_one_passes(user):
    for rec in _records(user, "honest"):
        assert not isinstance(rec, Unavailable | Failed), rec
        assert rec.passed and rec.dsinks is not None and rec.dsinks_ratio is not None, rec
        assert rec.dsinks["max_abs"] <= 3 * rec.dsinks_standard["max_abs"] + rec.dsinks_floor


def test_a_dsinks_scaled_by_one_and_a_half_fails_by_name_with_dq_dk_dv_right(user):
    for rec in _records(user, "scaled"):
        assert not rec.passed and rec.baseline_passed is False, rec
        assert rec.dsinks_ratio > 3 and all(getattr(rec, f"{g}_ratio") < 3 for g in MG.GRADS)
        assert "baseline rule FAIL on dsinks (no band judges it)" in rec.disagreement


def test_a_declared_dsinks_the_output_does_not_depend_on_fails_by_name(user):
    (rec,) = _records(user, "detached", dtypes=("fp32",))
    assert isinstance(rec, Failed)
    assert "declares flashbench_dsinks but its o does not depend on the sinks" in rec.reason


def test_without_the_declaration_sinks_are_numbers_and_dsinks_is_not_judged(user):
    (rec,) = _records(user, "numbers", dtypes=("fp32",))
    assert rec.passed and rec.dsinks is None and "dsinks" not in rec.as_dict()


def test_a_dsinks_declared_without_sinks_in_the_backward_is_refused_by_name(user):
    (rec,) = _records(user, "forward_sinks_only", dtypes=("fp32",))
    assert isinstance(rec, Failed)
    assert "declares flashbench_dsinks but its backward takes no sinks" in rec.reason


def test_a_dsinks_declaration_that_is_not_a_bool_is_refused(user, tmp_path):
    (tmp_path / "fb_dsinks.py").write_text(USER + "honest.flashbench_dsinks = 'yes'\n")
    (rec,) = _records(user, "honest", dtypes=("fp32",))
    assert isinstance(rec, Failed) and "flashbench_dsinks attribute 'yes' is not valid" \
        in rec.reason


def test_the_built_in_kernels_give_dsinks_and_the_exactness_covers_it(working_interpreter):
    recs = MG.measure_gradients(CASE, ["fp32", "bf16"], ["flash_model", "triton",
                                                         "torch-naive"])
    assert {(r.kernel, r.dtype) for r in recs if r.dsinks is not None} == {
        (k, d) for k in ("flash_model", "triton", "torch-naive") for d in ("fp32", "bf16")}
    assert all(r.passed for r in recs if not r.peer), recs
    from flashbench import reference
    from flashbench.inputs.problem import make_qkv

    q, k, v = make_qkv(SHAPE, "normal", 0)
    do = MG.grad_output(SHAPE, 0)
    ref = reference.attention_grad(q, k, v, do, **CASE.kwargs(0))
    what = [r.what for r in MG.backward_exactness(CASE, q, k, v, do, ref, 16)]
    assert what == ["dq", "dk", "dv", "dsinks"]


def test_the_floor_is_two_ulps_of_the_largest_dsinks_plus_0_3():
    assert sinks_floor(np.array([0.05, -0.1]), "fp32") == 2 * 2.0 ** -23 * 2.0 ** -2
    assert sinks_floor(np.array([1.8, 0.1]), "bf16") == 2 * 2.0 ** -7 * 2.0 ** 1
    assert sinks_floor(np.array([-5.0]), "fp16") == 2 * 2.0 ** -10 * 2.0 ** 2


def test_the_tables_show_dsinks_columns_with_a_dash_where_a_kernel_gives_none(user, capsys):
    from flashbench.cli import main

    code = main(["check", "--shape", "1x2x24x40x16", "--pass", "bwd", "--sinks", "--causal",
                 "on", "--dtype", "fp32", "--quiet", "--tables", "--only", f"{user}:honest",
                 f"{user}:numbers", "--save", "/dev/null"])
    text = capsys.readouterr().out
    assert code == 0, text
    table = text[text.index("5. Gradients"):]
    assert "dsinks err" in table and "floor dq/dk/dv/dsinks" in table
    numbers = next(ln for ln in table.splitlines() if f"{user}:numbers" in ln)
    assert " - " in numbers and "/-" in numbers
    code = main(["check", "--shape", "1x2x24x40x16", "--pass", "bwd", "--causal", "on",
                 "--dtype", "fp32", "--quiet", "--tables", "--no-backends", "--json"])
    assert "dsinks" not in json.dumps(json.loads(capsys.readouterr().out)["gradients"])


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(nq=st.integers(1, 48), nk=st.integers(1, 72), heads=st.sampled_from([(2, 2), (4, 2)]),
       causal=st.booleans(), dtype=st.sampled_from(["fp32", "fp16"]), seed=st.integers(0, 99))
def test_property_triton_dsinks_within_the_rule(working_interpreter, nq, nk, heads, causal,
                                                dtype, seed):
    """flashbench's Triton dsinks (packed over rows, fp32 sums) passes the gradient rule over
    shapes, GQA, masks, dtypes and seeds: the floor holds a correct kernel."""
    case = Case(Shape(1, heads[0], nq, nk, 16, Hkv=heads[1]), causal=causal, sinks=True)
    (rec,) = MG.measure_gradients(case, [dtype], ["triton"], seed=seed)
    assert rec.dsinks is not None
    assert rec.dsinks["max_abs"] <= 3 * rec.dsinks_standard["max_abs"] + rec.dsinks_floor, rec
