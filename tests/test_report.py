"""The history report's opening answer and narrow tables (flashbench.history.answer), on
hand-made frames and on the committed results/."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from flashbench.history.answer import answer, compact, machine_labels, narrow
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


def test_the_answer_lists_the_farthest_outside_first_and_counts_them_apart():
    """Failed before: tiny excursions (1e-6 relative then; 1e-8 is inside now, 1e-5 here)
    came first in the listing, by table order, and the one real move sat in
    "... and 47 more"."""
    base = {"kernel": "triton", "dtype": "bf16", "causal": False}
    tiny = [frame([1e-3, 1e-3, 1e-3 * (1 + 1e-5)], "a.TrackAccuracy.track_o_max_abs",
                  base | {"dtype": d}) for d in ("fp16", "fp32")]
    far = frame([2e-3, 2e-3, 1.6e-3], "a.TrackAccuracy.track_o_max_abs", base | {"N": 256})
    df = pd.concat([*tiny, far])
    text = "\n".join(answer(df, error_bands(df), steps(df), machine_labels(df), listed=1))
    assert "**3 of 3** accuracy tracks" in text and "**1** of them by more than 1%" in text
    rows = [line for line in text.splitlines() if line.startswith("| M1")]
    assert len(rows) == 1 and "bf16" in rows[0] and "-20" in rows[0], rows
    assert "N=256" in rows[0]  # a parameter no column shows is not dropped


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


def test_the_report_on_the_committed_results_opens_with_the_answer(committed_report):
    """Failed before: report.md opened with the bands table, up to 408 characters wide,
    with 'nan' cells; that 40 tracks lay outside their band was not said."""
    rc, out = committed_report  # `flashbench history results --out DIR` (build_report)
    assert rc == 0
    text = (out / "report.md").read_text()
    head = text.splitlines()[:12]
    assert any(line == "## The answer" for line in head)
    bands = pd.read_csv(out / "error_bands.csv")
    outside = int((bands["inside"].astype(str) == "False").sum())
    judged = int(bands["inside"].notna().sum())
    assert f"**{outside} of {judged}** accuracy tracks" in text
    assert not re.search(r"\|\s*nan\s*\|", text)
    widest = max(len(line) for line in text.splitlines() if line.startswith("|"))
    assert widest <= 210, widest  # 408 before
    assert text.index("## The answer") < text.index("## Accuracy bands")


def test_the_answer_names_flashbenchs_ratios_past_their_limit_at_the_newest_commit():
    """A newcomer: triton's softcap baseline ratio of 2.013 (limit 2) read "inside True":
    its band held the failing values. The answer names a kernel of flashbench's past a
    rule's limit at its newest commit; a peer's is information."""
    own = {"kernel": "triton", "dtype": "fp32", "causal": False}
    df = pd.concat([
        frame([2.013, 2.013, 2.013], "a.TrackAccuracy.track_o_baseline_ratio", own),
        frame([1.2, 1.2, 1.2], "a.TrackAccuracy.track_o_band_ratio", own),
        frame([3.0, 3.0, 3.0], "a.TrackAccuracy.track_o_baseline_ratio",
              own | {"kernel": "torch-naive"})])
    text = "\n".join(answer(df, error_bands(df), steps(df), machine_labels(df)))
    line = next(x for x in text.splitlines() if x.startswith("- Rules at the newest commit"))
    assert "**2** ratio(s) of flashbench's kernels past their limit" in line, line
    assert "M1 triton fp32 o_baseline_ratio 2.013 (limit 2)" in line and "torch-naive" not in line
    calm = frame([0.9] * 3, "a.TrackAccuracy.track_o_band_ratio", own)
    text = "\n".join(answer(calm, error_bands(calm), steps(calm), machine_labels(calm)))
    assert "no kernel of flashbench's past a rule's limit" in text


def test_the_answer_says_when_no_step_was_found():
    df = frame([1.0] * 5, "a.TrackAccuracy.track_o_max_abs", {"kernel": "k", "dtype": "fp32"})
    text = "\n".join(answer(df, error_bands(df), steps(df), machine_labels(df)))
    assert steps(df).empty
    assert "Steps found (asv step detection, level changes >= 1%): none." in text
    assert "**0 of 1** accuracy tracks" in text


# --------------------------------------------------------------------------- plots

def _merge_study(settings: int = 9, commits: int = 3):
    """The decode merge study: no kernel, nine (partials, lse_dtype, dtype) settings per
    commit, values far apart (the zigzag rules.png drew as one line "nan bf16")."""
    parts = []
    for i in range(settings):
        p = {"dtype": "bf16", "partials": f"p{i % 3}", "lse_dtype": f"l{i // 3}"}
        parts.append(frame([0.5 + 6 * i] * commits, "bench_decode.TrackDecodeMerge"
                           ".track_o_baseline_ratio", p))
    return pd.concat(parts, ignore_index=True)


def test_rules_plot_draws_one_series_per_setting_and_the_study_apart():
    """Failed before: the nine settings were joined into one zigzag line per dtype."""
    from flashbench.history.plots import rules_figure

    kernel = frame([0.5, 0.6, 0.55], "a.TrackAccuracy.track_o_baseline_ratio",
                   {"kernel": "triton", "dtype": "bf16", "causal": False})
    peer = frame([0.9, 0.9, 0.9], "a.TrackAccuracy.track_o_baseline_ratio",
                 {"kernel": "torch-sdpa", "dtype": "bf16", "causal": False})
    fig = rules_figure(pd.concat([kernel, peer, _merge_study()], ignore_index=True))
    axes = [ax for ax in fig.axes if ax.get_visible()]
    titles = [ax.get_title() for ax in axes]
    study = axes[next(i for i, t in enumerate(titles) if "merge study" in t)]
    rule = axes[titles.index("o_baseline_ratio (limit 2, dotted)")]
    assert len([ln for ln in study.get_lines() if ln.get_linestyle() == "-."]) == 9
    for ln in study.get_lines():
        if ln.get_linestyle() == "-.":
            assert len(set(ln.get_ydata())) == 1  # a setting's own flat line, no zigzag
    drawn = [ln for ln in rule.get_lines() if ln.get_linestyle() in ("-", "--")]
    assert len(drawn) == 2
    peer_line = next(ln for ln in drawn if ln.get_alpha() is not None and ln.get_alpha() < 1)
    assert peer_line.get_linewidth() < max(ln.get_linewidth() for ln in drawn)
    labels = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert "torch-sdpa (peer: information only)" in labels
    assert "decode merge study (not a kernel)" in labels and len(labels) < 20


def test_rules_plot_rings_flashbenchs_points_past_the_limit_alone():
    """A newcomer: triton's 2.013 against the limit of 2 sat on the dotted line like a
    pass. A kernel of flashbench's past the limit is ringed red; a peer's is not."""
    from flashbench.history.plots import rules_figure

    kernel = frame([1.9, 2.013, 2.013], "a.TrackAccuracy.track_o_baseline_ratio",
                   {"kernel": "triton", "dtype": "fp32", "causal": False})
    peer = frame([2.5, 2.5, 2.5], "a.TrackAccuracy.track_o_baseline_ratio",
                 {"kernel": "torch-naive", "dtype": "fp32", "causal": False})
    fig = rules_figure(pd.concat([kernel, peer], ignore_index=True))
    rule = next(ax for ax in fig.axes if ax.get_title().startswith("o_baseline_ratio"))
    rings = [c for c in rule.collections if len(c.get_offsets())]
    assert len(rings) == 1 and sorted(rings[0].get_offsets()[:, 1]) == [2.013, 2.013]
    assert "ringed red" in fig.texts[-1].get_text() or any(
        "ringed red" in t.get_text() for t in fig.texts)


def test_errors_plot_has_a_span_floor_tick_labels_on_every_panel_and_one_scale():
    """Failed before: a 4e-13 relative difference filled the tf32 panel (seven equal tick
    labels); the fp8 panel had no y tick labels."""
    from flashbench.history.figure import SPAN_FLOOR, visible_tick_labels
    from flashbench.history.plots import errors_figure

    tf32 = frame([1.654170e-4, 1.654170e-4 * (1 + 4e-13), 1.654170e-4 * (1 + 4e-13)],
                 "a.TrackAccuracy.track_o_max_abs", {"kernel": "flash_model", "dtype": "tf32",
                                                      "causal": False})
    fp8 = frame([0.0411] * 3, "a.TrackAccuracy.track_o_max_abs",
                {"kernel": "triton-fp8", "dtype": "fp8", "causal": False})
    fp32 = frame([2e-7, 3e-7, 2.5e-7], "a.TrackAccuracy.track_o_max_abs",
                 {"kernel": "triton", "dtype": "fp32", "causal": False}, machine="n",
                 cpu="CPU B")
    fig = errors_figure(pd.concat([tf32, fp8, fp32], ignore_index=True))
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert len(axes) == 3 and {ax.get_yscale() for ax in axes} == {"log"}
    for ax in axes:
        shown = visible_tick_labels(ax)
        assert len(shown) >= 2 and len(set(shown)) == len(shown), (ax.get_title(), shown)
        lo, hi = ax.get_ylim()
        assert hi / lo >= 1 + SPAN_FLOOR, ax.get_title()


def test_tflops_plot_marks_a_machine_change_and_a_loaded_run():
    """Failed before: a change of machine and a run 2-10x slower across the board read as
    speed changes of the code."""
    from flashbench.history.plots import loaded_runs, tflops_figure
    from flashbench.history.summaries import throughput_points

    def timing(seconds, machine, cpu, impl, start):
        df = frame(seconds, "bench_reference.TimeAttention.time_attention",
                   {"shape": "1x1x1024x1024x64", "dtype": "fp64", "causal": False,
                    "impl": impl}, machine=machine, cpu=cpu, unit="seconds")
        n = len(seconds)
        return df.assign(commit=[f"{i:040d}" for i in range(start, start + n)],
                         date=pd.date_range("2026-01-01", periods=n, tz="UTC")
                         + pd.Timedelta(days=start), type="time",
                         file=[f"{machine}{i}" for i in range(n)])

    parts = [timing([0.01, 0.01, 0.01], "xeon", "Xeon", impl, 0) for impl in
             ("one-shot", "streamed", "a", "b")]
    parts += [timing([0.02, 0.02, 0.02, 0.08], "epyc", "EPYC", impl, 3) for impl in
              ("one-shot", "streamed", "a", "b")]
    df = pd.concat(parts, ignore_index=True)
    points = throughput_points(df)
    assert not points.empty
    from flashbench.history.plots import commit_order

    assert loaded_runs(points, commit_order(df)) == {("epyc", "EPYC"): [6]}
    fig = tflops_figure(points, df)
    ax = next(a for a in fig.axes if a.get_visible())
    dashed = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"
              and len(set(ln.get_xdata())) == 1]
    assert [ln.get_xdata()[0] for ln in dashed] == [2.5]  # the machine change
    texts = {t.get_text() for t in ax.texts}
    assert {"M1", "M2"} <= texts
    red = [p for p in ax.patches if p.get_facecolor()[0] > 0.8 and p.get_facecolor()[1] < 0.5]
    assert len(red) == 1
    assert len({ln.get_label() for ln in ax.get_lines() if ln.get_marker() == "o"}) >= 1


def test_tflops_plot_tells_a_variant_from_the_plain_case():
    """Failed before: in one panel the streamed reference with a window and without it were
    drawn alike (one colour, one marker, one line style), so a reader took the window's
    series for the plain kernel's. A variant's markers are hollow, named in the legend."""
    from flashbench.history.plots import tflops_figure
    from flashbench.history.summaries import throughput_points

    parts = []
    for variant, seconds in (("causal", 0.02), ("causal window=(256,0)", 0.005)):
        df = frame([seconds, seconds], "bench_variants.TimeVariantReference.time_variant",
                   {"shape": "1x1x1024x1024x64", "dtype": "fp64", "variant": variant,
                    "impl": "streamed"}, unit="seconds")
        parts.append(df.assign(commit=[f"{i:040d}" for i in range(2)], type="time",
                               date=pd.date_range("2026-01-01", periods=2, tz="UTC"),
                               file=[f"{variant}{i}" for i in range(2)]))
    df = pd.concat(parts, ignore_index=True)
    fig = tflops_figure(throughput_points(df), df)
    ax = next(a for a in fig.axes if a.get_visible())
    faces = sorted(str(ln.get_markerfacecolor()) for ln in ax.get_lines()
                   if ln.get_marker() not in (None, "None", ""))
    assert len(faces) == 2 and faces.count("white") == 1, faces
    legend_texts = {t.get_text() for leg in fig.legends for t in leg.get_texts()}
    assert "hollow marker: a window, softcap or sinks" in legend_texts


def test_an_infinite_accuracy_value_is_not_drawn():
    """Failed before: errors.png and rules.png kept rows with status ok whatever their value,
    so one Infinity (asv stores what a benchmark returned) stretched a log axis to inf."""
    import numpy as np

    from flashbench.history.plots import errors_figure

    base = {"kernel": "triton", "dtype": "bf16", "causal": False}
    df = frame([1e-3, float("inf"), 2e-3], "a.TrackAccuracy.track_o_max_abs", base)
    fig = errors_figure(df)
    drawn = [y for ax in fig.axes for line in ax.get_lines()
             for y in np.asarray(line.get_ydata(), float)]
    assert drawn and np.isfinite(drawn).all()
    assert all(np.isfinite(ax.get_ylim()).all() for ax in fig.axes)


def test_a_log_panel_spanning_under_two_powers_of_ten_gets_more_than_one_label():
    """Failed before: a panel from 0.0035 to 0.09 (over 30x, one power of ten inside) was
    labelled "0.01" alone."""
    from flashbench.history.figure import pyplot, tick_labels, visible_tick_labels

    fig, ax = pyplot().subplots()
    ax.plot([0, 1], [0.0035, 0.09])
    ax.set_yscale("log")
    ax.set_ylim(0.003, 0.095)
    tick_labels(ax)
    shown = visible_tick_labels(ax)
    pyplot().close(fig)
    assert len(shown) >= 3, shown


def test_the_answer_counts_worse_and_better_and_names_a_moved_yardstick():
    """A probe (2026-12-07): after the standard decode model's summation order changed on
    purpose, four kernels' baseline ratios read -42.5% among 12 rows past 1%, worse and
    better sorted together, nothing saying whether anything got worse; each kernel's own
    max error was the same at both commits."""
    base = {"kernel": "triton", "dtype": "fp32", "causal": False}
    df = pd.concat([
        frame([2e-7, 2e-7, 2e-7], "a.TrackAccuracy.track_o_max_abs", base),
        frame([0.8, 0.8, 0.46], "a.TrackAccuracy.track_o_baseline_ratio", base),
        frame([1e-3, 1e-3, 3e-3], "a.TrackAccuracy.track_o_max_abs", base | {"dtype": "bf16"}),
    ])
    text = "\n".join(answer(df, error_bands(df), steps(df), machine_labels(df)))
    assert "**1** with more error than ever before (or no number), 1 with less" in text, text
    assert "1 of them a ratio whose kernel's own max error stayed in its band" in text
    rows = [line for line in text.splitlines() if line.startswith("| M1")]
    assert "bf16" in rows[0] and "o_max_abs" in rows[0]  # the worse first
    assert "o_baseline_ratio" in rows[1] and "yardstick" in rows[1], rows
