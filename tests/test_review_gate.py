"""The merge gate judges what the change did (issue 36, A): a failure base shares, a peer's
or a study's row and NaN on both sides never fail it; each is reported apart, once. The
rules on rows alone (no git, no asv), from the shapes of a real no-op ``--quick`` review."""

import math

import pytest

from flashbench.cli.review_markdown import render_markdown
from flashbench.history.suites import role
from flashbench.review.ab import Point
from flashbench.review.model import Review
from flashbench.review.rules import for_information, track_rows

ACC = "bench_accuracy.TrackAccuracy."
GRAD = "bench_accuracy.TrackGradAccuracy."
DEC = "bench_decode.TrackDecodeAccuracy."
MERGE = "bench_decode.TrackDecodeMerge.track_lse_baseline_ratio"
SHAPE = "dtype='bf16', causal=False, shape='1x2x1024x1024x64', dist='normal'"
# (benchmark, params, base, head): values as a no-op review of main measured them
NO_OP = [
    (ACC + "track_lse_band_ratio", f"kernel='flex', {SHAPE}", math.nan, math.nan),
    (ACC + "track_o_band_ratio", f"kernel='torch-naive', {SHAPE}", 1.7, 1.7),
    (GRAD + "track_dv_ratio", f"kernel='sdpa-flash', {SHAPE}", 3.596, 3.596),
    (MERGE, "dtype='bf16', partials='bf16', lse_dtype='bf16'", 9.005, 9.005),
    (DEC + "track_o_band_ratio", "kernel='triton', dtype='fp32', case='4x8/2x4x64:1000'",
     math.nan, math.nan),
    (DEC + "track_lse_band_ratio", "kernel='split_model', dtype='fp32', case='4x8'",
     math.nan, math.nan),
    (ACC + "track_o_baseline_ratio", f"kernel='triton', {SHAPE}", 2.4, 2.41),
    (ACC + "track_o_max_abs", f"kernel='triton', {SHAPE}", 3e-3, 3e-3),
]


def _rows(cases) -> list:
    points = [Point(name, 0, params, "track", "ratio") for name, params, _, _ in cases]
    ok = [{"status": "ok", "value": v} for v in (c[2] for c in cases)]
    head = [{"status": "ok", "value": v} for v in (c[3] for c in cases)]
    return for_information(track_rows(points, ok, head, 0.02, 1.1, lambda *a: []))


def _review(rows) -> Review:
    return Review("b" * 40, "h" * 40, "m", "cpu", "same-run A/B", 1.1, 0.02, rows=rows)


def test_a_head_that_changed_no_value_passes_and_says_what_stands_apart():
    """Failed before: "REGRESSION: 5 result(s) got worse (accuracy); exit 1" (torch's
    kernels, the merge study, NaN band ratios, a failure base shares)."""
    review = _review(_rows(NO_OP))
    assert review.status == 0 and not any(r.regression or r.undecided for r in review.rows)
    assert review.summary() == (  # 5: the 3 rows NaN in base and head compared nothing
        "OK: nothing regressed across 5 compared results; 1 result(s) already failing at "
        "base; 2 not comparable (NaN in base and head); 3 peer and 1 study row(s) for "
        "information; exit 0")
    by = {(r.benchmark, r.params[:20]): r for r in review.rows}
    own = by[(ACC + "track_o_baseline_ratio", f"kernel='triton', {SHAPE}"[:20])]
    assert (own.verdict, own.reason) == ("already failing at base",
                                         "rule-fails, failing-at-base")
    assert by[(MERGE, NO_OP[3][1][:20])].reason == "rule-fails, failing-at-base, study"
    text = render_markdown(review)
    assert "2 not comparable" in text and "(not comparable)" not in text  # said once
    listed = render_markdown(review, all_rows=True)  # a NaN pair's ratio read "nan"
    assert "| not comparable" in listed and "nan" not in listed.lower().replace("nan in", "")
    assert "| track_" not in text  # no table row: nothing against head
    assert "Reported apart, never against head" in text and "`peer`:" in text
    assert "TrackDecodeMerge.track_lse_baseline_ratio (already failing at base, study): 1" in text


