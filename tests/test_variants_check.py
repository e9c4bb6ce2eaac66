"""``flashbench check --window L,R --softcap C --sinks``: the variant reaches every path (the
reference, the models, the backends, the gradients), backends that do not take it are
"not applicable", and bad values are one-line errors with exit status 2."""

import json

import pytest

from flashbench.cli import main


def check_json(capsys, *args):
    rc = main(["check", "--dtype", "fp16", "--dist", "normal", "--json", "--quiet",
               "--shape", "1x2x96x32", "--causal", "on", *args])
    return rc, json.loads(capsys.readouterr().out)


def test_a_variant_check_judges_every_path_and_names_what_does_not_apply(capsys):
    rc, report = check_json(capsys, "--window", "24,0", "--softcap", "20", "--sinks",
                            "--backend", "torch-naive", "--backend", "torch-sdpa")
    assert rc == 0 and report["passed"]
    label = "normal B=1 H=2 Nq=96 Nk=96 d=32 causal window=(24,0) softcap=20 sinks"
    assert {r["case"] for r in report["exactness"]} == {label}
    assert all(r["max_abs"] <= 1e-12 for r in report["exactness"])
    assert report["dtypes"][0]["o_ratio"] < 2
    by_name = {r["backend"]: r for r in report["backends"]}
    # plain attention in fp16 (a peer): within 2x the standard, but above the band of a
    # correct flash kernel measured with this variant, as it is for plain attention
    naive = by_name["torch-naive"]
    assert naive["peer"] and naive["baseline_passed"] and not naive["band_passed"]
    assert by_name["torch-sdpa"]["skipped"].startswith("not applicable: its forward takes no")
    flash = report["dtypes"][0]
    assert flash["band_passed"] and flash["band"]["o"]["source"] == "measured"
    assert 0 < flash["o_band_ratio"] <= 1 and 0 < flash["lse_band_ratio"] <= 1
    grads = {r["kernel"]: r for r in report["gradients"]}
    assert grads["flash_model"]["passed"] and grads["flash_model"]["dq_band_ratio"] <= 1
    assert grads["torch-naive"]["baseline_passed"] and grads["torch-naive"]["peer"]


@pytest.mark.parametrize("variant, rows", [(["--window", "24,0"], 4), (["--softcap", "5"], 4),
                                           (["--sinks"], 4), (["--varlen", "40,7,0,20"], 4)])
def test_the_triton_kernel_passes_both_rules_under_each_variant(capsys, variant, rows):
    """The band of each variant's case is the flash model's with that variant: the Triton
    kernel (interpreted here) sits inside it, forward and backward, a packed batch's too
    (bf16; fp16 alike)."""
    rc, report = check_json(capsys, *variant, "--backend", "triton", "--dtype", "bf16")
    judged, rows = rows, [*report["dtypes"], *report["backends"], *report["gradients"]]
    assert rc == 0 and report["passed"] and len(rows) == judged
    for r in rows:
        assert r["passed"] and r["band_passed"], r
        ratios = [v for k, v in r.items() if k.endswith("_band_ratio")]
        assert len(ratios) in (2, 3) and all(0 < x <= 1 for x in ratios)


def test_the_window_alone_runs_through_sdpa_as_an_explicit_mask(capsys):
    rc, report = check_json(capsys, "--window", "8,8", "--backend", "torch-sdpa")
    (row,) = report["backends"]
    assert rc == 0 and row["passed"] and row["o"]["max_abs"] < 1e-2
    _, report = check_json(capsys, "--window=-1,4", "--no-backends")  # -1: write it with =
    # causal, the window's right side as it applies: 0 (causal caps it)
    assert report["exactness"][0]["case"].endswith("causal window=(-1,0)")


def test_a_window_wider_than_the_problem_gives_the_plain_figures(capsys):
    _, plain = check_json(capsys, "--no-backends")
    _, wide = check_json(capsys, "--no-backends", "--window", "500,500")
    for a, b in zip(plain["dtypes"], wide["dtypes"], strict=True):
        assert a["o"] == b["o"] and a["lse"] == b["lse"]


