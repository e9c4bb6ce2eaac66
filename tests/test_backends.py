"""The backend registry and the torch peers: every backend agrees with the float64
reference (fp32, causal, Nq != Nk, grouped-query), unavailable ones say why, and the
records describe what each takes."""

from dataclasses import replace

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from flashbench import reference as R
from flashbench.accuracy import error_stats
from flashbench.backends import (
    BACKENDS,
    TRITON_HEAD_DIMS,
    BackendFailed,
    BackendUnavailable,
    available_backends,
    get_backend,
)
from flashbench.backends.outputs import checked_output
from flashbench.inputs import Shape
from flashbench.inputs.precision import PRECISIONS
from flashbench.kernels.validate import expand_kv, validate_tensors
from flashbench.numerics import standard_model

NAMES = ["reference", "torch-naive", "torch-sdpa", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn",
         "sdpa-math", "triton", "triton-fp8", "flex"]  # triton before flex: flex's compile imports triton
GPU = torch.cuda.is_available()


def qkv(b, h, hkv, nq, nk, d, seed=0, dv=None):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, h, nq, d, generator=g), torch.randn(b, hkv, nk, d, generator=g),
            torch.randn(b, hkv, nk, d if dv is None else dv, generator=g))


def native(b, q, k, v):
    """q, k, v in a precision ``b`` takes on the device it runs on here (fp32 first;
    on a GPU sdpa-flash and sdpa-cudnn take fp16 and bf16 only), unchanged for a
    backend given fp32 by contract (``inputs``: triton-fp8)."""
    if b.inputs is not None:
        return q, k, v
    name = next(d for d in ("fp32", "fp16", "bf16") if b.unavailable_for(None, d) is None)
    dt = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[name]
    return tuple(t.to(dt) for t in (q, k, v))


def takes_fp32(name):
    return BACKENDS[name].unavailable() is None and BACKENDS[name].unavailable_for(
        None, "fp32") is None


def ref_of(q, k, v, causal):
    k, v = expand_kv(q, k, v)
    return R.attention(*(t.double().numpy() for t in (q, k, v)), causal=causal)


def test_registry_names_and_records():
    assert list(BACKENDS) == NAMES
    for b in BACKENDS.values():
        assert set(b.dtypes) <= set(PRECISIONS), b.name
        assert set(b.devices) <= {"cpu", "cuda"} and b.devices, b.name
        assert b.origin in ("flashbench", "torch"), b.name
        assert b.peer == (b.origin == "torch"), b.name  # torch's are peers; ours count
        assert callable(b.fn) and callable(b.timed_fn) and b.description
    assert not BACKENDS["triton"].peer and TRITON_HEAD_DIMS == tuple(range(8, 257, 8))
    names = [b.name for b in available_backends()]
    assert {"reference", "torch-naive", "torch-sdpa", "sdpa-flash", "sdpa-math"} <= set(names)
    assert get_backend("triton").interpreted() == (not GPU)
    with pytest.raises(ValueError, match="unknown backend 'flash3'.*package.module:function"):
        get_backend("flash3")


def test_triton_head_dims_are_the_kernels():
    from flashbench.kernels.triton_forward import HEAD_DIMS

    assert TRITON_HEAD_DIMS == tuple(HEAD_DIMS)


# Shapes of test_every_backend_agrees_with_reference_in_fp32 (B=2, d=32): flex compiles once
# per (shape, dtype, causal), about 5-8 s of a C++ compile each on CPU, so the tests below
# that need only some shape take one of these (one compile in a process, a disk-cache hit
# in another), not shapes of their own.
AGREE_SHAPES = [(2, 2, 33, 33), (2, 2, 20, 50), (2, 2, 50, 20), (4, 2, 20, 50), (4, 1, 50, 20)]


