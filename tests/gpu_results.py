"""A GPU machine's asv results folder, written by a test (never under results/).

Files in asv's own format (results schema version 2, machine.json, benchmarks.json) for
the grid of benchmarks/bench_gpu.py, on commits that the committed CPU results also
measured (so the two machines share the x axis), with 12 samples a point drawn around a
throughput model of an H200 (bf16 forward about 500 TFLOP/s, matmul 780), and a step:
from commit ``step_at`` on, the Triton bf16 rows take ``slow`` times as long.
"""

import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import bench_gpu  # noqa: E402
from flashbench.inputs import Shape  # noqa: E402

MACHINE = "nvidia-h200-xeon-platinum-8480-16cpu"
CPU = "Intel(R) Xeon(R) Platinum 8480+; GPU: NVIDIA H200"
ENV = "existing-py_usr_bin_python3"
TFLOPS = {("triton", "fwd"): 500.0, ("triton", "bwd"): 330.0, ("sdpa-flash", "fwd"): 360.0,
          ("sdpa-flash", "bwd"): 290.0, ("triton-fp8", "fwd"): 720.0}
PEAK = 780.0
SUITES = {"bench_gpu.TimeAttentionGPU.time_attention_gpu": bench_gpu.TimeAttentionGPU,
          "bench_gpu.TimeAttentionFP8GPU.time_attention_fp8": bench_gpu.TimeAttentionFP8GPU,
          "bench_gpu.TimeMatmulPeak.time_matmul": bench_gpu.TimeMatmulPeak}


def cpu_commits(n: int) -> list[tuple[str, int]]:
    """(hash, date ms) of the last ``n`` commits the committed CPU results measured that
    lie on HEAD's first-parent line (the commits asv graphs for a branch)."""
    line = set(subprocess.run(["git", "rev-list", "--first-parent", "HEAD"], cwd=ROOT,
                              capture_output=True, text=True, check=True).stdout.split())
    found = {}
    for f in (ROOT / "results").glob("*/*.json"):
        if f.name != "machine.json":
            data = json.loads(f.read_text())
            if data["commit_hash"] in line:
                found[data["commit_hash"]] = min(found.get(data["commit_hash"], 2**62),
                                                 data["date"])
    return sorted(found.items(), key=lambda c: c[1])[-n:]


def seconds(name: str, point: dict, slowed: bool) -> float:
    if name.endswith("time_matmul"):
        return 2 * point["n"] ** 3 / (PEAK * 1e12)
    s = Shape.parse(point["shape"])
    rate = TFLOPS[(point["backend"], point["direction"])] * (0.9 if point["causal"] else 1.0)
    t = s.flops(point["causal"], point["direction"]) / (rate * 1e12)
    return t * (SLOW if slowed and point["backend"] == "triton" else 1.0)


SLOW = 1.25


def write_gpu_results(root: Path, commits: int = 6, step_at: int = 3, seed: int = 0) -> list:
    """Write the folder; returns the commits (oldest first)."""
    rng = np.random.default_rng(seed)
    chosen = cpu_commits(commits)
    (root / MACHINE).mkdir(parents=True)
    (root / MACHINE / "machine.json").write_text(json.dumps({
        "arch": "x86_64", "cpu": CPU, "machine": MACHINE, "num_cpu": "16", "os": "Linux",
        "ram": "131072000", "version": 1}))
    meta = {"version": 2}
    for name, cls in SUITES.items():
        meta[name] = {"name": name, "param_names": cls.param_names, "type": "time",
                      "unit": "seconds", "version": "gpu-test",
                      "params": [[repr(v) for v in p] for p in cls.params]}
    (root / "benchmarks.json").write_text(json.dumps(meta))
    columns = ["result", "params", "version", "started_at", "duration", "stats_ci_99_a",
               "stats_ci_99_b", "stats_q_25", "stats_q_75", "stats_number", "stats_repeat",
               "samples", "profile"]
    for k, (commit, date) in enumerate(chosen):
        results = {}
        for name, cls in SUITES.items():
            cells = {c: [] for c in columns}
            for values in itertools.product(*cls.params):
                t = seconds(name, dict(zip(cls.param_names, values, strict=True)), k >= step_at)
                samples = np.sort(t * np.exp(rng.normal(0, 0.01, 12)))
                cells["result"].append(float(np.median(samples)))
                cells["samples"].append(samples.tolist())
                for col, q in (("stats_ci_99_a", 1), ("stats_ci_99_b", 99),
                               ("stats_q_25", 25), ("stats_q_75", 75)):
                    cells[col].append(float(np.percentile(samples, q)))
                cells["stats_number"].append(1)
                cells["stats_repeat"].append(12)
            results[name] = [cells["result"], meta[name]["params"], "gpu-test", date, 20.0,
                             *(cells[c] for c in columns[5:12]), None]
        data = {"commit_hash": commit, "env_name": ENV, "date": date + 3_600_000,
                "params": {"arch": "x86_64", "cpu": CPU, "machine": MACHINE, "num_cpu": "16",
                           "os": "Linux", "ram": "131072000", "python": "/usr/bin/python3"},
                "python": "/usr/bin/python3", "requirements": {}, "env_vars": {},
                "result_columns": columns, "results": results, "durations": {}, "version": 2}
        (root / MACHINE / f"{commit[:8]}-{ENV}.json").write_text(json.dumps(data))
    return [c for c, _ in chosen]
