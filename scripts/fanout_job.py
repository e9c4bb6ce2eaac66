"""One fan-out job: asv for the new commits on this machine, its results pushed to one
results branch that every machine shares.

    python scripts/fanout_job.py [--machine NAME] [--rev HEAD] [--max-commits 10]
        [--results-branch asv-results] [--remote origin] [--shard I/N] [--run-id ID]
        [--retries 8]
        [--asv "python -m asv"] [-- ASV_RUN_ARGS...]
    python scripts/fanout_job.py --report-missing [--rev HEAD] [--max-commits 10] ...

Run in a clone of the repository (a CI job's checkout, a Slurm task's clone) on the
machine to measure, by .github/workflows/asv.yml and scripts/slurm_asv.sbatch alike:

1. registers this machine with asv (scripts/asv_machine.py: NAME, else the name
   flashbench derives from the hardware) and fetches the results branch;
2. the new commits: the last --max-commits first-parent commits of --rev without a
   results file of this machine on the results branch; with --shard I/N, every N-th
   of them from the I-th (a Slurm array splitting one machine kind's commits), of the
   commits new when the run began: results another shard of the same run (--run-id,
   default the Slurm array's or GitHub run's id) pushed meanwhile still count as new,
   so a late task's share does not shift;
3. ``asv run --machine NAME HASHFILE:<file> ASV_RUN_ARGS`` (results into
   results/NAME/, as asv.conf.json says); in an existing environment (``-E existing``,
   ``--python=same``: asv refuses a commit range there) one ``asv run --set-commit-hash
   C`` per commit, each in a worktree of C with C first on PYTHONPATH;
4. commits the files asv wrote (results/NAME/*, results/benchmarks.json) on top of
   the results branch's tip through a private index (the branch is never checked
   out) and pushes; a push rejected because another job pushed first is redone on
   the new tip after a pause (--retries times). A job only adds or replaces its own
   files, so machine folders never collide and two shards never undo each other.

--asv replaces the asv command (tests use a fake that writes results files);
--push-delay waits between the first commit and its push (tests use it to make two
jobs race). --report-missing (the publish step) measures nothing: it lists, for each
machine with results among the last --max-commits commits of --rev on the results
branch, the commits it has none for and those whose results hold a failed benchmark
(null: no job reruns a commit that has a file), and names the machines with none in
the window (retired, or failing since). Exit status: 0 pushed, nothing new or reported,
1 asv or git failed (what asv wrote is still pushed), 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import suppress
from pathlib import Path

from flashbench.infra.git import GitError, git  # installed in the job's environment

HERE = Path(__file__).resolve().parent
BOT = {"GIT_AUTHOR_NAME": "flashbench fan-out", "GIT_AUTHOR_EMAIL": "fanout@flashbench.invalid"}


class JobError(RuntimeError):
    """An asv step or the push failed; the message says which and why (git's own failures
    are flashbench.infra.git's GitError)."""


def say(text: str) -> None:
    print(f"fanout: {text}", flush=True)


def results_dir(repo: Path) -> Path:
    from asv.util import load_json  # asv's own reader (asv.conf.json has comments)

    try:
        conf = load_json(str(repo / "asv.conf.json"), js_comments=True)
    except Exception as exc:  # asv's UserError for a missing or broken file
        raise JobError(f"cannot read {repo / 'asv.conf.json'}: {exc}") from None
    return repo / conf.get("results_dir", "results")


def register(name: str | None) -> str:
    """This machine registered with asv; its name."""
    r = subprocess.run([sys.executable, str(HERE / "asv_machine.py"), *([name] if name else [])],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise JobError(f"asv_machine.py failed: {(r.stderr or r.stdout).strip()}")
    return r.stdout.strip().splitlines()[-1]


def fetch_tip(repo: Path, remote: str, branch: str) -> str | None:
    """The results branch's tip on ``remote``, fetched (None: no such branch yet)."""
    if not git("ls-remote", "--heads", remote, branch, cwd=repo):
        return None
    git("fetch", "--quiet", remote, f"refs/heads/{branch}", cwd=repo)
    return git("rev-parse", "FETCH_HEAD", cwd=repo)


def last_commits(repo: Path, rev: str, count: int) -> list[str]:
    """Oldest first: the last ``count`` first-parent commits of ``rev``."""
    commits = git("rev-list", "--first-parent", f"--max-count={count}", rev, cwd=repo).split()
    return commits[::-1]


def measured(repo: Path, tip: str | None, folder: str) -> set[str]:
    """The 8-digit commit prefixes of the results files in ``folder`` at ``tip``."""
    if tip is None:
        return set()
    names = git("ls-tree", "--name-only", tip, f"{folder}/", cwd=repo).splitlines()
    return {Path(n).name.split("-", 1)[0] for n in names if n.endswith(".json")}


RUN_TRAILER = "Fanout-Run:"  # the push's message: "Fanout-Run: ID shard I/N"


def run_id() -> str | None:
    """What the jobs of one run share: a Slurm array's job id, a GitHub Actions run's id
    (FLASHBENCH_RUN_ID first, to choose it)."""
    for name in ("FLASHBENCH_RUN_ID", "SLURM_ARRAY_JOB_ID", "GITHUB_RUN_ID"):
        if os.environ.get(name):
            return os.environ[name]
    return None


def run_results(repo: Path, tip: str | None, folder: str, run: str | None) -> set[str]:
    """The 8-digit commits whose results in ``folder`` the shards of run ``run`` pushed
    (found by their pushes' trailer): commits that were new when the run began."""
    if tip is None or run is None:
        return set()
    pushes = git("log", "--format=%H", "--fixed-strings", f"--grep={RUN_TRAILER} {run} shard ",
                 tip, "--", f"{folder}/", cwd=repo).split()
    found = set()
    for push in pushes:
        names = git("diff-tree", "--no-commit-id", "--name-only", "-r", "--root", push, "--",
                    f"{folder}/", cwd=repo).splitlines()
        found |= {Path(n).name.split("-", 1)[0] for n in names if n.endswith(".json")}
    return found


def new_commits(repo: Path, rev: str, count: int, tip: str | None, folder: str,
                shard: tuple[int, int], run: str | None = None) -> list[str]:
    """Oldest first: this shard's commits of ``rev`` without a results file in ``folder``
    at ``tip``. The shards split the commits new when their run began (what the run's own
    pushes added does not count): a task that starts after another shard of its run
    pushed keeps its share (else the split shifts: a commit measured twice, another never;
    seen on a real Slurm array under load), and a requeued task skips what it pushed."""
    have = measured(repo, tip, folder)
    began = have - (run_results(repo, tip, folder, run) if shard[1] > 1 else set())
    share = [c for c in last_commits(repo, rev, count) if c[:8] not in began][shard[0]::shard[1]]
    return [c for c in share if c[:8] not in have]


def failed_results(repo: Path, tip: str, folder: str, commits: list[str]) -> dict[str, list]:
    """{8-digit commit: the benchmarks whose result is null (asv: it failed)} of the
    results files in ``folder`` at ``tip`` for ``commits``: a file exists, so no job
    measures that commit again, and one transient failure (a GPU out of memory) left a
    hole no report named (a probe, 2026-12-07)."""
    wanted = {c[:8] for c in commits}
    out: dict[str, list] = {}
    for name in git("ls-tree", "--name-only", tip, f"{folder}/", cwd=repo).splitlines():
        commit = Path(name).name.split("-", 1)[0]
        if not name.endswith(".json") or commit not in wanted:
            continue
        try:
            data = json.loads(git("show", f"{tip}:{name}", cwd=repo))
            column = data["result_columns"].index("result")
            rows = data["results"].items()
        except (ValueError, KeyError, TypeError, AttributeError):
            continue  # not a results file (machine.json), or unreadable: history says so
        bad = [b for b, row in rows if isinstance(row, list) and len(row) > column and (
            row[column] is None or isinstance(row[column], list) and None in row[column])]
        if bad:
            out.setdefault(commit, []).extend(bad)
    return out


def report_missing(repo: Path, rev: str, count: int, tip: str | None, results: str) -> int:
    """Say, per machine with results, which commits of the window have none, which hold
    failed results, and which machines have none in the whole window; how many missing."""
    commits = last_commits(repo, rev, count)
    folders = [] if tip is None else git("ls-tree", "-d", "--name-only", tip, f"{results}/",
                                         cwd=repo).splitlines()
    total = 0
    silent = []
    for folder in folders:
        have = measured(repo, tip, folder)
        if not have & {c[:8] for c in commits}:
            silent.append(Path(folder).name)  # retired, or failing since: said, not counted
            continue
        lost = [c[:8] for c in commits if c[:8] not in have]
        total += len(lost)
        if lost:
            say(f"missing: {Path(folder).name}: {len(lost)} of the last {len(commits)} "
                f"commits of {rev} have no results: {' '.join(lost)}")
        for commit, bad in failed_results(repo, tip, folder, commits).items():
            say(f"failed: {Path(folder).name}: commit {commit}: {len(bad)} benchmark(s) "
                f"failed ({', '.join(sorted(bad)[:3])}{' ...' if len(bad) > 3 else ''}); "
                "its results file exists, so no job measures it again: remove the file "
                "from the results branch to have it rerun")
    if tip is None:
        say("missing: the results branch does not exist yet: every result")
        return len(commits)
    if silent:
        say(f"silent: {', '.join(silent)}: no results in the last {len(commits)} commits of "
            f"{rev} (a machine retired, or one failing on every commit since)")
    if not total:
        say(f"missing: none (every machine with results in the window has all the last "
            f"{len(commits)} commits of {rev})")
    return total


def existing_env(asv_args: list[str]) -> bool:
    """Whether ``asv run`` gets an existing environment (it then takes no commit range)."""
    for i, a in enumerate(asv_args):
        nxt = asv_args[i + 1] if i + 1 < len(asv_args) else ""
        if a in ("-E", "--environment") and nxt.startswith("existing"):
            return True
        if a.startswith(("-Eexisting", "--environment=existing", "--python=same")):
            return True
        if a == "--python" and nxt == "same":
            return True
    return False


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns)
            for p in folder.glob("*") if p.is_file()} if folder.is_dir() else {}


