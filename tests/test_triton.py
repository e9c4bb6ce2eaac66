"""The Triton forward kernel, wherever it runs: compiled on a GPU, else interpreted on CPU.

Every test takes the ``device`` fixture (tests/conftest.py): "cuda" runs the compiled
kernel, "cpu" the same kernel under Triton's interpreter (chosen for flashbench's
kernel alone). Blocks are given explicitly, equal and unequal, so that both modes
cross the same block edges; ``None`` is the default (interpreter: 128 x 128 tiles;
GPU: the autotuner, or the fixed config for fp32).
"""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
import triton
import triton.language as tl
from hypothesis import given, settings
from hypothesis import strategies as st

import flashbench
from flashbench import reference as R
from flashbench.accuracy import error_stats, judge
from flashbench.inputs.precision import get_precision
from flashbench.kernels import triton_forward
from flashbench.kernels.launch import Config
from flashbench.numerics import flash_model, standard_model

TORCH = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
BLOCKS = {"default": None, "16x16": (16, 16), "16x32": (16, 32), "32x16": (32, 16)}


def cfg(blocks):
    return None if blocks is None else Config.of(num_warps=4, num_stages=2, BLOCK_M=blocks[0],
                                                 BLOCK_N=blocks[1])


def qkv(B, H, nq, nk, d, seed=0, dtype=torch.float32, device="cpu", hkv=None):
    g = torch.Generator().manual_seed(seed)
    hk = H if hkv is None else hkv
    return tuple(torch.randn(B, h, n, d, generator=g, dtype=torch.float64).to(device, dtype)
                 for h, n in ((H, nq), (hk, nk), (hk, nk)))


def np64(*ts):
    return tuple(t.detach().cpu().double().numpy() for t in ts)


def tol(dtype, q, k, causal, tensor="o"):
    """The measured tolerance band's edge (flashbench.tolerance, safety factor included) for
    this problem: Nk keys per row, Nq query rows (bottom-right causal rows see fewer)."""
    return flashbench.tolerance(dtype, k.shape[-2], causal=causal, nq=q.shape[-2],
                                tensor=tensor)


def ref_of(q, k, v, causal, scale=None):
    group = q.shape[1] // k.shape[1]
    k, v = (t.repeat_interleave(group, dim=1) for t in (k, v))
    return R.attention(*np64(q, k, v), causal=causal, scale=scale)


@pytest.fixture(params=list(BLOCKS), ids=list(BLOCKS))
def blocks(request):
    return BLOCKS[request.param]


