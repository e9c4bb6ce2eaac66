"""The site and a review's accuracy-band lookup on a team-sized history.

    python -m studies.history_scale [--dir DIR] [--machines 5] [--files 2000]
                                    [--benchmarks 60] [--what band,site]
                                    [--site ARGS ...] [--runs R]

Makes once, in DIR, a git repository of --files commits (git fast-import) and an asv
results folder of --machines machines x those commits (studies/history_corpus.py's
corpus; 60 benchmarks are 300 grid points a file: 3,000,000 rows by default), then
measures, each in a fresh process (wall seconds, peak RSS of the process tree):

- band: a stored review's accuracy-band lookup as flashbench.review.results.band_source
  does it (load_results through the history cache, this processor's ok rows of base's
  ancestors; the first call loads), then band(benchmark, params, version) for every
  accuracy point of the corpus; beside it the same values from one groupby of the
  frame's Categoricals by (benchmark, params, version), checked equal;
- site: ``python -m flashbench.site`` on that history (asv publish + local JS), once per
  ``--site`` mode (``--site '' --site '--last 200'``), modes interleaved ``--runs`` times.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

from studies.history_corpus import watched
from tools.asv_corpus import corpus_grids, make_corpus

BAND = """
import hashlib, itertools, json, sys, time, warnings
from pathlib import Path
warnings.simplefilter("ignore")
from flashbench.history import load_results
from flashbench.review import results as stored
from flashbench.infra.git import ancestors
from flashbench.review.model import Review
results, repo, base, machine, cpu, keys, how = sys.argv[1:8]
keys = json.loads(keys)
t0 = time.perf_counter()
if how == "today":
    review = Review(base, "f" * 40, machine, cpu, "stored results", 1.1, 0.05)
    band = stored.band_source(Path(results), Path(repo), review)
    first = band(*keys[0])
    t_first = time.perf_counter() - t0
    values = [first] + [band(*k) for k in keys[1:]]
else:  # one groupby of the label columns as they are (Categoricals): a lookup per point
    frame = stored.machine_rows(load_results(results, samples=False), machine, cpu)
    frame = frame[(frame["status"] == "ok")
                  & frame["commit"].isin(set(ancestors(base, repo)) - {"f" * 40})]
    groups = {k: [float(v) for v in g] for k, g in frame.groupby(
        ["benchmark", "params", "version"], observed=True, sort=False)["value"]}
    t_first = time.perf_counter() - t0
    values = [groups.get(tuple(k), []) for k in keys]
t_all = time.perf_counter() - t0
digest = hashlib.sha256(json.dumps(values).encode()).hexdigest()
print(json.dumps({"first_s": t_first, "all_s": t_all, "n": len(keys),
                  "values": sum(map(len, values)), "digest": digest}))
