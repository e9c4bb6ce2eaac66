"""``flashbench speed --varlen`` (issue 35: the options of check where they apply, varlen
among them): a packed batch in FlashAttention's layout timed on fresh inputs, every timed o
judged row by row against the float64 reference of its own sequence. Before this change
`speed --varlen` was refused by argparse (exit 2) and torch's peers had no packed path."""

import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from flashbench import reference
from flashbench.backends import Backend, get_backend
from flashbench.backends.registry import per_sequence
from flashbench.cli import main
from flashbench.inputs import Shape
from flashbench.kernels import torch_peers as tp
from flashbench.measure.speed import SpeedCase, measure_roofline
from flashbench.measure.speedrun import time_backend
from flashbench.measure.speedvarlen import PackedJudge
from flashbench.timed import guard
from flashbench.timed.attention import packed_shape

LENGTHS = (40, 0, 17, 9)
SHAPE = Shape(len(LENGTHS), 2, 40, 40, 16)  # B = the count, N = the longest, as speed sets


@pytest.fixture(scope="module")
def roof():
    return measure_roofline("cpu", ["fp32"])


def _packed(name, timed):
    """A backend whose bare packed op is ``timed`` (q, k, v, cu_q, cu_k, causal=)."""
    return Backend(name, tp.sdpa_attention, name, ("fp32",), origin="user", varlen=timed,
                   varlen_timed=timed)


