"""The peers and backends with the variants: each declared variant computed as the reference
does, each undeclared one "not applicable" (never run without it), a user's declaration
honoured, rows a window blinds accepted as LSE -inf."""

import sys
import textwrap

import numpy as np
import pytest
import torch

from flashbench import reference as R
from flashbench.backends import BACKENDS, BackendUnavailable, get_backend, variant_kwargs
from flashbench.backends.outputs import checked_output
from flashbench.inputs.variant import Variant
from flashbench.kernels import torch_peers as tp

SINKS = (0.5, -1.0, 2.0, 0.0)
VARIANTS = [Variant(window=(7, 2)), Variant(causal=True, window=(5, 0)),
            Variant(softcap=2.0), Variant(sinks=SINKS),
            Variant(causal=True, window=(9, 9), softcap=5.0, sinks=SINKS)]


def qkv(nq=48, nk=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(1, 4, nq, 16, generator=g), torch.randn(1, 2, nk, 16, generator=g),
            torch.randn(1, 2, nk, 16, generator=g))


def reference(q, k, v, variant):
    return R.attention(*(t.double().numpy() for t in (q, k, v)), causal=variant.causal,
                       **variant_kwargs(variant))


@pytest.mark.parametrize("variant", VARIANTS, ids=Variant.label)
@pytest.mark.parametrize("name", ["torch-naive", "torch-sdpa", "sdpa-math", "reference"])
def test_each_backend_computes_the_variants_it_declares_and_refuses_the_rest(name, variant):
    backend = BACKENDS[name]
    q, k, v = qkv()
    reason = backend.not_applicable(variant)
    if reason is not None:
        assert reason.startswith("not applicable: its forward takes no")
        with pytest.raises(BackendUnavailable, match="not applicable"):
            backend(q, k, v, causal=variant.causal, variant=variant)
        return
    o, lse = backend(q, k, v, causal=variant.causal, variant=variant)
    ref_o, ref_lse = reference(q, k, v, variant)
    np.testing.assert_allclose(o.double().numpy(), ref_o, rtol=0, atol=2e-6)
    np.testing.assert_allclose(lse.double().numpy(), ref_lse, rtol=0, atol=2e-6)


def test_declarations():
    assert {n for n, b in BACKENDS.items() if "softcap" in b.variants} == {
        "reference", "torch-naive", "triton", "flex"}
    assert BACKENDS["sdpa-math"].variants == ("window",)
    assert "sinks" not in BACKENDS["flex"].variants
    assert BACKENDS["torch-naive"].not_applicable(Variant(causal=True)) is None


def test_the_peers_refuse_what_their_op_cannot_express():
    q, k, v = qkv()
    with pytest.raises(BackendUnavailable, match="takes no softcap or sinks"):
        tp.sdpa_output(q, k, v, softcap=3.0)
    with pytest.raises(BackendUnavailable, match="express no sink"):
        tp.flex_output(q, k, v, sinks=SINKS)


@pytest.mark.slow  # torch.compile builds flex_attention's C++ kernel (about 40 s here)
def test_flex_takes_a_window_block_mask_and_a_softcap_score_mod():
    if BACKENDS["flex"].unavailable() is not None:
        pytest.skip(BACKENDS["flex"].unavailable())
    variant = Variant(causal=True, window=(9, 3), softcap=4.0)
    q, k, v = qkv()
    o, _ = BACKENDS["flex"](q, k, v, causal=True, variant=variant)
    np.testing.assert_allclose(o.double().numpy(), reference(q, k, v, variant)[0], rtol=0,
                               atol=2e-6)


def test_rows_a_window_blinds_may_have_lse_minus_inf_and_no_others():
    q, k, v = qkv(nq=64, nk=40)  # Nk - Nq = -24: rows 0..23 see nothing under (0, 0)
    variant = Variant(window=(0, 0))
    o, lse = tp.naive_attention(q, k, v, window=(0, 0))
    assert torch.isneginf(lse[..., :24]).all() and torch.isfinite(lse[..., 24:]).all()
    checked_output((o, lse), q, k, v, variant)
    lse[..., 30] = float("-inf")
    with pytest.raises(Exception, match="non-finite LSE"):
        checked_output((o, lse), q, k, v, variant)


