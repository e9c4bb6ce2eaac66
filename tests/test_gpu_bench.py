"""The GPU script, its compile plan and the one-command GPU check, as far as a machine
without a GPU can run them (the GPU paths run in ``scripts/gpu_session.sh``)."""

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from flashbench import reference as R
from flashbench.inputs import Shape

ROOT = Path(__file__).resolve().parents[1]
NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU refusal")


def _gpu_bench():
    from tools.gpu import bench

    return bench


def test_quick_plan_fits_the_compile_budget_and_the_full_plan_is_larger(tmp_path,
                                                                       capsys):
    # DESIGN.md's command, by its path and from another folder: scripts/gpu_bench.py runs
    # tools.gpu.bench
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_bench.py"), "--quick",
                        "--plan"], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    m = re.fullmatch(r"compiles: (\d+)", lines[-1])
    assert m, lines[-1]
    n = int(m[1])
    # 63 before the Hopper variants, + 16 (4 forward variants x 2 configs x full/causal) + 2
    # (the backward's attn_bwd_dkdv_tma, full/causal): 88 keeps the 8-process precompile short
    assert 0 < n <= 88
    # the Hopper variants, timed first (tools/gpu/hopper.py): each kernel, full and causal
    for kernel in ("attn_fwd_tma", "attn_fwd_ws", "attn_fwd_overlap", "attn_fwd_persistent"):
        sigs = [x for x in lines if x.startswith("signature ") and f": {kernel} (" in x]
        assert len(sigs) == 2 and all("HEAD_DIM=128" in x and "bf16" in x for x in sigs), kernel
    assert sum(x.startswith("signature ") and ": attn_bwd_dkdv_tma (" in x for x in lines) == 2
    # one line per compilation: a config under its signature
    configs = [x for x in lines if x.startswith("    ")]
    assert len(configs) == n
    # the decode kernels' checks and timings are planned too (tools/gpu/decode.py)
    assert any(x.startswith("signature ") and "decode_split" in x for x in lines)
    assert any(x.startswith("signature ") and "decode_merge" in x for x in lines)
    assert sum(x.startswith("signature ") for x in lines) >= 2
    assert any("HEAD_DIM=128" in x and "bf16" in x for x in lines)
    # the FP8 forward's checks and timings are planned: e4m3 operands, FP8 mode
    fp8 = [x for x in lines if x.startswith("signature ") and "Q:*fp8e4nv" in x]
    assert fp8 and all("FP8=True" in x and "O:*bf16" in x for x in fp8)
    assert any("HEAD_DIM=128" in x and "CAUSAL=True" in x for x in fp8)
    assert any("HEAD_DIM=128" in x and "CAUSAL=False" in x for x in fp8)
    # the full plan: more compilations, the same last line (in this process: main() is
    # what the command above ran)
    gb = _gpu_bench()
    capsys.readouterr()
    assert gb.main(["--plan"]) == 0
    m_full = re.fullmatch(r"compiles: (\d+)", capsys.readouterr().out.splitlines()[-1])
    assert m_full and int(m_full[1]) > n


@NO_GPU
def test_bench_refuses_without_a_gpu_and_compile_needs_plan(capsys):
    gb = _gpu_bench()  # main() in this process: the command's __main__ is sys.exit(main())
    assert gb.main(["--quick"]) == 2
    err = capsys.readouterr().err
    assert "no CUDA GPU" in err and "--plan" in err
    with pytest.raises(SystemExit) as exc:
        gb.main(["--compile"])
    assert exc.value.code == 2 and "--compile goes with --plan" in capsys.readouterr().err


def test_timed_output_check_catches_a_wrong_output():
    gb = _gpu_bench()
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 4, 300, 64, generator=g)
    k, v = (torch.randn(1, 2, 280, 64, generator=g) for _ in range(2))
    ke, ve = (t.repeat_interleave(2, 1) for t in (k, v))
    o, _ = R.attention(q.double().numpy(), ke.double().numpy(), ve.double().numpy(), causal=True)
    o = torch.from_numpy(o).to(torch.bfloat16)
    good = gb.check_slice(o, q, k, v, True, "bf16")
    assert good["passed"], good
    bad = o.clone()
    bad[0, 3, -1] += 0.25  # the last row of the last head: inside the checked slice
    assert not gb.check_slice(bad, q, k, v, True, "bf16")["passed"]


