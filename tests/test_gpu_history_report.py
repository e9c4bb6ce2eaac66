"""History and the asv site with a GPU machine beside the committed CPU machines.

The GPU machine's results are written by a test into a temporary folder
(tests/gpu_results.py); the committed results/ are only read.
"""

import json
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pandas as pd
import pytest
from gpu_results import MACHINE, PEAK, SLOW, TFLOPS, write_gpu_results

from flashbench.history import load_results, steps, throughput
from flashbench.history.report import build_report

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def gpu_tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu-results")
    return root, write_gpu_results(root, commits=6, step_at=3)


def test_gpu_results_read_as_tflops_and_percent_of_peak(gpu_tree):
    root, commits = gpu_tree
    df = load_results(root)
    assert set(df["machine"]) == {MACHINE} and df["samples"].map(len).eq(12).all()
    t = throughput(df)
    first = t.set_index(["backend", "shape", "causal", "direction"])
    fwd = first.loc[("triton", "B=4 H=16 Nq=4096 Nk=4096 d=128", False, "fwd")]
    assert fwd["first"] == pytest.approx(TFLOPS[("triton", "fwd")], rel=0.02)
    assert fwd["latest"] == pytest.approx(TFLOPS[("triton", "fwd")] / SLOW, rel=0.02)
    assert fwd["latest_pct_peak"] == pytest.approx(100 * 500 / SLOW / PEAK, rel=0.03)
    fp8 = t[t["backend"] == "triton-fp8"]
    assert len(fp8) == 4 and (fp8["dtype"] == "fp8").all()
    assert fp8["latest"].to_numpy() == pytest.approx(
        [720 * (0.9 if c else 1) for c in fp8["causal"]], rel=0.02)
    assert fp8["latest_pct_peak"].notna().all()  # of the run's bf16 matmul (no fp8 peak)


def test_steps_are_found_on_gpu_timings_and_only_where_the_kernel_slowed(gpu_tree):
    root, commits = gpu_tree
    s = steps(load_results(root))
    assert len(s) and (s["commit"].astype(str) == commits[3][:8]).all()
    backends = set(s["params"].astype(str).str.extract(r"backend='([^']+)'")[0])
    assert backends == {"triton"}
    assert s["change_pct"].to_numpy() == pytest.approx(100 * (SLOW - 1), abs=2)
    assert len(s) == 8  # every bf16 Triton point: 2 shapes x causal x fwd/bwd


def test_report_shows_the_gpu_machine_beside_the_cpu_machines(gpu_tree, tmp_path):
    root, commits = gpu_tree
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        text = build_report([root, ROOT / "results"], tmp_path / "report")
    assert MACHINE in text and "cpu-x86_64-xeon-2cpu-24gb" in text
    assert f"### `{MACHINE}` (Intel(R) Xeon(R) Platinum 8480+; GPU: NVIDIA H200): TFLOP/s" \
        in text
    # the per-commit table: a column per GPU commit (short hash), "TFLOP/s (% peak)" cells
    table = text.split(f"### `{MACHINE}`")[1].split("\n## ")[0]
    # fp8's % is of the bf16 matmul (no fp8 matmul timed): the heading says so (a probe)
    assert "% of the same run's matmul peak in the row's dtype; fp8: of the run's fastest " \
        "measured matmul (bf16), none of fp8 timed in it)" in table.splitlines()[0], table[:300]
    for c in commits:
        assert c[:7] in table
    assert re.search(r"\| 500 \(64%\)", table) and re.search(r"\| 400 \(51%\)", table)
    trend = pd.read_csv(tmp_path / "report" / "throughput.csv")
    assert {"triton", "sdpa-flash", "triton-fp8"} <= set(trend[trend["machine"] == MACHINE]
                                                         ["backend"])
    jumps = pd.read_csv(tmp_path / "report" / "steps.csv")
    assert (jumps["machine"] == MACHINE).sum() == 8
    for png in ("tflops.png", "errors.png", "bands.png"):
        assert f"![{png}]({png})" in text
        assert (tmp_path / "report" / png).stat().st_size > 10_000