@pytest.mark.parametrize("name", NAMES)
def test_each_backend_runs_here_or_says_why(name):
    b = BACKENDS[name]
    reason = b.unavailable()
    q, k, v = qkv(2, *AGREE_SHAPES[0], 32)  # d = 32: every backend takes it (fp8: d >= 32)
    if reason is None:
        o, lse = b(*native(b, q, k, v))
        assert o.shape == (2, 2, 33, 32) and lse.shape == (2, 2, 33)
        return
    assert reason.strip() and "\n" not in reason
    if not GPU and "cuda" in b.devices and "cpu" not in b.devices:
        assert "GPU" in reason  # a hardware reason names the hardware
    with pytest.raises(BackendUnavailable, match="unavailable"):
        b(q, k, v)


def test_without_a_gpu_the_cuda_only_kernels_say_so():
    if GPU:
        pytest.skip("this machine has a GPU: these kernels run (the test above)")
    for name in ("sdpa-efficient", "sdpa-cudnn"):
        assert BACKENDS[name].unavailable() == "needs a CUDA GPU (no GPU here)"


def test_unavailable_backend_says_why():
    b = replace(get_backend("torch-naive"), unavailable=lambda: "no GPU")
    with pytest.raises(RuntimeError, match="unavailable: no GPU"):
        b(*[torch.zeros(1, 1, 2, 16)] * 3)


@pytest.mark.parametrize("name", [n for n in NAMES if takes_fp32(n)])  # fp8: test_triton_fp8
@pytest.mark.parametrize("h,hkv,nq,nk", AGREE_SHAPES)
@pytest.mark.parametrize("causal", [False, True])
def test_every_backend_agrees_with_reference_in_fp32(name, h, hkv, nq, nk, causal):
    q, k, v = qkv(2, h, hkv, nq, nk, 32)
    try:
        o, lse = get_backend(name)(q, k, v, causal=causal)
    except BackendUnavailable as exc:  # flex on a GPU: inductor found no kernel for a case
        if name != "flex" or "torch.compile could not build" not in str(exc):
            raise
        pytest.skip(str(exc)[:200])
    ro, rlse = ref_of(q, k, v, causal)
    assert tuple(o.shape) == ro.shape and tuple(lse.shape) == rlse.shape
    assert error_stats(o, ro)["max_abs"] <= 1e-5
    sl = error_stats(lse, rlse)
    assert sl["nonfinite_mismatch"] == 0 and sl["max_abs"] <= 1e-5


@pytest.mark.parametrize("name", [n for n in NAMES if n not in ("reference", "triton", "triton-fp8")
                                  and takes_fp32(n)])
@pytest.mark.parametrize("h,hkv,nq,nk", [AGREE_SHAPES[0], AGREE_SHAPES[3]])
def test_timed_output_is_the_checked_output(name, h, hkv, nq, nk):
    """What timings run (the bare op after prepare) equals what the check judged, on
    every row that sees a key (torch leaves the others NaN; the check sets them to 0):
    Nq = Nk and Nq < Nk (causal: every row sees a key), one of them grouped-query."""
    b = BACKENDS[name]
    q, k, v = qkv(2, h, hkv, nq, nk, 32, seed=1)
    o, _ = b(q, k, v, causal=True)
    timed = b.timed_fn(*b.prepare(q, k, v), causal=True)
    assert torch.equal(timed, o)


@settings(max_examples=25, deadline=None)
@given(b=st.integers(1, 2), hkv=st.sampled_from([1, 2, 3]), group=st.integers(1, 3),
       nq=st.integers(1, 40), nk=st.integers(1, 40), d=st.sampled_from([8, 16, 24]),
       causal=st.booleans(), name=st.sampled_from(["torch-naive", "torch-sdpa", "sdpa-flash",
                                                   "sdpa-math"]))