def stats(patterns: list[Path]) -> dict[Path, tuple[int, int]]:
    """Size and modification time of the files matching ``patterns`` (globs)."""
    return {p: (p.stat().st_size, p.stat().st_mtime_ns) for pat in patterns
            for p in pat.parent.glob(pat.name) if p.is_file()}


def push(repo: Path, files: list[str], remote: str, branch: str, message: str,
         retries: int, delay: float, hold: float) -> str | None:
    """Commit ``files`` (paths in the repo) on the results branch's tip and push,
    redone on the new tip when another job pushed first. The pushed commit, or None
    when the branch already holds these files as they are."""
    try:
        git("config", "user.email", cwd=repo)
        user = {}
    except GitError:  # no identity configured: the bot's
        user = {**BOT, "GIT_COMMITTER_NAME": BOT["GIT_AUTHOR_NAME"],
                "GIT_COMMITTER_EMAIL": BOT["GIT_AUTHOR_EMAIL"]}
    with tempfile.TemporaryDirectory() as tmp:
        index = {"GIT_INDEX_FILE": str(Path(tmp) / "index"), **user}
        for attempt in range(retries + 1):
            tip = fetch_tip(repo, remote, branch)
            git("read-tree", *([tip] if tip else ["--empty"]), cwd=repo, env=index)
            git(f"--work-tree={repo}", "add", "-f", "--", *files, cwd=repo, env=index)
            tree = git("write-tree", cwd=repo, env=index)
            if tip is not None and tree == git("rev-parse", f"{tip}^{{tree}}", cwd=repo):
                return None
            commit = git("commit-tree", tree, *(["-p", tip] if tip else []), "-m", message,
                         cwd=repo, env=index)
            if attempt == 0 and hold:
                time.sleep(hold)
            # (git's whole output, not GitError's last line, tells a rejection apart)
            r = subprocess.run(["git", "push", "--porcelain", remote,
                                f"{commit}:refs/heads/{branch}"], cwd=repo,
                               capture_output=True, text=True)
            if r.returncode == 0:
                return commit
            out = r.stdout + r.stderr
            if not any(w in out for w in ("rejected", "fetch first", "non-fast-forward",
                                          "cannot lock ref", "failed to update ref")):
                raise JobError(f"git push failed: {out.strip()}")
            pause = delay * min(2 ** attempt, 30) * random.uniform(0.5, 1.5)
            say(f"push rejected (another job pushed first); retry {attempt + 1} of "
                f"{retries} on the new tip in {pause:.1f} s")
            time.sleep(pause)
    raise JobError(f"push still rejected after {retries} retries")


