"""asv history across commits on a machine that cannot build environments (a GPU box).

    python -m tools.gpu.history --machine NAME [--out results] COMMIT... | A..B

Each commit is measured with its own flashbench: its ``flashbench/`` folder is taken
out of git (``git archive``) and put first on the benchmark processes' path
(``ASV_PYTHONPATH``), and ``asv run -E existing:<python> --set-commit-hash <commit>
--record-samples`` runs today's benchmarks/ against it (asv's model: today's suites,
the commit's code). Results go to a private folder beside ``--out`` and are moved in
with ``os.replace`` once a commit's run is complete: an interrupted run leaves nothing
of its commit in ``--out``. Compiled Triton kernels are shared through one
``TRITON_CACHE_DIR`` (``--triton-cache``): Triton keys a compilation on the kernel's
source, so commits whose kernels are unchanged load them instead of compiling. Details
and the cost of a commit: docs/gpu.md ("GPU history").
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from flashbench.infra.asv import last_words, read_config, run_asv_process  # noqa: E402
from flashbench.infra.git import GitError, git, resolve, toplevel  # noqa: E402
from flashbench.infra.machine import ASV_LAUNCH_ENV, check_machine_name, register  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

PARTIAL = ".gpu-history-"  # prefix of the private folders beside --out
DEFAULT_BENCH = "bench_gpu"
EXIT_USAGE, EXIT_FAILED, EXIT_INTERRUPTED = 2, 1, 130


class HistoryError(ValueError):
    """Bad input (exit status 2): the message names the argument."""


def _commit(rev: str, repo: Path) -> str:
    try:
        return resolve(rev, repo)
    except ValueError:
        raise HistoryError(f"COMMITS: {rev!r} is not a commit in {repo}") from None


def commits(specs: list[str], repo: Path) -> list[str]:
    """Full hashes, oldest first within a range ``A..B``, in the order given, each once."""
    if not specs:
        raise HistoryError("COMMITS: name at least one commit or a range A..B")
    out: list[str] = []
    for spec in specs:
        if ".." in spec:
            a, _, b = spec.partition("..")
            if not a or not b or b.startswith("."):
                raise HistoryError(f"COMMITS: range {spec!r} must be A..B")
            ca, cb = _commit(a, repo), _commit(b, repo)
            try:
                found = git("rev-list", "--reverse", "--topo-order", f"{ca}..{cb}",
                            cwd=repo).split()
            except GitError as exc:
                raise HistoryError(f"COMMITS: range {spec!r}: {exc}") from None
            if not found:
                raise HistoryError(f"COMMITS: range {spec!r} holds no commits (is {a} an "
                                   f"ancestor of {b}?)")
            out += found
        else:
            out.append(_commit(spec, repo))
    return list(dict.fromkeys(out))


def check_out(out: str) -> Path:
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise HistoryError(f"--out {out!r} is a file, not a results folder")
    return path


def remove_stale(parent: Path) -> list[Path]:
    """Private folders of runs that are gone (their process no longer exists)."""
    gone = []
    for folder in parent.glob(f"{PARTIAL}*"):
        m = re.match(rf"{re.escape(PARTIAL)}(\d+)-", folder.name)
        if not m or not folder.is_dir():
            continue
        try:
            os.kill(int(m[1]), 0)
            continue  # alive
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        shutil.rmtree(folder, ignore_errors=True)
        gone.append(folder)
    return gone


def extract(commit: str, dest: Path, repo: Path) -> Path:
    """The commit's flashbench/ under ``dest`` (``git archive``); HistoryError if it has none."""
    dest.mkdir(parents=True)
    paths = ["flashbench"]
    for harness in ("tools", "scripts"):  # its precompile, for --precompile (GPU harness:
        # tools/gpu/bench.py, or scripts/gpu_bench.py beside its sibling scripts before)
        if subprocess.run(["git", "cat-file", "-e", f"{commit}:{harness}"], cwd=repo,
                          capture_output=True).returncode == 0:
            paths.append(harness)
    r = subprocess.run(["git", "archive", "--format=tar", commit, *paths], cwd=repo,
                       capture_output=True)
    if r.returncode != 0:
        raise HistoryError(f"COMMITS: {commit[:8]} has no flashbench/ folder: "
                           f"{r.stderr.decode(errors='replace').strip().splitlines()[-1:]}")
    with tempfile.TemporaryFile() as tar_file:
        tar_file.write(r.stdout)
        tar_file.seek(0)
        with tarfile.open(fileobj=tar_file) as tar:
            tar.extractall(dest, filter="data")
    return dest


