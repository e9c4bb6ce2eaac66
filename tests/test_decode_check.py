"""``flashbench check --decode``: cases, records, decode backends (flashbench's, torch's, a
user's with a declared decode signature) and exit statuses."""

import json
import sys

import numpy as np
import pytest
import torch

from flashbench.backends import resolve_backends
from flashbench.backends.decode import DECODE_BACKENDS, get_decode_backend
from flashbench.cli import main
from flashbench.inputs.kvcache import make_decode
from flashbench.measure.decode import DecodeCase, band_edge, run_decode_check

CASE = "2x4/2x2x16:70,33:p16"
USER = '''
import torch
from flashbench import reference

def good(q, k_cache, v_cache, cache_seqlens, block_table=None, causal=False):
    np64 = lambda t: None if t is None else t.cpu().numpy()
    o, lse = reference.decode_attention(*(t.double().numpy() for t in (q, k_cache, v_cache)),
                                        np64(cache_seqlens), np64(block_table), causal=causal)
    return torch.from_numpy(o).to(q.dtype), torch.from_numpy(lse).float()
good.flashbench_kind = "decode"

def wrong_shape(q, k_cache, v_cache, cache_seqlens, block_table=None, causal=False):
    return q[:, :1]
wrong_shape.flashbench_kind = "decode"

def forward(q, k, v, causal=False):
    return q

def lse_through_fp16(q, k_cache, v_cache, cache_seqlens, block_table=None, causal=False):
    from flashbench.kernels.triton_decode import triton_decode
    o, lse = triton_decode(q, k_cache, v_cache, cache_seqlens, block_table, causal=causal)
    return o, lse.half().float()  # the LSE stored through fp16: a defect
lse_through_fp16.flashbench_kind = "decode"

def whole_pages(q, k_cache, v_cache, cache_seqlens, block_table=None, causal=False):
    """Reads each sequence's last page whole where no causal mask hides its tail."""
    if block_table is not None and not causal:
        page = k_cache.shape[1]
        cache_seqlens = (cache_seqlens + page - 1) // page * page
    return good(q, k_cache, v_cache, cache_seqlens, block_table, causal)
whole_pages.flashbench_kind = "decode"
'''


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "fbuser_decode.py").write_text(USER)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("fbuser_decode", None)


def check(capsys, *args):
    rc = main(["check", "--decode", "--decode-case", CASE, "--dtype", "fp32", "fp16",
               "--dist", "normal", "--json", "--quiet", *args])
    return rc, json.loads(capsys.readouterr().out)


def test_decode_check_judges_the_kernel_and_a_users_function(capsys, user_module):
    rc, report = check(capsys, "--backend", "triton", "--backend", "torch-sdpa",
                       "--backend", "fbuser_decode:good")
    assert rc == 0 and report["passed"]
    kernels = {(r["kernel"], r["dtype"], r["case"]) for r in report["rows"] if "o" in r}
    assert len(kernels) == 4 * 2 * 2  # split_model, triton, sdpa, user x fp32, fp16 x causal
    assert {r["what"] for r in report["exactness"]} >= {"paged vs contiguous (bit for bit)"}
    user = [r for r in report["rows"] if r["kernel"] == "fbuser_decode:good"]
    assert all(r["passed"] and not r["peer"] and r["o_ratio"] <= 1 for r in user)
    # beside the band: the error against the rounded inputs' decode, within the band here
    mine = [r for r in report["rows"] if r["kernel"] in ("triton", "split_model")]
    assert all(0 <= r["band_err"] <= r["band"] for r in mine)


@pytest.mark.parametrize("spec, why", [
    ("fbuser_decode:wrong_shape", "expected o \\[B, Nq, H, dv\\]"),
    ("fbuser_decode:forward", "declares no decode signature"),
    ("fbuser_decode:missing", "cannot import fbuser_decode:missing"),
])
def test_a_bad_user_decode_backend_fails_with_its_reason(capsys, user_module, spec, why):
    rc, report = check(capsys, "--backend", spec)
    assert rc == 1 and not report["passed"]
    failed = [r for r in report["rows"] if r["kernel"] == spec]
    assert failed and all("failed" in r for r in failed)
    import re

    assert re.search(why, failed[0]["failed"])


def test_decode_check_table(capsys):
    rc = main(["check", "--decode", "--decode-case", CASE, "--causal", "on", "--dtype", "bf16",
               "--dist", "normal", "--quiet", "--backend", "torch-naive"])
    out = capsys.readouterr().out
    assert rc == 0 and "RESULT: PASS" in out and "split_model" in out and "(peer)" in out