def test_targets_read_only_the_target_rows():
    gb = _gpu_bench()
    rows = []
    for shape, causal, tr, fl in (("4x16x4096x4096x128", False, 500.0, 400.0),
                                  ("4x16x4096x4096x128", True, 380.0, 350.0),
                                  ("16x16x1024x1024x128", False, 100.0, 90.0)):
        case = f"{shape} bf16 {causal}"
        for name, tf in (("triton", tr), ("sdpa-flash", fl)):
            rows.append({"case": case, "backend": name, "shape": shape, "dtype": "bf16",
                         "causal": causal, "direction": "fwd", "tflops": tf})
    t = {r["case"]: r for r in gb.targets(rows)}
    assert len(t) == 2  # N = 1024 is not a target shape
    full, causal = t["4x16x4096x4096x128 bf16 False"], t["4x16x4096x4096x128 bf16 True"]
    assert full["met_tflops"] and full["met_vs_sdpa_flash"] and full["vs_sdpa_flash"] == 1.25
    assert not causal["met_tflops"] and "met_vs_sdpa_flash" not in causal


def test_timed_shapes_include_grouped_query_and_count_flops_per_query_head():
    gb = _gpu_bench()
    gqa = [t.shape for t in gb.timed_cases(True) if t.shape.Hkv is not None]
    assert gqa and all(s.H == 32 and s.Hkv == 8 and s.d == 128 for s in gqa)
    s = gqa[0]
    assert s.flops(False) == Shape(s.B, s.H, s.Nq, s.Nk, s.d).flops(False)
    from benchmarks.bench_gpu import SHAPES
    assert any(Shape.parse(x).Hkv == 8 for x in SHAPES)


