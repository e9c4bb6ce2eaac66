"""How often does ``flashbench review`` catch a slowdown, and how often does it cry wolf?

In a throw-away clone of this repository's committed HEAD, the script makes commits
on top of it and reviews each one several times against it (same-run A/B, the
default review), then prints one table:

- a no-op commit (README only): any "slower" verdict is a false alarm;
- one commit per size (default 1.1, 1.2, 1.3, 1.5): the streamed reference's loop
  (``stream_attention`` in flashbench/reference/streaming.py) spins, after its blocks, for a
  fixed multiple of the time the blocks took. The multiple is calibrated so that the
  chosen timing, ``online_attention(q, k, v, block=64)`` at 1x1x4096x4096x64 (asv's
  TimeStreamBlock at block=64), grows by ``size``: a probe commit that doubles the loop
  is timed against base (alternating fresh processes, fastest of 3 calls each), which
  gives the loop's share of that call. Every timing whose call runs the loop (the
  affected set, ``--affected``: TimeStreamBlock, streamed TimeAttention and
  TimeVariantReference, TimeModels' flash_model) grows in proportion to its own loop
  share; the others are untouched.

Per size: reviews; detected (reviews with "slower" on every affected timing);
false alarms (reviews with "slower" on an untouched timing, or on any timing of the
no-op commit); ambiguous share (rows "ambiguous" / all timing rows); the measured
size (the reviews' median head/base ratio of the chosen timing where it was reviewed,
else of all affected rows); review wall time (median and max, seconds, the whole
``flashbench review`` process). The lines after the table say
whether the targets of the review-power issue are met.

    python -m studies.review_power                                 # the full study
    python -m studies.review_power --reviews 2 --sizes 1.3 \\
        --bench "TimeAttention.*1024x1024x64" --budget 60          # a small look
    python -m studies.review_power --summarize DIR                 # the table of --save DIR
    python -m studies.review_power --processes request one ...     # both timing processes

Run it on a quiet machine: the figures are the machine's as much as the review's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from flashbench.infra.git import git  # (GitError where git fails)

ROOT = Path(__file__).resolve().parents[1]
TIMINGS = r"\.time_"  # every time_ benchmark (the timing suites)
AFFECTED = (r"TimeStreamBlock|TimeAttention.*impl='streamed'|TimeModels.*model='flash_model'"
            r"|TimeVariantReference.*impl='streamed'")  # every suite whose call runs the loop
CHOSEN = r"TimeStreamBlock.*block=64\)"  # the chosen timing's row, as name(params)
PROBE = """
import time
import numpy as np
from flashbench.reference import online_attention
rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((1, 1, 4096, 64)) for _ in range(3))
online_attention(q, k, v, block=64)  # warm-up
times = []
for _ in range(3):
    t0 = time.perf_counter()
    online_attention(q, k, v, block=64)
    times.append(time.perf_counter() - t0)
print(min(times))
"""
LOOP = "    for start, stop, (r0, r1) in key_blocks(variant, nq, nk, block):\n"
SPIN = '''    _spent = _review_power_clock() - _review_power_t0
    _until = _review_power_clock() + {extra!r} * _spent  # review_power.py: size {size}
    while _review_power_clock() < _until:
        pass
'''
GIT_ENV = {"GIT_AUTHOR_NAME": "review-power", "GIT_AUTHOR_EMAIL": "power@flashbench",
           "GIT_COMMITTER_NAME": "review-power", "GIT_COMMITTER_EMAIL": "power@flashbench"}


def slowed(source: str, size: float) -> str:
    """streaming.py whose stream_attention spins ``size - 1`` times its loop's time."""
    start = source.index("def stream_attention(")
    loop = source.index(LOOP, start)
    ret = source.index("    return ", loop)
    extra = round(size - 1.0, 6)  # ``size``: the loop's own slowdown
    return (source[:loop]
            + "    from time import perf_counter as _review_power_clock\n"
            + "    _review_power_t0 = _review_power_clock()\n"
            + source[loop:ret] + SPIN.format(extra=extra, size=size) + source[ret:])


def _commit(repo: Path, base: str, label: str, path: Path, text: str) -> str:
    git("checkout", "-q", "--detach", base, cwd=repo, env=GIT_ENV)
    path.write_text(text)
    git("commit", "-qam", f"review_power.py: {label}", cwd=repo, env=GIT_ENV)
    return git("rev-parse", "HEAD", cwd=repo, env=GIT_ENV)