def test_the_summary_counts_improvements():
    """A probe: a head 2x faster read "OK: nothing regressed across 6 compared results;
    exit 0", the CI line quoting the summary alone: the speed-up unsaid. A peer's better
    row is a peer's (counted once)."""
    better = [(ACC + "track_o_max_abs", f"kernel='triton', {SHAPE}", 3e-3, 1e-3),
              (ACC + "track_o_max_abs", f"kernel='torch-sdpa', {SHAPE}", 3e-3, 1e-3),
              (ACC + "track_o_rmse", f"kernel='triton', {SHAPE}", 1e-4, 1e-4)]
    review = _review(_rows(better))
    assert review.summary() == ("OK: nothing regressed across 3 compared results; improved: "
                                "1 better; 1 peer row(s) for information; exit 0")


def test_a_change_that_made_flashbenchs_own_kernel_worse_still_fails_the_gate():
    worse = [(ACC + "track_o_baseline_ratio", f"kernel='triton', {SHAPE}", 2.4, 2.6),
             (ACC + "track_o_max_abs", f"kernel='flash_model', {SHAPE}", 1e-3, math.nan),
             (ACC + "track_o_band_ratio", f"kernel='triton', {SHAPE}", math.nan, math.inf)]
    review = _review(_rows(worse))
    assert review.status == 1 and all(r.regression for r in review.rows)
    assert review.summary().startswith("REGRESSION: 3 result(s) got worse (accuracy)")


def test_a_peer_or_study_row_never_fails_the_gate_whatever_it_did():
    cases = [(ACC + "track_o_max_abs", f"kernel='torch-sdpa', {SHAPE}", 1e-3, 5e-3),
             (MERGE, "dtype='fp16', partials='fp16', lse_dtype='fp16'", 1.0, math.inf),
             ("bench_decode.TimeDecodeCPU.time_decode", "backend='torch-naive', case='x'",
              1.0, 1.0)]
    rows = _rows(cases[:2])
    from flashbench.review.rules import coverage_row

    rows += for_information([coverage_row("time", cases[2][0], cases[2][1], "seconds", "ok",
                                          "failed", "", "boom")])
    review = _review(rows)
    assert review.status == 0 and [r.reason for r in rows] == [
        "worse, peer", "not-finite, rule-fails, study", "failed, peer"]
    assert "2 peer and 1 study row(s) for information" in review.summary()
    neither = for_information([coverage_row("time", cases[2][0], cases[2][1], "seconds",
                                            "skipped", "skipped")])
    assert neither[0].reason == "not-measured"  # judged nothing: counted with its like


def test_peers_are_the_backends_whose_record_says_peer():
    """One source: history.suites.role agrees with every registered backend's ``peer``."""
    pytest.importorskip("torch")
    from flashbench.backends import BACKENDS
    from flashbench.backends.decode import DECODE_BACKENDS

    for registry in (BACKENDS, DECODE_BACKENDS):
        for name, backend in registry.items():
            for column in ("kernel", "backend"):
                got = role(ACC + "track_o_max_abs", f"{column}='{name}', dtype='bf16'")
                assert got == ("peer" if backend.peer else None), name
    for own in ("flash_model", "split_model", "reference-split8", "standard_model"):
        assert role(ACC + "track_o_max_abs", f"kernel='{own}'") is None
    assert role(MERGE, "dtype='bf16'") == "study"


def test_a_refused_base_makes_the_review_undecided_not_coverage_gained():
    """The worker refuses a side whose code replaced a shared function; its rows were
    "coverage gained" (exit 0: a review that timed nothing of base said "OK"). Now they are
    "not compared", undecided (exit 2), naming the refusal; a base that merely failed
    (a benchmark fixed by head) stays coverage gained."""
    from flashbench.infra.libwatch import REFUSED
    from flashbench.review.rules import coverage_row

    why = f"a call of its code {REFUSED}: numpy.dot (one side's code may not ...)"
    refused = coverage_row("time", "bench_x.TimeX.time_x", "n=1", "seconds", "failed", "ok",
                           base_reason=why)
    assert (refused.verdict, refused.reason) == ("not compared", "base-refused")
    assert refused.undecided and not refused.regression and REFUSED in refused.detail
    fixed = coverage_row("time", "bench_x.TimeX.time_x", "n=1", "seconds", "failed", "ok",
                         base_reason="ValueError: boom")
    assert (fixed.verdict, fixed.reason, fixed.undecided) == ("coverage gained",
                                                              "coverage-gained", False)