def test_grouped_query_equals_the_expanded_computation(b, hkv, group, nq, nk, d, causal, name):
    """k, v with Hkv heads give exactly the expanded computation (head h reads h // G)."""
    backend = get_backend(name)
    # fp32 where the backend takes it here; on a GPU sdpa-flash takes fp16 / bf16 only
    q, k, v = native(backend, *qkv(b, hkv * group, hkv, nq, nk, d, seed=nq * 41 + nk))
    try:
        o, lse = backend(q, k, v, causal=causal)
    except BackendUnavailable:  # e.g. GPU flash takes no mask: causal with Nq != Nk
        assume(False)
    ke, ve = expand_kv(q, k, v)
    assert ke.shape[1] == q.shape[1] and torch.equal(ke[:, group * (hkv - 1)], k[:, hkv - 1])
    oe, lsee = backend(q, ke, ve, causal=causal)
    eps = torch.finfo(q.dtype).eps
    tol = 1e-6 if q.dtype == torch.float32 else eps
    assert torch.allclose(o, oe, atol=tol, rtol=0) and torch.allclose(lse, lsee, atol=1e-6,
                                                                      rtol=0)
    ro, _ = ref_of(q.float(), k.float(), v.float(), causal)
    bound = 1e-5 if q.dtype == torch.float32 else 8 * eps * float(v.abs().max())
    assert error_stats(o, ro)["max_abs"] <= bound  # a wrong head: errors of order 1


def test_check_tensors_names_both_head_counts():
    q, k, v = qkv(1, 6, 4, 8, 8, 16)
    with pytest.raises(ValueError, match="Hkv=4 heads, which must divide q's H=6"):
        validate_tensors(q, k, v, gqa=True)
    q, k, _ = qkv(1, 4, 2, 8, 8, 16)
    with pytest.raises(ValueError, match="k has (Hkv=)?2.*v has 4"):  # both counts named
        validate_tensors(q, k, q, gqa=True)
    assert validate_tensors(q, k, k, gqa=True) == 2
    with pytest.raises(ValueError, match="share B and H.*H=4.*Hkv=2"):
        validate_tensors(q, k, k)  # a kernel that takes no grouped K/V
    with pytest.raises(ValueError, match="must divide"):
        get_backend("torch-naive")(*qkv(1, 6, 4, 8, 8, 16))


def test_a_shape_a_backend_cannot_run_is_unavailable_with_the_reason():
    triton = get_backend("triton")
    assert "d=44 is not a multiple of 8" in triton.unavailable_for(Shape(1, 1, 16, 16, 44),
                                                                   "fp32")
    assert triton.unavailable_for(Shape(1, 1, 16, 16, 64), "fp32") is None
    assert triton.unavailable_for(Shape(1, 1, 16, 16, 48), "fp32") is None  # padded to 64
    assert triton.unavailable_for(Shape(1, 1, 16, 16, 64, dv=32), "fp32") is None
    assert "dv=264 exceeds 256" in triton.unavailable_for(Shape(1, 1, 16, 16, 64, dv=264),
                                                          "fp32")
    assert "not fp64" in triton.unavailable_for(None, "fp64")
    with pytest.raises(BackendUnavailable, match="head dim d=44"):
        triton(*qkv(1, 1, 1, 16, 16, 44))
    # torch's own refusal, with torch's reason: flash wants dv == d
    flash = get_backend("sdpa-flash")
    with pytest.raises(BackendUnavailable, match="flash SDPA kernel does not take this case: "
                       "Flash attention requires q,k,v to have the same last dimension"):
        flash(*native(flash, *qkv(1, 2, 2, 8, 8, 16, dv=8)))
    if GPU:  # flash takes no fp32 on a GPU: said before torch is asked
        assert flash.unavailable_for(None, "fp32") == "takes fp16, bf16 on a GPU, not fp32"
    o, _ = get_backend("sdpa-math")(*qkv(1, 2, 2, 8, 8, 16, dv=8))  # math takes it
    assert o.shape == (1, 2, 8, 8)


@pytest.mark.parametrize("name", [n for n in NAMES if BACKENDS[n].unavailable() is None
                                  and n != "reference"])