"""


def make_history(root: Path, machines: int, files: int, benchmarks: int) -> list[str]:
    """DIR/repo (``files`` commits) and DIR/results; the commits, oldest first."""
    repo = root / "repo"
    if not (repo / ".git").exists():
        repo.mkdir(parents=True)
        subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
        stream = []
        for f in range(files):
            text, msg = f"commit {f}\n", f"c{f}\n"
            stream.append(f"commit refs/heads/main\nmark :{f + 1}\n"
                          f"committer t <t@t> {1700000000 + 60 * f} +0000\n"
                          f"data {len(msg)}\n{msg}" + (f"from :{f}\n" if f else "") +
                          f"M 644 inline code.txt\ndata {len(text)}\n{text}\n")
        subprocess.run(["git", "fast-import", "--quiet"], cwd=repo, check=True,
                       input="".join(stream), text=True)
        subprocess.run(["git", "checkout", "-q", "main"], cwd=repo, check=True)
    commits = subprocess.run(["git", "rev-list", "--reverse", "main"], cwd=repo, check=True,
                             capture_output=True, text=True).stdout.split()
    if not (root / "results" / "benchmarks.json").exists():
        make_corpus(root / "results", files, benchmarks, machines=machines, commits=commits)
    return commits


def band_figures(root: Path, commits: list[str], benchmarks: int) -> None:
    meta: dict = {}
    grids = corpus_grids(benchmarks, meta)
    keys = []
    for name, params in grids.items():
        if "TrackAccuracy" in name:
            for combo in itertools.product(*params):
                label = ", ".join(f"{n}={v}" for n, v in
                                  zip(meta[name]["param_names"], combo, strict=True))
                keys.append([name, label, "v1"])
    args = [str(root / "results"), str(root / "repo"), commits[-1], "synthetic-machine-0",
            "Synthetic CPU 0", json.dumps(keys)]
    watched([sys.executable, "-c", BAND, *args, "proposed"])  # the cache, warm for both
    runs = {}
    for how in ("today", "proposed"):
        out, wall, peak = watched([sys.executable, "-c", BAND, *args, how])
        runs[how] = (json.loads(out), peak)
    assert runs["today"][0]["digest"] == runs["proposed"][0]["digest"], "values differ"
    for how, (r, peak) in runs.items():
        per = (r["all_s"] - r["first_s"]) / max(r["n"] - 1, 1)
        print(f"band lookup, {how:8}: load + first {r['first_s']:.2f} s, then "
              f"{r['n'] - 1} points x {per * 1000:.1f} ms = {r['all_s'] - r['first_s']:.2f} s;"
              f" total {r['all_s']:.2f} s, {r['values']} values, peak {peak:.0f} MiB")


def site_figures(root: Path, modes: list[str], runs: int) -> None:
    """``python -m flashbench.site <mode>`` for each mode, interleaved run by run, each a
    fresh process (niced by the caller); the median of each mode's runs."""
    conf = root / "asv.conf.json"
    conf.write_text(json.dumps({
        "version": 1, "project": "scale", "repo": str(root / "repo"), "branches": ["main"],
        "dvcs": "git", "environment_type": "virtualenv", "pythons": ["3.11"],
        "results_dir": str(root / "results"), "html_dir": str(root / "html")}))
    got: dict[str, list] = {m: [] for m in modes}
    for run in range(runs):
        for mode in modes:
            load = os.getloadavg()[0]
            _, wall, peak = watched([sys.executable, "-m", "flashbench.site", "--config",
                                     str(conf), *shlex.split(mode)], cwd=root)
            index = json.loads((root / "html" / "index.json").read_text())
            size = sum(p.stat().st_size for p in (root / "html").rglob("*")
                       if p.is_file()) / 2**20
            got[mode].append((wall, peak, size, len(index["revision_to_hash"]), load))
            print(f"run {run + 1}, site {mode or '(all commits)'}: {wall:.1f} s wall, peak "
                  f"{peak:.0f} MiB, {size:.0f} MiB written, {got[mode][-1][3]} commits, "
                  f"load average {load:.1f}", flush=True)
    base = statistics.median(r[0] for r in got[modes[0]])
    print("| `python -m flashbench.site` | commits | wall s | x first | peak MiB | MiB written |"
          "\n| --- | ---: | ---: | ---: | ---: | ---: |")
    for mode, rows in got.items():
        wall = statistics.median(r[0] for r in rows)
        print(f"| {mode or '(all commits)'} | {rows[0][3]} | {wall:.1f} | {wall / base:.2f} | "
              f"{statistics.median(r[1] for r in rows):.0f} | {rows[0][2]:.0f} |")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", required=True, help="where the history is made (kept)")
    p.add_argument("--machines", type=int, default=5)
    p.add_argument("--files", type=int, default=2000, help="commits, one file each machine")
    p.add_argument("--benchmarks", type=int, default=60)
    p.add_argument("--what", default="band,site")
    p.add_argument("--site", action="append", metavar="ARGS",
                   help="arguments of one site mode, e.g. '--last 200' (repeatable; "
                        "default: one mode, all commits)")
    p.add_argument("--runs", type=int, default=1, help="runs of each site mode, interleaved")
    args = p.parse_args(argv)
    root = Path(args.dir).resolve()
    commits = make_history(root, args.machines, args.files, args.benchmarks)
    print(f"history: {args.machines} machines x {len(commits)} commits x "
          f"{args.benchmarks} benchmarks in {root}")
    if "band" in args.what:
        band_figures(root, commits, args.benchmarks)
    if "site" in args.what:
        site_figures(root, args.site or [""], args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
