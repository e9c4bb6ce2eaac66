"""Each commit's own suites beside the ones that ran (docs/review.md, "Coverage"): a
same-run review runs one set of suites on both sides (the working tree's: base's in the CI
recipe, head's where it is checked out); a grid point the other commit's own suites hold
or lack, or whose code (asv's version) differs, is said here."""

from __future__ import annotations

from pathlib import Path

from flashbench.infra.git import GitError, checked_out, git
from flashbench.review.ab import Point
from flashbench.review.gitops import dirty_files
from flashbench.review.model import Review, Row
from flashbench.review.options import select
from flashbench.review.worker_client import list_suites


def against_base_suites(review: Review, points: list[Point], root: Path, bench_dir: Path,
                        tree: Path, folder: Path, bench: str | None) -> list[Point] | None:
    """Base's own suites beside those that ran, where they differ (docs/review.md,
    "Coverage"): a point only base's hold is "coverage lost"; one whose code head changed
    (asv's version) is "not compared" unless it regressed or base could not run it.
    Returns base's own points (``points`` where they are the suites that ran; None where
    they could not be listed)."""
    rel = Path(bench_dir).resolve().relative_to(root.resolve())
    if not git("diff", "--name-only", review.base, "--", str(rel), cwd=root).split():
        return points  # the suites that ran are base's own
    try:
        own = select(list_suites(tree, tree / rel, folder / "base-suites.log"), bench)
    except (RuntimeError, ValueError) as exc:  # none selected, or they do not import
        review.notes.append(f"Base's own benchmarks/ were not listed ({str(exc)[:200]}): a "
                            "benchmark head renamed or removed would go unseen.")
        return None
    ran, rows = {(p.name, p.params): p for p in points}, review.rows
    # whose edit ran: head's where head is checked out and its benchmarks/ clean, else the
    # working tree's (uncommitted edits were blamed on head: a fresh-eyes probe)
    who = ("head" if checked_out(root) == review.head and not dirty_files(root, (str(rel),))
           else "the working tree's suites")
    for p in own:
        if (now := ran.get((p.name, p.params))) is None:
            rows.append(Row(p.kind, p.name, p.params, p.unit, "coverage lost", "coverage-lost",
                            "in base's own benchmarks/, not in the suites that ran (renamed or "
                            "removed in head): measured by neither side here", undecided=True))
        elif p.version and now.version and p.version != now.version:  # (docs/review.md)
            for r in [r for r in rows if (r.benchmark, r.params) == (p.name, p.params)]:
                r.detail += (f"; {who} changed this benchmark (asv version {p.version[:8]} "
                             f"-> {now.version[:8]}): read {r.verdict} under "
                             f"{'head' if who == 'head' else 'the working tree'}'s code, "
                             "not under base's own (compare by hand)")  # every row says so
                if r.reason == "coverage-gained" or not (r.regression or r.undecided or {
                        "not-measured", "still-failing", "failing-at-base"} & set(
                        r.reason.split(", "))):  # what the edit could buy is no verdict
                    r.verdict, r.reason, r.undecided = "not compared", "benchmark-changed", True
    return own


def against_head_suites(review: Review, points: list[Point], base_own: list[Point] | None,
                        root: Path, bench_dir: Path, tree: Path, folder: Path,
                        bench: str | None) -> None:
    """Head's own suites beside those that ran, where they differ (head not checked out, as
    in the CI recipe): a point base's suites hold and head's lack (renamed or removed in
    head) is **coverage lost**; a probe's renamed benchmark, measured under its old name on
    both sides, read OK, exit 0 (2026-12-07). Points only head's hold are named in a note."""
    rel = Path(bench_dir).resolve().relative_to(root.resolve())
    if not git("diff", "--name-only", review.head, "--", str(rel), cwd=root).split():
        return  # the suites that ran are head's own
    try:
        heads = {(p.name, p.params) for p in select(
            list_suites(tree, tree / rel, folder / "head-suites.log"), bench)}
    except ValueError:  # head's suites hold nothing --bench selects
        heads = set()
    except RuntimeError as exc:  # they do not import, or their listing timed out
        review.problems.append(f"Head's own benchmarks/ could not be listed "
                               f"({str(exc)[:200]}): a benchmark head renamed or removed "
                               "would go unseen.")
        return
    bases = {(p.name, p.params) for p in (points if base_own is None else base_own)}
    lost = {(p.name, p.params) for p in points} & bases - heads  # not the tree's own
    # base's suites changed since head branched: a point base added meanwhile reads lost too
    try:
        fork = git("merge-base", review.base, review.head, cwd=root)
        moved = bool(git("diff", "--name-only", fork, review.base, "--", str(rel),
                         cwd=root).split())
    except GitError:  # no common commit: nothing tells which side added it
        moved = True
    why = ("renamed or removed in head, or added to base after head branched: rebase head "
           "to tell" if moved else "renamed or removed in head: once merged, asv records it "
           "no more")
    for r in [r for r in review.rows if (r.benchmark, r.params) in lost]:
        r.detail = (f"{r.detail}; " if r.detail else "") + (
            f"in the suites that ran, not in head's own benchmarks/ ({why})")
        if not r.regression:
            r.verdict, r.reason, r.undecided = "coverage lost", "coverage-lost", True
    if new := sorted({name for name, params in heads - {(p.name, p.params) for p in points}}):
        review.notes.append(f"{len(new)} benchmark(s) only head's own benchmarks/ define "
                            f"(new or renamed in head) were not run: "
                            f"{', '.join(new[:3])}{' ...' if len(new) > 3 else ''}.")