def test_plot_colours_tell_flashbench_kernels_from_torch_peers():
    """Colour says which kernel (machines are shaded spans, docs/history.md): flashbench's
    kernels in distinct colours, torch's peers in greys."""
    from flashbench.history.figure import kernel_colours

    colours = kernel_colours({"triton", "flash_model", "torch-sdpa", "sdpa-flash", None})
    own, peer = colours["triton"], colours["torch-sdpa"]
    assert own != colours["flash_model"]
    assert peer[0] == peer[1] == peer[2] and not own[0] == own[1] == own[2]


def test_a_kernel_and_a_dtype_look_the_same_in_every_plot():
    """Red team, 2026-12-06: each plot numbered its own kernels and dtypes, so triton was
    orange in errors.png and green in rules.png, and a circle meant fp32 in one plot and
    bf16 in another. Now a kernel's colour and a dtype's marker do not depend on what else
    a plot draws."""
    from flashbench.history.figure import dtype_marker, kernel_colours

    alone = kernel_colours({"triton", "sdpa-math"})
    crowd = kernel_colours({"flash_model", "split_model", "triton", "triton-fp8", "torch-sdpa",
                            "sdpa-math", "mine", None})
    assert alone["triton"] == crowd["triton"] and alone["sdpa-math"] == crowd["sdpa-math"]
    assert len({crowd[k] for k in ("flash_model", "split_model", "triton", "triton-fp8",
                                   "mine")}) == 5
    assert dtype_marker("bf16", {}) == dtype_marker("bf16", {"fp32": "s", "fp16": "D"})
    assert len({dtype_marker(d, {}) for d in ("fp64", "fp32", "tf32", "fp16", "bf16",
                                              "fp8", "fp8_e5m2")}) == 7
    assert dtype_marker("int4", {}) not in {dtype_marker("fp32", {}), dtype_marker("bf16", {})}


@pytest.mark.slow
def test_site_lists_the_gpu_machine(gpu_tree, tmp_path):
    """asv publish over the committed CPU results and the GPU tree: the site's index
    names the GPU machine and has graphs for its benchmarks."""
    root, _ = gpu_tree
    results = tmp_path / "results"
    shutil.copytree(ROOT / "results", results)
    shutil.copytree(root / MACHINE, results / MACHINE)
    # the GPU run's benchmarks.json entries (asv shows results whose version matches)
    meta = json.loads((results / "benchmarks.json").read_text())
    meta.update(json.loads((root / "benchmarks.json").read_text()))
    (results / "benchmarks.json").write_text(json.dumps(meta))
    conf = json.loads(re.sub(r"^\s*//.*$", "", (ROOT / "asv.conf.json").read_text(),
                             flags=re.M))
    conf.update(repo=str(ROOT), results_dir=str(results), html_dir=str(tmp_path / "html"),
                benchmark_dir=str(ROOT / "benchmarks"), branches=["HEAD"])
    (tmp_path / "asv.conf.json").write_text(json.dumps(conf))
    r = subprocess.run([sys.executable, "-m", "asv", "publish", "--config",
                        str(tmp_path / "asv.conf.json")], capture_output=True, text=True,
                       cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    index = json.loads((tmp_path / "html" / "index.json").read_text())
    assert MACHINE in index["params"]["machine"]
    assert "cpu-x86_64-xeon-2cpu-24gb" in index["params"]["machine"]
    graphs = list((tmp_path / "html" / "graphs").rglob(
        f"*machine-{MACHINE}*/**/bench_gpu.TimeAttentionGPU.time_attention_gpu.json"))
    assert len(graphs) == 1
    points = json.loads(graphs[0].read_text())  # [revision, [value per grid point]]
    assert len(points) == 6 and all(v is not None for _, values in points for v in values)
