"""``flashbench check``'s compact view: one line per kernel and case, peers after the counted
lines, a FAIL's likely cause, no line over 120 characters, RESULT last; the five tables
always saved (``--save``) and printed with ``--tables``."""

from __future__ import annotations

import copy
import json
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flashbench.accuracy import error_stats
from flashbench.accuracy.bandrule import DEFECT_TABLE
from flashbench.cli import main
from flashbench.cli.check import _band_refusal
from flashbench.cli.check_view import SAVE_NAME, WIDTH, render_compact
from flashbench.inputs.precision import get_precision
from flashbench.inputs.problem import Shape
from flashbench.measure.records import Case

TINY = ["check", "--shape", "1x1x16x16", "--dtype", "fp32", "bf16", "--causal", "on",
        "--only", "torch-naive", "--quiet"]
CASE = "normal B=1 H=1 Nq=16 Nk=16 d=16 causal"
HEADERS = ("1. Exactness in float64", "2. Streamed vs one-shot", "3. Against the float64",
           "4. Backward exactness", "5. Gradients against")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny check run once: (status, stdout lines, the saved tables, the JSON report)."""
    folder = tmp_path_factory.mktemp("check")
    mp = pytest.MonkeyPatch()
    mp.chdir(folder)  # the default --save: flashbench-check.txt in the working folder
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(TINY)
    saved = (folder / SAVE_NAME).read_text()
    js = io.StringIO()
    with contextlib.redirect_stdout(js):
        main([*TINY, "--json", "--save", str(folder / "j.txt")])
    mp.undo()
    return rc, out.getvalue().splitlines(), saved, json.loads(js.getvalue()), folder


def test_compact_view_has_one_line_per_kernel_and_case_and_result_last(tiny):
    rc, lines, _, _, _ = tiny
    assert rc == 0 and lines[-1] == "RESULT: PASS"
    assert max(map(len, lines)) <= WIDTH
    rows = [ln.split() for ln in lines if CASE in ln]
    # forward, then gradients: the flash model and torch-naive, counted: --only named it
    # (a peer is information only where it was not asked for); dtypes folded
    assert [r[0] for r in rows] == ["flash_model", "torch-naive", "flash_model",
                                    "torch-naive"]
    assert not any(ln.startswith("Peers, for information") for ln in lines)
    assert "the peers --only named" in " ".join(lines)
    for ln in lines:  # each row: its verdict and the worst ratio's rule, tensor, dtype
        if CASE in ln:
            assert ("PASS" in ln or "FAIL" in ln) and any(
                f" {t} {d} " in ln for t in ("O", "LSE", "dq", "dk", "dv")
                for d in ("fp32", "bf16"))
            # the ratio and its rule's limit: a PASS's within it (a bare "2x O fp32 1.26"
            # read as over the limit)
            m = re.search(r" (2x|3x|band) \S+ \S+ ([\d.]+) of ([\d.]+)", ln)
            assert m and float(m[3]) == {"2x": 2, "3x": 3, "band": 1}[m[1]], ln
            assert ("PASS" not in ln) or float(m[2]) <= float(m[3]), ln


def test_the_five_tables_are_saved_and_named_and_printed_with_tables(tiny, tmp_path):
    _, lines, saved, _, folder = tiny
    assert all(h in saved for h in HEADERS) and saved.rstrip().endswith("RESULT: PASS")
    assert not any(h in "\n".join(lines) for h in HEADERS)
    assert any(f"tables (every number, every rule's ratio): {SAVE_NAME} " in ln for ln in lines)
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([*TINY, "--tables", "--save", str(tmp_path / "t.txt")]) == 0
    text = out.getvalue()
    assert all(h in text for h in HEADERS)
    assert (tmp_path / "t.txt").read_text() == text


def test_json_is_unchanged_and_still_saves_the_tables(tiny):
    _, _, _, report, folder = tiny
    assert set(report) == {"meta", "exactness", "dtypes", "backends", "grad_cases",
                           "grad_exactness", "gradients", "passed"}
    assert "3. Against the float64" in (folder / "j.txt").read_text()


def test_a_counted_fail_names_its_likely_cause_folded_to_the_width(tiny):
    report = copy.deepcopy(tiny[3])
    for b in report["backends"] + report["gradients"]:  # torch-naive as a default's peer
        b.update(peer=True, named=False)
    row = next(b for b in report["backends"] if b["dtype"] == "bf16")
    row.update(backend="mine", peer=False, passed=False, band_passed=False,
               baseline_passed=True, disagreement="band rule FAIL, baseline rule PASS: " +
               "O abs_p99 is 3.1x the band's edge; " * 20)
    row["band"]["o"]["passed"] = False
    report["passed"] = False
    lines = render_compact(report, "x.txt").splitlines()
    assert max(map(len, lines)) <= WIDTH and lines[-1] == "RESULT: FAIL"
    i = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("mine"))
    assert "FAIL (band)" in lines[i] and "band O bf16" in lines[i]
    assert "likely" in lines[i + 1] and "bf16 band rule FAIL on O" in lines[i + 1]
    assert DEFECT_TABLE in " ".join(lines[i + 1:i + 6])
    peers = next(i for i, ln in enumerate(lines) if ln.startswith("Peers"))
    assert i < peers  # a user's kernel counts: above the peers
    assert "do not count toward RESULT" in lines[peers]
    assert any(ln.lstrip().startswith("torch-naive") for ln in lines[peers:])


def test_save_to_a_missing_folder_is_refused_before_the_work(tmp_path, capsys):
    assert main([*TINY, "--save", str(tmp_path / "no" / "t.txt")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--save" in err[0] and "does not exist" in err[0]


def test_a_band_too_large_to_measure_is_refused_before_the_work(capsys):
    """MQA's gradient band draws a whole group of 32 heads on 4,096 keys (4.1e11 flops a
    seed): the refusal came after 80 s of reference, forward band and yardsticks; now before
    any (no progress line, nothing on stdout), with the band named. Only bands the check
    needs are asked: none for fp64, no gradient band for fp8 (no backward model) or with
    --pass fwd."""
    flags = ["check", "--shape", "1x32/1x4096x64", "--dtype", "bf16", "--no-backends"]
    assert main([*flags, "--pass", "bwd"]) == 2
    out = capsys.readouterr()
    err = out.err.strip().splitlines()
    assert len(err) == 1 and "gradient band is too large to measure here" in err[0], err
    assert "4.1e+11 flops a seed" in err[0] and out.out == ""
    big = Case(Shape(1, 32, 4096, 4096, 64, Hkv=1), "normal", False)
    assert "gradient band" in _band_refusal([get_precision("fp16")], [big], [big])
    for dtype in ("fp64", "fp8"):
        assert _band_refusal([get_precision(dtype)], [big], [big]) is None
    assert _band_refusal([get_precision("bf16")], [big], ()) is None


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 300), st.integers(0, 2**31 - 1), st.sampled_from([None, "nan", "inf"]))
def test_the_exactness_max_alone_equals_error_stats_max(n, seed, odd):
    """check's exactness reads max |diff| alone (error_stats(max_only=True), no percentiles:
    3% of the default check's profile): the same value as the full statistics, odd values
    (a non-finite mismatch: inf) included."""
    rng = np.random.default_rng(seed)
    ref = rng.standard_normal(n)
    out = ref + rng.standard_normal(n) * 1e-16
    if odd:
        out[rng.integers(n)] = float(odd)
    full, alone = error_stats(out, ref), error_stats(out, ref, max_only=True)
    assert alone["max_abs"] == full["max_abs"] and set(alone) <= set(full)


def test_a_variant_cases_band_fail_names_the_variant_among_its_causes():
    """A kernel that ignored --window read only "likely the O accumulator kept in the dtype
    ..."; a case with a window, softcap or sinks names them too."""
    from flashbench.cli.check_view import _causes

    rec = {"dtype": "bf16", "baseline_passed": False, "band": {"o": {"passed": False,
                                                                    "ratio": 337.0}}}
    for case, named in (("normal B=1 H=2 Nq=128 Nk=128 d=32 window=(16,0)", "window"),
                        ("normal B=1 H=2 Nq=64 Nk=64 d=32 softcap=30 sinks", "softcap and sinks")):
        said = " ".join(_causes({**rec, "case": case}, ("o",)))
        assert f"the case's {named} not applied" in said, said
    plain = " ".join(_causes({**rec, "case": "normal B=1 H=2 Nq=64 Nk=64 d=32"}, ("o",)))
    assert "not applied" not in plain