USER = textwrap.dedent('''
    import torch
    from flashbench.kernels.torch_peers import naive_attention

    def windowed(q, k, v, causal=False, window=(-1, -1)):
        return naive_attention(q, k, v, causal, window=window)
    windowed.flashbench_variants = ("window",)
    windowed.flashbench_gqa = True

    def plain(q, k, v, causal=False):
        return naive_attention(q, k, v, causal)
''')


def test_a_user_backend_runs_the_variants_it_declares_and_no_other(tmp_path, monkeypatch):
    (tmp_path / "fbuser_variants.py").write_text(USER)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "fbuser_variants", raising=False)
    q, k, v = qkv()
    windowed = get_backend("fbuser_variants:windowed")
    o, _ = windowed(q, k, v, variant=Variant(window=(4, 4)))
    np.testing.assert_allclose(o.double().numpy(), reference(q, k, v, Variant(window=(4, 4)))[0],
                               rtol=0, atol=2e-6)
    with pytest.raises(BackendUnavailable, match="not applicable: its forward takes no softcap"):
        windowed(q, k, v, variant=Variant(window=(4, 4), softcap=3.0))
    plain = get_backend("fbuser_variants:plain")
    with pytest.raises(BackendUnavailable, match="not applicable: its forward takes no window"):
        plain(q, k, v, variant=Variant(window=(4, 4)))
    o, _ = plain(q, k, v, causal=True)  # plain causal: no keyword passed
    np.testing.assert_allclose(o.double().numpy(), reference(q, k, v, Variant(causal=True))[0],
                               rtol=0, atol=2e-6)
    from flashbench.backends.user import release

    release()  # the functions ran in a worker process of their own


def test_the_naive_peers_timed_op_gives_rows_that_see_no_key_zeros():
    """docs/backends.md: a row that sees no key gets o = 0. naive_output (what speed times)
    left such rows NaN (softmax of -inf only); only the accuracy path zeroed them, so speed
    judged the peer wrong ("non-finite values") where check passed it (a red team)."""
    import torch

    from flashbench.kernels.torch_peers import naive_attention, naive_output

    g = torch.Generator().manual_seed(0)
    for nq, nk, kw in ((128, 32, {"causal": True}), (96, 64, {"window": (8, 0)}),
                       (64, 64, {"causal": True})):
        q = torch.randn(1, 2, nq, 16, generator=g)
        k, v = (torch.randn(1, 2, nk, 16, generator=g) for _ in range(2))
        o = naive_output(q, k, v, **kw)
        assert bool(torch.isfinite(o).all()), (nq, nk, kw)
        want, lse = naive_attention(q, k, v, **kw)
        assert torch.equal(o, want)
        blind = torch.isneginf(lse)
        assert bool((o[blind] == 0).all()) and (bool(blind.any()) is (nq != nk))


def test_the_naive_peer_stores_its_scores_rounded_once():
    """torch-naive's S is scale x q k^T rounded once to the dtype, as the standard model
    stores it: (q @ k^T) * scale rounded it twice in bf16 and fp16, and speed judged an
    honest run wrong 1 in 12 (a row 2.5-4.4x the standard's error; a red team)."""
    import torch

    from flashbench.kernels.torch_peers import naive_output

    g = torch.Generator().manual_seed(1)
    q = torch.randn(1, 4, 96, 48, generator=g).bfloat16()
    k, v = (torch.randn(1, 4, 160, 48, generator=g).bfloat16() for _ in range(2))
    scale = 48 ** -0.5
    once = (q.float() @ k.float().transpose(-1, -2) * scale).bfloat16()
    assert torch.equal(naive_output(q, k, v), torch.softmax(once, -1) @ v)
    twice = (q @ k.transpose(-1, -2)) * scale
    assert not torch.equal(torch.softmax(twice, -1) @ v, torch.softmax(once, -1) @ v)