def asv_config(repo: Path, results: Path, work: Path, commit: str) -> Path:
    try:
        conf = read_config(repo / "asv.conf.json")
    except ValueError as exc:
        raise HistoryError(str(exc)) from None
    conf.update(repo=str(repo), benchmark_dir=str((repo / conf.get("benchmark_dir",
                                                                    "benchmarks")).resolve()),
                results_dir=str(results), html_dir=str(work / "html"), env_dir=str(work / "env"),
                branches=[commit])  # the checkout may lack main: asv needs a name it finds
    path = work / "asv.conf.json"
    path.write_text(json.dumps(conf, indent=1))
    return path


def benchmark_path(tree: Path, repo: Path) -> str:
    """ASV_PYTHONPATH: the commit's tree first; today's checkout never (its flashbench
    would shadow nothing, but would answer an import the commit lacks)."""
    keep = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
            if p and Path(p).resolve() != repo.resolve()]
    return os.pathsep.join([str(tree), *keep])


def summarise(path: Path) -> dict:
    """Counts of a results file: points with a number, skipped (NaN), failed (null)."""
    data = json.loads(path.read_text())
    cols = data["result_columns"]
    i = cols.index("result")
    counts = {"ok": 0, "skipped": 0, "failed": 0}
    for row in data["results"].values():
        values = row[i] if isinstance(row[i], list) else [row[i]]
        for v in values:
            key = "failed" if v is None else "skipped" if v != v else "ok"
            counts[key] += 1
    return {"commit": data["commit_hash"], **counts}


PRECOMPILE = """
import sys, time
try:
    from tools.gpu import bench as gpu_bench
except ImportError:
    import gpu_bench
if not hasattr(gpu_bench, "precompile"):
    print("this commit's gpu_bench has no precompile"); sys.exit(0)
t = time.time()
errors = gpu_bench.precompile(True, int(sys.argv[1]))
print(f"precompiled in {time.time() - t:.0f} s" + (f"; errors: {errors}" if errors else ""))
"""


