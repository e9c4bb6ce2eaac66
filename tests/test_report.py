"""The history report's opening answer and narrow tables (flashbench.history.answer), on
hand-made frames and on the committed results/."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from flashbench.history.answer import answer, compact, machine_labels, narrow
from flashbench.history.report import build_report
from flashbench.history.steps import steps
from flashbench.history.summaries import error_bands

RESULTS = Path(__file__).resolve().parents[1] / "results"


def frame(values, benchmark, params, machine="m", cpu="CPU A", unit="unitless"):
    n = len(values)
    label = ", ".join(f"{k}={v!r}" for k, v in params.items())
    return pd.DataFrame({"machine": machine, "cpu": cpu, "env": "e",
                         "commit": [f"{i:040d}" for i in range(n)],
                         "date": pd.date_range("2026-01-01", periods=n, tz="UTC"),
                         "file": [f"f{i}" for i in range(n)], "benchmark": benchmark,
                         "params": label, "type": "track", "unit": unit, "value": values,
                         "status": "ok"} | {k: [v] * n for k, v in params.items()})


def test_the_answer_counts_and_names_what_is_outside_its_band():
    """Failed before: the report had no such section (it opened with a 226-row table)."""
    base = {"kernel": "triton", "dtype": "bf16", "causal": False}
    df = pd.concat([
        frame([1e-3, 1e-3, 1e-3, 4e-3], "a.TrackAccuracy.track_o_max_abs", base),
        frame([2e-3] * 4, "a.TrackAccuracy.track_o_max_abs", base | {"dtype": "fp16"}),
        frame([1e-3] * 4, "a.TrackAccuracy.track_o_max_abs", base, machine="n", cpu="CPU B")])
    labels = machine_labels(df)
    assert labels == {("m", "CPU A"): "M1", ("n", "CPU B"): "M2"}
    text = "\n".join(answer(df, error_bands(df), steps(df), labels))
    assert text.startswith("## The answer")
    assert "**1 of 3** accuracy tracks" in text
    row = next(line for line in text.splitlines() if line.startswith("| M1"))
    assert "bf16" in row and "[0.001, 0.001]" in row and "300" in row  # +300 % over band_hi
    assert "- M2: `n` (CPU B)" in text and "Failed results: none" in text


def test_narrow_tables_hold_no_nan_and_split_rows_by_the_parameters_they_have():
    """Failed before: one table for every row, 'nan' in shape / dist / variant cells."""
    table = pd.DataFrame({"machine": ["m", "m"], "cpu": ["CPU A", "CPU A"],
                          "kernel": ["a", "b"], "shape": ["1x2x64x64x8", None],
                          "variant": [None, "softcap=30"], "o_band": [float("nan"), 0.5]})
    lines = narrow(table, {("m", "CPU A"): "M1"}, optional=("shape", "variant"))
    text = "\n".join(lines)
    assert "nan" not in text and "CPU A" not in text
    assert "Rows with shape:" in text and "Rows with variant:" in text
    first = text.split("Rows with variant:")[0]
    assert "variant" not in first.split("Rows with shape:")[1]
    assert compact("kernel='triton', N=256, causal=True") == "triton N=256 causal=True"
    assert compact("not asv's (spelling") == "not asv's (spelling"


def test_the_report_on_the_committed_results_opens_with_the_answer(tmp_path):
    """Failed before: report.md opened with the bands table, up to 408 characters wide,
    with 'nan' cells; that 40 tracks lay outside their band was not said."""
    text = build_report(RESULTS, tmp_path / "report")
    head = text.splitlines()[:12]
    assert any(line == "## The answer" for line in head)
    bands = pd.read_csv(tmp_path / "report" / "error_bands.csv")
    outside = int((bands["inside"].astype(str) == "False").sum())
    judged = int(bands["inside"].notna().sum())
    assert f"**{outside} of {judged}** accuracy tracks" in text
    assert not re.search(r"\|\s*nan\s*\|", text)
    widest = max(len(line) for line in text.splitlines() if line.startswith("|"))
    assert widest <= 210, widest  # 408 before
    assert text.index("## The answer") < text.index("## Accuracy bands")


def test_the_answer_says_when_no_step_was_found():
    df = frame([1.0] * 5, "a.TrackAccuracy.track_o_max_abs", {"kernel": "k", "dtype": "fp32"})
    text = "\n".join(answer(df, error_bands(df), steps(df), machine_labels(df)))
    assert steps(df).empty
    assert "Steps found (asv step detection, level changes >= 1%): none." in text
    assert "**0 of 1** accuracy tracks" in text
