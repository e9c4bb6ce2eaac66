"""A user's differentiable kernel is judged on its backward under the variants it declares
(``flashbench_grad_variants``, default: every variant its forward takes), in its worker."""

import textwrap

import pytest

from flashbench.backends.user import release
from flashbench.inputs import Shape
from flashbench.measure import backward as MG
from flashbench.measure.records import Case, Failed, Unavailable

USER = textwrap.dedent('''
    import torch
    from flashbench.kernels.torch_peers import naive_attention


    def honest(q, k, v, causal=False, window=(-1, -1), softcap=None, sinks=None):
        return naive_attention(q, k, v, causal, window=window, softcap=softcap, sinks=sinks)
    honest.flashbench_variants = ("window", "softcap", "sinks")
    honest.flashbench_differentiable = True
    honest.flashbench_gqa = True


    class _Capless(torch.autograd.Function):
        """A forward with the softcap, a backward of the plain scores: a wrong backward."""

        @staticmethod
        def forward(ctx, q, k, v, causal, softcap):
            ctx.save_for_backward(q, k, v)
            ctx.causal = causal
            return naive_attention(q, k, v, causal, softcap=softcap)[0]

        @staticmethod
        def backward(ctx, do):
            q, k, v = (t.detach().requires_grad_(True) for t in ctx.saved_tensors)
            with torch.enable_grad():
                o = naive_attention(q, k, v, ctx.causal)[0]
            return (*torch.autograd.grad(o, (q, k, v), do), None, None)


    def capless(q, k, v, causal=False, softcap=None):
        return _Capless.apply(q, k, v, causal, softcap)
    capless.flashbench_variants = ("softcap",)
    capless.flashbench_differentiable = True
    capless.flashbench_gqa = True


    def forward_only(q, k, v, causal=False, softcap=None):
        return capless(q, k, v, causal, softcap)
    forward_only.flashbench_variants = ("softcap",)
    forward_only.flashbench_grad_variants = ()
    forward_only.flashbench_differentiable = True
    forward_only.flashbench_gqa = True


    def overclaims(q, k, v, causal=False):
        return naive_attention(q, k, v, causal)[0]
    overclaims.flashbench_grad_variants = ("sinks",)
    overclaims.flashbench_differentiable = True
''')

SHAPE = Shape(1, 2, 24, 32, 16)


@pytest.fixture()
def user(user_module):
    user_module("fbuser_grads", USER)
    yield "fbuser_grads"
    release()


@pytest.mark.parametrize("variant", [dict(window=(6, 0)), dict(softcap=5.0), dict(sinks=True)])
def test_an_honest_backward_passes_under_each_variant(user, variant):
    (rec,) = MG.measure_gradients(Case(SHAPE, causal=True, **variant), ["fp32"],
                                  [f"{user}:honest"])
    assert not isinstance(rec, Unavailable | Failed), rec
    assert rec.passed, rec


def test_a_backward_that_ignores_the_softcap_fails_and_passes_without_it(user):
    (wrong,) = MG.measure_gradients(Case(SHAPE, softcap=2.0), ["fp32"], [f"{user}:capless"])
    assert not isinstance(wrong, Unavailable | Failed) and not wrong.passed
    (plain,) = MG.measure_gradients(Case(SHAPE), ["fp32"], [f"{user}:capless"])
    assert plain.passed


def test_a_kernel_may_keep_a_variant_out_of_its_backward(user):
    (rec,) = MG.measure_gradients(Case(SHAPE, softcap=2.0), ["fp32"], [f"{user}:forward_only"])
    assert isinstance(rec, Unavailable) and "its backward takes no softcap" in rec.reason


def test_a_backward_variant_the_forward_does_not_take_is_refused_by_name(user):
    (rec,) = MG.measure_gradients(Case(SHAPE), ["fp32"], [f"{user}:overclaims"])
    assert isinstance(rec, Failed)
    assert "flashbench_grad_variants ('sinks',) names a variant its forward does not take" \
        in rec.reason


def test_speed_times_a_user_backward_under_a_variant_and_fails_a_wrong_one(user, capsys):
    """flashbench speed --pass bwd --softcap: the honest backward is timed and PASSes, the
    one that leaves the softcap out FAILs by the gradient rule (before: "not applicable")."""
    from flashbench.cli import main

    code = main(["speed", "--only", f"{user}:honest", f"{user}:capless", "--pass", "bwd",
                 "--softcap", "5", "--shape", "1x1x64x64x16", "--dtype", "fp32", "--causal",
                 "off", "--json"])
    import json

    out = json.loads(capsys.readouterr().out)
    verdicts = {r["backend"]: r["status"] for r in out["rows"]}
    assert verdicts == {f"{user}:honest": "PASS", f"{user}:capless": "FAIL"}, out["rows"]
    assert code == 1