SHAPES = [  # B, H, Nq, Nk, d
    (1, 1, 1, 1, 16),
    (2, 3, 17, 17, 16),
    (1, 2, 129, 129, 64),
    (1, 2, 17, 129, 64),  # Nq < Nk
    (2, 1, 129, 40, 32),  # Nq > Nk: causal rows 0..88 see nothing
    (1, 1, 70, 70, 128),
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_fp32_matches_fp64_reference(shape, causal, blocks, device):
    q, k, v = qkv(*shape, device=device)
    o, lse, _ = triton_forward.forward(q, k, v, causal=causal, config=cfg(blocks))
    ro, rlse = ref_of(q, k, v, causal)
    assert o.dtype == torch.float32 and lse.dtype == torch.float32
    assert o.shape == q.shape and lse.shape == q.shape[:3] and o.device == q.device
    so, sl = error_stats(o, ro), error_stats(lse, rlse)
    assert so["nonfinite_mismatch"] == 0 and sl["nonfinite_mismatch"] == 0
    assert so["max_abs"] <= tol("fp32", q, k, causal)
    assert sl["max_abs"] <= tol("fp32", q, k, causal, "lse")
    blind = np.isneginf(rlse)
    assert np.all(o.cpu().numpy()[blind] == 0)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("shape,causal", [((1, 2, 129, 129, 64), True),
                                          ((2, 1, 100, 300, 64), False),
                                          ((1, 2, 200, 77, 16), True),
                                          ((1, 1, 256, 256, 128), False)])
def test_low_precision_meets_baseline_rule_and_flash_model(dtype, shape, causal, blocks, device):
    q, k, v = qkv(*shape, seed=1, dtype=TORCH[dtype], device=device)
    o, lse, used = triton_forward.forward(q, k, v, causal=causal, config=cfg(blocks))
    assert o.dtype == TORCH[dtype]
    q64, k64, v64 = np64(q, k, v)
    ref = R.attention(q64, k64, v64, causal=causal)
    std = standard_model(q64, k64, v64, dtype, causal=causal)
    j = judge((o, lse), std, ref, dtype)
    assert j["o"]["verdict"].passed, j["o"]["verdict"]
    assert j["lse"]["verdict"].passed, j["lse"]["verdict"]
    # the model of the same key-block order: within a few ulps of the dtype
    model = flash_model(q64, k64, v64, dtype, block=used.kwargs["BLOCK_N"], causal=causal)
    eps = get_precision(dtype).eps
    assert error_stats(o, model[0])["max_abs"] <= 4 * eps
    assert error_stats(lse, model[1])["max_abs"] <= 1e-5


def _bf16_bits(x):
    """Ordered integer codes of bf16 values (adjacent bf16 numbers differ by 1)."""
    b = np.asarray(x, dtype=np.float32).view(np.int32) >> 16
    return np.where(b < 0, -(b & 0x7FFF), b).astype(np.int64)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_bf16_rounds_p_and_o_to_nearest_even_like_the_gpu(causal, device):
    """The interpreter's fp32 -> bf16 cast truncates; the GPU rounds to nearest even. The
    kernel rounds P and O itself under the interpreter, so its bf16 output is the flash
    model's (which rounds to nearest even) bit for bit but for rare P ties of exp2 vs exp,
    within one bf16 ulp. The case is one where truncation and rounding differ: truncating
    the model's own fp32 O would change most outputs."""
    from flashbench.reference.streaming import stream_attention

    q, k, v = qkv(1, 2, 96, 80, 64, seed=5, dtype=torch.bfloat16, device=device)
    o, _, used = triton_forward.forward(q, k, v, causal=causal, config=cfg((32, 32)))
    q64, k64, v64 = np64(q, k, v)
    model = np.asarray(flash_model(q64, k64, v64, "bf16", block=32, causal=causal)[0])
    got = _bf16_bits(o.float().cpu().numpy())
    want = _bf16_bits(model.astype(np.float32))
    sizable = np.abs(model.astype(np.float32)) >= 2**-6 * np.abs(model.astype(np.float32)).max()
    assert np.abs(got - want)[sizable].max() <= 1  # (near 0, a P tie moves O by more ulps)
    assert np.mean(got == want) >= 0.99
    # the discriminating power: the model's O before its final rounding, truncated
    prec = get_precision("bf16")
    o32, _ = stream_attention(*(x.astype(np.float32) for x in (q64, k64, v64)), block=32,
                              causal=causal, scale=64 ** -0.5, compute=np.float32,
                              round_p=prec.operand)
    truncated = _bf16_bits((o32.view(np.int32) & ~0xFFFF).view(np.float32))
    assert np.mean(truncated == want) < 0.7


def test_non_contiguous_inputs_use_strides(device):
    base = torch.randn(1, 40, 2, 64, device=device)  # [B, N, H, d] viewed as [B, H, N, d]
    q = base.transpose(1, 2)
    k = torch.randn(1, 2, 64, 90, device=device).transpose(-1, -2)  # d-stride != 1
    v = torch.randn(1, 2, 90, 128, device=device)[..., ::2]  # every other element
    assert not (q.is_contiguous() or k.is_contiguous() or v.is_contiguous())
    fixed = "fixed"  # one config for both calls, so they may be compared bit for bit
    o, lse, _ = triton_forward.forward(q, k, v, causal=True, config=fixed)
    o2, lse2, _ = triton_forward.forward(q.contiguous(), k.contiguous(), v.contiguous(),
                                     causal=True, config=fixed)
    assert torch.equal(o, o2) and torch.equal(lse, lse2)
    ro, _ = ref_of(q, k, v, True)
    assert error_stats(o, ro)["max_abs"] <= tol("fp32", q, k, True)


def test_repeated_calls_are_bitwise_identical(device):
    q, k, v = qkv(2, 2, 65, 65, 32, dtype=torch.float16, device=device)
    a = flashbench.triton_attention(q, k, v, causal=True)
    b = flashbench.triton_attention(q, k, v, causal=True)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


@pytest.mark.parametrize("scale", [0.05, 1.7, -0.3, 0.0])
def test_scale_argument(scale, device):
    q, k, v = qkv(1, 1, 20, 30, 16, device=device)
    o, lse = flashbench.triton_attention(q, k, v, scale=scale, causal=True)
    ro, rlse = ref_of(q, k, v, True, scale=scale)
    # not the tolerance table's setting (its bands are for the default scale 1/sqrt(d):
    # scale 1.7 makes the logits 7x larger and the fp32 LSE error with them): fp32's 1e-5
    assert error_stats(o, ro)["max_abs"] <= 1e-5 and error_stats(lse, rlse)["max_abs"] <= 1e-5


@pytest.mark.parametrize("scale,exc,match", [
    (float("nan"), ValueError, "scale must be finite"),
    (float("inf"), ValueError, "scale must be finite"),
    ("0.5", TypeError, "scale must be a real number"),
    (True, TypeError, "scale must be a real number"),
])
def test_bad_scale_raises(scale, exc, match):
    q, k, v = qkv(1, 1, 4, 4, 16)
    with pytest.raises(exc, match=match):
        flashbench.triton_attention(q, k, v, scale=scale)


@settings(max_examples=12)
@given(nq=st.integers(1, 70), nk=st.integers(1, 70), d=st.sampled_from([16, 32]),
       causal=st.booleans(), dtype=st.sampled_from(["fp32", "fp16", "bf16"]),
       bm=st.sampled_from([16, 32]), bn=st.sampled_from([16, 32]), seed=st.integers(0, 99))
def test_property_masks_tails_and_blocks(nq, nk, d, causal, dtype, bm, bn, seed, device):
    q, k, v = qkv(1, 2, nq, nk, d, seed=seed, dtype=TORCH[dtype], device=device)
    o, lse, _ = triton_forward.forward(q, k, v, causal=causal, config=cfg((bm, bn)))
    ro, rlse = ref_of(q, k, v, causal)
    sl = error_stats(lse, rlse)
    assert sl["nonfinite_mismatch"] == 0 and sl["max_abs"] <= tol(dtype, q, k, causal, "lse")
    assert error_stats(o, ro)["max_abs"] <= tol(dtype, q, k, causal)


@settings(max_examples=10)
@given(hkv=st.sampled_from([1, 2, 3]), group=st.sampled_from([1, 2, 4]), b=st.integers(1, 2),
       nq=st.integers(1, 40), nk=st.integers(1, 40), causal=st.booleans(),
       dtype=st.sampled_from(["fp32", "bf16"]), seed=st.integers(0, 99))
def test_property_gqa_equals_expanded_kv(hkv, group, b, nq, nk, causal, dtype, seed, device):
    """Grouped-query attention reads kv head h // (H // Hkv) in place: bit for bit the
    result of the same kernel on k, v expanded to H heads."""
    h = hkv * group
    q, k, v = qkv(b, h, nq, nk, 16, seed=seed, dtype=TORCH[dtype], device=device, hkv=hkv)
    blocks = cfg((16, 16))
    o, lse, _ = triton_forward.forward(q, k, v, causal=causal, config=blocks)
    ke, ve = (t.repeat_interleave(group, dim=1) for t in (k, v))
    oe, lsee, _ = triton_forward.forward(q, ke, ve, causal=causal, config=blocks)
    assert torch.equal(o, oe) and torch.equal(lse, lsee)


def test_gqa_matches_reference(device):
    q, k, v = qkv(2, 8, 33, 47, 32, device=device, hkv=2)
    o, lse = flashbench.triton_attention(q, k, v, causal=True)
    ro, rlse = ref_of(q, k, v, True)
    assert error_stats(o, ro)["max_abs"] <= tol("fp32", q, k, True)
    assert error_stats(lse, rlse)["max_abs"] <= tol("fp32", q, k, True, "lse")


@pytest.mark.parametrize("mutate,exc,match", [
    (lambda q, k, v: (q.double(), k.double(), v.double()), TypeError, "float64"),
    (lambda q, k, v: (q, k.half(), v), TypeError, "share one dtype"),
    (lambda q, k, v: (q[0], k[0], v[0]), ValueError, r"4-D \[B, H, N, d\]"),
    (lambda q, k, v: (q[..., :20], k[..., :20], v[..., :20]), ValueError,
     "head dim d=20 is not a multiple of 8"),
    (lambda q, k, v: (q, k[..., :16], v), ValueError, "share head dim"),
    (lambda q, k, v: (q, k, v[:, :, :3]), ValueError, "share Nk"),
    (lambda q, k, v: (q, k, v[..., :12]), ValueError, "dv=12"),
    (lambda q, k, v: (q, k[:1], v[:1]), ValueError, r"share (the batch )?B"),
    (lambda q, k, v: (q, k[:, :1], v), ValueError, "k has 1, v has 4"),
    (lambda q, k, v: (q, k[:, :3], v[:, :3]), ValueError, "Hkv=3 heads, which must divide q's H=4"),
    (lambda q, k, v: (q.numpy(), k, v), TypeError, "q must be a torch.Tensor"),
])
def test_bad_inputs_raise(mutate, exc, match):
    q, k, v = qkv(2, 4, 8, 8, 32)
    with pytest.raises(exc, match=match):
        flashbench.triton_attention(*mutate(q, k, v))


def test_tf32_only_for_fp32():
    q, k, v = qkv(1, 1, 8, 8, 16, dtype=torch.float16)
    with pytest.raises(ValueError, match="allow_tf32"):
        flashbench.triton_attention(q, k, v, allow_tf32=True)


def test_nan_input_propagates_instead_of_looking_like_a_blind_row(device):
    q, k, v = qkv(1, 1, 8, 8, 16, device=device)
    q[0, 0, 3, 0] = float("nan")
    o, lse = flashbench.triton_attention(q, k, v)
    assert torch.isnan(o[0, 0, 3]).all() and torch.isnan(lse[0, 0, 3])
    assert torch.isfinite(o[0, 0, :3]).all()
    with np.errstate(all="ignore"):
        ro, rlse = ref_of(q, k, v, False)
    assert np.isnan(ro[0, 0, 3]).all() and np.isnan(rlse[0, 0, 3])


def test_grid_puts_batch_times_heads_on_axis_0(monkeypatch):
    """B * H on grid axis 0 (limit 2^31 - 1), query blocks on axis 1 (limit 65535): a
    launch for B=4096, H=32, N=128 fits (it failed with B * H on axis 1)."""
    seen = {}

    def spy(grid, args, constexprs, **kw):
        seen["grid"] = grid({"BLOCK_M": 64, "BLOCK_N": 64})
        return Config.of(BLOCK_M=64, BLOCK_N=64)

    monkeypatch.setattr(triton_forward.FORWARD, "launch", spy)
    q = torch.empty(4096, 32, 128, 64, device="meta", dtype=torch.float16)
    triton_forward.forward(q, q, q)
    assert seen["grid"] == (4096 * 32, 2)


def test_batch_and_head_offsets_are_64_bit(device):
    """Views whose batch stride fits in 32 bits but whose last batch starts beyond 2^31
    elements: 32-bit batch offsets wrap there and read the wrong memory."""
    stride_b = 2**30 + 1024  # elements; batch 2 starts at 2^31 + 2048
    try:
        storage = torch.empty(2 * stride_b + 4096, dtype=torch.float16, device=device)
    except (RuntimeError, MemoryError):  # pragma: no cover - machine without 4.3 GB
        pytest.skip("cannot allocate 4.3 GB for the 2^31-element view")
    views = []
    for j in range(3):  # q, k, v interleaved in one storage: [B=3, H=1, N=32, d=16]
        t = storage.as_strided((3, 1, 32, 16), (stride_b, 512, 16, 1), storage_offset=j * 1024)
        t.copy_(torch.randn(3, 1, 32, 16, device=device, dtype=torch.float16))
        views.append(t)
    q, k, v = views
    o, lse = flashbench.triton_attention(q, k, v, causal=True)
    o2, lse2 = flashbench.triton_attention(q.contiguous(), k.contiguous(), v.contiguous(),
                                           causal=True)
    assert torch.equal(o, o2) and torch.equal(lse, lse2)


@triton.jit
def _add_one(X, Y, N: tl.constexpr):
    """A Triton kernel that is not flashbench's: it must stay compiled."""
    offs = tl.arange(0, N)
    tl.store(Y + offs, tl.load(X + offs) + 1.0)


def test_interpreter_does_not_leak_to_other_kernels(device):
    from triton.runtime.jit import JITFunction

    q, k, v = qkv(1, 1, 16, 16, 16, device=device)
    flashbench.triton_attention(q, k, v)  # interpreted on CPU, compiled on a GPU
    assert "TRITON_INTERPRET" not in os.environ
    assert not triton.knobs.runtime.interpret
    assert type(_add_one) is JITFunction and type(tl.max) is JITFunction

    @triton.jit
    def later(X):  # decorated after flashbench ran: still a compiled kernel
        pass

    assert type(later) is JITFunction
    with pytest.raises(RuntimeError, match="outside of the scope of a kernel"):
        tl.max(1, 0)  # JITFunction.__call__ is Triton's own again
    x = torch.arange(16, dtype=torch.float32, device=device)
    y = torch.zeros_like(x)
    if device == "cuda":
        _add_one[(1,)](x, y, N=16)
        assert torch.equal(y, x + 1)
    else:  # no GPU: a compiled kernel cannot launch, and nothing ran it interpreted
        with pytest.raises(Exception):  # noqa: B017 - Triton's "no active driver" error
            _add_one[(1,)](x, y, N=16)
        assert torch.equal(y, torch.zeros_like(x))


def _rowmax(X, Y, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(X + offs[:, None] * BLOCK + offs[None, :])
    tl.store(Y + offs, tl.max(x, 1))


def test_interpreted_launch_leaves_triton_language_as_it_was(tmp_path, monkeypatch,
                                                            working_interpreter):
    """Triton's interpreter patches triton.language while it runs, and an interpreted helper
    call (tl.max reached from the kernel) patches triton.language.core without restoring
    it; the launch puts everything back, so a kernel compiled afterwards (a fresh cache: a
    real compilation, here for sm_90 offline) still compiles."""
    pytest.importorskip("triton.backends.nvidia")
    from flashbench.kernels.interpreter import language_objects
    from flashbench.kernels.launch import TritonKernel, planning
    from flashbench.kernels.offline import compile_plan

    before = [(obj, dict(vars(obj))) for obj in language_objects()]
    q, k, v = qkv(1, 1, 16, 16, 16)  # CPU: interpreted wherever the test runs
    triton_forward.forward(q, k, v)
    for obj, attrs in before:
        now = dict(vars(obj))
        assert now.keys() == attrs.keys(), obj
        assert [n for n in attrs if now[n] is not attrs[n]] == [], obj
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    kernel = TritonKernel(_rowmax, name="rowmax")
    x, y = torch.empty(16, 16, device="meta"), torch.empty(16, device="meta")
    with planning() as plan:
        kernel.launch(lambda m: (1,), (x, y), {}, device="meta",
                      config=Config.of(num_warps=1, num_stages=1, BLOCK=16))
    (result,) = compile_plan(plan, say=lambda msg: None)
    assert result.error is None, result.error


def test_works_after_triton_and_dynamo_were_imported_first(device):
    """A fresh process that imports triton, torch and torch._dynamo before flashbench
    (the order that broke the process-wide TRITON_INTERPRET switch)."""
    code = textwrap.dedent(f"""
        import os, torch, triton, torch._dynamo
        import flashbench
        from flashbench import reference
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(1, 2, 40, 32, generator=g) for _ in range(3))
        o, lse = flashbench.triton_attention(*(t.to("{device}") for t in (q, k, v)), causal=True)
        ro, rl = reference.attention(q.double().numpy(), k.double().numpy(), v.double().numpy(),
                                     causal=True)
        err = float(abs(o.cpu().double().numpy() - ro).max())
        assert err < 1e-5, err
        assert "TRITON_INTERPRET" not in os.environ
        print("ok", err)
    """)
    env = {k: v for k, v in os.environ.items()
           if k not in ("TRITON_INTERPRET", "FLASHBENCH_TRITON_INTERPRET")}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.startswith("ok")