def test_differentiable_flag_is_true_to_autograd(name):
    b = BACKENDS[name]
    q, k, v = (t.requires_grad_() for t in b.prepare(*native(b, *qkv(1, 2, 2, 16, 16, 16))))
    try:
        b.timed_fn(q, k, v, causal=True).sum().backward()
        grads = all(t.grad is not None and torch.isfinite(t.grad).all() for t in (q, k, v))
    except Exception:  # no backward here (compiled for inference, no autograd.Function)
        grads = False
    assert grads == b.differentiable


def test_torch_naive_is_the_standard_model_in_fp16():
    """torch-naive stores S and P in fp16 with fp32 softmax: what standard_model models."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 64, 32, generator=g).half() for _ in range(3))
    o, _ = get_backend("torch-naive")(q, k, v)
    so, _ = standard_model(*(t.double().numpy() for t in (q, k, v)), "fp16")
    assert error_stats(o, so)["max_abs"] <= 2 * 2**-10


@pytest.mark.parametrize("out,match", [
    (lambda o, lse: (o, lse, lse), "a tuple of 3"),
    (lambda o, lse: o[..., :3], r"o of shape \(1, 2, 8, 3\); expected"),
    (lambda o, lse: o.half(), "o in torch.float16; expected torch.float32"),
    (lambda o, lse: o.numpy(), "returned an ndarray; expected o or"),
    (lambda o, lse: (o.numpy(), lse), "o as an ndarray"),
    (lambda o, lse: (o, lse[..., :4]), r"lse of shape \(1, 2, 4\)"),
    (lambda o, lse: (o, lse.int()), "lse as a torch.int32 tensor"),
    (lambda o, lse: o.index_fill(2, torch.tensor([3]), float("nan")), "16 non-finite"),
    (lambda o, lse: (o, lse.index_fill(2, torch.tensor([1]), float("-inf"))), "non-finite LSE"),
])
def test_checked_output_names_what_is_wrong(out, match):
    q, k, v = qkv(1, 2, 2, 8, 8, 8)
    o, lse = (t.cpu() for t in get_backend("torch-naive")(q, k, v))  # a GPU machine: cuda
    assert checked_output((o, lse), q, k, v)[0] is o
    with pytest.raises(BackendFailed, match=match):
        checked_output(out(o, lse), q, k, v)


def test_rows_that_see_no_key_may_have_minus_inf_lse():
    q, k, v = qkv(1, 1, 1, 12, 4, 8)
    o, lse = get_backend("torch-naive")(q, k, v, causal=True)
    assert torch.isneginf(lse[0, 0, :8]).all() and (o[0, 0, :8] == 0).all()
    assert checked_output((o, lse), q, k, v, causal=True)[1] is lse


def test_own_lse_is_declared_where_the_op_returns_one():
    own = {n for n, b in BACKENDS.items() if b.own_lse}
    assert own == {"reference", "triton", "triton-fp8"} | ({"flex"} if GPU else set())
    q, k, v = qkv(1, 2, 2, 16, 16, 16)
    assert get_backend("torch-naive")(q, k, v).own_lse is False
    assert get_backend("reference")(q, k, v).own_lse is True


def test_a_peer_lse_is_the_stand_in_shown_for_information_not_judged(monkeypatch):
    """Finding 8: torch's ops return no LSE; the stand-in's numbers are shown (marked),
    never judged: a stand-in patched to be wrong cannot fail the peer."""
    from flashbench.cli.check_tables import judge_cells
    from flashbench.kernels import torch_peers
    from flashbench.measure.forward import measure_accuracy
    from flashbench.measure.records import LSE_STAND_IN, Case

    case = Case(Shape(1, 2, 64, 64, 32))
    (rec,) = measure_accuracy(case, ["fp32"], ["torch-naive"])
    assert rec.lse_note == LSE_STAND_IN and rec.lse["max_abs"] < 1e-5 and rec.passed
    monkeypatch.setattr(torch_peers, "reference_lse", lambda q, k, v, causal, scale:
                        torch.zeros(q.shape[:3], device=q.device))
    (rec,) = measure_accuracy(case, ["fp32"], ["torch-naive"])
    assert rec.lse_note == LSE_STAND_IN and rec.lse_ratio > 2 and rec.passed
    assert "(stand-in)" in " ".join(judge_cells(rec.as_dict()))


@settings(max_examples=25, deadline=None)
@given(hkv=st.sampled_from([1, 2]), group=st.integers(1, 2), nq=st.integers(1, 70),
       nk=st.integers(1, 70), d=st.sampled_from([8, 16, 64]), causal=st.booleans(),
       dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16]),
       seed=st.integers(0, 2**16))
def test_the_stand_in_lse_is_the_float64_one_rounded_once_to_fp32(hkv, group, nq, nk, d,
                                                                 causal, dtype, seed):
    """Finding 8: the stand-in LSE (of ops that return none) is the float64 log-sum-exp
    of the inputs as given, correctly rounded to fp32: deterministic (the fp32 one was
    off by up to 66x its usual error in 1 fresh run of 4), within half an fp32 ulp."""
    import numpy as np

    from flashbench.kernels.torch_peers import reference_lse

    q, k, v = (t.to(dtype) for t in qkv(1, hkv * group, hkv, nq, nk, d, seed))
    lse = reference_lse(q, k, v, causal)
    assert lse.dtype == torch.float32
    exact = ref_of(q, k, v, causal)[1]
    got = lse.numpy().astype(np.float64)
    finite = np.isfinite(exact)
    np.testing.assert_array_equal(got[~finite], exact[~finite])  # rows that see no key
    half_ulp = np.spacing(np.abs(exact[finite]).astype(np.float32)).astype(np.float64) / 2
    assert np.all(np.abs(got[finite] - exact[finite]) <= half_ulp * (1 + 1e-6)), \
        np.max(np.abs(got[finite] - exact[finite]) / half_ulp)
    assert torch.equal(reference_lse(q, k, v, causal), lse)


def test_torch_floats_and_user_defaults_come_from_the_precision_registry():
    """Finding 17: no literal dtype lists: the default-judged precisions stored in a torch
    dtype of their own (tf32 is fp32 storage, a compute mode)."""
    from flashbench.backends import TORCH_FLOATS
    from flashbench.backends.declared import DEFAULT_DTYPES
    from flashbench.inputs.precision import CHECK_DTYPES

    assert TORCH_FLOATS == tuple(d for d in CHECK_DTYPES if d != "tf32") == ("fp32", "fp16",
                                                                            "bf16")
    assert DEFAULT_DTYPES is TORCH_FLOATS
    assert BACKENDS["torch-naive"].dtypes == TORCH_FLOATS


def test_triton_unavailable_when_the_interpreter_is_refused_without_a_gpu(monkeypatch):
    """FLASHBENCH_TRITON_INTERPRET=0 on a machine without a GPU: the Triton backends say
    why they cannot run (the check lists them as skipped, not as failed)."""
    from flashbench.backends import get_backend

    monkeypatch.setenv("FLASHBENCH_TRITON_INTERPRET", "0")
    for name in ("triton", "triton-fp8"):
        reason = get_backend(name).unavailable()
        if torch.cuda.is_available():
            assert reason is None
        else:
            assert "refuses Triton's interpreter" in reason
    monkeypatch.delenv("FLASHBENCH_TRITON_INTERPRET")
    assert get_backend("triton").unavailable() is None


def test_a_pinned_sdpa_kernels_refusal_quotes_its_own_reason_not_the_pin():
    """On a GPU torch warns about every kernel the pin disabled as well; the reason shown
    is the pinned kernel's own (seen on an H200: "Memory Efficient attention has been
    runtime disabled." was quoted as flash's reason for refusing fp32)."""
    import types

    from flashbench.kernels.torch_peers import _refusal

    caught = [types.SimpleNamespace(message=m) for m in (
        "Memory efficient kernel not used because:",
        "Memory Efficient attention has been runtime disabled. (Triggered internally at x)",
        "Flash attention kernel not used because:",
        "Expected query, key and value to all be of dtype: {Half, BFloat16}. Got float.")]
    q = torch.zeros(1)
    text = _refusal(caught, q, "flash")
    assert text == ("torch's flash SDPA kernel does not take this case: Expected query, key "
                    "and value to all be of dtype: {Half, BFloat16}. Got float.")
    assert "no reason given" in _refusal(caught[:2], q, "flash")