def test_timed_gradient_check_catches_a_wrong_gradient():
    from flashbench.measure.timing import pass_fn

    gb = _gpu_bench()

    def naive(q, k, v, causal=False):  # grouped-query attention in the inputs' dtype
        kk, vv = (t.repeat_interleave(q.shape[1] // k.shape[1], 1) for t in (k, v))
        s = q @ kk.transpose(-1, -2) / q.shape[-1] ** 0.5
        if causal:
            s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(1), float("-inf"))
        return torch.softmax(s.float(), -1).to(q.dtype) @ vv

    g = torch.Generator().manual_seed(1)
    q = torch.randn(1, 4, 64, 32, generator=g)
    k, v = (torch.randn(1, 2, 64, 32, generator=g) for _ in range(2))
    fn = pass_fn(naive, q, k, v, True, "bwd")
    grads = fn()
    assert torch.equal(fn.do, pass_fn(naive, q, k, v, True, "bwd").do)  # seeded dO
    good = gb.check_grads(grads, q, k, v, fn.do, True, "fp32", {})
    assert good["passed"], good
    bad = (grads[0], grads[1].clone(), grads[2])
    bad[1][0, 0, 5] += 0.01  # kv head 0: inside the checked sub-problem
    assert not gb.check_grads(bad, q, k, v, fn.do, True, "fp32", {})["passed"]


def test_fp8_timed_output_check_catches_a_wrong_output(working_interpreter):
    """The fp8 rows' check: the FP8 kernel (interpreted here) on per-tensor quantised
    inputs, against the float64 reference of the bf16 inputs, by the fp8 baseline rule."""
    from flashbench.kernels import triton_fp8

    gb = _gpu_bench()
    s = Shape(1, 4, 300, 280, 64, Hkv=2)
    (q, k, v), fp8 = gb.fp8_inputs(s, "cpu")
    assert q.dtype == torch.bfloat16 and fp8[0].dtype == torch.float8_e4m3fn
    assert fp8[2].stride(-2) == 1 and fp8[3].dim() == 0  # V key-major, per-tensor descale
    o, _, _ = triton_fp8.forward_fp8(*fp8, causal=True)
    good = gb.check_slice(o, q, k, v, True, "fp8")
    assert good["passed"] and good["ratio"] < 2, good
    bad = o.clone()
    bad[0, 3, -1] += 0.25
    assert not gb.check_slice(bad, q, k, v, True, "fp8")["passed"]


def test_fp8_check_rows_compare_the_kernel_with_the_model():
    from flashbench.measure.records import Case

    gb = _gpu_bench()
    rows = gb.fp8_check_rows(Case(Shape(1, 2, 200, 260, 64), causal=True))
    assert [r["kernel"] for r in rows] == ["flash_model", "triton-fp8"]
    kernel = rows[1]
    assert kernel["passed"] and abs(kernel["vs_fp8_model"] - 1) <= gb.FP8_MODEL_AGREEMENT
    assert {c.shape.d for c in gb.fp8_check_cases(True)} <= {32, 64, 128, 256}


def test_fp8_timed_cases_and_speedups():
    gb = _gpu_bench()
    fp8 = [t for t in gb.timed_cases(True) if t.dtype == "fp8"]
    assert {(t.shape.d, t.shape.Nq, t.causal) for t in fp8} == {
        (128, n, c) for n in (4096, 8192) for c in (False, True)}
    assert all(t.direction == "fwd" for t in fp8) and gb.backends_for(True, "fp8") == (
        "triton-fp8",)
    rows = [{"case": "a", "backend": "triton", "dtype": "bf16", "shape": "s", "causal": False,
             "direction": "fwd", "tflops": 400.0},
            {"case": "b", "backend": "triton-fp8", "dtype": "fp8", "shape": "s",
             "causal": False, "direction": "fwd", "tflops": 600.0},
            {"case": "c", "backend": "triton-fp8", "dtype": "fp8", "shape": "s",
             "causal": True, "direction": "fwd", "tflops": 500.0}]
    ups = gb.fp8_speedups(rows)
    assert ups[0]["fp8_vs_bf16"] == 1.5 and ups[1]["fp8_vs_bf16"] is None


def test_variants_phase_counts_no_time_for_a_wrong_output_and_compares_with_cudnn(
        guarded_on_cpu):
    """gpu_hopper's timing judges every timed call's output outside the clock: a backend
    whose output is wrong on some inputs gets no time, nor does a backward whose gradients
    are; the table says each row's speed against sdpa-cudnn of the same case."""
    from tools.gpu import hopper as gpu_hopper

    shape = Shape(1, 2, 64, 64, 32)

    def wrong_sometimes(q, k, v, causal):
        o = _torch_attention(q, k, v, causal)
        return o + 0.5 if float(q.float().sum()) > 0 else o

    row = gpu_hopper._time(wrong_sometimes, True, shape, "bf16", 1000.0, seed=1)
    assert "timed outputs failed their checks: time not counted" in row["skipped"]
    assert row["check"]["passed"] is False and "samples_s" not in row
    rows = [{"case": "c", "backend": "sdpa-cudnn", "ms": 2.0, "ms_q1": 1.9, "ms_q3": 2.1,
             "tflops": 400.0, "pct_peak": 50.0},
            {"case": "c", "backend": "triton-ws", "ms": 1.6, "ms_q1": 1.5, "ms_q3": 1.7,
             "tflops": 500.0, "pct_peak": 62.5, "config": "BLOCK_M=128"},
            {"case": "c", "backend": "triton-tma", "skipped": "failed: X"}]
    lines = gpu_hopper.table(rows).splitlines()

    def wrong(q, k, v):
        def call(do):
            with torch.enable_grad():
                leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
                grads = torch.autograd.grad(_torch_attention(*leaves), leaves, do)
            return tuple(g + 0.5 for g in grads)
        return _torch_attention(q, k, v), call

    brow = gpu_hopper._time_backward(None, wrong, False, shape, 1000.0, seed=1)
    assert brow["skipped"] == "timed gradients failed their checks: time not counted"
    assert "| c | triton-ws | 1.600 (1.500-1.700) | 500 | 62 | 1.25x | BLOCK_M=128 |" in lines
    assert "| c | triton-tma | failed: X | | | | |" in lines


def _roof():
    from flashbench.measure.speed import Roofline

    return Roofline({"fp32": 1e6}, 1e9, "a machine no call can beat (the floor is ~0 s)")


def _ptr_memo(fn):
    cache = {}

    def cached(*args, **kw):
        key = args[0].data_ptr()
        if key not in cache:
            cache[key] = fn(*args, **kw)
        return cache[key]

    return cached


def test_timed_forward_rows_see_fresh_inputs_and_judge_every_output():
    """gpu_bench's forward rows (gpu_checks.guarded_forward) on CPU tensors: an honest backend
    passes with 12 outputs checked; one that caches on q's address fails by name. Before this
    change the rows checked the first call's slice only and timed 20 calls on one input."""
    from flashbench.backends import get_backend

    gb = _gpu_bench()
    b = get_backend("torch-sdpa")
    s = Shape(1, 4, 128, 128, 32, Hkv=2)
    row = gb.guarded_forward(b, s, "fp32", True, _roof(), seed=5, device="cpu", samples=12)
    assert "skipped" not in row and row["check"]["checked"] == 12 and len(row["samples_s"]) == 12
    cheat = dataclasses.replace(b, timed=_ptr_memo(b.timed_fn))
    row = gb.guarded_forward(cheat, s, "fp32", True, _roof(), seed=5, device="cpu", samples=12)
    assert not row["check"]["passed"] and "not counted" in row["skipped"]
    assert set(row["check"]["failures"]) & {"stale", "wrong"}


def test_timed_backward_rows_see_fresh_do_and_judge_every_call(monkeypatch):
    """gpu_checks.guarded_backward on CPU: honest gradients pass; a backward that caches on
    dO's address returns another dO's gradients and fails as stale."""
    from flashbench.backends import get_backend

    gb = _gpu_bench()
    b = get_backend("torch-naive")
    s = Shape(1, 2, 64, 64, 16)
    samples, check = gb.guarded_backward(b, s, "fp32", True, seed=3, device="cpu", samples=9)
    assert check["passed"], check
    assert len(samples) == 9 and check["checked"] == 9 and check["contents"] >= 3
    grad = torch.autograd.grad
    cache = {}

    def cached(o, leaves, do, **kw):
        if do.data_ptr() not in cache:
            cache[do.data_ptr()] = grad(o, leaves, do, **kw)
        return cache[do.data_ptr()]

    monkeypatch.setattr(torch.autograd, "grad", cached)
    _, check = gb.guarded_backward(b, s, "fp32", True, seed=3, device="cpu", samples=9)
    assert not check["passed"] and "stale" in check["failures"], check


def _torch_attention(q, k, v, causal=False, window=(-1, -1), softcap=None):
    """Plain attention in torch with FlashAttention's bottom-right window (a stand-in for
    the Triton kernels on CPU tensors)."""
    nq, nk = q.shape[-2], k.shape[-2]
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = (q.double() @ k.double().transpose(-1, -2)) / q.shape[-1] ** 0.5
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    i, j = torch.arange(nq)[:, None] + nk - nq, torch.arange(nk)[None]
    left, right = window
    right = (0 if right < 0 else min(right, 0)) if causal else right
    keep = torch.ones(nq, nk, dtype=torch.bool)
    if left >= 0:
        keep &= j >= i - left
    if right >= 0:
        keep &= j <= i + right
    return (torch.softmax(s.masked_fill(~keep, float("-inf")), -1) @ v.double()).to(q.dtype)


def test_any_timed_call_sees_fresh_inputs_and_every_output_is_judged():
    """tools.gpu.guarded.guarded_call (the fp8, head-dim, variant and Hopper rows' timer) on CPU: an
    honest call passes with every output checked; one that caches on q's address, one that
    returns a view of its input and one that drops the window each fail by name. Before, these
    rows checked the first call's output only and timed 20 calls on the same tensors."""
    from flashbench.inputs.variant import Variant
    from flashbench.measure.speed import SpeedCase
    from flashbench.timed.guard import ALIAS, STALE, WRONG

    gb = _gpu_bench()
    s = Shape(1, 4, 96, 96, 32, Hkv=2)
    case = SpeedCase(s, "fp32", True)
    honest = gb.guarded_call(lambda q, k, v: _torch_attention(q, k, v, True), case, _roof(),
                             seed=7, device="cpu", samples=12)
    assert honest["check"]["passed"] and honest["check"]["checked"] == 12
    assert len(honest["samples_s"]) == 12 and "skipped" not in honest
    stale = gb.guarded_call(_ptr_memo(lambda q, k, v: _torch_attention(q, k, v, True)), case,
                            _roof(), seed=7, device="cpu", samples=12)
    assert "samples_s" not in stale and set(stale["check"]["failures"]) & {STALE, WRONG}
    view = gb.guarded_call(lambda q, k, v: q[..., :32], case, _roof(), seed=7, device="cpu",
                           samples=6)
    assert ALIAS in view["check"]["failures"] and "not counted" in view["skipped"]
    window = Variant(causal=True, window=(16, 0))
    wcase = SpeedCase(s, "fp32", True, variant=window)
    good = gb.guarded_call(lambda q, k, v: _torch_attention(q, k, v, True, (16, 0)), wcase,
                           _roof(), seed=7, device="cpu", samples=9)
    assert good["check"]["passed"], good
    bad = gb.guarded_call(lambda q, k, v: _torch_attention(q, k, v, True), wcase, _roof(),
                          seed=7, device="cpu", samples=9)
    assert "rows" in bad["check"]["failures"][WRONG] and "window" in \
        bad["check"]["failures"][WRONG]
    capped = SpeedCase(s, "fp32", False, variant=Variant(softcap=5.0))
    assert gb.guarded_call(lambda q, k, v: _torch_attention(q, k, v, softcap=5.0), capped,
                           _roof(), seed=7, device="cpu", samples=6)["check"]["passed"]
    assert not gb.guarded_call(lambda q, k, v: _torch_attention(q, k, v), capped, _roof(),
                               seed=7, device="cpu", samples=6)["check"]["passed"]


@pytest.fixture
def guarded_on_cpu(monkeypatch):
    """The GPU rows' guard on CPU tensors, a roof no call beats, 9 calls a row."""
    import functools

    from tools.gpu import checks, guarded

    monkeypatch.setattr(guarded, "guarded_call", functools.partial(
        guarded.guarded_call, device="cpu", samples=9))
    monkeypatch.setattr(checks, "guarded_backward", functools.partial(
        checks.guarded_backward, device="cpu", samples=9))
    monkeypatch.setattr(guarded, "roofline", lambda peak: _roof())


def _fake_forward(cheat=False):
    memo = {}

    def forward(q, k, v, causal=False, config=None, window=(-1, -1), softcap=None, sinks=None):
        o = _torch_attention(q, k, v, causal, window, softcap)
        if cheat:  # caches on q's address: the pool refills slots in place
            o = memo.setdefault(q.data_ptr(), o)
        return o, None, None

    return forward


def test_the_head_dim_rows_time_through_the_guard(monkeypatch, guarded_on_cpu):
    """gpu_headdims.timing_rows: every head dim's row is timed by guarded_call (fresh inputs,
    each output judged): an honest kernel gets times at d = 80, 96, 192/128; one that caches on
    q's address gets none, and the row says why."""
    from tools.gpu import headdims

    monkeypatch.setattr(headdims, "TIMED", (1, 2, 64, 64))
    monkeypatch.setattr(headdims.triton_fwd, "forward", _fake_forward())
    rows = headdims.timing_rows(1.0, lambda _: None)
    assert [r["d"] for r in rows] == [128, 80, 96, 192] and rows[3]["dv"] == 128
    assert all(r["check"]["passed"] and r["check"]["checked"] == 9 and "ms" in r for r in rows)
    monkeypatch.setattr(headdims.triton_fwd, "forward", _fake_forward(cheat=True))
    rows = headdims.timing_rows(1.0, lambda _: None)
    assert all("ms" not in r and "not counted" in r["skipped"] for r in rows)


def test_the_variant_rows_and_the_window_backward_time_through_the_guard(monkeypatch,
                                                                         guarded_on_cpu):
    """gpu_variants.timing_rows: the plain causal, window and softcap forwards through
    guarded_call, judged against each variant's float64 reference; the window's backward
    through guarded_backward with the window in the gradient check. A kernel that drops the
    window gets no time."""
    from tools.gpu import variants

    monkeypatch.setattr(variants, "TIMED_SHAPE", Shape(1, 2, 64, 64, 16))
    monkeypatch.setattr(variants, "WINDOW_BWD", (16, 0))
    monkeypatch.setattr(variants, "TIMED", {"causal": {"causal": True},
                                            "causal window=(16,0)": {"causal": True,
                                                                     "window": (16, 0)},
                                            "softcap=30": {"softcap": 30.0}})
    fwd = _fake_forward()

    def variant_forward(q, k, v, causal=False, **kw):
        return fwd(q, k, v, causal, **kw)

    def backward(q, k, v, o, lse, do, causal, window=(-1, -1)):
        with torch.enable_grad():
            leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
            return torch.autograd.grad(_torch_attention(*leaves, causal, window), leaves, do)

    monkeypatch.setattr(variants.triton_fwd, "forward", fwd)
    monkeypatch.setattr(variants, "variant_forward", variant_forward)
    monkeypatch.setattr(variants.triton_bwd, "backward", backward)
    rows = variants.timing_rows(1.0, lambda _: None)
    assert [r["direction"] for r in rows] == ["fwd", "fwd", "fwd", "bwd"]
    assert all(r["check"]["passed"] and "ms" in r for r in rows), rows
    monkeypatch.setattr(variants, "variant_forward", lambda q, k, v, causal=False, **kw:
                        fwd(q, k, v, causal, softcap=kw.get("softcap")))  # drops the window
    rows = variants.timing_rows(1.0, lambda _: None)
    from flashbench.timed.guard import WRONG

    assert "ms" in rows[0] and "ms" not in rows[1] and WRONG in rows[1]["check"]["failures"]


def test_the_hopper_rows_time_through_the_guard(monkeypatch, guarded_on_cpu):
    """gpu_hopper.run and run_backward: the forward rows through guarded_call, the backward
    rows (a kernel's own backward and a peer's autograd) through guarded_backward; a forward
    that caches on q's address gets no time."""
    from tools.gpu import hopper

    monkeypatch.setattr(hopper, "CASES", [(Shape(1, 2, 64, 64, 16), True)])
    monkeypatch.setattr(hopper, "BWD_CASES", [(Shape(1, 2, 64, 64, 16), False)])
    monkeypatch.setattr(hopper, "PEERS", ("torch-naive",))
    monkeypatch.setattr(hopper, "_chosen", lambda *a: None)
    fwd, cheat = _fake_forward(), _fake_forward(cheat=True)
    monkeypatch.setattr(hopper.triton_fwd, "forward", fwd)
    monkeypatch.setattr(hopper, "_calls", lambda: [
        ("triton", lambda q, k, v, causal: fwd(q, k, v, causal)[0]),
        ("triton-cheat", lambda q, k, v, causal: cheat(q, k, v, causal)[0])])

    def backward(q, k, v, o, lse, do, causal=False, kernel=None):
        with torch.enable_grad():
            leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
            return torch.autograd.grad(_torch_attention(*leaves, causal), leaves, do)

    monkeypatch.setattr(hopper.triton_bwd, "backward", backward)
    rows = {r["backend"]: r for r in hopper.run(1.0, lambda _: None)}
    assert rows["triton"]["check"]["passed"] and "tflops" in rows["triton"]
    assert "tflops" not in rows["triton-cheat"] and "not counted" in rows["triton-cheat"]["skipped"]
    assert rows["torch-naive"]["check"]["checked"] == 9 and "tflops" in rows["torch-naive"]
    rows = hopper.run_backward(1.0, lambda _: None)
    assert [r["backend"] for r in rows] == ["triton", "triton-dkdv-tma", "torch-naive"]
    assert all(r["check"]["passed"] and r["check"]["checked"] == 9 and "tflops" in r
               for r in rows), rows


def test_the_fp8_rows_time_through_the_guard(monkeypatch):
    """gpu_bench.time_fp8: the FP8 kernel on e4m3 pool slots quantised from fresh bf16 draws,
    every output judged against the float64 reference of those bf16 inputs; a kernel that
    caches on q8's address gets no time."""
    import functools

    gb = _gpu_bench()
    monkeypatch.setattr(gb, "guarded_call", functools.partial(gb.guarded_call, device="cpu",
                                                              samples=9))
    maker = gb.device_maker
    monkeypatch.setattr(gb, "device_maker", lambda s, dtype, device: maker(s, dtype, "cpu"))
    monkeypatch.setattr(gb, "roofline", lambda peak: _roof())
    memo = {}

    def forward_fp8(q8, k8, v8, qd, kd, vd, causal=False, cheat=False):
        q, k, v = (x.float() * d for x, d in ((q8, qd), (k8, kd), (v8, vd)))
        o = _torch_attention(q, k, v, causal).to(torch.bfloat16)
        return (memo.setdefault(q8.data_ptr(), o) if cheat else o), None, None

    t = gb.Timed(Shape(1, 2, 64, 64, 32), "fp8", True)
    monkeypatch.setattr(gb.triton_fp8, "forward_fp8", forward_fp8)
    row = gb.time_fp8(t, 1.0, {})
    assert row["check"]["passed"] and row["check"]["checked"] == 9 and "tflops" in row, row
    monkeypatch.setattr(gb.triton_fp8, "forward_fp8", functools.partial(forward_fp8,
                                                                         cheat=True))
    row = gb.time_fp8(t, 1.0, {})
    assert "tflops" not in row and "not counted" in row["skipped"]

