"""``flashbench speed`` (issue 35): its rows, JSON fields with units, statuses. Before this
change the subcommand did not exist."""

import json

import torch

from flashbench.cli import main
from flashbench.measure.speed import CLOCK_CPU, CLOCK_GPU


def test_json_rows_carry_times_throughput_and_verdicts(capsys):
    rc = main(["speed", "--shape", "1x2/1x64x32", "--causal", "both", "--backend",
               "torch-naive", "--backend", "torch-sdpa", "--backend", "triton", "--seed", "4",
               "--json", "--quiet"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0 and report["passed"] and report["meta"]["seed"] == 4
    host = report["meta"]["host"]  # what the times were measured beside
    assert host["cpus"] >= 1 and host["torch_threads"] >= 1 and "load_end" in host
    timed = [r for r in report["rows"] if r["status"] == "PASS"]
    # two torch peers x causal on/off, and on a GPU the compiled Triton kernel too
    assert len(timed) == (6 if torch.cuda.is_available() else 4)
    for r in timed:
        assert len(r["samples_s"]) >= 10 and r["p10_s"] <= r["median_s"] <= r["p90_s"]
        assert r["tflops"] > 0 and r["gbs"] > 0 and 0 < r["peak_fraction"]
        assert r["checked"] == len(r["samples_s"]) and r["failures"] == {}
        assert r["speedup"] is not None and r["baseline"] in ("torch-naive", "torch-sdpa")
    fastest = min(timed[:2], key=lambda r: r["median_s"])
    assert fastest["speedup"] == 1.0
    for r in timed:  # every other row's speedup with its interval around it
        ci = r["speedup_ci"]
        assert (ci is None) == (r["backend"] == r["baseline"]), r
        assert ci is None or ci[0] <= r["speedup"] <= ci[1], r
    triton = [r for r in report["rows"] if r["backend"] == "triton"]
    assert all(r["status"] == "not timed" and r["median_s"] is None for r in triton)
    assert any("interpreter" in (r["reason"] or "") or "triton" in (r["reason"] or "")
               for r in triton)


def test_a_speedups_interval_covers_one_for_twins_and_excludes_it_two_times_apart():
    """The speedup's interval (speedrun.speedup_interval): the bootstrap's percentile
    interval of the ratio of the rows' medians, the same for the same times; 1 inside it for
    two draws of one kernel's times, out of it for a kernel 2x slower; none without two
    times a row or with a median of 0 s."""
    import numpy as np

    from flashbench.measure.speedrun import speedup_interval

    rng = np.random.default_rng(7)
    a, b = (list(1e-3 * rng.lognormal(0, 0.1, 10)) for _ in range(2))
    twins = speedup_interval(a, b)
    assert twins[0] < 1 < twins[1] and twins == speedup_interval(a, b)
    slower = speedup_interval(a, [2 * x for x in b])
    assert slower[0] < 0.5 < slower[1] < 1, slower  # the true ratio in, 1 out
    assert speedup_interval(a, b[:1]) is None and speedup_interval(a, [0.0] * 10) is None
    wide = speedup_interval(a, list(1e-3 * rng.lognormal(0, 1.0, 10)))
    assert wide[1] / wide[0] > (twins[1] / twins[0]) ** 2  # a scattered row: a wide interval


def test_text_names_the_clock_the_peak_and_the_verdict(capsys):
    rc = main(["speed", "--shape", "1x1x32x16", "--backend", "torch-naive", "--baseline",
               "torch-naive", "--samples", "12"])
    out = capsys.readouterr()
    assert rc == 0 and "verdict: PASS" in out.out and "matmul" in out.out
    clock = CLOCK_GPU if torch.cuda.is_available() else CLOCK_CPU  # the machine's default
    assert f"clock: {clock}" in out.out and "| 12 |" in out.out
    assert "timing torch-naive" in out.err  # the progress line


def test_only_times_just_the_backends_named(capsys):
    """--only as check takes it (a user's function alone brings no defaults; failed before:
    "unrecognized arguments"); with --backend it is refused."""
    rc = main(["speed", "--shape", "1x1x32x16", "--only", "torch-naive", "--json", "--quiet"])
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert rc == 0 and [r["backend"] for r in rows] == ["torch-naive"]
    rc = main(["speed", "--quiet", "--only", "torch-naive", "--backend", "torch-sdpa"])
    assert rc == 2 and "contradict" in capsys.readouterr().err


def test_the_default_set_leaves_out_backends_that_take_no_dtype_asked(capsys):
    """backends.md: triton-fp8 joins when fp8 is asked for; an fp32 run listed it as 'not
    timed: takes fp8, not fp32'. Named with --backend, such a row still says why."""
    main(["speed", "--shape", "1x1x32x16", "--json", "--quiet", "--samples", "10"])
    names = {r["backend"] for r in json.loads(capsys.readouterr().out)["rows"]}
    assert "triton-fp8" not in names and "torch-naive" in names
    # a user's function alone brings the defaults, filtered the same way
    main(["speed", "--shape", "1x1x32x16", "--json", "--quiet", "--backend",
          "flashbench.reference:attention"])
    names = {r["backend"] for r in json.loads(capsys.readouterr().out)["rows"]}
    assert "triton-fp8" not in names and "torch-naive" in names
    main(["speed", "--shape", "1x1x32x16", "--json", "--quiet", "--backend", "triton-fp8"])
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [(r["backend"], r["status"]) for r in rows] == [("triton-fp8", "not timed")]


def test_bad_input_is_one_line_and_exit_2(capsys):
    for argv in (["--baseline", "sdpa-math", "--backend", "torch-naive"], ["--samples", "5"],
                 ["--samples", "10001"], ["--shape", "1x1x0x16"], ["--backend", "nosuch"], ["--window", "3"],
                 ["--decode", "--pass", "bwd"], ["--decode-case", "2x4x1x32:5"],
                 ["--pass", "sideways"], ["--warmup", "0"], ["--warmup", "1000000000"],
                 # mid-run, after the first row: "causal must be True or False (a bool),
                 # got Variant" (the fp8 models take no variant; a probe, 2026-12-07)
                 ["--dtype", "fp32", "fp8", "--softcap", "5", "--shape", "1x1x16x16"]):
        try:
            rc = main(["speed", "--quiet", *argv])
        except SystemExit as exc:  # argparse's refusal
            rc = exc.code
        err = capsys.readouterr().err
        assert rc == 2 and len(err.strip().splitlines()) == 1, (argv, err)
        assert "Variant" not in err, err


def test_nothing_timed_is_exit_2_with_one_line_naming_why(capsys):
    """Every backend interpreted (Triton on a CPU) or not applicable: exit 2, one line on
    stderr with the reasons; --json still prints the table. Before: exit 0."""
    import torch

    if torch.cuda.is_available():
        return  # the Triton kernel is timed on a GPU: nothing to refuse
    rc = main(["speed", "--quiet", "--shape", "1x1x32x16", "--backend", "triton"])
    out = capsys.readouterr()
    err = out.err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "nothing was timed" in err[0], err
    assert "verdict: nothing timed (exit 2)" in out.out  # it said "verdict: PASS"
    assert "triton" in err[0] and "interpreter" in err[0]
    rc = main(["speed", "--quiet", "--json", "--shape", "1x1x32x16", "--backend", "triton"])
    out = capsys.readouterr()
    assert rc == 2 and json.loads(out.out)["rows"][0]["status"] == "not timed"
    assert len(out.err.strip().splitlines()) == 1


def test_a_dtype_no_backend_takes_is_exit_2_not_an_empty_pass(capsys):
    """Every default backend left out for its dtype: the run printed an empty table,
    "verdict: PASS" and exited 0 (a red team, 2026-12-06); now exit 2, one line naming the
    dtype and what the backends take."""
    for argv in (["--shape", "1x2x64x32", "--dtype", "fp64"], ["--decode", "--dtype", "fp64"],
                 ["--shape", "1x2x64x32", "--dtype", "tf32"]):
        rc = main(["speed", "--quiet", "--seed", "1", *argv])
        out = capsys.readouterr()
        err = out.err.strip().splitlines()
        assert rc == 2 and len(err) == 1 and "nothing to time" in err[0], (argv, rc, err)
        assert argv[-1] in err[0] and "fp32" in err[0] and "PASS" not in out.out


def test_each_row_names_the_peak_it_is_judged_against(capsys):
    """fp8 rows used the bf16 peak without saying so; now a row names its peak: its own
    dtype's matmul, the fp8 torch._scaled_mm peak where measured (GPU), or the stand-in."""
    from flashbench.inputs import Shape
    from flashbench.measure.speed import Roofline, SpeedCase, row_from

    roof = Roofline({"bf16": 900.0, "fp8": 1800.0}, 4000.0, "fixed",
                    {"fp8": "fp8 e4m3 torch._scaled_mm"})
    case = SpeedCase(Shape(1, 8, 1024, 1024, 128), "fp8")
    row = row_from(case, "k", [1e-3] * 10, {}, roof, "test", 10)
    assert row.peak == "fp8 e4m3 torch._scaled_mm"
    assert row.floor_s == max(case.flops() / 1800e12, case.bytes() / 4000e9)
    assert Roofline({"bf16": 900.0}, 1.0, "x").peak_used("fp8") == \
        "bf16 matmul (none measured in fp8)"
    rc = main(["speed", "--quiet", "--shape", "1x1x32x16", "--backend", "torch-naive",
               "--dtype", "fp32"])
    out = capsys.readouterr().out
    # (on a GPU it goes on: "; the floor of the bf16 matmul ... (the tensor cores ...)")
    assert rc == 0 and "% peak and the floor are of: fp32: fp32 matmul" in out
    assert "\nhost: " in out and " CPUs, torch " in out


FP8_KERNEL = """
import torch

def attention(q, k, v, causal=False, scale=None):
    s = (q.double() @ k.double().transpose(-1, -2)) * q.shape[-1] ** -0.5
    if causal:  # bottom-right aligned
        n, m = s.shape[-2:]
        s = s.masked_fill(torch.ones(n, m, dtype=torch.bool).triu(m - n + 1), float("-inf"))
    return (torch.softmax(s, -1) @ v.double()).to(q.dtype)  # o in q's dtype: fp8

attention.flashbench_dtypes = ("fp8",)
"""


def test_a_users_fp8_kernel_is_judged_and_timed(tmp_path, monkeypatch, capsys):
    """Failed before: its fp8 output could not be checked ('isfinite' has no fp8 kernel in
    torch): check FAILed it, speed failed whole (exit 3); and the CPU's fp8 peak, an
    emulated matmul, put the floor above an honest kernel."""
    (tmp_path / "fbfp8.py").write_text(FP8_KERNEL)
    monkeypatch.syspath_prepend(str(tmp_path))
    rc = main(["speed", "--shape", "1x2x64x32", "--dtype", "fp8", "--only", "fbfp8:attention",
               "--json", "--quiet"])
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert rc == 0 and [r["status"] for r in rows] == ["PASS"], rows
    rc = main(["check", "--shape", "1x2x64x32", "--dtype", "fp8", "--only", "fbfp8:attention",
               "--json"])
    records = [r for r in json.loads(capsys.readouterr().out)["backends"]
               if r.get("backend") == "fbfp8:attention"]
    assert rc == 0 and records and all(r["passed"] for r in records), records


def test_a_named_kernel_that_takes_no_dtype_asked_is_said_skipped(tmp_path, monkeypatch,
                                                                  capsys):
    """Failed before: a kernel declaring bf16 alone, checked in fp32, left no line at all
    and the run ended 'RESULT: PASS' as if it had been judged."""
    (tmp_path / "fbbf16.py").write_text(FP8_KERNEL.replace('("fp8",)', '("bf16",)'))
    monkeypatch.syspath_prepend(str(tmp_path))
    main(["check", "--shape", "1x2x64x32", "--dtype", "fp32", "--only", "fbbf16:attention"])
    out = capsys.readouterr().out
    assert "fbbf16:attention skipped" in out and "takes bf16, not fp32" in out, out


def test_an_fp32_rows_floor_is_of_the_tensor_cores_and_its_percent_of_its_own_peak():
    """On a GPU an fp32 kernel's tf32 dots run on the tensor cores: its floor is of their
    peak (a fair kernel was not to fail it), while its % peak stays of the fp32 matmul, as
    earlier runs and history read it."""
    import pytest

    from flashbench.inputs import Shape
    from flashbench.measure.speed import Roofline, SpeedCase, roofline_floor, row_from

    case = SpeedCase(Shape(1, 8, 2048, 2048, 128), "fp32")
    roof = Roofline({"fp32": 60.0}, 4000.0, "x", floor={"fp32": 900.0})
    assert roofline_floor(case, roof) == max(case.flops() / 900e12, case.bytes() / 4000e9)
    row = row_from(case, "k", [case.flops() / 120e12] * 10, {}, roof, "test", 10)
    assert row.status == "PASS" and row.peak_fraction == pytest.approx(2.0)


HONEST = """
import torch


def good(q, k, v, causal=False, scale=None):
    s = (q.double() @ k.double().transpose(-1, -2)) * q.shape[-1] ** -0.5
    return (torch.softmax(s, -1) @ v.double()).to(q.dtype)
"""


def test_openmp_threads_set_to_spin_do_not_fail_an_honest_kernel(tmp_path):
    """Under OMP_WAIT_POLICY=active an honest kernel FAILed "work outside the timed call":
    torch's OpenMP threads spun in its worker between requests (0.21 s of CPU in 0.3 s of
    idle pauses). The setting is unset for the run, harness and workers alike, and the
    report says so."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from flashbench.review.worker_client import THREAD_VARIABLES
    from flashbench.timed.threads import without_spinning

    env = {"OMP_WAIT_POLICY": "Active", "GOMP_SPINCOUNT": "100", "KMP_BLOCKTIME": "infinite"}
    notes = without_spinning(env)
    assert env == {"GOMP_SPINCOUNT": "100"} and "OMP_WAIT_POLICY=Active" in notes[0], notes
    assert without_spinning({"OMP_WAIT_POLICY": "passive", "GOMP_SPINCOUNT": "10k"}) == []
    assert "GOMP_SPINCOUNT=1M" in without_spinning({"GOMP_SPINCOUNT": "1M"})[0]
    assert "GOMP_SPINCOUNT=INFINITE" in without_spinning({"GOMP_SPINCOUNT": "INFINITE"})[0]
    (tmp_path / "fbhonest.py").write_text(HONEST)
    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    env.update(OMP_WAIT_POLICY="active", OMP_NUM_THREADS="2",  # a pool of threads that spins
               PYTHONPATH=os.pathsep.join([str(tmp_path), str(root)]))
    r = subprocess.run([sys.executable, "-m", "flashbench.cli", "speed", "--shape",
                        "1x4x256x64", "--dtype", "fp32", "--only", "fbhonest:good", "--json",
                        "--quiet", "--seed", "3"], env=env, capture_output=True, text=True,
                       timeout=600, cwd=tmp_path)
    report = json.loads(r.stdout)
    rows = report["rows"]
    assert r.returncode == 0 and [x["status"] for x in rows] == ["PASS"], (rows, r.stderr[-2000:])
    assert "OMP_WAIT_POLICY=active" in report["meta"]["environment"][0]


def test_a_users_decode_function_adds_to_the_default_decode_backends():
    """A helper's probe (2026-12-05): ``speed --decode --backend mod:fn`` timed the user's
    function alone (no torch peer: its speedup "-"), where the forward's adds it to the
    defaults (docs/backends.md); a registry name still selects."""
    from flashbench.backends.decode import resolve_decode_backends

    defaults = resolve_decode_backends()
    assert resolve_decode_backends(["fbmine:decode"]) == [*defaults, "fbmine:decode"]
    assert resolve_decode_backends([defaults[0], "fbmine:decode"]) == [defaults[0],
                                                                        "fbmine:decode"]


def test_a_peers_fail_is_information_and_not_the_runs_verdict():
    """Torch's own attention is judged by the same rules, and its FAIL shows, but as in
    check it is not the run's verdict (torch-naive's twice-rounded bf16 scores failed an
    honest run 1 in 12, exit 1); the same wrong function as flashbench's or yours fails it."""
    import dataclasses

    from flashbench.backends import Backend
    from flashbench.cli.speed_view import render_text
    from flashbench.inputs import Shape
    from flashbench.measure.speed import SpeedCase
    from flashbench.measure.speedrun import run_speed

    def off(q, k, v, causal=False, scale=None):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v) * 1.01

    case = SpeedCase(Shape(1, 2, 64, 64, 32), "fp32")
    for peer in (True, False):
        b = Backend("off", off, "off", ("fp32",), timed=off, peer=peer)
        report = run_speed([case], [b], seed=3, progress=False)
        (row,) = report["rows"]
        assert row.status == "FAIL" and row.peer is peer, row.failures
        assert report["passed"] is peer
        text = render_text(report)
        assert ("for information" in text) is peer and ("verdict: PASS" in text) is peer
        assert dataclasses.asdict(row)["peer"] is peer