def test_a_fail_shows_the_ratio_of_the_rule_that_failed():
    """A red team (2026-12-06): `torch-sdpa FAIL (band) 3x dq fp32 3.58 of 3`: the worst
    ratio shown was the gradient rule's, which passed (by its floor); the band rule had
    failed. A FAIL's line shows its failed rules' ratios alone; a PASS above its limit by
    the floor says "(floor)"."""
    from flashbench.cli.check_view import _lines

    row = {"case": "normal B=1 H=2 Nq=32 Nk=32 d=128", "kernel": "k:x", "dtype": "fp32",
           "dq_ratio": 3.58, "dk_ratio": 1.0, "dv_ratio": 1.0, "dq_band_ratio": 1.1,
           "dk_band_ratio": 0.5, "dv_band_ratio": 0.5, "baseline_passed": True,
           "band_passed": False, "passed": False}
    line = _lines([row], "kernel", ("dq", "dk", "dv"), 3.0, peers=False)[0]
    assert "FAIL (band)" in line and line.endswith("band dq fp32 1.10 of 1"), line
    ok = {**row, "dq_band_ratio": 0.9, "band_passed": True, "passed": True}
    line = _lines([ok], "kernel", ("dq", "dk", "dv"), 3.0, peers=False)[0]
    assert "PASS" in line and line.endswith("3x dq fp32 3.58 of 3 (floor)"), line