def _time_call(tree: Path, threads: int | None) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    if threads:
        env.update({v: str(threads) for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                              "MKL_NUM_THREADS")})
    r = subprocess.run([sys.executable, "-c", PROBE], cwd=tree, env=env, capture_output=True,
                       text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"timing the chosen call failed: {r.stderr.strip()[-300:]}")
    return float(r.stdout.split()[-1])


def loop_share(repo: Path, base: str, probe: str, threads: int | None, pairs: int = 3
               ) -> tuple[float, float]:
    """(share of the chosen call spent in the loop, probe/base ratio): the probe commit
    doubles the loop, so its ratio to base is 1 + share."""
    trees = {}
    try:
        for label, commit in (("base", base), ("probe", probe)):
            trees[label] = repo.parent / f"tree-{label}"
            git("worktree", "add", "-q", "--detach", str(trees[label]), commit, cwd=repo,
                env=GIT_ENV)
        ratios = []
        for i in range(pairs):  # alternate which side runs first
            order = ("base", "probe") if i % 2 == 0 else ("probe", "base")
            t = {label: _time_call(trees[label], threads) for label in order}
            ratios.append(t["probe"] / t["base"])
    finally:
        for tree in trees.values():
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=repo,
                           capture_output=True)
    ratio = statistics.median(ratios)
    return min(max(ratio - 1.0, 0.2), 1.0), ratio


def make_commits(repo: Path, sizes: list[float], threads: int | None) -> tuple[dict, str]:
    """({label: commit}, calibration note): base, no-op and one commit per size, each on
    top of base."""
    base = git("rev-parse", "HEAD", cwd=repo, env=GIT_ENV)
    commits = {"base": base}
    streaming = repo / "flashbench" / "reference" / "streaming.py"
    original = streaming.read_text()
    if LOOP not in original:
        raise RuntimeError(f"{streaming} has no stream_attention loop to slow")
    readme = repo / "README.md"
    commits["no-op"] = _commit(repo, base, "no-op", readme, readme.read_text()
                               + "\n<!-- review_power.py: no-op -->\n")
    probe = _commit(repo, base, "probe (loop doubled)", streaming, slowed(original, 2.0))
    share, ratio = loop_share(repo, base, probe, threads)
    note = (f"calibration: doubling the loop made the chosen call {ratio:.3f}x slower "
            f"(median of 3 alternating fresh-process pairs, fastest of 3 calls each): loop "
            f"share {share:.2f}, so size s spins (s - 1) / {share:.2f} of the loop's time")
    for size in sizes:
        commits[f"{size:g}x"] = _commit(repo, base, f"{size:g}x", streaming,
                                        slowed(original, 1.0 + (size - 1.0) / share))
    git("checkout", "-q", "--detach", base, cwd=repo, env=GIT_ENV)
    return commits, note


def review(repo: Path, home: Path, base: str, head: str, args, process: str | None = None
           ) -> tuple[dict, float]:
    cmd = [sys.executable, "-m", "flashbench.cli", "review", base, head, "--json", "--bench",
           args.bench]
    if args.budget:
        cmd += ["--budget", str(args.budget)]
    if args.quick:
        cmd.append("--quick")
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    if args.jobs:
        cmd += ["--jobs", str(args.jobs)]
    t0 = time.monotonic()
    env = {**os.environ, "HOME": str(home)}
    if process:  # the worker's timing process (flashbench/infra/pointfork.py)
        env["FLASHBENCH_REVIEW_PROCESS"] = process
    r = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, env=env)
    seconds = time.monotonic() - t0
    if r.returncode not in (0, 1, 2) or not r.stdout.strip():
        raise RuntimeError(f"review exited {r.returncode}: {r.stderr.strip()[-500:]}")
    return json.loads(r.stdout), seconds


