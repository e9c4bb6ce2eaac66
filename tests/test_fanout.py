"""scripts/fanout_job.py end to end: jobs in throw-away clones of a repository push to a
local bare "remote", two at once; no result is lost or mixed, a rejected push is redone
on the new tip, a second run measures only the new commit, shards split the commits.
Also: the workflow and the Slurm script lint clean (where the linters are installed)."""

import os
import shutil
import subprocess
import sys
import tarfile
import warnings
from io import BytesIO
from pathlib import Path

import pytest
from fanout_fake_asv import BENCH, value

from flashbench.history import load_results

ROOT = Path(__file__).resolve().parents[1]
JOB = ROOT / "scripts" / "fanout_job.py"
FAKE = ROOT / "tests" / "fanout_fake_asv.py"
BRANCH = "asv-results"


def sh(*args, cwd, **kw) -> str:
    return subprocess.run(args, cwd=cwd, check=True, capture_output=True, text=True,
                          **kw).stdout.strip()


@pytest.fixture
def upstream(tmp_path):
    """A project with three commits pushed to a bare remote."""
    remote = tmp_path / "remote.git"
    sh("git", "init", "-q", "--bare", "-b", "main", str(remote), cwd=tmp_path)
    work = tmp_path / "upstream"
    work.mkdir()
    sh("git", "init", "-q", "-b", "main", cwd=work)
    (work / "asv.conf.json").write_text('{\n  // asv configuration\n  "version": 1,\n'
                                        '  "results_dir": "results"\n}\n')
    for i in range(3):
        (work / "code.txt").write_text(f"version {i}\n")
        sh("git", "add", ".", cwd=work)
        sh("git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", f"c{i}",
           cwd=work)
    sh("git", "push", "-q", str(remote), "main", cwd=work)
    return remote, work


def clone(remote: Path, where: Path) -> Path:
    sh("git", "clone", "-q", str(remote), str(where), cwd=remote.parent)
    return where


def env(tmp_path) -> dict:
    home = tmp_path / "home"  # asv_machine.py registers into $HOME/.asv-machine.json
    home.mkdir(exist_ok=True)
    return {**os.environ, "HOME": str(home), "FAKE_ASV_LOG": str(tmp_path / "asv.log"),
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
            "GIT_CONFIG_GLOBAL": os.devnull}