def test_a_base_that_failed_beside_head_but_runs_alone_is_undecided(tmp_path):
    """A probe's head killed base's requests (or made them raise) from its import in the
    worker: base's rows read "coverage gained", exit 0, and a 2x slower head merged. A
    timing base failed beside head is asked again of base alone, in a worker that never
    imported head: ok there, the row is undecided (exit 2); a base broken on its own (a
    benchmark head fixed) stays coverage gained."""
    from types import SimpleNamespace

    from flashbench.review.ab import Point
    from flashbench.review.rules import coverage_row
    from flashbench.review.run import _base_alone

    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "__init__.py").write_text("")
    (tmp_path / "benchmarks" / "suite.py").write_text(
        "def time_fine():\n    pass\n\n\ndef time_broken():\n    raise ValueError('boom')\n")
    points = [Point(f"suite.{n}", 0, "", "time", "seconds") for n in ("time_fine",
                                                                     "time_broken")]
    rows = [coverage_row("time", p.name, "", "seconds", "failed", "ok",
                         base_reason="worker died (the request's process killed by signal 9)")
            for p in points]
    _base_alone(rows, points, tmp_path, tmp_path / "benchmarks", tmp_path,
                SimpleNamespace(threads=None, process=None))
    fine, broken = rows
    assert (fine.verdict, fine.reason, fine.undecided) == (
        "not compared", "base-failed-beside-head", True), fine
    assert "base alone, in a worker that never imported head: ok" in fine.detail
    assert (broken.reason, broken.undecided) == ("coverage-gained", False)


@pytest.mark.parametrize("why", [
    "its import left 2 process(es) running in the review's worker (killed)",
    "its import started 1 thread(s) in the review's worker, which forks a process per "
    "request (a thread does not cross a fork)"])
def test_a_base_refused_for_what_its_import_left_is_undecided_even_when_head_failed(why):
    """A probe's head left burners at import in the worker: both sides refused (which one's
    import it was is not known), every row "already failing at base", exit 0. A base refused
    for what its import left in the worker is "not compared", undecided, whatever head did."""
    from flashbench.review.rules import coverage_row

    for head in ("failed", "ok"):
        row = coverage_row("time", "bench_x.TimeX.time_x", "n=1", "seconds", "failed", head,
                           base_reason=why, head_reason=why)
        assert (row.verdict, row.reason, row.undecided) == ("not compared", "base-refused",
                                                            True), row


def test_a_changed_benchmark_leaves_standing_failures_and_unmeasured_points_alone(tmp_path):
    """A row of a benchmark head changed is "not compared" unless it regressed; a fresh-eyes
    review found rows already failing at base, failing in both and measured by neither
    turned "not compared" too (the summary's standing failures lost, NOT COMPARED inflated
    by GPU-only points on a CPU). The row that could have been bought still is."""
    from unittest import mock

    from flashbench.review import ownsuites as run
    from flashbench.review.ab import Point
    from flashbench.review.model import Review
    from flashbench.review.rules import coverage_row, value_row

    name = "bench_accuracy.TrackAccuracy.track_o_baseline_ratio"
    rows = [value_row("accuracy", name, "flash_model fp16", "ratio", 2.5, 2.5, [], 0.02, 1.1),
            coverage_row("accuracy", name, "triton fp16", "ratio", "failed", "failed", "x", "x"),
            coverage_row("accuracy", name, "sdpa-flash fp16", "ratio", "skipped", "skipped"),
            value_row("accuracy", name, "flash_model bf16", "ratio", 0.5, 0.5, [], 0.02, 1.1),
            value_row("accuracy", name, "triton bf16", "ratio", 0.5, 1.5, [], 0.02, 1.1)]
    before = [(r.verdict, r.reason) for r in rows]
    review = Review("b", "h", "m", "cpu", "same-run A/B", 1.1, 0.02, rows=rows)
    points = [Point(name, i, r.params, "track", "ratio", version="new")
              for i, r in enumerate(rows)]
    with mock.patch.object(run, "git", return_value="benchmarks/bench_accuracy.py"), \
            mock.patch.object(run, "list_suites", return_value=None), \
            mock.patch.object(run, "select", return_value=[
                Point(p.name, p.index, p.params, p.type, p.unit, version="old") for p in points]):
        run.against_base_suites(review, points, tmp_path, tmp_path / "benchmarks", tmp_path,
                                tmp_path, None)
    after = [(r.verdict, r.reason) for r in review.rows]
    assert after[:3] == before[:3], after  # failing at base, in both, measured by neither
    assert after[3] == ("not compared", "benchmark-changed")  # "same": bought, maybe
    assert after[4] == before[4] and review.rows[4].regression  # a regression stands