def test_the_materialised_causal_mask_is_bottom_right_and_built_once():
    """The mask given to SDPA on a GPU for Nq > Nk (torch's lower-right bias gave the
    efficient kernel wrong rows): query i sees key j iff j <= i + Nk - Nq, the same
    object for every call of a shape (timed calls do not build it)."""
    from flashbench.kernels.torch_peers import _lower_right_mask

    m = _lower_right_mask(5, 3, "cpu")
    want = torch.tensor([[j <= i + 3 - 5 for j in range(3)] for i in range(5)])
    assert torch.equal(m, want) and not m[:2].any() and m[4].all()
    assert _lower_right_mask(5, 3, "cpu") is m


def test_with_sinks_a_minus_inf_lse_is_wrong_on_every_row_and_the_message_says_why():
    """A red team (2026-12-06): with sinks and a window no key passes, an LSE of -inf FAILed
    (right) as "non-finite LSE value(s) on rows that see keys": those rows see none; they see
    their sink, which the message now says."""
    from flashbench.inputs.variant import Variant

    q, k, v = qkv(1, 1, 1, 12, 4, 8)
    variant = Variant(causal=True, sinks=(0.0,))
    o = torch.zeros(1, 1, 12, 8, dtype=q.dtype)
    lse = torch.full((1, 1, 12), float("-inf"))
    with pytest.raises(BackendFailed,
                       match=r"LSE value\(s\): 12 on every row \(with sinks each row sees its"):
        checked_output((o, lse), q, k, v, causal=variant)


