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


def test_infinite_values_show_as_failed_and_malformed_files_are_skipped_by_name(tmp_path,
                                                                                capsys):
    """A probe (2026-12-07): one Infinity timing left `asv publish` running for good (the
    site never came); a results file whose "results" is a string was a traceback; a commit
    given as a number failed asv publish without naming the file; a list was left out
    unsaid; a date of 1e20 was published."""
    root = tmp_path / "results"
    _results(root, [math.inf, 2.0, math.nan, -math.inf])
    folder = root / "cpu-epyc"
    good = json.loads((folder / "abc-env.json").read_text())
    for name, change in (("str-env.json", {"results": "abc"}), ("num-env.json",
                         {"commit_hash": 12}), ("date-env.json", {"date": 10**20})):
        (folder / name).write_text(json.dumps({**good, **change}))
    (folder / "list-env.json").write_text("[1, 2]")
    view_tree(root, tmp_path / "view")
    err = capsys.readouterr().err
    for name, why in (("str-env.json", "'results' is not an object"),
                      ("num-env.json", "'commit_hash' is not a string"),
                      ("date-env.json", "'date' 100000000000000000000 is no time"),
                      ("list-env.json", "not a JSON object")):
        assert f"skipped {folder / name}: not a readable results file: {why}" in err, err
    assert "2 infinite value(s) in the results shown as failed" in err
    kept = sorted(p.name for p in (tmp_path / "view" / "cpu-epyc").glob("*-env.json"))
    assert kept == ["abc-env.json"]
    row = json.loads((tmp_path / "view" / "cpu-epyc" / "abc-env.json").read_text())[
        "results"]["a.T.track_x"]
    assert row[0][0] is None and row[0][1] == 2.0 and row[0][3] is None
    assert math.isnan(row[0][2])  # asv's skip stays a skip
