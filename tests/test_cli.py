"""flashbench check on small shapes, through the real CLI entry point."""

import json
import subprocess
import sys

import pytest

from flashbench.cli import main, parse_shape


def test_check_json_small(capsys):
    rc = main(["check", "--shape", "1x2x64x32", "--shape", "1x1x20x50x16", "--dtype", "fp32",
               "bf16", "--dist", "normal", "--json", "--quiet"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0 and report["passed"] is True
    cases = {r["case"] for r in report["exactness"]}
    assert len(cases) == 4  # 2 shapes x causal on/off
    assert all(r["max_abs"] <= 1e-12 for r in report["exactness"])
    assert {r["dtype"] for r in report["dtypes"]} == {"fp32", "bf16"}
    backends = {r["backend"] for r in report["backends"]}
    assert {"torch-naive", "torch-sdpa", "triton"} <= backends
    fp32 = [r for r in report["dtypes"] if r["dtype"] == "fp32"]
    assert all(r["streamed_vs_oneshot_o"]["max_abs"] < 1e-5 for r in fp32)


def test_check_text_report_and_failure_exit(capsys, monkeypatch):
    import flashbench.measure as measure

    rc = main(["check", "--shape", "1x1x40x16", "--dtype", "fp16", "--causal", "on",
               "--no-backends", "--quiet"])
    text = capsys.readouterr().out
    assert rc == 0
    assert "1. Exactness in float64" in text and "RESULT: PASS" in text and "eps" in text
    monkeypatch.setattr(measure, "EXACT_TOL", 0.0)  # nothing is *that* exact: must fail
    rc = main(["check", "--shape", "1x1x40x16", "--dtype", "fp16", "--no-backends", "--quiet"])
    assert rc == 1 and "RESULT: FAIL" in capsys.readouterr().out


def test_parse_shape():
    s = parse_shape("2x4x128x64")
    assert (s.B, s.H, s.Nq, s.Nk, s.d) == (2, 4, 128, 128, 64)
    assert parse_shape("1x2x3x5x16").Nk == 5
    with pytest.raises(Exception, match="BxHxNxd"):
        parse_shape("1x2")


def test_cli_rejects_bad_arguments():
    r = subprocess.run([sys.executable, "-m", "flashbench.cli", "check", "--dtype", "fp8"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "invalid choice: 'fp8'" in r.stderr
    r = subprocess.run([sys.executable, "-m", "flashbench.cli", "check", "--shape", "axb"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "shape must be" in r.stderr
    r = subprocess.run([sys.executable, "-m", "flashbench.cli", "check", "--shape", "1x1x8x16",
                        "--block", "0", "--quiet"], capture_output=True, text=True)
    assert r.returncode == 2 and "block must be >= 1, got 0" in r.stderr
    assert "Traceback" not in r.stderr


def test_peers_inform_but_only_owned_kernels_fail_the_check():
    from flashbench.check import overall_passed

    ok = {"exactness": [{"passed": True}], "dtypes": [{"passed": True}]}
    assert overall_passed(ok | {"backends": [{"passed": False, "peer": True}]})
    assert overall_passed(ok | {"backends": [{"skipped": "interpreter"}]})
    assert not overall_passed(ok | {"backends": [{"passed": False, "peer": False}]})
    assert not overall_passed(ok | {"exactness": [{"passed": False}], "backends": []})
