"""flashbench check on small shapes, through the real CLI entry point."""

import json
import subprocess
import sys

import pytest

from flashbench.cli import main, parse_shape


def test_check_json_small(capsys):
    # d=16 at Nq=20, Nk=50 put the fp32 Triton backward's dv at 2.9x-6.7x its rule's
    # yardstick, depending on the BLAS kernel (OPENBLAS_CORETYPE): the rule's edge, not
    # what this test is about (docs/backward.md)
    rc = main(["check", "--shape", "1x2x64x32", "--shape", "1x1x20x50x32", "--dtype", "fp32",
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
    import flashbench.measure.records as measure

    rc = main(["check", "--shape", "1x1x40x16", "--dtype", "fp16", "--causal", "on",
               "--no-backends", "--quiet", "--tables"])
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


def test_counts_share_one_positive_integer_parser():
    """Findings 16: one parser (cli.common.positive_int) for every count of every
    subcommand, one message for a bad value."""
    import argparse

    from flashbench.cli import build_parser
    from flashbench.cli.common import positive_int

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    typed = {(name, a.option_strings[0]): a.type for name, p in sub.choices.items()
             for a in p._actions if a.option_strings}
    for key in (("check", "--kv-heads"), ("bands", "--n"), ("bands", "--seeds"),
                ("review", "--threads"), ("review", "--jobs")):
        assert typed[key] is positive_int, key
    counts = [k for k, t in typed.items() if getattr(t, "__name__", "").lstrip("_").startswith(
        "positive")]
    assert all(typed[k] is positive_int for k in counts), counts
    for bad in ("0", "-2", "x", "1.5", ""):
        with pytest.raises(argparse.ArgumentTypeError, match="must be an integer >= 1"):
            positive_int(bad)
    assert positive_int("3") == 3


def test_cli_rejects_bad_arguments():
    r = subprocess.run([sys.executable, "-m", "flashbench.cli", "check", "--dtype", "fp7"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "invalid choice: 'fp7'" in r.stderr
    r = subprocess.run([sys.executable, "-m", "flashbench.cli", "check", "--shape", "axb"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "shape must be" in r.stderr
    r = subprocess.run([sys.executable, "-m", "flashbench.cli", "check", "--shape", "1x1x8x16",
                        "--block", "0", "--quiet"], capture_output=True, text=True)
    assert r.returncode == 2 and "block must be >= 1, got 0" in r.stderr
    assert "Traceback" not in r.stderr


def test_peers_inform_but_only_owned_kernels_fail_the_check():
    from flashbench.measure.run import overall_passed

    ok = {"exactness": [{"passed": True}], "dtypes": [{"passed": True}]}
    assert overall_passed(ok | {"backends": [{"passed": False, "peer": True}]})
    assert overall_passed(ok | {"backends": [{"skipped": "interpreter"}]})
    assert not overall_passed(ok | {"backends": [{"passed": False, "peer": False}]})
    assert not overall_passed(ok | {"exactness": [{"passed": False}], "backends": []})


def peers(*names):
    """--backend arguments naming each backend (the pinned SDPA kernels and flex run
    unasked on GPU machines only)."""
    return [a for n in names for a in ("--backend", n)]


def test_check_on_a_head_dim_triton_lacks_still_runs_the_others(capsys):
    rc = main(["check", "--shape", "1x1x16x44", "--dtype", "fp32", "bf16", "--dist", "normal",
               "--json", "--quiet", *peers("triton", "torch-naive", "torch-sdpa", "sdpa-flash",
                                           "sdpa-math")])
    report = json.loads(capsys.readouterr().out)
    triton = [r for r in report["backends"] if r["backend"] == "triton"]
    assert triton and all("head dim d=44" in r["skipped"] for r in triton)
    ran = {r["backend"] for r in report["backends"] if "o" in r}
    assert {"torch-naive", "torch-sdpa", "sdpa-flash", "sdpa-math"} <= ran
    assert rc == (0 if report["passed"] else 1)
    assert all(r["passed"] for r in report["dtypes"])  # the flash model ran too


def test_kv_heads_applies_to_given_shapes_and_checks_them(capsys):
    rc = main(["check", "--shape", "1x4x64x32", "--shape", "1x8x40x16", "--kv-heads", "2",
               "--dtype", "bf16", "--dist", "normal", "--causal", "off", "--backend",
               "torch-naive", "--json", "--quiet"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0 and {r["case"] for r in report["exactness"]} == {
        "normal B=1 H=4 Hkv=2 Nq=64 Nk=64 d=32", "normal B=1 H=8 Hkv=2 Nq=40 Nk=40 d=16"}
    assert all(r["passed"] for r in report["exactness"])
    r = refused_in_a_process("check", "--shape", "1x6x8x16", "--kv-heads", "4")
    assert "Hkv=4 must divide the query heads H=6" in r.stderr
    # a shape that names its heads (1x8/8: 8) and a --kv-heads of 2 contradict: refused
    # (the flag won without a word, a first-use probe, 2026-12-07)
    r = refused_in_a_process("check", "--shape", "1x8/8x40x16", "--kv-heads", "2")
    assert "--kv-heads 2 contradicts the shape" in r.stderr
    r = subprocess.run([sys.executable, "-m", "flashbench.cli", "check", "--kv-heads", "0"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "must be an integer >= 1" in r.stderr


# flashbench.cli.main in a process of its own; prints its status and whether torch was loaded
MAIN = "import sys\nfrom flashbench.cli import main\nrc = main(sys.argv[1:])\n" \
       "print(rc, 'torch' in sys.modules)"


def refused_in_a_process(*argv):
    """``main(argv)`` in a fresh process: asserts exit 2 with one line on stderr, refused
    before torch was imported (its import is 2 s of CPU: failed before, the shape's
    checks ran after the backends' import)."""
    r = subprocess.run([sys.executable, "-c", MAIN, *argv], capture_output=True, text=True,
                       timeout=60)
    assert r.stdout.split() == ["2", "False"], (r.stdout, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    return r


def test_grouped_shape_spec_reaches_every_backend(capsys):
    rc = main(["check", "--shape", "1x4/2x64x32", "--dtype", "bf16", "--dist", "normal",
               "--causal", "on", "--json", "--quiet",
               *peers("torch-naive", "sdpa-flash", "sdpa-math", "triton", "flex")])
    report = json.loads(capsys.readouterr().out)
    judged = [r for r in report["backends"] if "o" in r]
    assert {"torch-naive", "sdpa-flash", "sdpa-math", "triton", "flex"} <= {
        r["backend"] for r in judged}
    assert all("Hkv=2" in r["case"] and r["o"]["max_abs"] < 0.05 for r in judged)
    assert rc == 0 and report["passed"]


def test_a_check_without_backends_never_imports_torch(tmp_path):
    """The exactness and the flash model are NumPy's: ``check --no-backends`` in a fresh
    process runs without torch (2 s of CPU to import). Before: torch was imported for the
    registry, the report's versions and the records' lookups."""
    r = subprocess.run([sys.executable, "-c", MAIN, "check", "--shape", "1x1x8x16", "--dtype",
                        "fp32", "bf16", "--no-backends", "--quiet", "--json", "--save",
                        str(tmp_path)], capture_output=True, text=True, timeout=120)
    report, status = r.stdout.rsplit("\n", 2)[:2]
    assert status == "0 False", (r.stdout[-300:], r.stderr)
    meta = json.loads(report)["meta"]
    assert meta["torch"] == __import__("torch").__version__  # read from its metadata


def test_a_case_too_big_for_memory_is_refused_before_allocating():
    r = subprocess.run([sys.executable, "-m", "flashbench.cli", "check", "--shape",
                        "1x1x1000000x64"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert "shape 1x1x1000000x1000000x64 needs about 32.0 TB" in r.stderr
    assert "available" in r.stderr
    r = refused_in_a_process("check", "--shape", "1x1x1000000x64")  # before torch, too
    assert "needs about 32.0 TB" in r.stderr


def test_memory_estimate_formula_and_refusal():
    from flashbench.inputs import Shape
    from flashbench.measure.footprint import BYTES_PER_SCORE, check_case_bytes, human, too_big

    s = Shape(2, 4, 1000, 3000, 64)
    assert check_case_bytes(s) == BYTES_PER_SCORE * 8 * 1000 * 3000 + 256 * 8 * 4000 * 64
    assert check_case_bytes(Shape(1, 1, 100, 100, 16)) == 32 * 100 * 100 + 256 * 200 * 16
    assert too_big([s], available=check_case_bytes(s)) is None
    msg = too_big([Shape(1, 1, 8, 8, 16), s], available=5 * 10**8)
    assert msg.startswith("shape 2x4x1000x3000x64 needs about 1.1 GB") and "500.0 MB" in msg
    assert human(999) == "999 B" and human(24e12) == "24.0 TB"


def test_memory_estimate_bounds_the_measured_peak():
    """tracemalloc's peak of the reference and the standard models on one case stays
    under the estimate (which also covers the torch peers, measured by RSS)."""
    import tracemalloc

    from flashbench import numerics, reference
    from flashbench.inputs import Shape, make_qkv
    from flashbench.measure.footprint import check_case_bytes

    s = Shape(1, 2, 512, 768, 64)
    q, k, v = make_qkv(s)
    peaks = []
    for dtype in (None, "fp32", "tf32", "fp16", "bf16"):
        tracemalloc.start()
        if dtype is None:
            reference.attention(q, k, v, causal=True)
        else:
            numerics.standard_model(q, k, v, dtype, causal=True)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    assert max(peaks) <= check_case_bytes(s)
    # an estimate, not a blanket refusal: the row term also holds the backward's gradients
    # and the copies of four dtypes (a check of 96x8x64x128 peaked at 2.15 GB resident),
    # which this forward-only measure has none of (4.2x here)
    assert max(peaks) >= check_case_bytes(s) / 5
