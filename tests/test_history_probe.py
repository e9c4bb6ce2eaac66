"""A red team's findings on `flashbench history`, 2026-12-08: each test failed before its fix."""

import json
import os
import re
import warnings

import numpy as np
import pandas as pd
from test_history import results_file, run_cli, tiny_results, write

from flashbench.history import load_results

TRACK = "b.Track.track_x"


def _load(root, **kw):
    """(frame, warning messages) of ``root``, read without a cache."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = load_results(root, cache=False, **kw)
    return df, [str(w.message) for w in caught]


def _track_folder(root):
    write(root / "benchmarks.json", {"version": 2, TRACK: {
        "param_names": ["n"], "type": "track", "unit": "err"}})
    return root


def test_a_bool_or_a_string_value_is_a_failed_result(tmp_path):
    """`false` and "0.5" were read as 0.0 and 0.5, status ok (np.array(..., float) takes
    them): a value that is no number is a failed result, and said."""
    root = _track_folder(tmp_path / "results")
    write(root / "m" / "a.json", results_file({
        TRACK: [[False, "0.5", 1.5, True, None], [["1", "2", "3", "4", "5"]]]}))
    write(root / "m" / "b.json", results_file({TRACK: [[True, False], [["1", "2"]]]},
                                              commit="d" * 40, date=1700000060000))
    df, said = _load(root)
    a = df[df["file"] == os.path.join("m", "a.json")].sort_values("n")
    assert a["status"].astype(str).tolist() == ["failed", "failed", "ok", "failed", "failed"]
    assert a["value"].isna().tolist() == [True, True, False, True, True]
    b = df[df["file"] == os.path.join("m", "b.json")]
    assert (b["status"] == "failed").all() and b["value"].isna().all()
    assert any("not numbers" in s and "a.json" in s for s in said), said
    assert any("not numbers" in s and "b.json" in s for s in said), said


def test_a_result_list_longer_than_its_grid_is_said_and_never_mislabelled(tmp_path):
    """A grid shrunk to one model while its four values remained: the list was cut and
    flash_model's times read as standard_model's. The entry is skipped and said, in both
    the first file of a layout and a file that reuses the layout before it."""
    root = _track_folder(tmp_path / "results")
    for k, values in enumerate([[1.0], [2.0, 3.0], [4.0]]):
        write(root / "m" / f"{k}.json", results_file({
            TRACK: [values, [["1"]]], "b.plain": [[5.0 + k]]},
            commit=f"{k:040d}", date=1700000000000 + k))
    write(root / "m" / "3.json", results_file({TRACK: [[7.0, 8.0, 9.0], [["1", "2"]]]},
                                              commit=f"{3:040d}", date=1700000000003))
    df, said = _load(root)
    track = df[df["benchmark"] == TRACK].sort_values("date")
    assert track["value"].tolist() == [1.0, 4.0]  # 2.0 and 7.0, 8.0 never under n=1, 2
    assert (df["benchmark"] == "b.plain").sum() == 3
    skipped = dict(df.attrs["skipped_files"])
    for name, grid in (("1.json", 1), ("3.json", 2)):
        why = next(v for k, v in skipped.items() if k.endswith(f"{name}: {TRACK}"))
        assert "longer than" in why and f"grid of {grid}" in why, why
    assert sum("longer than" in s for s in said) == 2, said


def _copy_with_other_name(folder):
    for f in sorted(folder.glob("*/*.json")):
        (f.parent / f"{f.stem}-copy.json").write_bytes(f.read_bytes())


def test_a_copy_under_another_name_is_read_once_and_said(tmp_path):
    """Every file of a machine copied to <name>-copy.json: each point was read twice."""
    alone, _ = _load(tiny_results(tmp_path / "alone"))
    root = tiny_results(tmp_path / "results")
    _copy_with_other_name(root)
    df, said = _load(root)
    assert len(df) == len(alone)
    assert sorted(df["value"]) == sorted(alone["value"])
    assert df.groupby(["commit", "benchmark", "params"], observed=True).size().max() == 1
    left = [n for n in df.attrs["notes"] if "left out" in n]
    assert len(left) == 3 and all("identical" in n and "-copy.json" in n for n in left), left
    assert all(n in said for n in left)


def _two_envs(root, names, values=(1.0, 2.0), started=(1700000100000, 1700000200000)):
    """One machine, one commit, two environments: ``values[i]`` in file ``names[i]``,
    run at ``started[i]``."""
    _track_folder(root)
    for name, value, when, env in zip(names, values, started, ("virtualenv-py", "existing-py"),
                                      strict=True):
        data = results_file({TRACK: [[value], [["1"]], "v", when]},
                            columns=["result", "params", "version", "started_at"])
        write(root / "m" / name, data | {"env_name": env})
    return root


def test_one_commit_in_two_environments_reads_the_newer_run_whatever_the_file_names(tmp_path):
    """Two results files of one machine and commit in two environments read as two
    commits, and which won depended on the names' order. The newest run is kept (its
    latest started_at), the other said; swapping the names changes no number."""
    numbers = []
    for k, names in enumerate((("a.json", "b.json"), ("b.json", "a.json"))):
        df, said = _load(_two_envs(tmp_path / f"r{k}", names))
        assert df["value"].tolist() == [2.0] and df["env"].tolist() == ["existing-py"]
        note = next(n for n in df.attrs["notes"] if "left out" in n)
        assert f"{names[0]} left out" in note and names[1] in note, note
        numbers.append(df.drop(columns=["file", "samples"]))
    pd.testing.assert_frame_equal(numbers[0], numbers[1])


def test_the_reviews_stored_results_keep_each_environment(tmp_path):
    """`review --reuse` compares like environments (review.envs.pick_envs): the newest run
    alone left it a same-environment run of an older date to compare across or re-run (a
    fresh-eyes review, 2026-12-08). Its load keeps one file per environment; copies of one
    run in one environment are still read once."""
    root = _two_envs(tmp_path / "r", ("a.json", "b.json"))
    write(root / "m" / "a-copy.json", json.loads((root / "m" / "a.json").read_text()))
    df, _ = _load(root, each_env=True)
    assert sorted(df["env"].astype(str)) == ["existing-py", "virtualenv-py"]
    assert sorted(df["value"]) == [1.0, 2.0]
    from flashbench.review.results import load_stored

    stored = load_stored([root])
    assert sorted(stored["env"].astype(str)) == ["existing-py", "virtualenv-py"]


def test_the_same_run_twice_keeps_one_by_its_content_not_its_name(tmp_path):
    """Two differing files of one run with the same started_at: the choice is the
    content's, never the names' order."""
    kept = set()
    for k, names in enumerate((("a.json", "b.json"), ("b.json", "a.json"))):
        df, _ = _load(_two_envs(tmp_path / f"r{k}", names, started=(5, 5)))
        kept.add(float(df["value"].iloc[0]))
    assert len(kept) == 1


def test_every_log_scaled_axis_says_so():
    """rules.png was log-scaled with nothing saying so: finish labelled only an axis that
    had a label."""
    from test_report import _merge_study, frame

    from flashbench.history.plots import rules_figure

    kernel = frame([0.5, 0.6, 0.55], "a.TrackAccuracy.track_o_baseline_ratio",
                   {"kernel": "triton", "dtype": "bf16", "causal": False})
    fig = rules_figure(pd.concat([kernel, _merge_study()], ignore_index=True))
    logs = [ax for ax in fig.axes if ax.get_visible() and ax.get_yscale() == "log"]
    assert logs
    assert all("log" in ax.get_ylabel() for ax in logs), [ax.get_ylabel() for ax in logs]


def _cells(line: str) -> int:
    return len(re.findall(r"(?<!\\)\|", line))


def test_a_pipe_in_a_parameter_value_is_escaped_in_every_table(tmp_path, capsys):
    """`|` inside a value made one cell too many in the Markdown tables."""
    from flashbench.history.answer import _render
    from flashbench.history.report import _table

    table = pd.DataFrame({"kernel": ["a|b", "c"], "x": [1.0, np.nan]})
    for text in (_render(table, ".3g"), _table(table)):
        assert "a\\|b" in text
        assert len({_cells(line) for line in text.splitlines()}) == 1, text
    root = tiny_results(tmp_path / "results", commits=4)
    for f in root.glob("m/*.json"):
        data = json.loads(f.read_text())
        data["results"]["a.TrackAccuracy.track_o_max_abs"][1][0] = ["'tri|ton'"]
        data["results"]["t.TimeX.time_fwd"][1][0] = ["'1x2x64x64x16|x'"]
        f.write_text(json.dumps(data))
    rc, out, err = run_cli(["history", str(root), "--out", str(tmp_path / "out")], capsys)
    assert rc == 0, err
    text = (tmp_path / "out" / "report.md").read_text()
    assert "tri\\|ton" in text
    lines = text.splitlines()
    for k, line in enumerate(lines):
        if line.startswith("|") and (k == 0 or not lines[k - 1].startswith("|")):
            block = [x for x in lines[k:] if x.startswith("|")]
            block = block[:next((i for i, x in enumerate(lines[k:]) if not x.startswith("|")),
                                len(block))]
            assert len({_cells(x) for x in block}) == 1, "\n".join(block)


def test_a_folder_whose_results_all_failed_says_so(tmp_path, capsys):
    """It said "no results in ...", which was false: they are there, all failed."""
    root = tiny_results(tmp_path / "results")
    for f in root.glob("m/*.json"):
        data = json.loads(f.read_text())
        for row in data["results"].values():
            row[0] = [None] * len(row[0])
        f.write_text(json.dumps(data))
    rc, _, err = run_cli(["history", str(root), "--out", str(tmp_path / "out")], capsys)
    assert rc == 2, err
    assert "no measured result in" in err and "12 results, all failed" in err, err
    assert "no results in" not in err


def test_a_time_faster_than_the_machine_is_left_out_of_the_throughput_and_said(tmp_path):
    """A time of 1e-9 s read 6.9e7 TFLOP/s, +1.4e11% on its row, without a word, on a
    machine whose same run measured an fp32 matmul near 0.2 TFLOP/s."""
    import shutil
    from pathlib import Path

    from flashbench.history.report import build_report

    src = Path(__file__).resolve().parents[1] / "results"
    root = tmp_path / "results"
    (root / "m").mkdir(parents=True)
    shutil.copy(src / "benchmarks.json", root)
    shutil.copy(src / "cpu-x86_64-xeon-2cpu-24gb" / "machine.json", root / "m")
    name = "-virtualenv-py3.11-matplotlib-ml_dtypes-numpy-pandas-tabulate-torch2.13.0-triton.json"
    for commit in ("6729dcc1", "10665f79"):
        shutil.copy(src / "cpu-x86_64-xeon-2cpu-24gb" / f"{commit}{name}", root / "m")
    bad = root / "m" / f"10665f79{name}"
    data = json.loads(bad.read_text())
    values = data["results"]["bench_reference.TimeModels.time_model"][0]
    values[0] = 1e-9
    bad.write_text(json.dumps(data))
    report = build_report(root, tmp_path / "out")
    said = [line for line in report.splitlines() if "left out of the throughput" in line]
    assert len(said) == 1 and "TimeModels" in said[0] and "10665f79" in said[0], said
    assert "is 6.87e+07 TFLOP/s, over 5,000 TFLOP/s (no machine's" in said[0], said
    trend = pd.read_csv(tmp_path / "out" / "throughput.csv")
    assert not (trend["best"] >= 10).any(), trend.sort_values("best").tail(3)


def test_an_fp8_row_has_room_for_its_own_matmul_over_a_16_bit_peak():
    """fp8 rows' % peak is of the bf16 matmul where no fp8 one was timed (TimeMatmulPeak
    times bf16), and fp8's dense rate is about 2x: at 2x they would be dropped as
    impossible (a fresh-eyes review, 2026-12-08)."""
    from flashbench.history.report import _possible

    points = pd.DataFrame({
        "machine": ["g"] * 4, "commit": ["c" * 40] * 4, "benchmark": ["b"] * 4,
        "params": ["p"] * 4, "value": [1.0] * 4, "dtype": ["fp8", "bf16", "fp8", "fp32"],
        "tflops": [3000.0, 3000.0, 9000.0, 6000.0], "pct_peak": [300.0, 300.0, 500.0, np.nan]})
    kept, notes = _possible(points)
    assert kept["dtype"].tolist() == ["fp8"] and kept["tflops"].tolist() == [3000.0]
    assert len(notes) == 3 and "over 5,000 TFLOP/s" in notes[2], notes


def test_two_commits_of_one_date_read_parent_first(tmp_path):
    """Commits made in one second (the committed 6729dcc1 and its parent 728b1696) were
    ordered by hash, a child before its parent on the plots and in the steps (a red team,
    2026-12-08). Where git holds them (the results inside the repository), parent first."""
    import subprocess

    repo = tmp_path / "repo"
    repo.mkdir()
    env = {**os.environ, "GIT_AUTHOR_DATE": "2026-12-08T00:00:00Z",
           "GIT_COMMITTER_DATE": "2026-12-08T00:00:00Z", "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}

    def git(*args):
        return subprocess.run(["git", *args], cwd=repo, env=env, check=True,
                              capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    git("commit", "-q", "--allow-empty", "-m", "parent")
    parent = git("rev-parse", "HEAD")
    for k in range(64):  # a child whose hash sorts before its parent's, as the pair's did
        git("commit", "-q", "--allow-empty", "-m", f"child {k}")
        child = git("rev-parse", "HEAD")
        if child < parent:
            break
        git("reset", "-q", "--hard", parent)
    assert child < parent
    root = _track_folder(repo / "results")
    for commit, value in ((parent, 1.0), (child, 2.0)):
        write(root / "m" / f"{commit[:8]}.json", results_file(
            {TRACK: [[value], [["1"]]]}, commit=commit, date=1700000000000))
    df, _ = _load(root)
    assert list(df["commit"].cat.categories) == [parent, child]
    outside = tmp_path / "elsewhere"  # no repository: by hash, as before
    root.rename(outside)
    df, _ = _load(outside)
    assert list(df["commit"].cat.categories) == [child, parent]