@pytest.mark.parametrize("args, message", [
    (["--decode-case", "2x4x2x16:70"], "B=2 needs 2 cache lengths (one per sequence), got 1"),
    (["--decode-case", "2x4/3x2x16:70,33"], "Hkv=3 heads"),
    (["--decode", "--shape", "1x1x16x16"], "check --decode does not read --shape: forward options"),
    (["--decode", "--backend", "nope"], "unknown decode backend 'nope'"),
    (["--decode-case", "1x4/2x8x16:4:p16", "--causal", "on"], "shorter than Nq = 8"),
])
def test_bad_decode_arguments_exit_2(capsys, args, message):
    rc = main(["check", "--quiet", "--dtype", "fp32", "--dist", "normal", *args])
    assert rc == 2 and message in capsys.readouterr().err


def test_decode_backends_do_not_change_the_forward_registry():
    assert "triton" in DECODE_BACKENDS and get_decode_backend("torch-sdpa").peer
    assert all(":" not in n for n in resolve_backends())


def test_peers_agree_on_ragged_paged_mqa():
    q, k, v, lens, table = make_decode(3, 8, 1, 4, 32, [90, 4, 17], 16, seed=4)
    t = [torch.from_numpy(x).float() for x in (q, k, v)]
    args = (*t, torch.from_numpy(lens), torch.from_numpy(table))
    from flashbench import reference

    ref = reference.decode_attention(q, k, v, lens, table, causal=True)
    for name in ("torch-naive", "torch-sdpa", "triton"):
        o, lse = DECODE_BACKENDS[name](*args, causal=True)
        assert np.abs(o.double().numpy() - ref[0]).max() < 1e-5
        assert np.abs(lse.double().numpy() - ref[1]).max() < 1e-5


def test_case_text_and_band():
    case = DecodeCase.parse("4x32/8x1x128:4096,100,7,1:p64")
    assert case.spec() == "4x32/8x1x128:4096,100,7,1:p64" and case.Hkv == 8
    assert DecodeCase.parse("1x2x1x16:5").page_size is None
    assert band_edge(case, "bf16") > 0 and band_edge(DecodeCase.parse("1x2x1x16:9000"),
                                                     "bf16") is None
    # the largest over the sequences: the 1-key row of this case, not its 4096-key one
    assert band_edge(case, "bf16") == band_edge(DecodeCase.parse("1x32/8x1x128:1"), "bf16")


def test_records_without_backends():
    report = run_decode_check([DecodeCase.parse("1x2/1x1x16:40:p16")], ["bf16"], [])
    assert report["passed"] and [r["kernel"] for r in report["rows"]] == ["split_model"]


