"""The backend registry and the torch peers."""

import pytest
import torch

from flashbench import reference as R
from flashbench.accuracy import error_stats
from flashbench.backends import BACKENDS, available_backends, get_backend
from flashbench.numerics import standard_model


def test_registry_names_and_availability():
    assert {"reference", "torch-naive", "torch-sdpa", "triton"} <= set(BACKENDS)
    names = [b.name for b in available_backends()]
    assert "reference" in names and "torch-sdpa" in names
    assert get_backend("triton").interpreted() == (not torch.cuda.is_available())
    with pytest.raises(ValueError, match="unknown backend 'flash3'"):
        get_backend("flash3")


def test_unavailable_backend_says_why():
    from dataclasses import replace

    b = replace(get_backend("torch-naive"), unavailable=lambda: "no GPU")
    with pytest.raises(RuntimeError, match="unavailable: no GPU"):
        b(*[torch.zeros(1, 1, 2, 16)] * 3)


@pytest.mark.parametrize("name", ["reference", "torch-naive", "torch-sdpa", "triton"])
@pytest.mark.parametrize("nq,nk", [(33, 33), (20, 50), (50, 20)])
@pytest.mark.parametrize("causal", [False, True])
def test_every_backend_agrees_with_reference_in_fp32(name, nq, nk, causal):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, n, 32, generator=g) for n in (nq, nk, nk))
    o, lse = get_backend(name)(q, k, v, causal=causal)
    ro, rlse = R.attention(q.double().numpy(), k.double().numpy(), v.double().numpy(), causal=causal)
    assert tuple(o.shape) == ro.shape and tuple(lse.shape) == rlse.shape
    assert error_stats(o, ro)["max_abs"] <= 1e-5
    sl = error_stats(lse, rlse)
    assert sl["nonfinite_mismatch"] == 0 and sl["max_abs"] <= 1e-5


def test_torch_naive_is_the_standard_model_in_fp16():
    """torch-naive stores S and P in fp16 with fp32 softmax: what standard_model models."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 64, 32, generator=g).half() for _ in range(3))
    o, _ = get_backend("torch-naive")(q, k, v)
    so, _ = standard_model(*(t.double().numpy() for t in (q, k, v)), "fp16")
    assert error_stats(o, so)["max_abs"] <= 2 * 2**-10