def _yardstick(cases) -> dict:
    """The rows of ``cases`` after the yardstick rule, then the peers' (as review.run)."""
    from flashbench.review.rules import yardstick_moved

    points = [Point(name, 0, params, "track", "ratio") for name, params, _, _ in cases]
    ok = [{"status": "ok", "value": c[2]} for c in cases]
    head = [{"status": "ok", "value": c[3]} for c in cases]
    rows = for_information(yardstick_moved(track_rows(points, ok, head, 0.02, 1.1,
                                                      lambda *a: [])))
    return {(r.benchmark.rsplit(".", 1)[1], r.params): r for r in rows}


def test_a_ratio_that_moved_with_its_yardstick_alone_is_said_so():
    """A fresh-eyes probe (2026-12-07): a head that scaled the bf16 flash model's O (the
    band of the head-dim cases is measured from it) read "better" on Triton's band ratios,
    Triton's code and output unchanged. A ratio whose kernel's own max |error| is the same
    in base and head moved with its yardstick (a band ratio: with every other kernel's):
    said so, never "better". A yardstick that got looser (the ratio fell) lets more error
    pass: a regression of that model (red teams, 2026-12-08); tighter, not counted unless
    past its limit."""
    hd = "bench_headdims.TrackHeadDimAccuracy."
    tri, mine = f"kernel='triton', {SHAPE}", f"kernel='mine', {SHAPE}"
    fm = f"kernel='flash_model', {SHAPE}"
    rows = _yardstick([
        (hd + "track_o_max_abs", tri, 3e-3, 3e-3),  # Triton: the same output
        (hd + "track_o_band_ratio", tri, 0.70, 0.49),
        (hd + "track_o_max_abs", fm, 9e-3, 9e-3),  # the flash model's max the same too:
        (hd + "track_o_band_ratio", fm, 2.1, 1.47),  # the band moved for both
        (hd + "track_dv_band_ratio", tri, 0.5, 0.3),  # no dv max_abs to tell: kept
        (hd + "track_o_max_abs", mine, 3e-3, 2.5e-3),  # a kernel that did change
        (hd + "track_o_band_ratio", mine, 0.70, 0.49),
        (hd + "track_o_baseline_ratio", tri, 1.0, 2.5),  # tighter, past its rule: counted
        (hd + "track_lse_max_abs", tri, 1e-3, 1e-3),
        (hd + "track_lse_baseline_ratio", tri, 1.0, 1.5)])  # tighter, within its rule
    looser = rows["track_o_band_ratio", tri]
    assert (looser.verdict, looser.reason, looser.regression) == (
        "yardstick looser", "yardstick-looser", True), looser
    assert "its yardstick got looser" in looser.detail
    assert rows["track_dv_band_ratio", tri].verdict == "better"
    assert rows["track_o_band_ratio", mine].verdict == "better"
    failing = rows["track_o_baseline_ratio", tri]
    assert failing.regression and failing.verdict != "yardstick moved"
    assert "the yardstick moved" in failing.detail
    tighter = rows["track_lse_baseline_ratio", tri]  # worse than base, the same output
    assert (tighter.verdict, tighter.regression) == ("yardstick moved", False), tighter
    summary = _review(list(rows.values())).summary()
    assert "1 ratio(s) moved with their yardstick alone" in summary
    assert "ratio(s) fell with their yardstick, which got looser" in summary
    assert summary.startswith("REGRESSION: 1 yardstick(s) got looser and 1 result(s) "
                              "failed in head") or summary.startswith(
        "REGRESSION: 1 result(s) got worse and 1 yardstick(s) got looser"), summary