def score(label: str, docs: list[tuple[dict, float]], affected, chosen) -> dict:
    rows = [[x for x in doc["rows"] if x["kind"] == "time"] for doc, _ in docs]
    noop = label.split()[0] == "no-op"
    hit = [x for x in sum(rows, []) if affected(x)]

    def detected(rs):
        mine = [x for x in rs if affected(x)]
        return bool(mine) and all(x["verdict"] == "slower" for x in mine)

    def false_alarm(rs):
        return any(x["verdict"] == "slower" and (noop or not affected(x)) for x in rs)

    compared = [[x for x in rs if x["verdict"] != "not compared"] for rs in rows]
    total = sum(len(rs) for rs in compared)  # GPU timings on a CPU machine: not compared
    times = [s for _, s in docs]
    picked = [x for x in hit if chosen(x)] or hit
    ratios = [x["ratio"] for x in picked if x["ratio"] is not None]
    return {"size": label, "reviews": len(docs),
            "detected": None if noop else sum(detected(rs) for rs in rows),
            "false_alarms": sum(false_alarm(rs) for rs in rows),
            "ambiguous": sum(x["verdict"] == "ambiguous" for rs in compared for x in rs)
            / max(total, 1),
            "rows": total // max(len(docs), 1),
            "measured": statistics.median(ratios) if ratios and not noop else None,
            "median_s": statistics.median(times), "max_s": max(times)}


def summarize(folder: Path, affected, chosen) -> list[dict]:
    """Scores of the reviews saved in ``folder`` by --save (an interrupted study too); a
    file that is not a saved review is reported and skipped."""
    import re

    docs: dict[str, list] = {}
    for path in sorted(folder.glob("*.json")):
        m = re.fullmatch(r"(no-op|[0-9.]+x)(?:@(request|one))?-([0-9]+)\.json", path.name)
        if not m:
            continue
        label = m[1] + (f" @{m[2]}" if m[2] else "")
        try:
            doc = json.loads(path.read_text())
            rows = doc["rows"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"review_power: skipped {path}: not a saved review ({exc})", file=sys.stderr)
            continue
        if not isinstance(rows, list):
            print(f"review_power: skipped {path}: no rows", file=sys.stderr)
            continue
        docs.setdefault(label, []).append((doc, float(doc.get("power_wall_s")
                                                      or doc.get("seconds") or 0.0)))
    order = sorted(docs, key=lambda label: (not label.startswith("no-op"), label))
    return [score(label, docs[label], affected, chosen) for label in order]


def table(results: list[dict]) -> str:
    head = ("| size | reviews | detected (slower on every affected timing) | false alarms | "
            "ambiguous rows (of compared) | timing rows compared per review | "
            "measured head/base (median, affected) "
            "| review wall time, median / max (s) |")
    lines = [head, "|" + "---|" * 8]
    for r in results:
        detected = "-" if r["detected"] is None else f"{r['detected']}/{r['reviews']}"
        measured = "-" if r["measured"] is None else f"{r['measured']:.3f}"
        lines.append(f"| {r['size']} | {r['reviews']} | {detected} | "
                     f"{r['false_alarms']}/{r['reviews']} | {r['ambiguous']:.0%} | {r['rows']} | "
                     f"{measured} | {r['median_s']:.0f} / {r['max_s']:.0f} |")
    return "\n".join(lines)