def test_a_packed_outputs_bad_sequence_is_named_as_the_judges_name_it():
    """"sequence 3 (rows 22..30)" counted from 0 where every other message says "sequence 4
    of 4 (index 3, ... packed rows 57-65)" (a red team, 2026-12-06): one way now."""
    from flashbench.backends.outputs import checked_packed_output

    lengths = [5, 17, 9]
    cu = torch.tensor([0, 5, 22, 31])
    q, k, v = (torch.randn(31, 2, 8) for _ in range(3))
    o, lse = torch.zeros(31, 2, 8), torch.zeros(2, 31)
    o[25, 0, 0] = float("nan")  # in the third sequence, packed rows 22-30
    with pytest.raises(BackendFailed, match=r"^sequence 3 of 3 \(index 2, packed rows 22-30\)"):
        checked_packed_output((o, lse), q, k, v, cu, cu)
    assert sum(lengths) == 31


def test_a_decode_lse_of_plus_inf_on_an_empty_sequence_is_flashattentions_and_nan_is_named():
    """A red team (2026-12-06): +inf or NaN as the LSE of a length-0 sequence FAILed "on rows
    that see keys": those rows see none. +inf there is FlashAttention-2's own convention (its
    non-split path's ``sum == 0 ? INFINITY``): read as the reference's -inf since a probe
    (2026-12-07) found a FlashAttention wrapper FAILed for it; NaN is named."""
    from flashbench.backends.outputs import checked_decode_output
    from flashbench.inputs.kvcache import make_decode

    q, k, v, lens, table = (torch.as_tensor(x) for x in
                            make_decode(2, 4, 2, 1, 16, (0, 9), 16, seed=0))
    o = torch.zeros(2, 1, 4, 16, dtype=q.dtype)
    lse = torch.zeros(2, 4, 1)
    lse[0] = float("inf")  # the empty sequence's 4 heads
    got = checked_decode_output((o, lse), q, k, v, lens, table, False, None)
    assert torch.isneginf(got[1][0]).all() and torch.isfinite(got[1][1]).all()
    lse[0, 1] = float("nan")
    with pytest.raises(BackendFailed, match=r": 1 NaN on rows that see no key"):
        checked_decode_output((o, lse), q, k, v, lens, table, False, None)
    lse[0], lse[1, 0] = float("-inf"), float("nan")  # right there; NaN where keys are seen
    with pytest.raises(BackendFailed, match=r": 1 on rows that see keys \(the float64"):
        checked_decode_output((o, lse), q, k, v, lens, table, False, None)