@pytest.mark.parametrize("args, message", [
    (["--window=-2,0"], "window must be (left, right)"),
    (["--window", "3"], "window must be L,R"),
    (["--window", "a,b"], "window must be L,R"),
    (["--softcap", "0"], "softcap must be finite and > 0"),
    (["--softcap", "nan"], "softcap must be finite and > 0"),
    (["--softcap", "x"], "softcap must be a number > 0"),
])
def test_bad_variant_options_are_one_line_errors(capsys, args, message):
    with pytest.raises(SystemExit) as exc:
        main(["check", *args])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_packed_batch_is_judged_per_sequence_and_peers_without_varlen_do_not_apply(capsys):
    rc = main(["check", "--dtype", "fp16", "--dist", "normal", "--json", "--quiet",
               "--causal", "on", "--varlen", "40,0,17", "--window", "8,0", "--no-backends"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0 and report["passed"]
    assert report["exactness"][0]["case"] == ("normal varlen 40,0,17 H=2 d=64 causal "
                                              "window=(8,0)")
    rc = main(["check", "--dtype", "fp32", "--dist", "normal", "--json", "--quiet",
               "--causal", "off", "--varlen", "40,17", "--backend", "torch-naive",
               "--backend", "reference"])
    report = json.loads(capsys.readouterr().out)
    by_name = {r["backend"]: r for r in report["backends"]}
    assert by_name["torch-naive"]["skipped"] == ("not applicable: it takes no packed (varlen) "
                                                 "batch")
    assert by_name["reference"]["o"]["max_abs"] < 1e-6 and report["passed"]


@pytest.mark.parametrize("text", ["", "a,b", "0,0", "-1,3"])
def test_bad_varlen_lengths_are_one_line_errors(capsys, text):
    with pytest.raises(SystemExit) as exc:
        main(["check", f"--varlen={text}"])
    assert exc.value.code == 2 and "varlen must be N1,N2,..." in capsys.readouterr().err


def test_the_asv_variant_grid_names_its_cases_as_the_check_prints_them():
    """bench_variants' ``variant`` parameter is the label flashbench check prints, and its
    skip_params are exactly the registry's "not applicable" pairs."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks import bench_variants as bv
    from flashbench.inputs import Shape
    from flashbench.measure.records import Case
    from flashbench.measure.varlen import VARIANT_SET

    assert bv.VARIANTS == VARIANT_SET  # asv needs its grid literal: held equal here
    for name, kw in bv.VARIANTS.items():
        label = Case(Shape.parse(bv.SHAPES[0]), "normal", **kw).label()
        assert name in label, (name, label)
    from flashbench.backends import BACKENDS

    skipped = {(k, v) for k, _, v, _ in bv.TrackVariantAccuracy.skip_params}
    registry = {(k, name) for k in bv.KERNELS[1:] for name, kw in bv.VARIANTS.items()
                if not (BACKENDS[k].varlen if "varlen" in kw else
                        all(key in BACKENDS[k].variants for key in kw if key != "causal"))}
    assert skipped == registry == {("torch-naive", "varlen 512,1000,77")}


def test_the_variant_set_runs_each_variant_once_and_refuses_a_mix(capsys):
    rc = main(["check", "--variants", "--shape", "1x2x48x32", "--dtype", "fp32", "--dist",
               "normal", "--json", "--quiet", "--no-backends"])
    report = json.loads(capsys.readouterr().out)
    cases = list(dict.fromkeys(r["case"] for r in report["exactness"]))
    assert rc == 0 and len(cases) == 4 and cases[-1].startswith("normal varlen 512,1000,77")
    assert main(["check", "--variants", "--softcap", "3"]) == 2


def test_variants_judge_the_sinks_causal_where_a_kernel_that_ignores_them_fails(user_module,
                                                                                capsys):
    """Causal off, one N(0, 1) sink beside 1,024 keys weighs under bf16's rounding: a kernel
    that declared the sinks and ignored them PASSed `--variants --shape 1x2x1024x64 --dtype
    bf16` (a probe, 2026-12-07). --variants judges the sinks causal, where rows see few keys."""
    import json

    from flashbench.cli import main

    user_module("fbsinkless", "import torch.nn.functional as F\n\n\n"
                "def attn(q, k, v, causal=False, scale=None, sinks=None):\n"
                "    return F.scaled_dot_product_attention(q, k, v, scale=scale, "
                "is_causal=causal)\n\n\nattn.flashbench_variants = ('sinks',)\n")
    rc = main(["check", "--variants", "--shape", "1x2x256x32", "--dtype", "bf16", "--pass",
               "fwd", "--json", "--quiet", "--only", "fbsinkless:attn"])
    report = json.loads(capsys.readouterr().out)
    (row,) = [r for r in report["backends"] if "sinks" in r["case"]]
    assert "causal" in row["case"] and not row["passed"], row
    assert rc == 1
