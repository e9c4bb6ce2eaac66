"""``flashbench speed --pass bwd / fwdbwd`` (issue 35's open ends): the backward timed on fresh
inputs with its forward built outside the clock, every timed (dq, dk, dv) judged against the
float64 gradients, a backend with no backward named so, and a memoised or wrong backward
caught by name, in this process and in a user kernel's worker. On main before this change
`speed --pass bwd` exited 2 (the only pass was fwd)."""

import json
import sys
import textwrap

import numpy as np
import pytest
import torch

from flashbench import reference
from flashbench.backends import Backend, get_backend
from flashbench.cli import main
from flashbench.inputs import Shape
from flashbench.measure.speed import SpeedCase, measure_roofline
from flashbench.measure.speedrun import time_backend
from flashbench.timed import guard

KERNELS = textwrap.dedent('''
    import torch

    def good(q, k, v, causal=False, scale=None):
        s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
        if causal:
            n, m = s.shape[-2:]
            s = s.masked_fill(torch.ones(n, m, dtype=torch.bool, device=s.device).triu(m - n + 1), float("-inf"))
        return torch.softmax(s, -1) @ v

    def no_grad(q, k, v, causal=False, scale=None):
        with torch.no_grad():
            return good(q, k, v, causal)

    _SEEN = {}

    class _Memo(torch.autograd.Function):
        """A correct forward whose backward is memoised on the inputs' addresses."""

        @staticmethod
        def forward(ctx, q, k, v):
            ctx.save_for_backward(q, k, v)
            return good(q.detach(), k.detach(), v.detach())

        @staticmethod
        def backward(ctx, do):
            q, k, v = ctx.saved_tensors
            key = (q.data_ptr(), k.data_ptr(), v.data_ptr())
            if key not in _SEEN:
                with torch.enable_grad():
                    leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
                    _SEEN[key] = torch.autograd.grad(good(*leaves), leaves, do)
            return tuple(g.clone() for g in _SEEN[key])

    def memo_backward(q, k, v, causal=False, scale=None):
        return _Memo.apply(q, k, v)

    class _Half(torch.autograd.Function):
        """A correct forward, a backward that halves dk."""

        @staticmethod
        def forward(ctx, q, k, v):
            ctx.save_for_backward(q, k, v)
            return good(q.detach(), k.detach(), v.detach())

        @staticmethod
        def backward(ctx, do):
            with torch.enable_grad():
                leaves = [t.detach().requires_grad_(True) for t in ctx.saved_tensors]
                dq, dk, dv = torch.autograd.grad(good(*leaves), leaves, do)
            return dq, dk * 0.5, dv

    def wrong_backward(q, k, v, causal=False, scale=None):
        return _Half.apply(q, k, v)

    def undeclared(q, k, v, causal=False, scale=None):
        return good(q, k, v, causal)


    # speed times a declared backward only, as check judges one (no_grad declares one it
    # has not: autograd does not flow)
    for _f in (good, no_grad, memo_backward, wrong_backward):
        _f.flashbench_differentiable = True
''')
CASE = SpeedCase(Shape(1, 2, 64, 64, 32), "fp32", False, "bwd")


