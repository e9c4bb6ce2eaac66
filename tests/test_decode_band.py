"""The band rule for decode: the split model's band of a case (flashbench.bands.decode), and
the Triton kernel within it (check --decode's table: tests/test_decode_check.py)."""

import pytest

from flashbench.bands import cache as band_cache
from flashbench.bands import decode as decode_bands
from flashbench.bands.decode import decode_band, decode_band_seeds
from flashbench.measure.decode import DecodeCase, default_decode_cases, run_decode_check


def test_a_decode_band_is_measured_once_then_read_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FLASHBENCH_CACHE", str(tmp_path))
    monkeypatch.setattr(band_cache, "_MEMO", {})
    case = DecodeCase.parse("2x64/8x8x16:70,33:p16")  # 1024 query rows: 8 seeds
    band = decode_band(case, "fp16")
    assert band["seeds"] == decode_band_seeds(case) == 8 and band["source"] == "measured"
    assert band["key"] == "fp16|decode 2x64/8x8x16:70,33:p16|normal|causal|splits=4"
    assert all(len(v) == 8 for t in ("o", "lse") for v in band["per_seed"][t].values())
    assert 0 < band["edges"]["lse"]["rmse"] < band["edges"]["o"]["max_abs"] < 1e-2
    assert len(list((tmp_path / "bands").glob("*.json"))) == 1
    monkeypatch.setattr(band_cache, "_MEMO", {})  # a new process: the disk cache answers

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