def test_a_band_ratio_that_moved_alone_is_the_kernels_own_change():
    """Red teams (2026-12-08): a head that moved the bf16 flash model's LSE everywhere but at
    its largest error (1.8x its rounding error) read band ratio 0.50 -> 0.91 "yardstick
    moved", OK, exit 0: its max |error| was the same, but the band (the shipped table) had
    not moved; and two kernels made worse alike (flash_model and Triton, softcap 30) read the
    same while torch-naive's ratio there stayed put. A band's move is every kernel's."""
    fm, naive = f"kernel='flash_model', {SHAPE}", f"kernel='torch-naive', {SHAPE}"
    tri = f"kernel='triton', {SHAPE}"
    rows = _yardstick([
        (ACC + "track_lse_max_abs", fm, 1.808e-3, 1.808e-3),
        (ACC + "track_lse_band_ratio", fm, 0.4966, 0.9111),
        (ACC + "track_lse_max_abs", naive, 0.02, 0.02),
        (ACC + "track_lse_band_ratio", naive, 3.0, 3.0),  # the band: unmoved
        (ACC + "track_o_max_abs", fm, 1e-3, 1e-3),  # two made worse alike,
        (ACC + "track_o_band_ratio", fm, 0.71, 0.89),
        (ACC + "track_o_max_abs", tri, 1e-3, 1e-3),
        (ACC + "track_o_band_ratio", tri, 0.71, 0.89),
        (ACC + "track_o_max_abs", naive, 0.01, 0.01),  # a third unmoved
        (ACC + "track_o_band_ratio", naive, 12.6, 12.6)])
    for key in (("track_lse_band_ratio", fm), ("track_o_band_ratio", fm),
                ("track_o_band_ratio", tri)):
        row = rows[key]
        assert row.verdict == "worse" and row.regression, row
        assert "not every other kernel's band ratio here moved" in row.detail, row.detail
        assert "the yardstick moved" not in row.detail
    assert "3 result(s) got worse" in _review(list(rows.values())).summary()


def test_a_variants_standard_made_worse_is_a_regression_of_the_yardstick():
    """A red team (2026-12-08): the variants' fp32 standard model rounded through fp16 (no
    standard track covers the variants) read every fp32 baseline ratio "yardstick moved"
    (0.99 -> 0.008), OK, exit 0, and the 2x rule then passed kernels ~1,000x worse."""
    var = "bench_variants.TrackVariantAccuracy."
    params = "kernel='triton', dtype='fp32', variant='softcap=30', shape='1x2x1024x1024x64'"
    rows = _yardstick([(var + "track_o_max_abs", params, 5e-7, 5e-7),
                       (var + "track_o_baseline_ratio", params, 0.7737, 0.0065)])
    row = rows["track_o_baseline_ratio", params]
    assert (row.verdict, row.regression) == ("yardstick looser", True), row
    summary = _review(list(rows.values())).summary()
    assert summary.startswith("REGRESSION: 1 yardstick(s) got looser (accuracy)"), summary
    assert "got worse" not in summary  # its ratio fell (a fresh-eyes review)


def test_a_ratio_gone_nan_gets_no_yardstick_words():
    """A head's NaN ratio with the kernel's max unchanged stays its rule's (not finite), and
    the detail no longer says "the yardstick moved, not the kernel" (a fresh-eyes review)."""
    var = "bench_variants.TrackVariantAccuracy."
    params = "kernel='triton', dtype='fp32', variant='sinks', shape='1x2x1024x1024x64'"
    rows = _yardstick([(var + "track_o_max_abs", params, 5e-7, 5e-7),
                       (var + "track_o_baseline_ratio", params, 0.7, math.nan)])
    row = rows["track_o_baseline_ratio", params]
    assert row.regression and "yardstick" not in row.detail, row