def start(repo: Path, machine: str, tmp_path, *extra) -> subprocess.Popen:
    cmd = [sys.executable, str(JOB), "--machine", machine, "--asv", f"{sys.executable} {FAKE}",
           "--retry-delay", "0.2", *extra]
    return subprocess.Popen(cmd, cwd=repo, env=env(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def finish(*jobs) -> list[str]:
    outs = []
    for job in jobs:
        out, _ = job.communicate(timeout=120)
        assert job.returncode == 0, out
        outs.append(out)
    return outs


def branch_frame(remote: Path, tmp_path):
    """The results branch's results/ as flashbench.history reads it."""
    out = tmp_path / "export"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    data = subprocess.run(["git", "archive", BRANCH, "results"], cwd=remote, check=True,
                          capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(out, filter="data")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing unreadable, nothing skipped
        return load_results(out / "results", cache=False)


def measured(frame) -> list[tuple[str, str]]:
    """(machine, commit) of each result, checked to be that machine's own number."""
    for machine, commit, v in zip(frame["machine"], frame["commit"], frame["value"],
                                  strict=True):
        assert v == value(machine, commit), (machine, commit)
    assert set(frame["benchmark"]) == {BENCH}
    return sorted(zip(frame["machine"].astype(str), frame["commit"].astype(str), strict=True))


@pytest.mark.slow
def test_two_jobs_at_once_lose_and_mix_nothing(upstream, tmp_path):
    remote, work = upstream
    commits = sh("git", "rev-list", "--reverse", "main", cwd=work).split()
    a, b = clone(remote, tmp_path / "job-a"), clone(remote, tmp_path / "job-b")
    # both commit on the same (absent) tip, then wait before pushing: one push loses
    outs = finish(start(a, "gpu-a", tmp_path, "--push-delay", "3"),
                  start(b, "gpu-b", tmp_path, "--push-delay", "3"))
    assert sum("push rejected (another job pushed first)" in out for out in outs) >= 1, outs
    assert all("pushed " in out for out in outs), outs
    frame = branch_frame(remote, tmp_path)
    assert measured(frame) == sorted((m, c) for m in ("gpu-a", "gpu-b") for c in commits)
    log = sh("git", "log", "--format=%s", BRANCH, cwd=remote).splitlines()
    assert len(log) == 2 and all(s.startswith("results: gpu-") for s in log)
    tree = sh("git", "ls-tree", "-r", "--name-only", BRANCH, cwd=remote).splitlines()
    assert "results/benchmarks.json" in tree
    assert {"results/gpu-a/machine.json", "results/gpu-b/machine.json"} <= set(tree)

    # a new commit upstream: a second run measures it alone, on top of the other's work
    (work / "code.txt").write_text("version 3\n")
    sh("git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "c3", cwd=work)
    sh("git", "push", "-q", str(remote), "main", cwd=work)
    sh("git", "pull", "-q", "origin", "main", cwd=a)
    new = sh("git", "rev-parse", "HEAD", cwd=a)
    open(tmp_path / "asv.log", "w").close()
    out, = finish(start(a, "gpu-a", tmp_path))
    assert (tmp_path / "asv.log").read_text().split() == ["gpu-a", new], out
    out, = finish(start(a, "gpu-a", tmp_path))
    assert "no new commit" in out
    frame = branch_frame(remote, tmp_path)
    assert measured(frame) == sorted([(m, c) for m in ("gpu-a", "gpu-b") for c in commits]
                                     + [("gpu-a", new)])

    # a Slurm array's two shards of one machine kind: every commit once, none lost
    c1, c2 = clone(remote, tmp_path / "shard-0"), clone(remote, tmp_path / "shard-1")
    open(tmp_path / "asv.log", "w").close()
    finish(start(c1, "cpu-c", tmp_path, "--shard", "0/2", "--push-delay", "2"),
           start(c2, "cpu-c", tmp_path, "--shard", "1/2", "--push-delay", "2"))
    runs = [line.split()[1:] for line in (tmp_path / "asv.log").read_text().splitlines()]
    assert sorted(c for run in runs for c in run) == sorted([*commits, new])
    assert len(runs) == 2 and not set(runs[0]) & set(runs[1])
    frame = branch_frame(remote, tmp_path)
    assert [mc for mc in measured(frame) if mc[0] == "cpu-c"] == sorted(
        ("cpu-c", c) for c in [*commits, new])


def test_a_shard_that_starts_after_its_sibling_pushed_keeps_its_share(upstream, tmp_path):
    """The shards of one run split the commits new when the run began: shard 1 starting
    after shard 0 pushed (a busy cluster) measured the commit left over by the shifted
    split before (here: none, commit 1 lost); a requeued shard 0 finds its own work done."""
    remote, work = upstream
    commits = sh("git", "rev-list", "--reverse", "main", cwd=work).split()
    repo = clone(remote, tmp_path / "array")
    open(tmp_path / "asv.log", "w").close()
    finish(start(repo, "cpu-d", tmp_path, "--shard", "0/2", "--run-id", "77"))
    late, = finish(start(repo, "cpu-d", tmp_path, "--shard", "1/2", "--run-id", "77"))
    again, = finish(start(repo, "cpu-d", tmp_path, "--shard", "0/2", "--run-id", "77"))
    runs = [line.split()[1:] for line in (tmp_path / "asv.log").read_text().splitlines()]
    assert runs == [commits[0::2], commits[1::2]], (runs, late)
    assert "no new commit" in again
    body = sh("git", "log", "-1", "--format=%B", BRANCH, cwd=remote)
    assert "Fanout-Run: 77 shard 1/2" in body
    # another run (a new array) sees everything measured
    rerun, = finish(start(repo, "cpu-d", tmp_path, "--shard", "1/2", "--run-id", "78"))
    assert "no new commit" in rerun


def test_bad_usage_is_refused(tmp_path):
    r = subprocess.run([sys.executable, str(JOB), "--shard", "2/2"], capture_output=True,
                       text=True, cwd=tmp_path)
    assert r.returncode == 2 and "--shard I/N needs 0 <= I < N" in r.stderr


def test_the_workflow_is_what_the_fan_out_needs():
    """Parsed as YAML (yaml ships with the venv's dependencies): the matrix names CPU
    hosts and GPU runners by label, each job runs the one job script, then a publish
    job needs them all."""
    yaml = pytest.importorskip("yaml")
    flow = yaml.safe_load((ROOT / ".github" / "workflows" / "asv.yml").read_text())
    bench = flow["jobs"]["bench"]
    kinds = bench["strategy"]["matrix"]["include"]
    runners = [k["runner"] for k in kinds]
    assert any(r == "ubuntu-latest" or "cpu" in str(r) for r in runners)
    assert sum("self-hosted" in r and "gpu" in r for r in runners if isinstance(r, list)) >= 2
    assert bench["strategy"]["fail-fast"] is False
    steps = " ".join(str(s.get("run", "")) for s in bench["steps"])
    assert "scripts/fanout_job.py" in steps
    publish = flow["jobs"]["publish"]
    assert publish["needs"] == "bench" or "bench" in publish["needs"]
    site = " ".join(str(s.get("run", "")) for s in publish["steps"])
    assert "-m flashbench.site" in site and '--last "$SITE_LAST"' in site  # a bounded site
    slurm = (ROOT / "scripts" / "slurm_asv.sbatch").read_text()
    assert '--last "${FLASHBENCH_SITE_LAST:-500}"' in slurm
    assert "sbatch --parsable --array=" in slurm and "scripts/fanout_job.py" in slurm
    assert "SLURM_ARRAY_TASK_ID" in slurm
    # publish says what is missing in both (learnt from a failed task on a real Slurm)
    assert "scripts/fanout_job.py --report-missing" in site
    assert "scripts/fanout_job.py --report-missing" in slurm


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
def test_the_slurm_script_passes_shellcheck():
    r = subprocess.run(["shellcheck", str(ROOT / "scripts" / "slurm_asv.sbatch")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


CHECK_JSONSCHEMA = shutil.which("check-jsonschema", path=str(Path(sys.executable).parent))


FLOWS = ["asv.yml", "review.yml", "review-comment.yml"]


@pytest.fixture(scope="module")
def schema_check():
    """One check-jsonschema run over every workflow (0.35 s of CPU a process); a failure
    names the file and the path in it."""
    return subprocess.run([CHECK_JSONSCHEMA, "--builtin-schema", "vendor.github-workflows",
                           *(str(ROOT / ".github" / "workflows" / f) for f in FLOWS)],
                          capture_output=True, text=True)


@pytest.mark.skipif(CHECK_JSONSCHEMA is None,
                    reason="check-jsonschema not installed (the test extra installs it)")
@pytest.mark.parametrize("flow", FLOWS)
def test_the_workflow_passes_the_github_workflow_schema(flow, schema_check):
    r = schema_check
    assert r.returncode == 0 and "validation done" in r.stdout, r.stdout + r.stderr
    assert str(ROOT / ".github" / "workflows" / flow) in r.args


def test_the_job_reads_results_dir_from_asv_conf(tmp_path):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import fanout_job
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    (tmp_path / "asv.conf.json").write_text('{"version": 1, // c\n "results_dir": "r/x"}')
    assert fanout_job.results_dir(tmp_path) == tmp_path / "r" / "x"


def test_a_failed_result_and_a_silent_machine_are_reported(upstream, tmp_path, monkeypatch):
    """A probe (2026-12-07): a benchmark that failed once (asv writes null) left its
    commit's results file pushed, so no job measured it again, and --report-missing said
    "missing: none"; a machine failing on every commit of the window dropped out of the
    report as if retired."""
    remote, work = upstream
    commits = sh("git", "rev-list", "--reverse", "main", cwd=work).split()
    repo = clone(remote, tmp_path / "job")

    def report(*window) -> str:
        out, = finish(start(repo, "gpu-f", tmp_path, "--report-missing", *window))
        return out

    monkeypatch.setenv("FAKE_ASV_NULL", commits[-1][:8])
    finish(start(repo, "gpu-f", tmp_path, "--max-commits", "2"))
    said = report("--max-commits", "2")
    assert f"failed: gpu-f: commit {commits[-1][:8]}: 1 benchmark(s) failed" in said, said
    assert f"commit {commits[-2][:8]}" not in said
    said = report("--rev", commits[0], "--max-commits", "1")  # gpu-f measured none of it
    assert "silent: gpu-f: no results in the last 1 commits" in said, said


def test_an_existing_environment_runs_asv_once_per_commit_and_missing_is_reported(
        upstream, tmp_path):
    """asv refuses a commit range in an existing environment (the GPU default of the
    workflow and the Slurm script): the job runs it once per commit, each in a checkout
    of that commit (the fake asv checks both, as asv refuses); --report-missing lists
    what a machine lacks."""
    remote, work = upstream
    commits = sh("git", "rev-list", "--reverse", "main", cwd=work).split()
    repo = clone(remote, tmp_path / "job")

    def report() -> str:
        out, = finish(start(repo, "gpu-e", tmp_path, "--report-missing", "--max-commits", "3"))
        return out

    assert "the results branch does not exist yet" in report()
    finish(start(repo, "gpu-e", tmp_path, "--max-commits", "2", "--", "-E", "existing:python3"))
    assert (tmp_path / "asv.log").read_text().split("\n")[:2] == [
        f"gpu-e {c}" for c in commits[1:]]
    assert f"missing: gpu-e: 1 of the last 3 commits of HEAD have no results: {commits[0][:8]}" \
        in report()
    finish(start(repo, "gpu-e", tmp_path, "--", "-E", "existing:python3"))
    assert measured(branch_frame(remote, tmp_path)) == sorted(("gpu-e", c) for c in commits)
    assert "missing: none" in report()
    assert not (repo / ".asv" / "fanout-gpu-e-0.tree").exists()  # the worktree is gone
    assert sh("git", "worktree", "list", "--porcelain", cwd=repo).count("worktree ") == 1
