"""The compiled kernel on a GPU (marker ``gpu``: ``pytest -m gpu``; without a GPU these
skip with reason "no GPU"), and the launch machinery that decides what compiles
(runs here)."""

import pytest
import torch

from flashbench import numerics
from flashbench import reference as R
from flashbench.accuracy import error_stats, judge
from flashbench.kernels import attention, configs, triton_forward
from flashbench.kernels.headdim import config_width
from flashbench.kernels.launch import Config, _spec, planning

COMBOS = [(d, dt) for d in triton_forward.HEAD_DIMS for dt in ("fp16", "bf16", "fp32")]
TORCH = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def _inputs(shape, dtype, seed=0, hkv=None):
    B, H, nq, nk, d = shape
    g = torch.Generator().manual_seed(seed)
    hk = H if hkv is None else hkv
    return tuple(torch.randn(B, h, n, d, generator=g, dtype=torch.float64)
                 for h, n in ((H, nq), (hk, nk), (hk, nk)))


def _np_expanded(q, k, v):
    group = q.shape[1] // k.shape[1]
    return (q.numpy(), k.repeat_interleave(group, 1).numpy(),
            v.repeat_interleave(group, 1).numpy())


@pytest.mark.gpu
@pytest.mark.parametrize("d,dtype", COMBOS, ids=[f"d{d}-{dt}" for d, dt in COMBOS])
@pytest.mark.parametrize("nq,nk", [(300, 517), (517, 300)], ids=["Nq<Nk", "Nq>Nk"])
def test_every_autotune_config_on_a_ragged_causal_shape(d, dtype, nq, nk):
    """Every candidate config (unequal BLOCK_M/BLOCK_N included) and the fixed one, forced
    one by one through a ragged, causal, grouped-query Nq != Nk problem."""
    q64, k64, v64 = _inputs((2, 4, nq, nk, d), dtype, hkv=2)
    q, k, v = (t.to("cuda", TORCH[dtype]) for t in (q64, k64, v64))
    qn, kn, vn = _np_expanded(*(t.cpu().double() for t in (q, k, v)))
    ref = R.attention(qn, kn, vn, causal=True)
    std = numerics.standard_model(qn, kn, vn, dtype, causal=True)
    width = config_width(d)  # the tables are per compiled width, as the launch reads them
    tried = dict.fromkeys([*configs.candidates(width, TORCH[dtype]),
                           configs.fixed_config(width, TORCH[dtype])])
    failed = []  # every config's failure, not only the first (a GPU window is short)
    for cfg in tried:
        o, lse, used = triton_forward.forward(q, k, v, causal=True, config=cfg)
        assert used == cfg
        if dtype == "fp32":
            errors = (error_stats(o, ref[0])["max_abs"], error_stats(lse, ref[1])["max_abs"])
            if max(errors) > 1e-5:
                failed.append((cfg.label(), "o, lse max abs", errors))
        else:
            j = judge((o, lse), std, ref, dtype)
            failed += [(cfg.label(), t, j[t]["verdict"]) for t in ("o", "lse")
                       if not j[t]["verdict"].passed]
    assert not failed, f"{len(failed)} of {len(tried)} configs: {failed}"


FP8_DIMS = [32, 64, 128, 256]


@pytest.mark.gpu
@pytest.mark.parametrize("d", FP8_DIMS)
@pytest.mark.parametrize("nq,nk", [(300, 517), (517, 300)], ids=["Nq<Nk", "Nq>Nk"])
def test_every_fp8_config_on_a_ragged_causal_shape(d, nq, nk):
    """Every fp8 candidate config, compiled: per-block quantisation on its own tiles, a
    ragged causal grouped-query problem; the baseline rule against the fp8 standard model,
    and the fp8 flash model on the same blocks within a small fraction of its error."""
    from flashbench.kernels import triton_fp8

    q64, k64, v64 = _inputs((2, 4, nq, nk, d), "fp32", hkv=2)
    qn, kn, vn = _np_expanded(q64, k64, v64)
    ref = R.attention(qn, kn, vn, causal=True)
    std = numerics.standard_model(qn, kn, vn, "fp8", causal=True)
    q, k, v = (t.to("cuda", torch.float32) for t in (q64, k64, v64))
    failed, tried = [], configs.candidates(d, torch.float8_e4m3fn)
    for cfg in tried:  # every config's failure, not only the first (a GPU window is short)
        o, lse = triton_fp8.triton_attention_fp8(q, k, v, causal=True, config=cfg)
        j = judge((o, lse), std, ref, "fp8")
        failed += [(cfg.label(), t, j[t]["verdict"]) for t in ("o", "lse")
                   if not j[t]["verdict"].passed]
        bm, bn = cfg.kwargs["BLOCK_M"], cfg.kwargs["BLOCK_N"]
        model = numerics.fp8.flash_fp8(qn, kn, vn, "fp8", block=bn, block_q=bm, causal=True)
        diff, own = error_stats(o, model[0]), error_stats(model[0], ref[0])
        if diff["rmse"] > 0.1 * own["rmse"]:
            failed.append((cfg.label(), "o off the fp8 flash model (rmse, its own)",
                           (diff["rmse"], own["rmse"])))
    assert not failed, f"{len(failed)} of {len(tried)} configs: {failed}"