def test_check_decode_judges_by_both_rules(capsys, user_module, tmp_path, monkeypatch):
    monkeypatch.setenv("FLASHBENCH_CACHE", str(tmp_path))
    args = ["check", "--decode", "--decode-case", CASE, "--causal", "on", "--dist", "normal",
            "--dtype", "fp32", "fp16", "bf16", "--backend", "triton",
            "--backend", "fbuser_decode:lse_through_fp16", "--quiet"]
    assert main([*args, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    rows = {(r["kernel"], r["dtype"]): r for r in report["rows"]}
    for kernel in ("split_model", "triton"):
        for dtype in ("fp16", "bf16"):
            r = rows[(kernel, dtype)]
            assert r["passed"] and r["band_passed"] and r["baseline_passed"]
            assert set(r["band_rule"]) == {"o", "lse"} and r["lse_band_ratio"] <= 1
            assert isinstance(r["band"], float)  # still the tolerance band's edge
        assert "o_band_ratio" not in rows[(kernel, "fp32")]  # fp32: the baseline rule alone
    bad = rows[("fbuser_decode:lse_through_fp16", "fp16")]
    assert bad["lse_band_ratio"] > 1 and not bad["band_passed"] and not bad["passed"]
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "O band" in out and "LSE band" in out and "RESULT: FAIL" in out
    assert any(("FAIL (band)" in line or "FAIL (both)" in line) and "fbuser_decode" in line
               for line in out.splitlines())


def test_a_ratio_above_2_that_passes_says_it_is_within_the_floor(capsys):
    """The table read "LSE ratio 3.02 ... PASS" under a header saying <= 2 x the standard's
    + eps/4: a passing ratio above 2 is marked (floor), and the header says what it means.
    Which real row lands above 2 depends on the processor's rounding (the split model's
    causal LSE at seed 0 read 3.02 on a Xeon, 1.47 on an AMD EPYC), so the run's own rows
    are checked as they come and a passing and a failing row are then set above 2."""
    import re

    from flashbench.cli.decode import render_decode

    args = ["check", "--decode", "--decode-case", "1x2x2x32:50", "--dtype", "fp32", "--quiet",
            "--only", "torch-naive"]
    rc = main(args)
    out = capsys.readouterr().out
    assert rc == 0 and "((floor): above 2, within the + eps/4" in out
    for line in out.splitlines():
        if line.rstrip().endswith("PASS") and " fp32 " in line:  # the ratios' table
            for m in re.finditer(r" (\d+\.\d\d)(?![\de])( \(floor\))?", line):
                assert float(m[1]) <= 2 or m[2], line
    assert main([*args, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    passing, failing = (dict(r) for r in report["rows"][:2])
    passing["lse_ratio"] = 3.02
    failing.update(o_ratio=3.25, baseline_passed=False, passed=False)
    report["rows"] = [passing, failing]
    lines = render_decode(report).splitlines()
    assert any("3.02 (floor)" in line for line in lines)
    assert any(" 3.25 " in line + " " and "(floor)" not in line for line in lines)


def test_a_case_with_more_rows_than_the_triton_decode_holds_skips_it(capsys, user_module):
    """A red team (2026-12-06): 16 query heads on one kv head with 16 speculative tokens
    (256 rows, the kernel holds 128) made the Triton decode raise, FAIL and set RESULT FAIL,
    exit 1, beside a user's kernel that passed; now a skipped row naming the limit."""
    rc = main(["check", "--decode", "--decode-case", "1x16/1x16x64:40:p16", "--causal", "on",
               "--dtype", "fp32", "--json", "--quiet", "--backend", "triton",
               "--backend", "fbuser_decode:good"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0 and report["passed"], report
    triton = [r for r in report["rows"] if r["kernel"] == "triton"]
    assert triton and all("at most 128" in r.get("skipped", "") for r in triton), triton


def test_the_defaults_hold_a_paged_cache_unmasked_whose_last_pages_end_mid_page(
        capsys, user_module):
    """A red team (2026-12-06): a kernel that read each last page whole where no causal
    mask hid its tail PASSed the four default cases (each paged one causal); the fifth,
    paged and not causal, FAILs it."""
    from flashbench.measure.decode import default_decode_cases

    edge = [c for c in default_decode_cases() if c.page_size and not c.causal
            and any(n % c.page_size for n in c.lens)]
    assert edge, "no default decode case is paged, unmasked and ragged"
    c = edge[0]
    spec = f"{c.B}x{c.H}/{c.Hkv}x{c.Nq}x{c.d}:{','.join(map(str, c.lens))}:p{c.page_size}"
    for kernel, code in (("fbuser_decode:whole_pages", 1), ("fbuser_decode:good", 0)):
        rc = main(["check", "--decode", "--decode-case", spec, "--causal", "off", "--dtype",
                   "fp16", "--json", "--quiet", "--only", kernel])
        report = json.loads(capsys.readouterr().out)
        assert rc == code, (kernel, report)


def test_an_empty_cache_under_the_default_causal_both_runs_without_causal(capsys):
    """The default --causal both refused a case with an empty cache (exit 2, "shorter than
    Nq = 1"), though causal was never asked for by name (a probe, 2026-12-07): it runs
    without causal and says why; --causal on still refuses it."""
    import json

    rc = main(["check", "--decode", "--decode-case", "2x4x1x64:0,77:p16", "--dtype", "fp32",
               "--quiet", "--only", "torch-sdpa", "--json", "--dist", "normal", "outliers"])
    out, err = capsys.readouterr()
    rows = json.loads(out)["rows"]
    assert rc == 0 and rows and all("causal" not in r["case"] for r in rows), rows
    assert err.count("2x4x1x64:0,77:p16 runs without causal alone: a cache of 0 keys") == 1
    assert main(["check", "--decode", "--decode-case", "2x4x1x64:0,77:p16", "--dtype", "fp32",
                 "--quiet", "--causal", "on"]) == 2
    assert "shorter than Nq = 1" in capsys.readouterr().err


def test_check_decode_writes_its_tables_where_save_says(tmp_path, capsys, monkeypatch):
    """A probe: `check --decode --save PATH` wrote nothing and said nothing (the flag read by
    no one). The decode tables go there, --json runs too; without --save, no file."""
    target = tmp_path / "decode.txt"
    args = ["check", "--decode", "--decode-case", "1x2/1x1x16:40:p16", "--dtype", "fp32",
            "--causal", "off", "--only", "torch-naive"]
    rc = main([*args, "--save", str(target), "--json"])
    out, err = capsys.readouterr()
    assert rc == 0 and json.loads(out)["passed"] is True
    text = target.read_text()
    assert text.startswith("flashbench check --decode") and "RESULT: PASS" in text
    assert f"the tables written to {target}" in err
    assert main([*args, "--save", str(tmp_path / "nowhere" / "x.txt")]) == 2  # before the work
    capsys.readouterr()
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    assert main([*args, "--quiet"]) == 0
    assert list(here.iterdir()) == []


def test_the_peer_legend_is_printed_only_beside_a_peers_row(capsys):
    """A probe: "(peer): torch's attention ..., judged for information" under a table with
    no peer row in it."""
    args = ["check", "--decode", "--decode-case", "1x2/1x1x16:40:p16", "--dtype", "fp32",
            "--causal", "off", "--quiet"]
    assert main([*args, "--only", "triton"]) == 0
    assert "(peer): torch's attention" not in capsys.readouterr().out
    assert main([*args, "--backend", "triton", "--backend", "torch-naive"]) == 0
    out = capsys.readouterr().out
    assert "(peer): torch's attention" in out and "PASS (peer)" in out