@pytest.fixture
def kernels(tmp_path, monkeypatch):
    (tmp_path / "fbpasses.py").write_text(KERNELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # the worker finds it too
    monkeypatch.delitem(sys.modules, "fbpasses", raising=False)
    import fbpasses

    yield fbpasses
    sys.modules.pop("fbpasses", None)


@pytest.fixture(scope="module")
def roof():
    return measure_roofline("cpu", ["fp32"])


def _backend(fn, name):
    return Backend(name, fn, name, ("fp32",), timed=fn, origin="user", differentiable=True)


def _speed(capsys, *argv):
    rc = main(["speed", "--quiet", "--json", "--seed", "5", *argv])
    return rc, json.loads(capsys.readouterr().out)


def test_bwd_and_fwdbwd_rows_pass_with_their_flops_and_no_backward_named(capsys):
    rows = {}
    for p in ("fwd", "bwd", "fwdbwd"):
        rc, report = _speed(capsys, "--shape", "1x2/1x32x16", "--causal", "both", "--pass", p,
                            "--backend", "torch-naive", "--backend", "reference")
        assert rc == 0 and report["passed"], report["rows"]
        rows[p] = report["rows"]
    for p, factor in (("bwd", 2.5), ("fwdbwd", 3.5)):
        for fwd, r in zip(rows["fwd"], rows[p], strict=True):
            if r["backend"] == "reference":  # float64, no autograd through it
                assert r["status"] == "not timed" and "no backward" in r["reason"]
                continue
            assert r["status"] == "PASS" and r["checked"] == len(r["samples_s"]) >= 10
            assert r["direction"] == p and r["case"].endswith(p)
            ratio = (r["tflops"] * r["median_s"]) / (fwd["tflops"] * fwd["median_s"])
            assert ratio == pytest.approx(factor)


@pytest.mark.parametrize("name, expected", [("memo_backward", guard.STALE),
                                            ("wrong_backward", guard.WRONG)])
def test_a_memoised_or_wrong_backward_fails_by_name_in_process(kernels, roof, name, expected):
    for direction in ("bwd", "fwdbwd"):
        case = SpeedCase(CASE.shape, "fp32", False, direction)
        row = time_backend(case, _backend(getattr(kernels, name), name), roof, seed=3)
        assert row.status == "FAIL" and expected in row.failures, (direction, row.failures)
        good = time_backend(case, _backend(kernels.good, "good"), roof, seed=3)
        assert good.status == "PASS" and not good.failures, good.failures


def test_gqa_gradients_are_of_the_grouped_heads(kernels, roof):
    """A kernel without GQA gets k, v expanded inside the graph: dk, dv come back with Hkv
    heads and are judged against the float64 grouped gradients."""
    case = SpeedCase(Shape(1, 4, 32, 48, 16, Hkv=2), "fp32", True, "bwd")
    for name, status in (("good", "PASS"), ("wrong_backward", "FAIL")):
        fn = getattr(kernels, name)
        b = Backend(name, fn, name, ("fp32",), timed=fn, origin="user", differentiable=True,
                    gqa=False)
        row = time_backend(case, b, roof, seed=1)
        assert row.status == status and row.checked == 10, (name, row.failures)
    assert guard.WRONG in row.failures and "dk" in row.failures[guard.WRONG]


def test_user_kernels_backward_is_timed_and_judged_in_its_worker(kernels, capsys):
    rc, report = _speed(capsys, "--shape", "1x2x32x16", "--pass", "bwd", "--backend",
                        "fbpasses:good", "--backend", "fbpasses:no_grad", "--backend",
                        "fbpasses:memo_backward")
    rows = {r["backend"]: r for r in report["rows"]}
    assert rc == 1 and not report["passed"]
    good = rows["fbpasses:good"]
    assert good["status"] == "PASS", (good["failures"], good["reason"])
    assert rows["fbpasses:no_grad"]["status"] == "not timed"
    assert "no backward" in rows["fbpasses:no_grad"]["reason"]
    rc, report = _speed(capsys, "--shape", "1x2x32x16", "--pass", "fwdbwd", "--only",
                        "fbpasses:undeclared")  # check judged its gradients not: nor speed
    row = report["rows"][0]
    assert rc == 2 and row["status"] == "not timed", row
    assert "not declared differentiable" in row["reason"], row["reason"]
    assert "to time its backward" in row["reason"] and "judge" not in row["reason"]  # timed
    memo = rows["fbpasses:memo_backward"]
    assert memo["status"] == "FAIL" and guard.STALE in memo["failures"], memo


@pytest.mark.parametrize("fill", ["q, k, v", "dO"])
def test_a_backwards_fills_weigh_its_do_alone(kernels, capsys, monkeypatch, fill):
    """A backward's q, k, v fill came right after the harness's warm-up of the worker's
    threads, and the worker's CPU over it (their spin, a stretched fill) was weighed against
    copying: "work outside the timed call: the worker used 1.45-1.77 s of CPU copying its
    calls' inputs in" failed an honest sdpa backward 5 runs in 5 at --samples 200
    (1x2x64x32, 2 threads, a quiet machine). What q, k and v allow, a backward's stage (its
    forward, untimed and unweighed) may compute as well: its dO's fill alone is weighed
    (where dO is posted with the run, inside the clock: none). Here each fill of one kind
    reads 50 ms more of the worker's CPU (the fills' path, a GPU's, taken on this CPU)."""
    from flashbench.measure import clocked, speedworker

    extra = {"cpu": 0.0}
    real_cpu, real_ask = speedworker.cpu_s, clocked.Clocked.ask

    def cpu_s(pid, family):
        c = real_cpu(pid, family)
        return None if c is None else c + extra["cpu"]

    def ask(self, *args, **request):
        if request.get("op") == "fill" and bool(request.get("late")) == (fill == "dO"):
            extra["cpu"] += 0.05
        return real_ask(self, *args, **request)

    monkeypatch.setattr(speedworker, "cpu_s", cpu_s)
    monkeypatch.setattr(clocked.Clocked, "ask", ask)
    monkeypatch.setattr(speedworker, "_mailbox", lambda *a: None)
    rc, report = _speed(capsys, "--shape", "1x2x32x16", "--pass", "bwd", "--only",
                        "fbpasses:good")
    failures = report["rows"][0]["failures"]
    if fill == "dO":
        assert rc == 1 and "copying its calls' inputs in" in failures[guard.OUTSIDE], failures
    else:
        assert rc == 0 and failures == {}, failures


def test_variants_are_timed_where_taken_and_not_applicable_elsewhere(capsys):
    """torch-naive takes window, softcap and sinks; torch-sdpa only a window: never run
    without the rest. On main `speed --window` exited 2."""
    rc, report = _speed(capsys, "--shape", "1x2/1x32x16", "--causal", "on", "--window", "8,0",
                        "--softcap", "5", "--sinks", "--backend", "torch-naive", "--backend",
                        "torch-sdpa")
    rows = {r["backend"]: r for r in report["rows"]}
    assert rc == 0 and rows["torch-naive"]["status"] == "PASS", rows
    assert rows["torch-naive"]["variant"] == "causal window=(8,0) softcap=5 sinks"
    sdpa = rows["torch-sdpa"]
    assert sdpa["status"] == "not timed" and sdpa["median_s"] is None
    assert "not applicable" in sdpa["reason"] and "softcap" in sdpa["reason"]


def test_a_kernel_that_ignores_its_variant_fails_as_wrong(kernels, roof):
    """It declares a window and is timed with one; its outputs are judged against the
    window's float64 reference (forward) and gradients (backward)."""
    from flashbench.inputs.variant import variant_of

    window = variant_of(False, window=(4, 4))
    for direction in ("fwd", "bwd"):
        case = SpeedCase(CASE.shape, "fp32", False, direction, window)
        b = Backend("ignores", lambda q, k, v, causal=False, window=None: kernels.good(q, k, v),
                    "ignores", ("fp32",), origin="user", differentiable=True,
                    variants=("window",), grad_variants=("window",))
        row = time_backend(case, b, roof, seed=2)
        assert row.status == "FAIL" and guard.WRONG in row.failures, (direction, row.failures)
        naive = time_backend(case, get_backend("torch-naive"), roof, seed=2)
        assert naive.status == "PASS" and naive.variant == "window=(4,4)", naive.failures
        assert case.flops() < SpeedCase(CASE.shape, "fp32", False, direction).flops()


def test_decode_rows_report_cache_bandwidth_against_the_copy_peak(capsys):
    """On main `speed --decode` exited 2 (no such option)."""
    rc, report = _speed(capsys, "--decode", "--decode-case", "2x4/2x1x32:300,17:p16",
                        "--backend", "torch-naive", "--dtype", "fp32")  # 4-byte items below
    (row,) = report["rows"]
    assert rc == 0 and row["status"] == "PASS" and row["direction"] == "decode", row
    assert row["checked"] == len(row["samples_s"]) >= 10
    copy = report["meta"]["roofline"]["copy_gbs"]
    assert row["peak_fraction"] == pytest.approx(row["gbs"] / copy)
    bytes_read = 4 * ((300 + 17) * 2 * 2 * 32 + 2 * 2 * 1 * 4 * 32)  # K, V rows; q and o
    assert row["gbs"] == pytest.approx(bytes_read / row["median_s"] * 1e-9)


def test_a_memoised_or_wrong_decode_fails_by_name(roof):
    from flashbench.backends.decode import DecodeBackend, get_decode_backend
    from flashbench.measure.decode import DecodeCase
    from flashbench.measure.speeddecode import DecodeSpeedCase, time_decode

    naive = get_decode_backend("torch-naive")
    seen = {}

    def memo(q, kc, vc, lens, table=None, causal=False, scale=None):
        key = (q.data_ptr(), kc.data_ptr())
        if key not in seen:
            seen[key] = naive.timed_fn(q, kc, vc, lens, table, causal=causal)
        return seen[key].clone()

    def wrong(q, kc, vc, lens, table=None, causal=False, scale=None):
        return naive.timed_fn(q, kc, vc, lens, table, causal=causal) * 1.01

    case = DecodeSpeedCase(DecodeCase(2, 4, 2, 1, 32, (200, 9), 16), "fp32")
    for fn, expected in ((memo, guard.STALE), (wrong, guard.WRONG)):
        b = DecodeBackend(fn.__name__, fn, fn.__name__, ("fp32",), timed=fn)
        row = time_decode(case, b, roof, 4, 10, 2, "cpu")
        assert row.status == "FAIL" and expected in row.failures, (fn.__name__, row.failures)
    good = time_decode(case, naive, roof, 4, 10, 2, "cpu")
    assert good.status == "PASS" and not good.failures, good.failures


def test_a_decode_lse_is_judged_by_its_values(roof):
    """A decode function's returned LSE was checked in structure only by speed --decode
    (a constant one PASSed; check --decode judged it): its values now, as o's."""
    from flashbench.backends.decode import DecodeBackend
    from flashbench.measure.decode import DecodeCase
    from flashbench.measure.speeddecode import DecodeSpeedCase, time_decode

    def exact(q, kc, vc, lens, table=None, causal=False, scale=None):
        o, lse = reference.decode_attention(
            *(t.double().numpy() for t in (q, kc, vc)), lens.numpy(),
            None if table is None else table.numpy(), causal=causal)
        return torch.from_numpy(o).float(), torch.from_numpy(np.ascontiguousarray(lse)).float()

    def constant_lse(q, kc, vc, lens, table=None, causal=False, scale=None):
        o, lse = exact(q, kc, vc, lens, table, causal)
        return o, torch.full_like(lse, 3.0)

    case = DecodeSpeedCase(DecodeCase(2, 4, 2, 2, 32, (200, 9), 16, causal=True), "fp32")
    rows = {fn.__name__: time_decode(case, DecodeBackend(fn.__name__, fn, fn.__name__,
                                                         ("fp32",), timed=fn),
                                     roof, 4, 10, 2, "cpu") for fn in (exact, constant_lse)}
    assert rows["exact"].status == "PASS", rows["exact"].failures
    bad = rows["constant_lse"]
    assert bad.status == "FAIL" and bad.failures[guard.WRONG].startswith(
        "lse off the float64 decode"), bad.failures


def test_a_decode_with_dv_below_d_passes_a_correct_kernel_and_counts_both_widths(roof):
    """Failed before: the decode judge expected an output of width d, so every correct kernel
    on a d != dv case (192/128, MLA's 576/512) was 'wrong'; FLOPs counted 4 x d per pair."""
    from flashbench.backends.decode import get_decode_backend
    from flashbench.measure.decode import DecodeCase
    from flashbench.measure.speeddecode import DecodeSpeedCase, time_decode

    c = DecodeCase.parse("2x4/2x1x48/32:40,9")
    case = DecodeSpeedCase(c, "fp32")
    assert case.flops() == 2 * 4 * (48 + 32) * 1 * (40 + 9)  # per (query, key) pair
    row = time_decode(case, get_decode_backend("torch-naive"), roof, 4, 10, 2, "cpu")
    assert row.status == "PASS" and not row.failures, row.failures


def test_a_causal_decode_counts_the_pairs_its_queries_see():
    """64 queries on 100 cached keys, causal: 4,384 visible pairs, as the dense case of that
    shape counts them; all 6,400 were counted (TFLOP/s 1.46x high, a red team)."""
    from flashbench.measure.decode import DecodeCase
    from flashbench.measure.speeddecode import DecodeSpeedCase

    causal = DecodeSpeedCase(DecodeCase.parse("1x4x64x64:100"), "fp32")
    dense = SpeedCase(Shape(1, 4, 64, 100, 64), "fp32", True)
    assert causal.case.causal and causal.flops() == 2 * 4 * (64 + 64) * 4384
    assert causal.flops() == pytest.approx(dense.flops())
    two = DecodeSpeedCase(DecodeCase.parse("2x4x64x64:100,30"), "fp32")
    assert two.flops() == 2 * 4 * 128 * (4384 + sum(min(30, i + 1 - 34) if i >= 34 else 0
                                                     for i in range(64)))


def test_the_rows_checked_are_not_drawn_from_the_seed_a_worker_is_sent():
    """Failed before: Judge and GradJudge drew their checked rows from the run's seed, which a
    user kernel's worker is sent: a kernel could compute only those 8 rows."""
    from flashbench.measure.speed import Judge
    from flashbench.measure.speedgrad import GradJudge

    for judge in (Judge, GradJudge):
        draws = {int(judge(CASE, None, 7).rng.integers(1 << 62)) for _ in range(4)}
        assert len(draws) == 4, judge.__name__


def test_an_honest_backward_is_judged_as_check_judges_it():
    """fp32 sdpa's backward at 1x2x64x32 failed the speed judge's gradient rule on 2 contents
    in 200 (dq 3.4x and 4.0x the limit against the standard backward alone): ``check``
    rescues such a gradient with the same-dtype flash model backward's error as the
    yardstick, and the speed judge now does too; a gradient off by 1e-3 still fails."""
    import numpy as np
    import torch

    from flashbench.measure.speedgrad import GradJudge
    from flashbench.timed.attention import grad_maker

    case = SpeedCase(Shape(1, 2, 64, 64, 32), "fp32", False, "bwd")
    make = grad_maker(case.shape, "fp32")
    for s in (10, 23):  # the two contents (and rows) that failed
        q, k, v, do = make((s, s + 10**6))
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
        grads = torch.autograd.grad(
            torch.nn.functional.scaled_dot_product_attention(*leaves), leaves, do)
        judge = GradJudge(case, make, 0)
        judge.rng = np.random.default_rng(s)
        assert judge.judge((s, s + 10**6), grads) is None and judge.finish() is None
        judge = GradJudge(case, make, 0)
        judge.rng = np.random.default_rng(s)
        off = (grads[0] + 1e-3 * grads[0].abs().max(), *grads[1:])
        assert judge.judge((s, s + 10**6), off) is None  # the rule's verdict: at finish
        assert judge.finish()[0] == guard.WRONG


def test_a_gradient_beyond_the_rule_on_one_row_fails_though_its_rmse_is_small():
    """One value of dq 1.5x the gradient rule's limit on a checked row fails, though the
    whole gradient's RMSE and 99th percentile stay inside its band: a rescue by the band
    rule (tried on 2026-12-06 for torch's CPU fp32 backward, whose approximate exp puts a
    row beyond the rule on about 1 content in 400 at 1x2x64x32) passed a bf16 dq whose last
    row was 5% low; the rule alone judges, as check's first rule does."""
    import numpy as np
    import torch

    from flashbench import numerics, reference
    from flashbench.accuracy import gradient_floor
    from flashbench.measure.speedgrad import GradJudge
    from flashbench.timed.attention import grad_maker

    case = SpeedCase(Shape(1, 2, 64, 64, 32), "fp32", False, "bwd")
    make, content = grad_maker(case.shape, "fp32"), (7, 8)
    q, k, v, do = (t.double().numpy() for t in make(content))
    ref = reference.attention_grad(q, k, v, do)[:3]
    yardsticks = [numerics.standard_model_grad(q, k, v, do, "fp32")[0],
                  numerics.flash_model_grad(q, k, v, do, "fp32")[0]]
    limit = 3 * max(float(np.abs(np.asarray(y, np.float64) - ref[0]).max())
                    for y in yardsticks) + gradient_floor(ref[0], "fp32")
    best = [torch.from_numpy(np.asarray(r, np.float32)) for r in ref]  # rounded once
    judge = GradJudge(case, make, 0)
    assert judge.judge(content, best) is None and judge.finish() is None
    spiked = best[0].clone()
    spiked[0, 1, 63, 5] += 1.5 * limit  # one value, on the last row (always checked)
    judge = GradJudge(case, make, 0)
    assert judge.judge(content, [spiked, *best[1:]]) is None
    wrong = judge.finish()
    assert wrong[0] == guard.WRONG and "dq rows" in wrong[1] and "PASS iff" in wrong[1], wrong


def test_the_gradient_rule_sets_the_runs_extremes_side_by_side():
    """Each content's rows against that content's own standard backward made the gradient
    rule a draw repeated once per input: an honest fp32 backward's worst content reached
    1.16x the limit in 400 (1x2x64x32, every row), so a run of 200 inputs failed about one
    time in two. The kernel's largest error over the run is now set against the standard's
    largest over the same inputs. Here: one content whose dq is 2x the rounding of the
    others' (a draw) passes among 40 honest ones, and fails alone, as it did among them
    before; a dq 4x the standard's largest error fails among them."""
    import numpy as np

    from flashbench import numerics, reference
    from flashbench.accuracy import gradient_floor
    from flashbench.measure.speedgrad import GradJudge
    from flashbench.timed.attention import grad_maker

    case = SpeedCase(Shape(1, 2, 64, 64, 32), "fp32", False, "bwd")
    make = grad_maker(case.shape, "fp32")
    exact, std_errs = {}, []
    for c in range(40):
        q, k, v, do = (t.double().numpy() for t in make(c))
        ref = reference.attention_grad(q, k, v, do)[:3]
        std = numerics.standard_model_grad(q, k, v, do, "fp32")[:3]
        exact[c] = ref
        std_errs.append(float(np.abs(np.asarray(std[0], np.float64) - ref[0]).max()))
    # dq on content 0: its float64 value plus a (sign-alternating) error of the given size
    # on every element, so that the checked rows carry it whatever rows are drawn

    def grads(c, err=0.0):
        out = [torch.from_numpy(np.asarray(r, np.float32)) for r in exact[c]]
        if err:
            sign = torch.ones_like(out[0])
            sign[..., ::2] = -1
            out[0] = (torch.from_numpy(exact[c][0]) + err * sign).float()
        return out

    def judged(contents, err):
        judge = GradJudge(case, make, 0)
        judge.contents = len(contents)
        for c in contents:
            assert judge.judge(c, grads(c, err if c == 0 else 0.0)) is None
        return judge.finish()

    # 1.1x content 0's own limit (3x its standard's error or its flash model's, + the
    # floor), within 3x the run's largest standard error
    floor = gradient_floor(exact[0][0], "fp32")
    draw = 1.1 * (3 * max(std_errs[0], _flash_error(make, 0)) + floor)
    assert draw < 3 * max(std_errs), (draw, std_errs[0], max(std_errs), floor)
    assert judged(range(40), draw) is None
    alone = judged([0], draw)
    assert alone is not None and alone[0] == guard.WRONG and "of input 0" in alone[1], alone
    bad = judged(range(40), 4 * max(std_errs))
    assert bad is not None and "dq rows" in bad[1] and "40 inputs judged" in bad[1], bad


def _flash_error(make, c) -> float:
    import numpy as np

    from flashbench import numerics, reference

    q, k, v, do = (t.double().numpy() for t in make(c))
    ref = reference.attention_grad(q, k, v, do)[0]
    return float(np.abs(np.asarray(numerics.flash_model_grad(q, k, v, do, "fp32")[0],
                                   np.float64) - ref).max())


def test_an_honest_forward_is_judged_against_yardsticks_a_matrix_product_rounds():
    """fp32 sdpa on one thread at 1x8x1024x64 failed the speed judge on 1 content in 400
    (5.79e-7 at row 788, above the band's 5.43e-7 and twice the standard attention of the
    checked rows computed alone); on 64-row blocks around them, as a matrix product rounds
    them (over the whole output the standard attention's error on that row is 3.5e-7), the
    kernel passes. A forward off by 2e-6 still fails."""
    import numpy as np
    import torch

    from flashbench.measure.speed import Judge
    from flashbench.timed.attention import attention_maker

    case = SpeedCase(Shape(1, 8, 1024, 1024, 64), "fp32")
    make, content = attention_maker(case.shape, "fp32"), 2000388
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        o = torch.nn.functional.scaled_dot_product_attention(*make(content))
    finally:
        torch.set_num_threads(threads)
    for out, want in ((o, None), (o + 2e-6, guard.WRONG)):
        judge = Judge(case, make, 0)
        judge.rng = np.random.default_rng(content)  # the rows that failed
        bad = judge.judge(content, out)
        assert (bad if bad is None else bad[0]) == want, bad


def test_a_kernel_wrong_on_its_last_row_fails_every_run(roof):
    """A kernel's last (partial) block is where its bugs live: a forward that halved its
    last query row PASSed 5 runs in 6, a backward that zeroed dq's or dv's last row 4 in 6
    (8 random rows checked; a red team, 2026-12-06). The judges check the first and the
    last rows too: every seed fails, dense, with a variant and backward."""
    import torch

    F = torch.nn.functional.scaled_dot_product_attention

    def last_row_half(q, k, v, causal=False, scale=None, softcap=None):
        o = F(q, k, v, is_causal=causal) if softcap is None else _capped(q, k, v, softcap)
        return torch.cat([o[..., :-1, :], o[..., -1:, :] * 0.5], dim=-2)

    def _capped(q, k, v, cap):
        s = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
        return torch.softmax(cap * torch.tanh(s / cap), -1) @ v

    class _LastDv(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):
            ctx.save_for_backward(q, k, v)
            return F(q, k, v)

        @staticmethod
        def backward(ctx, do):
            with torch.enable_grad():
                leaves = [t.detach().requires_grad_(True) for t in ctx.saved_tensors]
                dq, dk, dv = torch.autograd.grad(F(*leaves), leaves, do)
            dv = dv.clone()
            dv[..., -1, :] = 0
            return dq, dk, dv

    def dv_last(q, k, v, causal=False, scale=None):
        return _LastDv.apply(q, k, v)

    from flashbench.inputs.variant import Variant

    cases = [(SpeedCase(Shape(1, 2, 256, 256, 32), "fp32", True), last_row_half, {}),
             (SpeedCase(Shape(1, 2, 256, 256, 32), "fp32", False,
                        variant=Variant(softcap=30.0)), last_row_half, {"softcap"}),
             (SpeedCase(Shape(1, 2, 64, 64, 32), "fp32", False, "bwd"), dv_last, set())]
    for case, fn, variants in cases:
        b = Backend(fn.__name__, fn, fn.__name__, ("fp32",), timed=fn, origin="user",
                    differentiable=True, variants=frozenset(variants))
        for seed in range(4):
            row = time_backend(case, b, roof, seed=seed)
            assert row.status == "FAIL" and guard.WRONG in row.failures, (case, seed, row)