@pytest.mark.gpu
def test_compiled_fp32_to_e4m3_conversion_rounds_to_nearest_even():
    """The GPU's p.to(float8e4nv) (what the FP8 kernel runs; Hopper: cvt.rn.satfinite) equals
    the models' nearest-even saturating e4m3 on random P in [0, 256] and on every tie."""
    import ml_dtypes
    import numpy as np
    import triton
    import triton.language as tl

    from flashbench.inputs.precision import round_to_fp8

    @triton.jit
    def cast(X, Y, N, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(X + offs, mask=offs < N, other=0.0)
        tl.store(Y + offs, x.to(tl.float8e4nv), mask=offs < N)

    grid = np.arange(0, 126, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    rng = np.random.default_rng(0)
    x = np.concatenate([(grid[:-1] + grid[1:]) / 2, rng.uniform(0, 256, 100_000),
                        rng.uniform(0, 2**-6, 10_000)]).astype(np.float32)
    xt = torch.from_numpy(x).cuda()
    y = torch.empty(x.size, dtype=torch.float8_e4m3fn, device="cuda")
    cast[(triton.cdiv(x.size, 1024),)](xt, y, x.size, BLOCK=1024)
    np.testing.assert_array_equal(y.float().cpu().numpy(), round_to_fp8(x, ml_dtypes.float8_e4m3fn))


@pytest.mark.gpu
def test_autotuned_launch_reports_its_config():
    q, k, v = (t.to("cuda", torch.bfloat16) for t in _inputs((1, 2, 1024, 1024, 128), "bf16"))
    o, lse, used = triton_forward.forward(q, k, v, causal=True)
    assert used in configs.candidates(128, torch.bfloat16)
    o2, _, fixed = triton_forward.forward(q, k, v, causal=True, config="fixed")
    assert fixed == configs.fixed_config(128, torch.bfloat16)
    assert error_stats(o, o2)["max_abs"] <= 4 * 2.0**-8  # both bf16 roundings of one result


@pytest.mark.gpu
def test_grid_launches_for_4096_batches_of_32_heads():
    """B * H = 131072 programs on grid axis 0 (axis 1's limit is 65535)."""
    B, H, N, d = 4096, 32, 128, 64
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(B, H, N, d, device="cuda", dtype=torch.float16, generator=g)
               for _ in range(3))
    o, lse = attention.triton_attention(q, k, v, causal=True)
    torch.cuda.synchronize()
    for b, h in ((0, 0), (B - 1, H - 1), (2049, 17)):
        ro, rlse = R.attention(*(t[b, h].double().cpu().numpy() for t in (q, k, v)), causal=True)
        assert error_stats(o[b, h], ro)["max_abs"] <= 2e-3
        assert error_stats(lse[b, h], rlse)["max_abs"] <= 1e-3


@pytest.mark.gpu
def test_observed_compilations_match_the_plan():
    """The plan's specialisation rules are Triton's: launches of a config used nowhere else
    compile exactly as many kernels as the plan counts."""
    cfg = Config.of(num_warps=2, num_stages=1, BLOCK_M=32, BLOCK_N=16)  # unique to this test
    shapes = [(1, 2, 100, 100, 64), (2, 3, 64, 200, 64), (1, 2, 100, 100, 32)]
    calls = [(s, dt, c) for s in shapes for dt in ("fp16", "bf16") for c in (False, True)]
    with planning() as plan:
        for s, dt, c in calls:
            q, k, v = (torch.empty(*t.shape, device="meta", dtype=TORCH[dt])
                       for t in _inputs(s, dt))
            triton_forward.forward(q, k, v, causal=c, config=cfg)
    before = triton_forward.FORWARD.compiled_count()
    if before is None:
        pytest.skip("this Triton keeps its compile cache where flashbench cannot count it")
    for s, dt, c in calls:
        q, k, v = (t.to("cuda", TORCH[dt]) for t in _inputs(s, dt))
        triton_forward.forward(q, k, v, causal=c, config=cfg)
    assert triton_forward.FORWARD.compiled_count() - before == len(plan)


def test_specialisation_mirror_matches_triton():
    native = pytest.importorskip("triton._C.libtriton").native_specialize_impl
    from triton.backends.compiler import BaseBackend

    values = [1, 0, 16, 17, -16, 2**31 - 16, 2**31, 2**31 + 16, -2**31 - 16, 2**63, 0.5, True,
              None, torch.empty(4, device="meta", dtype=torch.bfloat16),
              torch.zeros(5, dtype=torch.float16), torch.zeros(9)[1:]]
    for v in values:
        for specialize in (True, False):
            want = native(BaseBackend, v, False, specialize, True)
            assert _spec(v, specialize) == tuple(want), (v, specialize)


def test_plan_counts_configs_times_signatures():
    q = torch.empty(1, 4, 1000, 128, device="meta", dtype=torch.bfloat16)
    k = torch.empty(1, 2, 1000, 128, device="meta", dtype=torch.bfloat16)
    with planning() as plan:
        for causal in (False, True):
            triton_forward.forward(q, k, k, causal=causal)  # autotuned: every candidate
            triton_forward.forward(q, k, k, causal=causal, config="fixed")  # one of them
        triton_forward.forward(q, k, k, causal=True)  # same signature again: nothing new
    n = len(configs.candidates(128, torch.bfloat16))
    assert configs.fixed_config(128, torch.bfloat16) in configs.candidates(128, torch.bfloat16)
    assert len(plan) == 2 * n and len(plan.signatures()) == 2 and plan.launches == 2 * n + 2 + n
    assert plan.lines()[-1] == f"compiles: {2 * n}"


def test_pruning_drops_what_does_not_fit_and_long_query_blocks():
    q = torch.empty(1, 1, 64, 256, device="meta", dtype=torch.bfloat16)
    huge = Config.of(num_warps=8, num_stages=4, BLOCK_M=128, BLOCK_N=128)
    assert not configs.fits_shared_memory(configs.forward_smem_bytes(huge, 256, q.dtype))
    cands = [*configs.candidates(256, q.dtype), huge]
    kept = configs.prune_forward(cands, {"Q": q, "N_Q": 64}, HEAD_DIM=256)
    assert huge not in kept and kept
    assert all(c.kwargs["BLOCK_M"] <= 64 for c in kept)
    assert configs.prune_forward([huge], {"Q": q, "N_Q": 64}, HEAD_DIM=256) == [huge]


def test_offline_compile_for_sm90_without_a_gpu():
    """One small config compiled to sm_90 here with Triton's bundled ptxas: it compiles,
    uses wgmma, and spills nothing."""
    pytest.importorskip("triton.backends.nvidia")
    from flashbench.kernels.offline import compile_plan

    q = torch.empty(1, 1, 64, 16, device="meta", dtype=torch.float16)
    with planning() as plan:
        triton_forward.forward(q, q, q, config=Config.of(num_warps=4, num_stages=2, BLOCK_M=64,
                                                     BLOCK_N=32))
    (result,) = compile_plan(plan, say=lambda msg: None)
    assert result.error is None, result.error
    assert result.wgmma and result.shared_bytes > 0
    assert result.spill_bytes in (0, None)


def test_offline_fp8_compile_puts_both_dots_on_wgmma():
    """An fp8 config compiled to sm_90 here: both dots (S = Q K^T and P V, e4m3 x e4m3 into
    fp32) are wgmma instructions, none falls back to mma.sync, and nothing spills. With
    BLOCK_M = BLOCK_N = d = 64: 64/64 x 64/32 = 2 wgmma (k32) per dot, 2 dots in each of
    the two key-block loops (unmasked, masked): 8."""
    pytest.importorskip("triton.backends.nvidia")
    from flashbench.kernels import triton_fp8
    from flashbench.kernels.offline import compile_plan

    q = torch.empty(1, 1, 256, 64, device="meta", dtype=torch.float8_e4m3fn)
    one = torch.ones((), device="meta")
    with planning() as plan:
        triton_fp8.forward_fp8(q, q, triton_fp8.key_major(q), one, one, one,
                               config=Config.of(num_warps=4, num_stages=2, BLOCK_M=64,
                                                BLOCK_N=64))
    (result,) = compile_plan(plan, say=lambda msg: None)
    assert result.error is None, result.error
    assert "V:*fp8e4nv" in result.line and "stride_vn=1" in result.line  # key-major V
    assert result.wgmma_ops == 8 and result.mma_sync_ops == 0
    assert result.spill_bytes in (0, None)


def test_warming_splits_the_plans_compilations_among_workers(monkeypatch):
    """Workers that each replay the launches inside warming(share) compile every planned
    compilation exactly once between them, through Triton's warmup (faked here)."""
    from flashbench.kernels.launch import warming

    calls = []

    class FakeJit:
        def warmup(self, *args, grid, **kw):
            calls.append((args[0].dtype, kw["HEAD_DIM"], kw["CAUSAL"], kw["BLOCK_M"],
                          kw["BLOCK_N"], kw["num_warps"], kw["num_stages"]))

    monkeypatch.setattr(triton_forward.FORWARD, "_jit", FakeJit())

    def work():
        for dt in (torch.float16, torch.float32):
            q = torch.empty(2, 4, 700, 64, device="meta", dtype=dt)
            for causal in (False, True):
                triton_forward.forward(q, q, q, causal=causal)
                triton_forward.forward(q, q, q, causal=causal, config="fixed")

    with planning() as plan:
        work()
    for me in range(3):
        with warming(lambda i, me=me: i % 3 == me):
            work()
    assert len(calls) == len(plan) == len(set(calls))
    assert len(plan) == 2 * len(configs.candidates(64, torch.float16)) + 2