def test_rows_time_the_packed_peer_and_name_what_cannot_run(capsys):
    rc = main(["speed", "--varlen", ",".join(map(str, LENGTHS)), "--shape", "1x2x8x16",
               "--causal", "both", "--backend", "torch-sdpa", "--backend", "torch-naive",
               "--backend", "triton", "--seed", "5", "--json", "--quiet"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0 and report["passed"]
    rows = {(r["backend"], r["causal"]): r for r in report["rows"]}
    for causal in (False, True):
        sdpa = rows["torch-sdpa", causal]
        assert sdpa["status"] == "PASS" and sdpa["checked"] == len(sdpa["samples_s"]) >= 10
        assert "varlen 40,0,17,9" in sdpa["case"] and sdpa["shape"] == "4x2x40x40x16"
        case = SpeedCase(SHAPE, "fp32", causal, "fwd", None, LENGTHS)
        assert sdpa["tflops"] == pytest.approx(case.flops() / sdpa["median_s"] * 1e-12)
        naive = rows["torch-naive", causal]
        assert naive["status"] == "not timed" and "packed (varlen)" in naive["reason"]
        if not torch.cuda.is_available():
            assert rows["triton", causal]["status"] == "not timed"
            assert "interpreter" in rows["triton", causal]["reason"]


def test_flops_and_bytes_are_the_sequences_not_the_padded_batch():
    dense = [SpeedCase(Shape(1, 2, n, n, 16), "fp32", True) for n in LENGTHS if n]
    packed = SpeedCase(SHAPE, "fp32", True, "fwd", None, LENGTHS)
    assert packed.flops() == pytest.approx(sum(c.flops() for c in dense))
    assert packed.flops() < SpeedCase(SHAPE, "fp32", True).flops()  # no padding counted
    assert packed.bytes() == 4 * 66 * 2 * 16 * 4  # q, k, v, o: 66 rows, 2 heads, d 16, fp32
    assert packed_shape(LENGTHS, SHAPE) == Shape(1, 2, 66, 66, 16)


def _ignores_causal(q, k, v, cu_q, cu_k, causal=False):
    return per_sequence(tp.sdpa_output, q, k, v, cu_q, cu_k, causal=False)


def _one_sequence(q, k, v, cu_q, cu_k, causal=False):
    """The whole packed batch as one sequence: each row sees the other sequences' keys."""
    return tp.sdpa_output(*(t.transpose(0, 1)[None] for t in (q, k, v)),
                          causal=causal)[0].transpose(0, 1)


_SEEN: dict = {}


def _memo_on_address(q, k, v, cu_q, cu_k, causal=False):
    """Right on the first contents of each slot, then stale: a cache keyed on q's address
    (the pool refills its slots in place)."""
    key = q.data_ptr()
    if key not in _SEEN:
        _SEEN[key] = per_sequence(tp.sdpa_output, q, k, v, cu_q, cu_k, causal=causal)
    return _SEEN[key].clone()


@pytest.mark.parametrize("fn, causal, expected", [(_ignores_causal, True, guard.WRONG),
                                                  (_one_sequence, False, guard.WRONG),
                                                  (_memo_on_address, False, guard.STALE)])
def test_a_wrong_or_memoised_packed_kernel_fails_by_name(roof, fn, causal, expected):
    case = SpeedCase(SHAPE, "fp32", causal, "fwd", None, LENGTHS)
    row = time_backend(case, _packed(fn.__name__, fn), roof, seed=7, samples=12)
    assert row.status == "FAIL" and expected in row.failures, row.failures
    good = time_backend(case, get_backend("torch-sdpa"), roof, seed=7, samples=12)
    assert good.status == "PASS" and not good.failures, good.failures


@settings(max_examples=15)
@given(lengths=st.lists(st.integers(0, 33), min_size=1, max_size=4).filter(any),
       heads=st.sampled_from([(2, 2), (4, 2), (2, 1)]), causal=st.booleans(),
       d=st.sampled_from([8, 16]))
def test_the_peers_packed_path_is_the_float64_reference_per_sequence(lengths, heads, causal, d):
    """torch-sdpa's packed path (one call per sequence, empty ones skipped, grouped heads)
    against flashbench's float64 varlen reference, in fp32."""
    h, hkv = heads
    total = sum(lengths)
    g = torch.Generator().manual_seed(total * 31 + d)
    q, k, v = (torch.randn(total, n, d, generator=g, dtype=torch.float64)
               for n in (h, hkv, hkv))
    cu = np.concatenate([[0], np.cumsum(lengths)])
    o, lse = get_backend("torch-sdpa").varlen(*(t.float() for t in (q, k, v)), cu, cu,
                                               causal=causal)
    ref_o, ref_lse = reference.varlen_attention(q.numpy(), k.numpy(), v.numpy(), cu, cu,
                                                causal=causal)
    assert o.shape == (total, h, d) and lse.shape == (h, total)
    assert np.abs(o.double().numpy() - ref_o).max() < 1e-5
    assert np.abs(lse.double().numpy() - ref_lse).max() < 1e-5


@pytest.mark.parametrize("argv", [["--pass", "bwd"], ["--window", "2,0"], ["--sinks"],
                                  ["--decode"], ["--shape", "1x2x8x16"]])
def test_what_a_packed_speed_does_not_read_is_refused_with_one_line(capsys, argv):
    varlen = "0,0" if argv == ["--shape", "1x2x8x16"] else "5,6"  # only empty sequences
    try:
        rc = main(["speed", "--quiet", "--varlen", varlen, *argv])
    except SystemExit as exc:  # argparse's refusal of a bad --varlen
        rc = exc.code
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err


def test_many_short_sequences_are_sized_by_their_own_scores_not_the_totals_square(
        monkeypatch, capsys):
    """The memory check read a packed batch as one sequence of its totals: 32 sequences of
    400-512 rows at H = 8 "needed" 42.7 GB and were refused on a 24 GB machine (the run
    holds one sequence's scores at a time). Here 256 of them at H = 2, d = 16: 650 GB read
    so; now the largest sequence's scores and the packed rows, as check --varlen's."""
    import flashbench.cli.speed as speed

    seen = []
    monkeypatch.setattr(speed, "_timed", lambda args, cases, *rest: seen.append(cases) or 0)
    rc = main(["speed", "--quiet", "--varlen", "uniform:400-512:256", "--shape", "1x2x512x16",
               "--dtype", "fp32", "--seed", "3"])
    assert rc == 0, capsys.readouterr().err
    (cases,) = seen
    assert cases[0].shape.B == 256 and cases[0].shape.Nq == max(cases[0].varlen) <= 512
    # a sequence past any memory is still refused, with its figures, before anything runs
    for cmd in ("speed", "check"):
        rc = main([cmd, "--quiet", "--varlen", "10:100,20:20000000", "--shape", "1x64x1024x64",
                   "--dtype", "fp32"])
        err = capsys.readouterr().err
        assert rc == 2 and "a packed batch of 2 sequences (30 query rows over 20000100 keys) " \
            "at H=64, d=64 needs about" in err, err
    assert len(seen) == 1


USER_KERNELS = '''
import torch


def _dense(q, k, v, causal):
    s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    if causal:
        n, m = s.shape[-2:]
        s = s.masked_fill(torch.ones(n, m, dtype=torch.bool, device=s.device).triu(m - n + 1), float("-inf"))
    return torch.softmax(s, -1) @ v


def _each(q, k, v, cu, causal):
    """Per sequence, as FlashAttention's varlen does (empty sequences: no rows)."""
    c = cu.tolist()
    return torch.cat([_dense(*(t[a:b].transpose(0, 1) for t in (q, k, v)), causal)
                      .transpose(0, 1) for a, b in zip(c[:-1], c[1:])])


def good(q, k, v, causal=False, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None,
         max_seqlen_k=None):
    assert max_seqlen_q == int(cu_seqlens_q.diff().max())
    return _each(q, k, v, cu_seqlens_q, causal)


def across(q, k, v, causal=False, cu_seqlens_q=None, **_):
    """Every row sees every sequence's keys: the mask between sequences forgotten."""
    return _dense(*(t.transpose(0, 1) for t in (q, k, v)), causal).transpose(0, 1)


_SEEN = {}


def memo(q, k, v, causal=False, cu_seqlens_q=None, **_):
    key = q.data_ptr()
    if key not in _SEEN:
        _SEEN[key] = _each(q, k, v, cu_seqlens_q, causal)
    return _SEEN[key].clone()


def dense_only(q, k, v, causal=False):
    return _dense(q, k, v, causal)


for _f in (good, across, memo):
    _f.flashbench_varlen = True
    _f.flashbench_dtypes = ("fp32",)
'''


@pytest.fixture
def user_kernels(tmp_path, monkeypatch):
    (tmp_path / "fbpacked.py").write_text(USER_KERNELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # the workers find it too


def test_a_users_packed_function_is_checked_and_timed_in_its_worker(user_kernels, capsys):
    """flashbench_varlen = True: called with FlashAttention's varlen keywords in its worker
    (k, v expanded to q's heads: it declares no GQA). check --varlen judges it (the wrong one
    FAILs, one without a packed path is not applicable); speed --varlen times it by the
    harness's clock and judges every timed o: the memoised one STALE, the one that lets rows
    see other sequences WRONG. Before this change a user's function had no packed path."""
    rc = main(["check", "--varlen", "40,0,17,9", "--shape", "1x4/2x8x16", "--dtype", "fp32",
               "--causal", "on", "--backend", "fbpacked:good", "--backend", "fbpacked:across",
               "--backend", "fbpacked:dense_only", "--json", "--quiet"])
    by = {r["backend"]: r for r in json.loads(capsys.readouterr().out)["backends"]
          if r["backend"].startswith("fbpacked")}
    assert rc == 1 and by["fbpacked:good"]["passed"], by["fbpacked:good"]
    assert not by["fbpacked:across"]["passed"] and "worst_at" not in by["fbpacked:good"]
    assert by["fbpacked:across"]["worst_at"].startswith("worst in sequence "), by
    assert "packed (varlen)" in by["fbpacked:dense_only"]["skipped"]
    rc = main(["speed", "--varlen", "40,0,17,9", "--shape", "1x4/2x8x16", "--causal", "on",
               "--backend", "fbpacked:good", "--backend", "fbpacked:memo", "--backend",
               "fbpacked:across", "--seed", "3", "--json", "--quiet"])
    rows = {r["backend"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    good = rows["fbpacked:good"]
    assert good["status"] == "PASS" and good["checked"] >= len(good["samples_s"]) >= 10
    assert "worker" in good["clock"] and good["calls_per_request"] >= 1
    assert guard.STALE in rows["fbpacked:memo"]["failures"], rows["fbpacked:memo"]
    assert guard.WRONG in rows["fbpacked:across"]["failures"], rows["fbpacked:across"]
    assert rc == 1


@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.integers(0, 9), min_size=1, max_size=6).filter(any),
       data=st.data())
def test_a_packed_fail_names_the_sequence_its_worst_error_is_in(lengths, data):
    """check --varlen's FAIL says which sequence (its index, length, packed rows) holds the
    worst error: one sequence's rows off by far more than the rest's rounding."""
    from flashbench.measure.varlen import worst_sequence

    cu = np.concatenate([[0], np.cumsum(lengths)])
    bad = data.draw(st.sampled_from([i for i, n in enumerate(lengths) if n]))
    rng = np.random.default_rng(len(lengths))
    ref = rng.standard_normal((int(cu[-1]), 2, 4))
    o = ref + 1e-7 * rng.standard_normal(ref.shape)
    o[cu[bad]:cu[bad + 1], 1] += 0.5
    said = worst_sequence(o, ref, cu)
    assert said.startswith(f"worst in sequence {bad + 1} of {len(lengths)} (index {bad}, "
                           f"length {lengths[bad]}, packed rows {cu[bad]}-{cu[bad + 1] - 1})"), \
        said


def test_a_packed_fail_of_a_q_colon_k_item_names_its_queries_and_keys():
    """A probe (2026-12-07): check --varlen 100:300,37,0,65:20 named the last item "length
    65", its 65 queries over 20 keys (speed said "65 queries, 20 keys")."""
    from flashbench.measure.varlen import worst_sequence

    cu_q, cu_k = np.array([0, 100, 137, 137, 202]), np.array([0, 300, 337, 337, 357])
    ref = np.zeros((202, 2, 4))
    o = ref.copy()
    o[150] += 1.0
    said = worst_sequence(o, ref, cu_q, cu_q, cu_k)
    assert said.startswith("worst in sequence 4 of 4 (index 3, 65 queries, 20 keys, packed "
                           "rows 137-201)"), said


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(0, 40), min_size=1, max_size=300).filter(any),
       contents=st.integers(1, 12), seed=st.integers(0, 2**31))
def test_a_run_covers_every_packed_sequence_and_row_before_any_twice(lengths, contents, seed):
    """The rows judged in each timed packed o (PackedJudge._rows): the first and the last of
    each sequence dealt it, a deck of the sequences covering them all over the run's
    distinct inputs; rows from a deck of all rows, every one over the run where there are
    at most 64 an input. Before (2026-12-07) a random 64 sequences and 8 rows an input: a
    kernel that zeroed one of 1,000 sequences PASSed 3 seeds in 6, rows 300-303 of a
    600-row sequence 4 in 4 (a red team)."""
    from flashbench.measure.speedvarlen import MOST_SEQUENCES

    judge = object.__new__(PackedJudge)
    judge.rng, judge.decks, judge.contents = np.random.default_rng(seed), {}, contents
    cu = np.concatenate([[0], np.cumsum(lengths)])
    total, spans = int(cu[-1]), [(a, b) for a, b in zip(cu[:-1], cu[1:], strict=True) if b > a]
    seen_rows, seen_spans = set(), set()
    for _ in range(contents):
        rows = judge._rows(cu, total)
        assert len(set(rows.tolist())) == len(rows) and rows.max() < total
        dealt = {s for s in spans if s[0] in rows and s[1] - 1 in rows}
        assert len(dealt) >= min(len(spans), 64)
        seen_rows |= set(rows.tolist())
        seen_spans |= dealt
    if -(-len(spans) // contents) <= MOST_SEQUENCES:
        assert seen_spans == set(spans)  # every sequence's first and last rows
    if -(-total // contents) <= 64:
        assert seen_rows == set(range(total))


def _padded(q, k, v, cu_q, cu_k, causal=False):
    """Every sequence of a packed batch at once: padded, masked sdpa (a red team's)."""
    cq, ck = cu_q.long(), cu_k.long()
    nq, nk = cq[1:] - cq[:-1], ck[1:] - ck[:-1]
    lq, lk = int(nq.max()), int(nk.max())
    iq, ik = torch.arange(lq), torch.arange(lk)
    at_q = (cq[:-1, None] + iq[None, :]).clamp(max=q.shape[0] - 1)
    at_k = (ck[:-1, None] + ik[None, :]).clamp(max=k.shape[0] - 1)
    mask = (ik[None, :] < nk[:, None])[:, None, :].expand(len(nq), lq, lk)
    if causal:
        mask = mask & (ik[None, None, :] <= iq[None, :, None] + (nk - nq)[:, None, None])
    seen = mask.any(-1)
    o = torch.nn.functional.scaled_dot_product_attention(
        *(t[at].permute(0, 2, 1, 3) for t, at in ((q, at_q), (k, at_k), (v, at_k))),
        attn_mask=(mask | ~seen[..., None])[:, None])
    return (o * seen[:, None, :, None]).permute(0, 2, 1, 3)[iq[None, :] < nq[:, None]]


def _middle_sequence_zero(q, k, v, cu_q, cu_k, causal=False):
    o = _padded(q, k, v, cu_q, cu_k, causal)
    cq = cu_q.tolist()
    o[cq[len(cq) // 2 - 1]:cq[len(cq) // 2]] = 0
    return o


def _four_rows_zero(q, k, v, cu_q, cu_k, causal=False):
    o = _padded(q, k, v, cu_q, cu_k, causal)
    o[150:154] = 0  # the middle of its first, 300-row, sequence
    return o


def _constant_lse(q, k, v, cu_q, cu_k, causal=False):
    return _padded(q, k, v, cu_q, cu_k, causal), torch.full((q.shape[1], q.shape[0]), 3.0)


@pytest.mark.parametrize("fn, lengths", [
    (_middle_sequence_zero, tuple(int(n) for n in np.random.default_rng(1).integers(2, 5, 1000))),
    (_four_rows_zero, (300, 20, 30)), (_constant_lse, (100, 37, 60))])
def test_a_packed_kernel_wrong_where_few_rows_were_checked_fails(roof, fn, lengths):
    """A red team's varlen kernels (2026-12-07) that PASSed speed --varlen: one sequence of
    1,000 zeroed (3 seeds in 6), 4 rows of a 600-row sequence (4 in 4; here of 300: a
    run's rows are all checked up to 64 x its distinct inputs, about 6 at 10 samples), a
    constant LSE (every run: its values were not judged). Each FAILs now; its honest twin
    PASSes."""
    case = SpeedCase(Shape(len(lengths), 2, max(lengths), max(lengths), 16), "fp32", False,
                     "fwd", None, lengths)
    row = time_backend(case, _packed(fn.__name__, fn), roof, seed=1, samples=10)
    assert row.status == "FAIL" and guard.WRONG in row.failures, row.failures
    if fn is _constant_lse:
        assert "lse off the float64 reference" in row.failures[guard.WRONG]
    good = time_backend(case, _packed("padded", _padded), roof, seed=1, samples=10)
    assert good.status == "PASS", good.failures


def test_a_packed_gradient_fail_names_its_sequence(monkeypatch):
    """check --varlen named the sequence of a forward FAIL only; a packed backward wrong in
    its last sequence alone (a user's function has no packed backward: a registry entry
    here, whose gradients are the float64 ones with the last sequence's scaled by 1.5) has
    its gradients' FAIL named there too."""
    from dataclasses import replace

    from flashbench.backends.registry import BACKENDS
    from flashbench.measure import varlen as vl
    from flashbench.measure.records import Case

    def wrong_last(backend, q, k, v, do, cu, cu_k, prec, kw):
        grads = reference.varlen_attention_grad(q, k, v, do, cu, cu_k, **kw)[:3]
        last = int(cu[-2])
        return tuple(torch.from_numpy(np.concatenate([g[:last], 1.5 * g[last:]])).float()
                     for g in grads)

    monkeypatch.setattr(vl, "_varlen_autograd", wrong_last)
    monkeypatch.setitem(BACKENDS, "last-scaled", replace(
        get_backend("torch-naive"), name="last-scaled", varlen_grad=True, peer=False))
    case = Case(Shape(4, 2, 40, 40, 16), "normal", False, varlen=(40, 0, 17, 9))
    recs = vl.measure_varlen_gradients(case, ["fp32"], ["flash_model", "last-scaled"])
    bad = [r for r in recs if getattr(r, "kernel", None) == "last-scaled"]
    assert bad and not bad[0].passed, recs
    assert "in sequence 4 of 4 (index 3, 9 queries, 9 keys, packed rows 57-65)" in \
        bad[0].worst_at, bad[0].worst_at
    assert all(r.worst_at is None for r in recs if getattr(r, "passed", False))


def test_a_packed_rows_yardsticks_are_its_whole_sequences():
    """A row beyond 2x its own row's standard error is judged against the same-dtype
    standard model's error over its sequence's 64 rows around it (here all 37; the flash
    model's as the second
    yardstick, as check's): one row's was a noisy yardstick, and a per-sequence kernel that
    rounded S twice failed 7 fp16 contents in 300 (2 now)."""
    from flashbench import numerics
    from flashbench.inputs import Shape
    from flashbench.measure.speed import SpeedCase
    from flashbench.measure.speedvarlen import PackedJudge
    from flashbench.timed.attention import varlen_maker

    lens, shape = (100, 37, 2, 60), Shape(4, 4, 100, 100, 48, Hkv=2)
    case = SpeedCase(shape, "fp16", False, "fwd", None, lens)
    q, k, v, cu, _ = (t.double().numpy() for t in varlen_maker(lens, shape, "fp16")(57))
    judge = object.__new__(PackedJudge)
    judge.case = case
    qs = q[100:137].transpose(1, 0, 2)[None]
    ks, vs = (np.repeat(t[100:137].transpose(1, 0, 2)[None], 2, axis=1) for t in (k, v))
    ref = reference.attention(qs, ks, vs)[0]
    std = float(np.abs(np.asarray(numerics.standard_model(qs, ks, vs, "fp16")[0]) - ref).max())
    ok = judge._sequence_yardsticks(q, k, v, (100, 37), (100, 37), 120, 2, 1.5 * std)
    assert ok.passed and ok.standard_error == pytest.approx(std)
    assert not judge._sequence_yardsticks(q, k, v, (100, 37), (100, 37), 120, 2,
                                          100 * std).passed