def test_a_kernel_skipped_in_both_passes_says_which_line_is_the_gradients(tmp_path, capsys,
                                                                           monkeypatch):
    """A probe: "triton skipped on 1 case(s) x dtype(s): head dim d=44 is not a multiple of
    8" printed twice, nothing telling the forward's line from the gradients'."""
    monkeypatch.chdir(tmp_path)
    rc = main(["check", "--shape", "1x1x16x44", "--dtype", "fp32", "--causal", "on",
               "--only", "triton", "torch-naive", "--quiet"])
    lines = [x for x in capsys.readouterr().out.splitlines() if "skipped on" in x]
    assert rc == 0 and len(lines) == 2, lines
    assert lines[0].strip().startswith("triton skipped on 1 case(s)"), lines
    assert lines[1].strip().startswith("triton (gradients) skipped on 1 case(s)"), lines


def test_a_pinned_sdpa_kernels_refusal_is_said_once_in_its_skip(tmp_path, monkeypatch,
                                                                 recwarn, capsys):
    """A probe: at 192/128 torch's UserWarnings (its flash kernel's reasons) reached stderr
    under --quiet from the gradients' call, beside the skip that says the same."""
    monkeypatch.chdir(tmp_path)
    rc = main(["check", "--shape", "1x2x32x192/128", "--dtype", "fp32", "--causal", "on",
               "--only", "sdpa-flash", "--quiet"])
    out = capsys.readouterr().out
    assert rc == 2 and "requires q,k,v to have the same last dimension" in out, out
    assert not [w for w in recwarn if "Flash attention" in str(w.message)], \
        [str(w.message) for w in recwarn]


def test_a_long_kernel_name_keeps_the_columns_in_line(user_module, capsys):
    """A probe, 2026-12-07: kernel names over 16 characters (`kmods:wrong_shape`, any
    user's "module:function") pushed the verdict and ratio columns out of line. The kernel
    column is as wide as its longest name (up to 44)."""
    from flashbench.cli import main

    user_module("fb_a_rather_long_module", "import torch\n\n\ndef attention_forward(q, k, v, "
                "causal=False, scale=None):\n    return torch.nn.functional."
                "scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)\n")
    name = "fb_a_rather_long_module:attention_forward"
    assert main(["check", "--shape", "1x1x16x16", "--dtype", "fp32", "--causal", "off",
                 "--pass", "fwd", "--quiet", "--save", "/dev/null", "--only", name]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = next(ln for ln in lines if ln.lstrip().startswith("kernel") and "verdict" in ln)
    rows = [ln for ln in lines if ln.startswith("  flash_model ") or ln.startswith(f"  {name}")]
    assert len(rows) == 2, lines
    column = head.index("verdict")
    assert all(row[column:column + 4] == "PASS" for row in rows), [head, *rows]
    # the PASS (band) legend only where a row reads it (it was printed for none)
    legend = [ln for ln in lines if ln.startswith("PASS (band): ")]
    assert bool(legend) == any("PASS (band)" in row for row in rows), lines