def targets(results: list[dict], args) -> list[str]:
    out = []
    for r in results:
        label = r["size"]
        if label.split()[0] == "no-op":
            out.append(f"{label}: {r['false_alarms']}/{r['reviews']} reviews with a 'slower' "
                       "verdict (target: none in 10 of 10)")
            continue
        size = float(label.split()[0].rstrip("x"))
        if size >= 1.3:
            out.append(f"{label}: detected in {r['detected']}/{r['reviews']}, untouched timings "
                       f"called slower in {r['false_alarms']} (target: every review, none)")
        elif size >= 1.2:
            out.append(f"{label}: detected in {r['detected']}/{r['reviews']} (target: >= 9 of 10)")
    worst = max((r["ambiguous"] for r in results), default=0.0)
    out.append(f"ambiguous rows: at most {worst:.0%} per size (target: <= 10%)")
    slowest = max((r["max_s"] for r in results), default=0.0)
    limit = 120 if args.quick else 300
    out.append(f"slowest review: {slowest:.0f} s ({'--quick ' if args.quick else ''}target: "
               f"<= {limit} s)")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=float, nargs="+", default=[1.1, 1.2, 1.3, 1.5],
                   help="slowdowns of the streamed loop (default 1.1 1.2 1.3 1.5)")
    p.add_argument("--reviews", type=int, default=10, help="reviews per commit (default 10)")
    p.add_argument("--no-noop", action="store_true", help="skip the no-op commit")
    p.add_argument("--bench", default=TIMINGS, help=f"benchmarks to review (default {TIMINGS})")
    p.add_argument("--affected", default=AFFECTED,
                   help="regex on 'benchmark(params)' naming the timings the loop slows")
    p.add_argument("--budget", type=float, help="review --budget (default: review's)")
    p.add_argument("--quick", action="store_true", help="review --quick")
    p.add_argument("--threads", type=int, help="review --threads")
    p.add_argument("--jobs", type=int, help="review --jobs (timing workers at once)")
    p.add_argument("--workdir", help="where to clone (default: a temporary folder, removed)")
    p.add_argument("--processes", nargs="+", choices=["request", "one"],
                   help="the worker's timing processes, each review of each size run under "
                        "each in turn (FLASHBENCH_REVIEW_PROCESS; default: the machine's)")
    p.add_argument("--save", help="a folder to write each review's JSON to "
                                  "(<size>[@<process>]-<i>.json)")
    p.add_argument("--summarize", metavar="DIR",
                   help="print the table of the reviews saved in DIR (--save) and stop")
    args = p.parse_args(argv)
    if args.reviews < 1 or any(not 1.0 < s < 100 for s in args.sizes):
        p.error("--reviews must be >= 1 and every size in (1, 100)")
    import re

    pattern = re.compile(args.affected)

    def affected(row) -> bool:
        return bool(pattern.search(f"{row['benchmark']}({row['params']})"))

    def chosen(row) -> bool:
        return bool(re.search(CHOSEN, f"{row['benchmark']}({row['params']})"))

    if args.summarize:
        results = summarize(Path(args.summarize), affected, chosen)
        if not results:
            print(f"review_power: no saved reviews (<size>-<i>.json) in {args.summarize}",
                  file=sys.stderr)
            return 2
        return report(f"{sum(r['reviews'] for r in results)} saved reviews in "
                      f"{args.summarize}; affected: {args.affected!r}", results, args)

    with tempfile.TemporaryDirectory(prefix="review-power-", dir=args.workdir) as tmp:
        repo, home = Path(tmp) / "repo", Path(tmp) / "home"
        home.mkdir()
        subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True)
        commits, note = make_commits(repo, args.sizes, args.threads)
        print(note, file=sys.stderr, flush=True)
        sizes = ([] if args.no_noop else ["no-op"]) + [f"{s:g}x" for s in args.sizes]
        runs = [(size, mode) for size in sizes for mode in args.processes or [None]]
        name = {run: run[0] + (f" @{run[1]}" if run[1] else "") for run in runs}
        docs = {run: [] for run in runs}
        for i in range(args.reviews):  # sizes and processes interleaved: drift hits all
            for size, mode in runs:
                doc, seconds = review(repo, home, commits["base"], commits[size], args, mode)
                docs[size, mode].append((doc, seconds))
                if args.save:
                    out = Path(args.save)
                    out.mkdir(parents=True, exist_ok=True)
                    (out / f"{size}{f'@{mode}' if mode else ''}-{i + 1}.json").write_text(
                        json.dumps({**doc, "power_wall_s": seconds}, indent=1))
                slower = sum(x["verdict"] == "slower" for x in doc["rows"])
                print(f"[{name[size, mode]} {i + 1}/{args.reviews}] exit {doc['status']}, "
                      f"{slower} slower, {seconds:.0f} s", file=sys.stderr, flush=True)
        results = [score(name[run], docs[run], affected, chosen) for run in runs]
    return report(f"same-run A/B reviews of commits on {commits['base'][:8]}, --bench "
                  f"{args.bench!r}{f', --budget {args.budget:g}' if args.budget else ''}"
                  f"{', --quick' if args.quick else ''}"
                  f"{f', --threads {args.threads}' if args.threads else ''}"
                  f"{f', --jobs {args.jobs}' if args.jobs else ''}; "
                  f"affected: {args.affected!r}; {note}", results, args)


def report(what: str, results: list[dict], args) -> int:
    print(f"flashbench review power: {what}.\n")
    print(table(results))
    print()
    for line in targets(results, args):
        print("- " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