def asv_range(repo: Path, machine: str, todo: list[str], args) -> int:
    """``asv run`` of ``todo`` as one hash file; its exit status."""
    hashes = repo / ".asv" / f"fanout-{machine}-{args.shard[0]}.hashes"
    hashes.parent.mkdir(parents=True, exist_ok=True)
    hashes.write_text("".join(f"{c}\n" for c in todo))
    cmd = [*shlex.split(args.asv), "run", "--machine", machine, f"HASHFILE:{hashes}",
           *args.asv_args]
    say("running " + " ".join(shlex.quote(c) for c in cmd))
    return subprocess.run(cmd, cwd=repo).returncode


def asv_each(repo: Path, results: Path, machine: str, todo: list[str], args) -> int:
    """``asv run --set-commit-hash C`` in an existing environment, per commit, in a
    worktree of C (its benchmarks, its package first on PYTHONPATH); what each run
    wrote is copied into ``results``. The last failing run's status, else 0."""
    tree = repo / ".asv" / f"fanout-{machine}-{args.shard[0]}.tree"
    git("worktree", "prune", cwd=repo)
    rc = 0
    try:
        for commit in todo:
            if (tree / ".git").exists():
                git("checkout", "--quiet", "--force", "--detach", commit, cwd=tree)
            else:
                git("worktree", "add", "--quiet", "--force", "--detach", str(tree), commit,
                    cwd=repo)
            out = results_dir(tree)
            written = [out / machine / "*", out / "benchmarks.json"]
            before = stats(written)
            cmd = [*shlex.split(args.asv), "run", "--machine", machine, "--set-commit-hash",
                   commit, *args.asv_args]
            say(f"{commit[:8]}: running " + " ".join(shlex.quote(c) for c in cmd))
            path = os.pathsep.join([str(tree), *filter(None, [os.environ.get("PYTHONPATH")])])
            rc = subprocess.run(cmd, cwd=tree, env={**os.environ, "PYTHONPATH": path}
                                ).returncode or rc
            for src, stat in stats(written).items():
                if before.get(src) != stat:
                    dst = results / src.relative_to(out)
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src, dst)
    finally:
        with suppress(GitError):
            git("worktree", "remove", "--force", str(tree), cwd=repo)
    return rc