def precompile(tree: Path, jobs: int, env: dict, timeout: float = 150) -> str:
    """The commit's own ``gpu_bench.precompile`` (its quick plan, which holds the kernels
    the GPU suites launch) in ``jobs`` processes into the shared Triton cache."""
    if not any((tree / p).exists() for p in ("tools/gpu/bench.py", "scripts/gpu_bench.py")):
        return "no tools/gpu/bench.py (or scripts/gpu_bench.py) at this commit"
    env = {**env, "PYTHONPATH": os.pathsep.join([str(tree / "scripts"), str(tree)])}
    try:
        r = subprocess.run([sys.executable, "-c", PRECOMPILE, str(jobs)], cwd=tree, env=env,
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"stopped after {timeout:.0f} s (the run compiles what is missing)"
    lines = (r.stdout + r.stderr).strip().splitlines()
    return lines[-1][:300] if lines else f"exit {r.returncode}"


def run_commit(commit: str, args, repo: Path, out: Path, say, fresh: bool = True) -> dict:
    """One commit: asv into a private folder, then the files moved into ``out``."""
    work = Path(tempfile.mkdtemp(prefix=f"{PARTIAL}{os.getpid()}-", dir=out.parent))
    try:
        tree = extract(commit, work / "src", repo)
        results = work / "results"
        conf = asv_config(repo, results, work, commit)
        env = {**os.environ, **ASV_LAUNCH_ENV, "ASV_PYTHONPATH": benchmark_path(tree, repo),
               "TRITON_CACHE_AUTOTUNING": "1"}
        if args.triton_cache:
            env["TRITON_CACHE_DIR"] = str(Path(args.triton_cache).resolve())
        cmd = [args.python, "-m", "asv", "run", "--config", str(conf),
               "-E", f"existing:{args.python}", "--set-commit-hash", commit,
               "--machine", args.machine, "--record-samples", "--launch-method",
               args.launch_method, "--show-stderr", *sum((["--bench", b] for b in args.bench), [])]
        if args.attribute:
            cmd += sum((["-a", a] for a in args.attribute), [])
        start = time.monotonic()
        if args.precompile and fresh:
            say(f"{commit[:8]} precompile ({args.precompile} processes): "
                f"{precompile(tree, args.precompile, env)}")
        r = run_asv_process(cmd, repo, env, echo=sys.stdout)  # progress, timed, in the log
        (work / "asv.log").write_text(r.stdout + r.stderr)
        written = sorted(results.glob(f"{args.machine}/{commit[:8]}-*.json"))
        if not written:
            raise RuntimeError(f"asv wrote no results for {commit[:8]} (exit {r.returncode}): "
                               f"{last_words(r.stdout + r.stderr)}")
        facts = summarise(written[-1])
        if facts["commit"] != commit:
            raise RuntimeError(f"asv recorded commit {facts['commit']} for {commit}")
        target = out / args.machine
        target.mkdir(parents=True, exist_ok=True)
        os.replace(results / args.machine / "machine.json", target / "machine.json")
        if (results / "benchmarks.json").exists():
            os.replace(results / "benchmarks.json", out / "benchmarks.json")
        for f in written:  # the results file last: complete when it appears
            os.replace(f, target / f.name)
        facts.update(file=str(target / written[-1].name), seconds=time.monotonic() - start)
        return facts
    finally:
        shutil.rmtree(work, ignore_errors=True)


def kernels_tree(commit: str, repo: Path) -> str:
    try:
        return git("rev-parse", f"{commit}:flashbench/kernels", cwd=repo)[:8]
    except GitError:
        return "none"


def parser() -> argparse.ArgumentParser:
    from flashbench.cli.common import Parser

    p = Parser(prog="python -m tools.gpu.history",
               description="Record asv results (samples kept) for each of COMMITS, each with "
               "its own flashbench, in an existing Python environment (no network needed).")
    p.add_argument("commits", nargs="*", metavar="COMMITS",
                   help="commits, or ranges A..B (oldest first)")
    p.add_argument("--machine", required=True, help="asv machine name (a name, not a path)")
    p.add_argument("--out", default="results", help="asv results folder (default: results)")
    p.add_argument("--python", default=sys.executable, help="the Python to measure in")
    p.add_argument("--bench", action="append", default=[],
                   help=f"benchmark regex, repeatable (default: {DEFAULT_BENCH})")
    p.add_argument("--launch-method", choices=("forkserver", "spawn"), default="forkserver",
                   help="asv's launch method (default forkserver: the suites are imported "
                   "once; safe with CUDA, docs/gpu.md)")
    p.add_argument("--triton-cache", help="TRITON_CACHE_DIR shared by every commit")
    p.add_argument("--precompile", type=int, default=0, metavar="N",
                   help="before a commit whose kernels were not seen yet, compile its "
                   "gpu_bench plan in N processes (a GPU machine; 0: no)")
    p.add_argument("--repo", default=str(ROOT), help="the git checkout whose commits and "
                   "benchmarks/ are used (default: this script's)")
    p.add_argument("-a", "--attribute", action="append", help="asv run -a (e.g. repeat=3)")
    return p


def main(argv=None) -> int:
    p = parser()
    args = p.parse_args(argv)
    args.bench = args.bench or [DEFAULT_BENCH]
    try:
        if not Path(args.repo).is_dir():
            raise HistoryError(f"--repo {args.repo!r} is not a folder")
        repo = toplevel(args.repo)
        check_machine_name(args.machine)
        out = check_out(args.out).resolve()
        todo = commits(args.commits, repo)
    except (HistoryError, ValueError) as exc:
        p.error(str(exc).replace("machine name", "--machine"))
    out.mkdir(parents=True, exist_ok=True)
    for gone in remove_stale(out.parent):
        print(f"gpu_history: removed {gone.name} (left by a run that is gone)")
    register(args.machine)
    print(f"gpu_history: {len(todo)} commits on {args.machine} -> {out} "
          f"(launch {args.launch_method}, bench {' '.join(args.bench)})", flush=True)
    failed, seen_kernels = [], {}
    for commit in todo:
        tree = kernels_tree(commit, repo)
        reuse = f" (kernels as {seen_kernels[tree][:8]}: compiled kernels reused)" \
            if tree in seen_kernels else ""
        seen_kernels.setdefault(tree, commit)
        try:
            f = run_commit(commit, args, repo, out, lambda m: print(m, flush=True),
                           fresh=not reuse)
        except KeyboardInterrupt:
            print(f"gpu_history: interrupted during {commit[:8]}: nothing of it written to "
                  f"{out}", file=sys.stderr)
            return EXIT_INTERRUPTED
        except (RuntimeError, HistoryError, OSError) as exc:
            print(f"gpu_history: {commit[:8]} FAILED: {exc}", file=sys.stderr, flush=True)
            failed.append(commit)
            continue
        print(f"{commit[:8]} kernels {tree}{reuse}: {f['ok']} measured, {f['skipped']} "
              f"skipped, {f['failed']} failed in {f['seconds']:.0f} s -> {f['file']}", flush=True)
    print(f"gpu_history: {len(todo) - len(failed)} of {len(todo)} commits recorded")
    return EXIT_FAILED if failed else 0


if __name__ == "__main__":
    import signal

    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM: clean up as ^C
    sys.exit(main())
