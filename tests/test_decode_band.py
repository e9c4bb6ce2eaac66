"""The band rule for decode: the split model's band of a case (flashbench.bands.decode), and
``check --decode`` judging fp16 and bf16 by both rules (O band / LSE band columns)."""

import json
import sys

import pytest

from flashbench.bands import case as case_bands
from flashbench.bands import decode as decode_bands
from flashbench.bands.decode import decode_band, decode_band_seeds
from flashbench.cli import main
from flashbench.measure.decode import DecodeCase, default_decode_cases, run_decode_check

CASE = "2x4/2x2x16:70,33:p16"
USER = '''
import torch
from flashbench.kernels.triton_decode import triton_decode

def lse_through_fp16(q, k_cache, v_cache, cache_seqlens, block_table=None, causal=False):
    o, lse = triton_decode(q, k_cache, v_cache, cache_seqlens, block_table, causal=causal)
    return o, lse.half().float()  # the LSE stored through fp16: a defect
lse_through_fp16.flashbench_kind = "decode"
'''


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "fbuser_band.py").write_text(USER)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("fbuser_band", None)


def test_a_decode_band_is_measured_once_then_read_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FLASHBENCH_CACHE", str(tmp_path))
    monkeypatch.setattr(case_bands, "_MEMO", {})
    case = DecodeCase.parse("2x64/8x8x16:70,33:p16")  # 1024 query rows: 8 seeds
    band = decode_band(case, "fp16")
    assert band["seeds"] == decode_band_seeds(case) == 8 and band["source"] == "measured"
    assert band["key"] == "fp16|decode 2x64/8x8x16:70,33:p16|normal|causal|splits=4"
    assert all(len(v) == 8 for t in ("o", "lse") for v in band["per_seed"][t].values())
    assert 0 < band["edges"]["lse"]["rmse"] < band["edges"]["o"]["max_abs"] < 1e-2
    assert len(list((tmp_path / "bands").glob("*.json"))) == 1
    monkeypatch.setattr(case_bands, "_MEMO", {})  # a new process: the disk cache answers

    def measured(*args):
        raise AssertionError("measured again")

    monkeypatch.setattr(decode_bands, "measure_decode_band", measured)
    assert decode_band(case, "fp16")["edges"] == band["edges"]
    with pytest.raises(ValueError, match="dtype 'fp64' has no decode band"):
        decode_band(case, "fp64")


def test_the_kernels_fp16_lse_passes_the_band(tmp_path, monkeypatch):
    """It read 3.74x the band here (q, k, v cast by torch, through fp32: rounded twice;
    docs/decode.md): the first default case, seed 0."""
    monkeypatch.setenv("FLASHBENCH_CACHE", str(tmp_path))
    report = run_decode_check(default_decode_cases()[:1], ["fp16"], ["triton"])
    (row,) = [r for r in report["rows"] if r["kernel"] == "triton"]
    assert row["lse_band_ratio"] <= 1 and row["o_band_ratio"] <= 1
    assert row["band_passed"] and row["passed"] and report["passed"]


def test_check_decode_judges_by_both_rules(capsys, user_module, tmp_path, monkeypatch):
    monkeypatch.setenv("FLASHBENCH_CACHE", str(tmp_path))
    args = ["check", "--decode", "--decode-case", CASE, "--causal", "on", "--dist", "normal",
            "--dtype", "fp32", "fp16", "bf16", "--backend", "triton",
            "--backend", "fbuser_band:lse_through_fp16", "--quiet"]
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
    bad = rows[("fbuser_band:lse_through_fp16", "fp16")]
    assert bad["lse_band_ratio"] > 1 and not bad["band_passed"] and not bad["passed"]
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "O band" in out and "LSE band" in out and "RESULT: FAIL" in out
    assert any(("FAIL (band)" in line or "FAIL (both)" in line) and "fbuser_band" in line
               for line in out.splitlines())
