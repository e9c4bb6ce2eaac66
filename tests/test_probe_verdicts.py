"""Wrong verdicts a first-use probe found (2026-12-07), each a test that failed before its
fix: the float64 exactness of an exact streaming on large logits, ..."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flashbench import reference
from flashbench.cli import main
from flashbench.inputs.problem import Shape, make_qkv
from flashbench.measure.forward import exactness
from flashbench.measure.records import EXACT_TOL, Case, exact


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**16), n=st.integers(16, 160), d=st.sampled_from([32, 80, 96]),
       block=st.sampled_from([7, 16, 64]), causal=st.booleans())
def test_the_exact_streaming_is_exact_on_large_logits(seed, n, d, block, causal):
    """Large logits put the LSE near 10^3-10^4, where an ulp is ~1e-12: an absolute 1e-12
    FAILed the exact streaming by 2 ulp (1x4x200x96 seed 3, causal: LSE 5838, 1.8e-12).
    The bound is 1e-12 x max(1, the quantity's largest |value|)."""
    case = Case(Shape(1, 2, n, n, d), "large-logits", causal)
    q, k, v = make_qkv(case.shape, case.dist, seed)
    ref = reference.attention(q, k, v, **case.kwargs(seed))
    rows = exactness(case, q, k, v, ref, block, seed)
    assert all(r.passed for r in rows), [(r.what, r.max_abs, r.scale) for r in rows]
    lse = next(r for r in rows if r.what == "attention LSE")
    assert lse.scale == max(1.0, float(np.abs(ref[1]).max()))


def test_the_exactness_bound_is_absolute_up_to_one_and_relative_beyond():
    case = Case(Shape(1, 1, 4, 4, 8), "normal", False)
    assert exact(case, "x", 0.9e-12, np.array([0.5])).passed
    assert not exact(case, "x", 1.1e-12, np.array([0.5])).passed  # |value| <= 1: absolute
    assert exact(case, "x", 1.1e-12, np.array([-5000.0])).passed  # 2 ulp of 5000
    assert not exact(case, "x", 2 * EXACT_TOL * 5000, np.array([-5000.0])).passed
    assert exact(case, "x", 0.0, np.array([-np.inf, 2.0])).scale == 2.0  # a row seeing no key


def test_check_passes_the_probes_large_logits_case(capsys):
    rc = main(["check", "--shape", "1x4x200x96", "--seed", "3", "--dist", "large-logits",
               "--causal", "on", "--pass", "fwd", "--no-backends", "--dtype", "fp32", "--json",
               "--quiet"])
    report = json.loads(capsys.readouterr().out)
    lse = next(r for r in report["exactness"] if r["what"] == "attention LSE")
    assert lse["passed"] and lse["max_abs"] > 0 and lse["scale"] > 1000, lse
    assert lse["rel"] == lse["max_abs"] / lse["scale"]
    assert rc == 0, report["exactness"]


def test_a_peer_named_alone_is_counted_toward_result(capsys):
    """``check --only torch-naive`` read RESULT: PASS (the yardsticks') while torch-naive, the
    one kernel asked about, FAILed its band: a named peer now counts, in check and decode."""
    args = ["check", "--shape", "1x2x128x192/128", "--dtype", "bf16", "--causal", "off",
            "--pass", "fwd", "--quiet", "--json"]
    rc = main([*args, "--only", "torch-naive"])
    report = json.loads(capsys.readouterr().out)
    naive = [r for r in report["backends"] if r["backend"] == "torch-naive"]
    assert naive and not naive[0]["passed"] and naive[0]["named"] and not naive[0]["peer"]
    assert rc == 1 and report["passed"] is False
    rc = main([*args[:-1], "--only", "torch-naive"])
    assert rc == 1 and "the peers --only named" in capsys.readouterr().out
    rc = main([*args, "--only", "torch-sdpa"])  # a peer that passes: PASS, counted
    report = json.loads(capsys.readouterr().out)
    assert rc == 0 and report["passed"] is True
    assert all(r["named"] for r in report["backends"] if r["backend"] == "torch-sdpa")
    # a name given to --backend selects (the docs said it added to the defaults), its peer
    # beside the kernel under test for information
    rc = main([*args, "--backend", "torch-naive"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0 and report["passed"] is True
    assert {r["backend"] for r in report["backends"]} == {"torch-naive"}
    assert all(r["peer"] for r in report["backends"] if r["backend"] == "torch-naive")


def test_result_counts_no_peer_among_what_went_unjudged(capsys):
    """A probe: `check --variants` read "RESULT: PASS; not judged: ... torch-sdpa on 2 of 2
    record(s) ...; torch-naive on 1 of 1 record(s)": the peers' skipped records carried no
    ``peer``, so RESULT listed them (information only) and counted only their skipped ones."""
    rc = main(["check", "--variants", "--shape", "1x2x64x32", "--dtype", "fp32",
               "--pass", "fwd", "--quiet", "--json"])
    report = json.loads(capsys.readouterr().out)
    skipped = [r for r in report["backends"] if r.get("skipped")
               and r["kernel" if "kernel" in r else "backend"].startswith("torch-")]
    assert skipped and all(r["peer"] for r in skipped), skipped
    assert rc == 0
    rc = main(["check", "--variants", "--shape", "1x2x64x32", "--dtype", "fp32",
               "--pass", "fwd", "--quiet"])
    result = next(line for line in capsys.readouterr().out.splitlines()
                  if line.startswith("RESULT:"))
    assert rc == 0 and "torch-" not in result, result


def test_speed_of_a_named_kernel_that_took_no_case_is_no_pass(tmp_path, monkeypatch, capsys):
    """``speed --backend mine`` where ``mine`` takes no case (it declares no dv != d) read
    "verdict: PASS", exit 0, on torch's rows alone; ``--only triton`` on a CPU (interpreted,
    never timed) exited 2 with ``"passed": true`` in its JSON. Both: exit 2, passed null."""
    (tmp_path / "fbprobe_nodv.py").write_text(
        "import torch\n\n\ndef nodv(q, k, v, causal=False, scale=None):\n"
        "    return torch.nn.functional.scaled_dot_product_attention(q, k, v)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    args = ["speed", "--shape", "1x2x64x192/128", "--dtype", "fp32", "--causal", "off",
            "--seed", "1", "--quiet", "--json"]
    rc = main([*args, "--backend", "fbprobe_nodv:nodv"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 2 and report["passed"] is None, report.get("untimed")
    assert "declares no dv != d" in report["untimed"]["fbprobe_nodv:nodv"]
    assert any(r["status"] == "PASS" for r in report["rows"])  # torch's rows still timed
    rc = main(["speed", "--shape", "1x2x32x64", "--dtype", "bf16", "--only", "triton",
               "--quiet", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 2 and report["passed"] is None
    # named beside a torch peer, as --help suggests (`--only mine torch-sdpa`): the peer's
    # row answered nothing asked of it, "verdict: PASS", exit 0 (a probe, 2026-12-07)
    rc = main([*args, "--only", "fbprobe_nodv:nodv", "torch-sdpa"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 2 and report["passed"] is None, report
    assert list(report["untimed"]) == ["fbprobe_nodv:nodv"]
    assert [r["status"] for r in report["rows"] if r["backend"] == "torch-sdpa"] == ["PASS"]
    rc = main([*args[:2], "1x2x64x64", *args[3:-1], "--backend", "fbprobe_nodv:nodv"])
    out = capsys.readouterr().out
    assert rc == 0 and "verdict: PASS" in out  # where it takes the case: timed and judged


def test_an_honest_users_kernel_too_small_for_torchs_pool_passes(tmp_path, monkeypatch, capsys):
    """An honest sdpa as a user's kernel at 1x1x32x32 FAILed "thread left running" in 4 runs
    of 4, quiet or not: the worker's warm-up started torch's thread pool after the threads
    were counted (the call itself too small to use it), and the pool spun past replies."""
    (tmp_path / "fbprobe_tiny.py").write_text(
        "import torch\n\n\ndef honest(q, k, v, causal=False, scale=None):\n"
        "    return torch.nn.functional.scaled_dot_product_attention(q, k, v)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    rc = main(["speed", "--shape", "1x1x32x32", "--dtype", "fp32", "--causal", "off",
               "--seed", "41", "--quiet", "--json", "--only", "fbprobe_tiny:honest"])
    row = json.loads(capsys.readouterr().out)["rows"][0]
    assert rc == 0 and row["status"] == "PASS", row["failures"]


def test_speed_decode_times_every_default_case_unless_causal_is_given(monkeypatch):
    """``speed --decode`` timed 2 of check --decode's 5 cases: its --causal defaulted to off,
    which dropped the causal ones (paged GQA, speculative MQA, d=128 with pages of 256)."""
    import flashbench.cli.speed as speed
    from flashbench.measure.decode import default_decode_cases

    seen = {}

    def timed(args, cases, *rest):
        seen["cases"] = [c.case for c in cases]
        return 0

    monkeypatch.setattr(speed, "_timed", timed)
    assert main(["speed", "--decode", "--dtype", "fp32", "--quiet"]) == 0
    assert seen["cases"] == default_decode_cases()
    assert sum(c.causal for c in seen["cases"]) == 3
    assert main(["speed", "--decode", "--dtype", "fp32", "--causal", "off", "--quiet"]) == 0
    assert seen["cases"] and not any(c.causal for c in seen["cases"])


GQA_VARLEN = '''
import torch


def packed(q, k, v, causal=False, scale=None, cu_seqlens_q=None, cu_seqlens_k=None,
           max_seqlen_q=None, max_seqlen_k=None):
    assert k.shape[1] == 2 and v.shape[1] == 2, f"k has {k.shape[1]} heads"
    out = torch.empty(q.shape[0], q.shape[1], v.shape[-1], dtype=q.dtype)
    for b in range(len(cu_seqlens_q) - 1):
        s, e = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
        kk = k[s:e].repeat_interleave(2, dim=1).transpose(0, 1)
        vv = v[s:e].repeat_interleave(2, dim=1).transpose(0, 1)
        out[s:e] = torch.nn.functional.scaled_dot_product_attention(
            q[s:e].transpose(0, 1), kk, vv).transpose(0, 1)
    return out
packed.flashbench_varlen = True
packed.flashbench_gqa = True
'''


def test_kv_heads_reaches_a_packed_batch_and_a_contradiction_is_refused(tmp_path, monkeypatch,
                                                                        capsys):
    """``check --varlen 10,20 --shape 1x4x1x64 --kv-heads 2`` handed k with 4 heads (the
    flag was not read for a packed batch); ``--shape 1x4/2x.. --kv-heads 1`` ran Hkv = 1."""
    (tmp_path / "fbprobe_gqa_varlen.py").write_text(GQA_VARLEN)
    monkeypatch.syspath_prepend(str(tmp_path))
    rc = main(["check", "--varlen", "10,20", "--shape", "1x4x1x64", "--kv-heads", "2",
               "--dtype", "fp32", "--pass", "fwd", "--causal", "off", "--quiet", "--json",
               "--only", "fbprobe_gqa_varlen:packed"])
    report = json.loads(capsys.readouterr().out)
    rows = [r for r in report["backends"] if r["backend"] == "fbprobe_gqa_varlen:packed"]
    assert rc == 0 and rows and all(r["passed"] for r in rows), rows
    assert "Hkv=2" in rows[0]["case"]
    rc = main(["check", "--shape", "1x4/2x64x64", "--kv-heads", "1", "--no-backends",
               "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and "--kv-heads 1 contradicts the shape" in err, err


NO_WINDOW = '''
import torch


def nowin(q, k, v, causal=False, scale=None, window=(-1, -1), softcap=0.0):
    """Declares the window and ignores it (softcap as the reference has it)."""
    s = (q.double() @ k.double().transpose(-1, -2)) * (scale or q.shape[-1] ** -0.5)
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if causal:
        n, m = s.shape[-2:]
        s = s.masked_fill(torch.ones(n, m, dtype=torch.bool).triu(m - n + 1), float("-inf"))
    p = torch.softmax(s, -1)
    lse = torch.logsumexp(s, -1)
    return (p @ v.double()).to(q.dtype), lse.float()
nowin.flashbench_variants = ("window", "softcap")
'''


def test_variants_at_a_small_shape_use_a_window_that_hides_keys(tmp_path, monkeypatch, capsys):
    """``check --variants --shape 1x2x128x64`` passed a kernel that ignores the window: the
    set's (128, 0) hides no key of a causal query at N <= 129. Its window there is N // 4."""
    (tmp_path / "fbprobe_nowin.py").write_text(NO_WINDOW)
    monkeypatch.syspath_prepend(str(tmp_path))
    rc = main(["check", "--variants", "--shape", "1x2x128x64", "--dtype", "fp32", "--pass",
               "fwd", "--quiet", "--json", "--only", "fbprobe_nowin:nowin"])
    report = json.loads(capsys.readouterr().out)
    rows = {r["case"]: r for r in report["backends"]}
    window = [c for c in rows if "window=(32,0)" in c]
    assert window and not rows[window[0]]["passed"], list(rows)
    assert rc == 1
    judged = [r for c, r in rows.items() if "window" not in c and "skipped" not in r]
    assert len(judged) == 1 and judged[0]["passed"], rows  # softcap


def test_messages_name_the_problem(tmp_path, monkeypatch, capsys):
    """A first-use probe's unclear messages: --samples 0 said ">= 1", then 5 said ">= 10";
    a baseline never timed left every speedup "-" without a word; a machine's folder given
    to history read "no results"; a decode function in a forward speed run was sent to
    check --decode."""
    import pytest

    with pytest.raises(SystemExit):
        main(["speed", "--samples", "0"])
    assert "must be an integer from 10 to 10,000" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # 1e11 ran on with no end (its bootstrap: 1,999 copies)
        main(["speed", "--samples", "100000000000"])
    assert "must be an integer from 10 to 10,000, got '100000000000'" in \
        capsys.readouterr().err
    rc = main(["speed", "--shape", "1x2x64x32", "--dtype", "fp32", "--causal", "off",
               "--seed", "1", "--quiet", "--baseline", "triton"])
    assert rc == 0 and "no speedup on 1x2x64x64x32 fp32 fwd: the baseline, triton, is not " \
        "timed there" in capsys.readouterr().out
    machine = tmp_path / "results" / "m1"
    machine.mkdir(parents=True)
    (machine / "machine.json").write_text("{}")
    rc = main(["history", str(machine), "--out", str(tmp_path / "out")])
    assert rc == 2 and "is one machine's folder" in capsys.readouterr().err
    (tmp_path / "fbprobe_dec.py").write_text(
        "def dec(q, k_cache, v_cache, cache_seqlens, block_table=None, causal=False):\n"
        "    raise RuntimeError\ndec.flashbench_kind = 'decode'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    main(["speed", "--shape", "1x2x64x32", "--dtype", "fp32", "--quiet", "--only",
          "fbprobe_dec:dec"])
    assert "speed --decode" in capsys.readouterr().out


def test_speed_counts_a_peer_only_names_as_check_does(capsys):
    """``speed --only torch-naive``: its row counts toward the verdict (peer false in
    --json: a FAIL is exit 1), as check counts it; beside the defaults it is information."""
    args = ["speed", "--shape", "1x2x32x16", "--dtype", "fp32", "--causal", "off", "--seed",
            "1", "--quiet", "--json"]
    main([*args, "--only", "torch-naive"])
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [(r["backend"], r["peer"]) for r in rows] == [("torch-naive", False)]
    main([*args, "--backend", "torch-naive"])
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert all(r["peer"] for r in rows if r["backend"].startswith("torch-"))


def test_review_says_when_threads_leave_its_worker_unpinned(capsys):
    """``review --threads 64`` on 2 CPUs (or 2 on 2) ran its worker unpinned (lane_cpus:
    none left over) under a header that said "fewer threads than cores"; and check --decode
    refused --pass with the variants' reason."""
    from flashbench.infra.cpuload import threads_note
    from flashbench.review.worker_client import lane_cpus

    assert "fewer threads than cores" in threads_note(1, 2)
    for threads in (2, 64):
        note = threads_note(threads, 2)
        assert "not pinned" in note and "fewer threads than cores" not in note, note
    if hasattr(__import__("os"), "sched_getaffinity"):
        n = len(__import__("os").sched_getaffinity(0))
        assert lane_cpus(n) == [None] and "not pinned" in threads_note(n, n)
    assert main(["check", "--decode", "--pass", "bwd"]) == 2
    assert "a decode step is a forward alone, no backward pass" in capsys.readouterr().err


def test_a_memo_is_read_whole_when_the_median_empty_round_trip_is_the_least():
    """The second reading (less the fastest empty round trip, no gate) was skipped where the
    empty round trips' median equalled their least (capped ones tie), the first reading's
    gate shut: a memo whose misses sit under 2x the median went unnamed."""
    from flashbench.measure.workerjudge import memo_fault

    nulls = [1e-3] * 6 + [5e-3] * 4  # median = least, IQR 4 ms: the gate wants 2 ms misses
    new = [False, True] * 12
    runs = [(1e-3 + (1.5e-3 if f else 1e-5), 1) for f in new]  # misses 1.5 ms, hits ~0
    assert memo_fault(runs, new, nulls) is not None
    honest = [(1e-3 + 1.5e-3, 1) for _ in new]
    assert memo_fault(honest, new, nulls) is None


FA_LSE = '''
import math

import torch


def attn(q, k, v, causal=False, scale=None):
    """FlashAttention's convention: LSE +inf on a row that sees no key (sum == 0 ? INFINITY)."""
    nq, nk = q.shape[-2], k.shape[-2]
    s = (q.double() @ k.double().transpose(-1, -2)) * (scale or 1 / math.sqrt(q.shape[-1]))
    if causal:
        i, j = torch.arange(nq)[:, None], torch.arange(nk)[None, :]
        s = s.masked_fill(j > i + nk - nq, float("-inf"))
    lse = torch.logsumexp(s, -1)
    o = (torch.exp(s - lse[..., None]).nan_to_num(0.0) @ v.double()).to(q.dtype)
    return o, torch.where(torch.isneginf(lse), torch.inf, lse).float()
'''


@pytest.mark.parametrize("command", ["check", "speed"])
def test_flashattentions_plus_inf_lse_on_rows_that_see_no_key_passes(user_module, capsys,
                                                                       command):
    """A probe (2026-12-07): a correct kernel that writes FlashAttention's +inf as the LSE of
    a row that sees no key (causal, Nq > Nk) FAILed check ("+inf or NaN on rows that see no
    key") and speed ("on rows whose o is not zero": o was zero there)."""
    user_module("fbfa_lse", FA_LSE)
    args = ([command, "--shape", "1x1x8x4x16", "--causal", "on", "--dtype", "fp32", "--json",
             "--quiet", "--only", "fbfa_lse:attn", "--seed", "1"]
            + (["--pass", "fwd"] if command == "check" else []))
    rc = main(args)
    report = json.loads(capsys.readouterr().out)
    rows = report["backends"] if command == "check" else report["rows"]
    (row,) = [r for r in rows if r.get("backend") == "fbfa_lse:attn"]
    assert rc == 0, row
    assert row["passed"] if command == "check" else row["status"] == "PASS", row


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 700), st.integers(1, 60), st.integers(0, 2**32 - 1))
def test_a_runs_checked_rows_cover_every_row_before_any_twice(n, contents, seed):
    """Each input's rows are dealt from a shuffled deck of all n, ceil(n / contents) an
    input (8 to 64): over ``contents`` inputs every row is checked where that covers n."""
    from flashbench.measure.checkrows import CHECK_ROWS, MOST_ROWS, checked_rows

    rng, decks = np.random.default_rng(seed), {}
    dealt = [checked_rows(rng, n, decks, contents) for _ in range(contents)]
    per = min(MOST_ROWS, max(CHECK_ROWS, -(-n // contents)))
    seen = set().union(*map(set, dealt)) - {0, n - 1}
    assert all(0 in d and n - 1 in d for d in dealt)
    assert len(seen) >= min(n - 2, per * contents - 2 * contents)
    if per * contents >= n:
        assert set().union(*map(set, dealt)) == set(range(n))


ONE_ROW = '''
import torch.nn.functional as F


def attn(q, k, v, causal=False, scale=None):
    o = F.scaled_dot_product_attention(q, k, v, scale=scale, is_causal=causal)
    o[:, :, 70] *= 0.5
    return o
'''


def test_speed_fails_a_kernel_wrong_on_one_row_of_every_call(user_module, capsys):
    """A probe (2026-12-07): one row of 256 halved in every call PASSed speed 3 runs of 3
    (8 rows drawn afresh for each of the run's inputs); its rows now cover every row."""
    user_module("fbonerow", ONE_ROW)
    rc = main(["speed", "--shape", "1x2x256x32", "--dtype", "fp32", "--causal", "off",
               "--seed", "2", "--json", "--quiet", "--only", "fbonerow:attn"])
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert rc == 1 and row["status"] == "FAIL", row
    assert "at row 70 " in row["failures"]["wrong"], row["failures"]


DV_SCALE = '''
import math

import torch


def attn(q, k, v, causal=False, scale=None):
    s = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(v.shape[-1])  # dv's, not d's
    return (torch.softmax(s, -1) @ v.float()).to(q.dtype), torch.logsumexp(s, -1)


attn.flashbench_dv = True
'''


def test_a_band_fail_of_o_beside_a_gross_lse_names_a_wrong_result(user_module, capsys):
    """A probe (2026-12-07): a 1/sqrt(dv) scale at 192/128 in bf16 read "likely the O
    accumulator kept in the dtype" on O (94x its band's edge, where precision defects reach
    too) beside "a wrong result" on its LSE (5.9e5x) in the same record."""
    user_module("fbdvscale", DV_SCALE)
    rc = main(["check", "--shape", "1x2x128x192/128", "--dtype", "bf16", "--causal", "off",
               "--pass", "fwd", "--only", "fbdvscale:attn"])
    out = " ".join(capsys.readouterr().out.split())
    assert rc == 1
    # since found by trying it (measure.diagnose): the scale itself, no guess
    assert "its O matches attention with a scale of 1/sqrt(dv) = 1/sqrt(128)" in out, out
    assert "likely the O accumulator" not in out
    # where nothing is found, the O line still reads the record's gross LSE (the tables'
    # notes too: check --decode read "accumulator" beside it, a probe, 2026-12-07)
    from flashbench.cli.check_tables import band_notes
    from flashbench.cli.check_view import band_cause

    record = {"case": "normal B=1 H=2 Nq=128 Nk=128 d=192 dv=128", "dtype": "bf16",
              "kernel": "k", "band_passed": False, "o_ratio": 40.0,
              "band": {"o": {"passed": False, "ratio": 73.0},
                       "lse": {"passed": False, "ratio": 5.9e5}}}
    said = band_cause(record, "o", record["band"])
    assert "but its LSE in the same record is 5.9e+05x its band's edge" in said, said
    notes = " ".join(band_notes([record], sources=False))
    assert "but its LSE in the same record is" in notes, notes
    record |= {"o_ratio": 100.3, "band": {"o": {"passed": False, "ratio": 199.8}}}
    notes = " ".join(band_notes([record], sources=False))
    assert "100x the same-dtype standard's max error" in notes, notes


DK_ROW = '''
import torch


def _attn(q, k, v, causal, scale):
    s = (q @ k.transpose(-1, -2)) * (scale if scale is not None else q.shape[-1] ** -0.5)
    return torch.softmax(s, -1) @ v


class _Halved(torch.autograd.Function):
    """Right forward and dq; key row 100 of dk halved in every call."""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale):
        ctx.save_for_backward(q, k, v)
        ctx.scale = scale
        with torch.no_grad():
            return _attn(q, k, v, causal, scale)

    @staticmethod
    def backward(ctx, do):
        q, k, v = (t.detach().requires_grad_() for t in ctx.saved_tensors)
        with torch.enable_grad():
            dq, dk, dv = torch.autograd.grad(_attn(q, k, v, False, ctx.scale), (q, k, v), do)
        dk = dk.clone()
        dk[..., 100, :] *= 0.5
        return dq, dk, dv, None, None


def attn(q, k, v, causal=False, scale=None):
    return _Halved.apply(q, k, v, causal, scale)


attn.flashbench_differentiable = True
'''


def test_speed_checks_every_key_row_of_dk_as_of_dq(user_module, capsys):
    """A probe (2026-12-07): dq, dk and dv dealt their rows from one deck (keyed by the row
    count alone): a dk halved on key row 100 of 128 PASSed speed --pass bwd 1 run in 8. Each
    gradient has a deck of its own."""
    user_module("fbdkrow", DK_ROW)
    rc = main(["speed", "--pass", "bwd", "--shape", "1x2x128x32", "--dtype", "fp32", "--causal",
               "off", "--seed", "3", "--json", "--quiet", "--only", "fbdkrow:attn"])
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert rc == 1 and row["status"] == "FAIL", row
    assert "dk rows" in row["failures"]["wrong"] and "100" in row["failures"]["wrong"], row


FP8_BF16 = '''
import torch


def _a(q, k, v, scale, fac):
    s = (q.float() @ k.float().transpose(-1, -2)) * (scale or q.shape[-1] ** -0.5) * fac
    return (torch.softmax(s, -1) @ v.float()).to(torch.bfloat16), torch.logsumexp(s, -1)


def exact(q, k, v, causal=False, scale=None):
    return _a(q, k, v, scale, 1.0)


def wrong(q, k, v, causal=False, scale=None):
    return _a(q, k, v, scale, 1.1)


exact.flashbench_dtypes = wrong.flashbench_dtypes = ("fp8",)
'''


@pytest.mark.parametrize("command", ["check", "speed"])
def test_an_fp8_kernel_may_write_o_in_bf16_as_flashattention_3_does(user_module, capsys,
                                                                      command):
    """A probe (2026-12-07): an FA3-style fp8 kernel returning o in bf16 FAILed check
    ("expected torch.float8_e4m3fn"), while the same kernel rounding o to e4m3 PASSed."""
    user_module("fbfp8o", FP8_BF16)
    rc = main([command, "--shape", "1x2x64x32", "--dtype", "fp8", "--causal", "off", "--json",
               "--quiet", "--seed", "1", "--only", "fbfp8o:exact", "fbfp8o:wrong"]
              + (["--pass", "fwd"] if command == "check" else []))
    report = json.loads(capsys.readouterr().out)
    rows = {r["backend"]: r for r in report["backends" if command == "check" else "rows"]
            if r.get("backend", "").startswith("fbfp8o")}
    passed = {n: r["passed"] if command == "check" else r["status"] == "PASS"
              for n, r in rows.items()}
    assert rc == 1 and passed == {"fbfp8o:exact": True, "fbfp8o:wrong": False}, rows


def test_a_users_packed_backward_is_said_not_judged_not_missing(tmp_path, monkeypatch,
                                                                 capsys):
    """A probe (2026-12-07): a differentiable packed function read "not applicable: its
    backward takes no packed (varlen) batch", blaming the kernel for what flashbench does
    not judge yet (a kernel halving every gradient PASSed beside it, the skip unexplained)."""
    (tmp_path / "fbprobe_grad_varlen.py").write_text(
        GQA_VARLEN + "packed.flashbench_differentiable = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    rc = main(["check", "--varlen", "10,20", "--shape", "1x4x1x64", "--kv-heads", "2",
               "--dtype", "fp32", "--causal", "off", "--quiet", "--json",
               "--only", "fbprobe_grad_varlen:packed"])
    report = json.loads(capsys.readouterr().out)
    skipped = [r["skipped"] for r in report["gradients"]
               if r.get("kernel") == "fbprobe_grad_varlen:packed" and "skipped" in r]
    assert rc == 0 and skipped, report["gradients"]
    assert all(s.startswith("not judged: flashbench judges the packed (varlen) backward of "
                            "its own kernels") for s in skipped), skipped


def test_a_pass_says_which_counted_kernels_went_unjudged():
    """A probe (2026-12-07): `check --shape 1x8x4096x128` read "RESULT: PASS" on the flash
    model alone (the Triton kernel skipped on every record: the interpreter too slow at that
    shape), and a speed run "verdict: PASS" beside Triton's rows "not timed"."""
    from types import SimpleNamespace

    from flashbench.cli.common import result_line, speed_pass

    why = "Triton interpreter: too slow at this shape (needs a GPU)"
    rows = [{"kernel": "flash_model", "passed": True},
            {"backend": "torch-sdpa", "peer": True, "skipped": "needs a GPU"},
            {"backend": "triton", "skipped": why}, {"backend": "triton", "skipped": why}]
    line = result_line({"passed": True, "backends": rows})
    assert line.startswith("RESULT: PASS, but no kernel of yours or flashbench's was judged")
    assert f"not judged: triton on 2 of 2 record(s) ({why})" in line and "torch" not in line
    rows[-1] = {"backend": "triton", "passed": True}
    line = result_line({"passed": True, "backends": rows})
    assert line == f"RESULT: PASS; not judged: triton on 1 of 2 record(s) ({why})"
    assert result_line({"passed": True, "backends": rows[:2] + rows[3:]}) == "RESULT: PASS"
    assert result_line({"passed": False, "backends": rows}) == "RESULT: FAIL"
    timed = [SimpleNamespace(status="PASS", backend="torch-sdpa"),
             SimpleNamespace(status="not timed", backend="triton")]
    assert speed_pass({"rows": timed}) == "PASS (1 of 2 row(s) not timed: triton)"
    assert speed_pass({"rows": timed[:1]}) == "PASS"


def test_a_nan_in_a_users_gradient_is_named_not_blamed_on_the_mask(user_module, capsys):
    """A probe (2026-12-07): a custom backward that put one NaN into dq read "band dq bf16
    inf of 1", its cause "an infinite error (a value finite where the true one is -inf, a
    row that sees no key, or the reverse) ... the scale, the mask", where the forward names
    the same fault "returned 1 non-finite value(s) (inf or NaN) in o". The gradient's FAIL
    now says it in the same words."""
    user_module("fbnangrad", DK_ROW.replace("dk[..., 100, :] *= 0.5", "dk[0, 0, 3, 0] = "
                                            "float('nan')"))
    rc = main(["check", "--pass", "bwd", "--shape", "1x2x64x32", "--dtype", "fp32", "--causal",
               "off", "--json", "--quiet", "--only", "fbnangrad:attn"])
    report = json.loads(capsys.readouterr().out)
    mine = [r for r in report["gradients"] if r.get("kernel") == "fbnangrad:attn"]
    assert rc == 1 and mine and all(not r["passed"] for r in mine), mine
    assert all(r.get("failed") == "returned 1 non-finite value(s) (inf or NaN) in dk, of "
               "4096, where the float64 reference is finite" for r in mine), mine
