"""The site's view of the results (flashbench.site.view): no drifting machine facts as
choices, no parameter value that no results file measured; the results left untouched."""

from __future__ import annotations

import json
import math

from flashbench.site.view import NOISE, view_tree

MACHINE = {"arch": "x86_64", "cpu": "AMD EPYC", "machine": "cpu-epyc", "num_cpu": "2",
           "os": "Linux 6.18.44-fc-v657", "ram": "24684092", "version": 1}
COLUMNS = ["result", "params", "version", "started_at", "duration", "stats_ci_99_a"]


def _results(root, values):
    params = [["'triton'", "'sdpa-cudnn'"], ["'fp16'", "'bf16'"]]
    (root / "cpu-epyc").mkdir(parents=True)
    (root / "benchmarks.json").write_text(json.dumps({
        "version": 2, "a.T.track_x": {"params": params, "param_names": ["kernel", "dtype"],
                                      "version": "v", "type": "track"}}))
    (root / "cpu-epyc" / "machine.json").write_text(json.dumps(MACHINE))
    row = [values, params, "v", 1, 2.0, [1, 2, 3, 4]]
    (root / "cpu-epyc" / "abc-env.json").write_text(json.dumps({
        "version": 2, "commit_hash": "abc", "env_name": "env", "date": 1,
        "params": {**MACHINE, "python": "3.11"}, "python": "3.11", "requirements": {},
        "result_columns": COLUMNS, "results": {"a.T.track_x": row}}))


def test_view_drops_machine_noise_and_never_measured_values(tmp_path):
    """Failed before (no view: asv published results/ as they are)."""
    root = tmp_path / "results"
    _results(root, [1.0, 2.0, math.nan, None])  # sdpa-cudnn: skipped (NaN) or absent
    before = {p: p.read_bytes() for p in root.rglob("*.json")}
    assert view_tree(root, tmp_path / "view") == 1
    assert {p: p.read_bytes() for p in root.rglob("*.json")} == before
    meta = json.loads((tmp_path / "view" / "benchmarks.json").read_text())
    assert meta["a.T.track_x"]["params"] == [["'triton'"], ["'fp16'", "'bf16'"]]
    machine = json.loads((tmp_path / "view" / "cpu-epyc" / "machine.json").read_text())
    assert not set(NOISE) & set(machine) and machine["machine"] == "cpu-epyc"
    data = json.loads((tmp_path / "view" / "cpu-epyc" / "abc-env.json").read_text())
    assert not set(NOISE) & set(data["params"]) and data["params"]["python"] == "3.11"
    row = data["results"]["a.T.track_x"]
    assert row[0] == [1.0, 2.0] and row[1] == [["'triton'"], ["'fp16'", "'bf16'"]]
    assert row[5] == [1, 2] and row[3] == 1  # per-point columns follow, scalars stay


def test_view_keeps_a_value_some_machine_measured(tmp_path):
    root = tmp_path / "results"
    _results(root, [1.0, 2.0, 3.0, None])
    assert view_tree(root, tmp_path / "view") == 0


def test_view_skips_a_corrupt_results_file_and_says_so(tmp_path, capsys):
    root = tmp_path / "results"
    _results(root, [1.0, 2.0, 3.0, None])
    (root / "cpu-epyc" / "bad-env.json").write_text("{not json")
    view_tree(root, tmp_path / "view")
    assert "skipped" in capsys.readouterr().err
    assert not (tmp_path / "view" / "cpu-epyc" / "bad-env.json").exists()
    assert (tmp_path / "view" / "cpu-epyc" / "abc-env.json").exists()