@pytest.mark.parametrize("flag", ["differentiable", "gqa", "dv", "varlen"])
def test_a_declared_flag_that_is_not_a_bool_is_refused_by_name(user_module, flag):
    """A probe, 2026-12-07: ``flashbench_differentiable = "False"`` (a string) was read as
    True, and the kernel's gradients judged and FAILed; the other flags alike. Each is
    now refused by name, as flashbench_dsinks was."""
    from flashbench.backends import declared
    from flashbench.backends.tensors import BackendFailed

    user_module("fbflags", f"def attn(q, k, v, causal=False, scale=None):\n    return q\n\n"
                           f"attn.flashbench_{flag} = 'False'\n")
    with pytest.raises(BackendFailed, match=rf"its flashbench_{flag} attribute 'False' is "
                                            r"not valid \(True or False\)"):
        declared.load("fbflags:attn")
    user_module("fbflags2", "def attn(q, k, v, causal=False, scale=None):\n    return q\n\n"
                            f"attn.flashbench_{flag} = True\n")
    assert declared.load("fbflags2:attn")[1][flag] is True


def test_a_module_named_with_its_py_is_refused_with_the_name_to_give():
    """A probe, 2026-12-07: `--backend good.py:forward` FAILed "No module named 'good.py';
    'good' is not a package" (exit 1), where a path form is refused (exit 2)."""
    from flashbench.backends.declared import parse_spec

    with pytest.raises(ValueError, match=r"name the module without \.py \(good:forward\)"):
        parse_spec("good.py:forward")
    assert parse_spec("pkg.good:forward") == ("pkg.good", "forward")


def test_a_dtype_a_users_function_did_not_declare_says_how_to_declare_it(user_module):
    from flashbench.backends import get_backend

    user_module("fbdtypes", "def attn(q, k, v, causal=False, scale=None):\n    return q\n")
    reason = get_backend("fbdtypes:attn").unavailable_for(dtype="fp8")
    assert reason.endswith("not fp8 (a function of yours declares more: "
                           "fn.flashbench_dtypes)"), reason
    assert get_backend("torch-naive").unavailable_for(dtype="fp8").endswith("not fp8")


def test_a_dtype_declared_as_one_string_is_refused_with_the_form_to_give(user_module):
    """A probe, 2026-12-07: ``flashbench_dtypes = "bf16"`` read "attribute 'bf16' is not
    valid" (a string is iterated letter by letter); the refusal now shows the form."""
    from flashbench.backends import declared
    from flashbench.backends.tensors import BackendFailed

    user_module("fbdtype", "def attn(q, k, v, causal=False, scale=None):\n    return q\n\n"
                           "attn.flashbench_dtypes = 'bf16'\n")
    with pytest.raises(BackendFailed, match=r"its flashbench_dtypes attribute 'bf16' is not "
                                            r"valid \(a tuple of precision names, e\.g\. "
                                            r"\('fp16', 'bf16'\); of fp64, fp32"):
        declared.load("fbdtype:attn")
    user_module("fbdtype2", "def attn(q, k, v, causal=False, scale=None):\n    return q\n\n"
                            "attn.flashbench_dtypes = ['bf16']\n")
    assert declared.load("fbdtype2:attn")[1]["dtypes"] == ["bf16"]