def run(args) -> int:
    repo = Path(git("rev-parse", "--show-toplevel", cwd=Path.cwd()))
    results = results_dir(repo)
    rel_results = results.relative_to(repo).as_posix()
    if args.report_missing:
        tip = fetch_tip(repo, args.remote, args.results_branch)
        report_missing(repo, args.rev, args.max_commits, tip, rel_results)
        return 0
    machine = register(args.machine)
    folder = results / machine
    rel = folder.relative_to(repo).as_posix()
    tip = fetch_tip(repo, args.remote, args.results_branch)
    run_of = args.run_id or run_id()
    todo = new_commits(repo, args.rev, args.max_commits, tip, rel, args.shard, run_of)
    if not todo:
        say(f"{machine}: no new commit in the last {args.max_commits} of {args.rev}")
        return 0
    say(f"{machine}: {len(todo)} new commit(s): {' '.join(c[:8] for c in todo)}")
    before = snapshot(folder)
    bench_json = results / "benchmarks.json"
    bench_before = bench_json.read_bytes() if bench_json.exists() else None
    if existing_env(args.asv_args):
        rc = asv_each(repo, results, machine, todo, args)
    else:
        rc = asv_range(repo, machine, todo, args)
    after = snapshot(folder)
    files = [f"{rel}/{n}" for n in sorted(after) if before.get(n) != after[n]]
    if bench_json.exists() and (files or bench_json.read_bytes() != bench_before):
        files.append(bench_json.relative_to(repo).as_posix())
    if rc != 0:
        say(f"asv exited with status {rc}; pushing what it wrote ({len(files)} file(s))")
    if not files:
        say("asv wrote no results file: nothing to push")
        return 1 if rc else 0
    message = (f"results: {machine}: {len(todo)} commit(s) {todo[0][:8]}..{todo[-1][:8]}"
               + (f" (shard {args.shard[0]}/{args.shard[1]})" if args.shard[1] > 1 else ""))
    if run_of is not None and args.shard[1] > 1:
        message += f"\n\n{RUN_TRAILER} {run_of} shard {args.shard[0]}/{args.shard[1]}"
    pushed = push(repo, files, args.remote, args.results_branch, message, args.retries,
                  args.retry_delay, args.push_delay)
    say(f"pushed {pushed[:12]} to {args.results_branch} ({len(files)} file(s))" if pushed
        else f"{args.results_branch} already holds these results")
    return 1 if rc else 0


def shard(text: str) -> tuple[int, int]:
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shard must be I/N, got {text!r}") from None
    if not 0 <= i < n:
        raise argparse.ArgumentTypeError(f"--shard I/N needs 0 <= I < N, got {text!r}")
    return i, n


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--machine", help="asv machine name (default: derived from the hardware)")
    p.add_argument("--rev", default="HEAD", help="the commits to measure: first parents of")
    p.add_argument("--max-commits", type=int, default=10)
    p.add_argument("--results-branch", default="asv-results")
    p.add_argument("--remote", default="origin")
    p.add_argument("--shard", type=shard, default=(0, 1), help="I/N: this job's share")
    p.add_argument("--run-id", help="what the shards of one run share (default: "
                   "$FLASHBENCH_RUN_ID, $SLURM_ARRAY_JOB_ID or $GITHUB_RUN_ID)")
    p.add_argument("--retries", type=int, default=8)
    p.add_argument("--retry-delay", type=float, default=2.0, help="first pause, seconds")
    p.add_argument("--push-delay", type=float, default=0.0, help=argparse.SUPPRESS)
    p.add_argument("--report-missing", action="store_true",
                   help="measure nothing: list the commits each machine has no results for")
    p.add_argument("--asv", default=f"{shlex.quote(sys.executable)} -m asv")
    p.add_argument("asv_args", nargs="*", help="after --: more arguments for asv run")
    args = p.parse_args(argv)
    if args.max_commits < 1 or args.retries < 0:
        p.error("--max-commits must be >= 1 and --retries >= 0")
    try:
        return run(args)
    except (JobError, GitError) as exc:
        print(f"fanout: failed: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