def test_a_rows_band_says_when_it_is_the_tables_d64_not_the_cases_head_dim():
    """A red team (2026-12-06): `speed --shape 1x2x128x192/128` printed "above the band's
    tolerance 3.13e-06 (flashbench.tolerance)": d = 64's edge, where the case's own (d = 192,
    dv = 128) is 4.49e-06. The reason now names the table's head dim."""
    from flashbench.inputs import Shape
    from flashbench.measure.bandjudge import band_words
    from flashbench.measure.speed import SpeedCase

    def words(**kw):
        return band_words(SpeedCase(Shape(1, 2, 128, 128, **kw), "fp32", True, "fwd"))

    assert words(d=64) == words(d=64, dv=64) == "flashbench.tolerance"
    assert words(d=192, dv=128).endswith("at d = 64: this case's d = 192/128")
    assert words(d=80).endswith("this case's d = 80")


def test_a_decode_case_with_every_cache_empty_is_refused(capsys):
    """A probe (2026-12-07): `speed --decode --decode-case 1x2x1x8:0` FAILed torch's rows
    "stale" (every call's output is zeros) and read "verdict: PASS", exit 0."""
    rc = main(["speed", "--quiet", "--seed", "1", "--decode", "--decode-case", "1x2x1x8:0"])
    err = capsys.readouterr().err
    assert rc == 2 and "a case whose every cache is empty (0 keys)" in err, err
