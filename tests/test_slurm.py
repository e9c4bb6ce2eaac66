"""scripts/slurm_asv.sbatch submitted to a real single-node Slurm (tests/slurm_cluster.py):
a throw-away copy of this project (its working tree, 2 commits) behind a local bare
remote; ``sbatch --array=0-1`` runs REAL asv over the 2 commits, shared by the two tasks,
then the publish job (``--dependency=afterany``) writes the site and the history report.
Then the faults, with the fake asv (tests/fanout_fake_asv.py): a failing task while the
other pushes and the publish job after it, two pushes racing, a task cancelled midway
and requeued, a rerun that finds nothing new."""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from slurm_cluster import Cluster, slurm, unavailable  # noqa: F401  (the fixture)

ROOT = Path(__file__).resolve().parents[1]
SBATCH = ROOT / "scripts" / "slurm_asv.sbatch"
BRANCH = "asv-results"
BENCH = "bench_reference.TimeSoftmax.time_softmax"
FAKE = ROOT / "tests" / "fanout_fake_asv.py"


def sh(*args, cwd) -> str:
    return subprocess.run(args, cwd=cwd, check=True, capture_output=True, text=True,
                          env={**os.environ, "GIT_CONFIG_GLOBAL": os.devnull}).stdout.strip()


def commit(work: Path, message: str) -> str:
    sh("git", "add", "-A", cwd=work)
    sh("git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message, cwd=work)
    return sh("git", "rev-parse", "HEAD", cwd=work)


def project(tmp_path: Path, commits: int = 3) -> tuple[Path, Path, list[str]]:
    """This project's working tree (without its committed results) as ``commits`` commits
    of a throw-away repository, pushed to a bare remote: (remote, work, hashes)."""
    work = tmp_path / "project"
    work.mkdir()
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=ROOT, check=True,
                            capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        src = ROOT / name
        if name.startswith(("results/", "gpu-results/")) or not src.is_file():
            continue
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, work / name)
    sh("git", "init", "-q", "-b", "main", cwd=work)
    hashes = [commit(work, "c0: this project's working tree")]
    for i in range(1, commits):
        (work / "CHANGES.txt").write_text(f"change {i}\n")
        hashes.append(commit(work, f"c{i}"))
    remote = tmp_path / "remote.git"
    sh("git", "clone", "-q", "--bare", str(work), str(remote), cwd=tmp_path)
    return remote, work, hashes


def job_env(tmp_path: Path, remote: Path, **extra) -> dict:
    """What the submitting shell exports (sbatch passes it on to every task)."""
    home = tmp_path / "home"  # asv's machine file
    home.mkdir(exist_ok=True)
    cache = tmp_path / "cache"
    cache.mkdir(exist_ok=True)
    vendor = ROOT / ".asv" / "vendor"  # npm's packages, kept between test runs
    vendor.mkdir(parents=True, exist_ok=True)
    if not (cache / "vendor").exists():
        (cache / "vendor").symlink_to(vendor)
    env = {"HOME": str(home), "GIT_CONFIG_GLOBAL": os.devnull, "FLASHBENCH_REPO": str(remote),
           "FLASHBENCH_VENV": str(ROOT / ".venv"), "FLASHBENCH_WORK": str(tmp_path / "work"),
           "FLASHBENCH_SITE": str(tmp_path / "site"), "FLASHBENCH_CACHE": str(cache)}
    return {**env, **extra}


def tree(remote: Path) -> list[str]:
    return sh("git", "ls-tree", "-r", "--name-only", BRANCH, cwd=remote).splitlines()


def outputs(tmp_path: Path, job: str) -> dict[str, str]:
    """Each task's (and the publish job's) output file, by its name."""
    return {p.name: p.read_text() for p in sorted(tmp_path.glob(f"flashbench-asv-{job}_*.out"))}


@pytest.mark.slow
def test_real_asv_on_a_real_slurm_array_then_publish(slurm, tmp_path):  # noqa: F811
    # 2 commits, one a task (each commit's real asv run imports the suites and torch:
    # most of this test's CPU); the faults test below shares 4 and 2 among 2 tasks
    remote, _, commits = project(tmp_path, commits=2)
    env = job_env(tmp_path, remote, FLASHBENCH_MAX_COMMITS="2", FLASHBENCH_SITE_LAST="2",
                  FLASHBENCH_ASV_ARGS="--bench TimeSoftmax --quick --launch-method forkserver "
                                      "-E existing:python3")
    array = slurm.sbatch("--array=0-1", str(SBATCH), env=env, cwd=tmp_path)
    publish = slurm.sbatch(f"--dependency=afterany:{array}", str(SBATCH), "publish",
                           env=env, cwd=tmp_path)
    slurm.wait(array, publish, timeout=240)
    logs = {**outputs(tmp_path, array), **outputs(tmp_path, publish)}
    states = {j: slurm.job(j) for j in (f"{array}_0", f"{array}_1", publish)}
    assert all(s["JobState"] == "COMPLETED" and s["ExitCode"] == "0:0"
               for s in states.values()), (states, logs)

    # every commit measured once, each by one of the two shards
    files = tree(remote)
    machines = {Path(f).parent.name for f in files if f.count("/") == 2}
    assert len(machines) == 1, files
    machine = machines.pop()
    results = sorted(f for f in files if f.startswith(f"results/{machine}/")
                     and not f.endswith("machine.json"))
    assert [Path(f).name.split("-", 1)[0] for f in results] == sorted(c[:8] for c in commits)
    assert "results/benchmarks.json" in files
    messages = sh("git", "log", "--format=%s", BRANCH, cwd=remote).splitlines()
    assert sorted(m.rsplit("(", 1)[1] for m in messages) == ["shard 0/2)", "shard 1/2)"]
    shares = [line.split(": ")[-1].split() for out in logs.values() for line in out.splitlines()
              if "new commit(s):" in line]
    assert sorted(c for share in shares for c in share) == sorted(c[:8] for c in commits)
    assert len(shares) == 2 and all(shares), logs

    # the publish job read them: the asv site and flashbench history
    site = tmp_path / "site"
    assert (site / "index.html").is_file()
    graphs = list((site / "graphs").rglob(f"{BENCH}.json"))
    assert graphs, sorted(p.name for p in site.rglob("*.json"))[:20]
    frame = pd.read_csv(site / "history" / "results.csv")
    assert set(frame["commit"].astype(str).str[:8]) == {c[:8] for c in commits}
    assert (frame["machine"] == machine).all()
    assert "missing: none" in "".join(outputs(tmp_path, publish).values()), logs


def shares(tmp_path: Path, job: str) -> list[list[str]]:
    """The commits (8 digits) each task of ``job`` found new, one list a task."""
    return [line.split(": ")[-1].split() for out in outputs(tmp_path, job).values()
            for line in out.splitlines() if "new commit(s):" in line]


def asv_log(tmp_path: Path) -> list[str]:
    log = tmp_path / "asv.log"
    return log.read_text().splitlines() if log.exists() else []


def results_on_branch(remote: Path, machine: str) -> list[str]:
    """The 8-digit commits of ``machine``'s results files on the branch, sorted."""
    return sorted(Path(f).name.split("-", 1)[0] for f in tree(remote)
                  if f.startswith(f"results/{machine}/") and not f.endswith("machine.json"))


@pytest.mark.slow
def test_faults_on_a_real_slurm_lose_nothing(slurm, tmp_path):  # noqa: F811
    remote, work, commits = project(tmp_path, commits=4)
    short = [c[:8] for c in commits]
    base = job_env(tmp_path, remote, FLASHBENCH_MAX_COMMITS="4", FLASHBENCH_MACHINE="fake-a",
                   FLASHBENCH_ASV=f"{sys.executable} {FAKE}", FLASHBENCH_ASV_ARGS="--quick",
                   FAKE_ASV_LOG=str(tmp_path / "asv.log"), FLASHBENCH_SITE_LAST="all")

    def submit(*args: str, **extra) -> str:
        return slurm.sbatch(*args, str(SBATCH), env={**base, **extra}, cwd=tmp_path)

    # 1. an array numbered from 1: task 2's asv fails while task 1 pushes; the publish
    # job (afterany) publishes what task 1 pushed and names the commits missing
    array = submit("--array=1-2", FAKE_ASV_FAIL="2")
    publish = slurm.sbatch(f"--dependency=afterany:{array}", str(SBATCH), "publish",
                           env=base, cwd=tmp_path)
    slurm.wait(array, publish)
    ok, failed = slurm.job(f"{array}_1"), slurm.job(f"{array}_2")
    assert (ok["JobState"], failed["JobState"], failed["ExitCode"]) == (
        "COMPLETED", "FAILED", "1:0"), outputs(tmp_path, array)
    assert sorted(shares(tmp_path, array)) == sorted([short[0::2], short[1::2]])
    assert results_on_branch(remote, "fake-a") == sorted(short[0::2])
    out = "".join(outputs(tmp_path, publish).values())
    assert slurm.job(publish)["JobState"] == "COMPLETED", out
    assert (f"missing: fake-a: 2 of the last 4 commits of HEAD have no results: "
            f"{short[1]} {short[3]}") in out
    history = pd.read_csv(tmp_path / "site" / "history" / "results.csv")
    assert sorted(set(history["commit"].astype(str).str[:8])) == sorted(short[0::2])

    # 2. the rerun shares the two missing commits; both tasks commit on one tip and wait
    # before pushing: one push is rejected and redone on the other's
    array = submit("--array=0-1", FLASHBENCH_FANOUT_ARGS="--push-delay 2 --retry-delay 0.2")
    slurm.wait(array)
    logs = outputs(tmp_path, array)
    assert sum("push rejected (another job pushed first)" in o for o in logs.values()) == 1, logs
    assert all(slurm.job(f"{array}_{i}")["JobState"] == "COMPLETED" for i in (0, 1)), logs
    assert sorted(shares(tmp_path, array)) == sorted([[short[1]], [short[3]]])
    assert results_on_branch(remote, "fake-a") == sorted(short)

    # 3. two new commits; task 0 is cancelled while its asv runs, then requeued: its
    # second attempt measures the commit, nothing is lost or measured twice
    for i in (4, 5):
        (work / "CHANGES.txt").write_text(f"change {i}\n")
        commits.append(commit(work, f"c{i}"))
    sh("git", "push", "-q", str(remote), "main", cwd=work)
    short = [c[:8] for c in commits]
    array = submit("--array=0-1", FAKE_ASV_SLEEP="0:60")
    started = tmp_path / "asv.log.started"
    end = time.monotonic() + 60
    while not started.exists() or f"fake-a {commits[4]}" not in started.read_text():
        assert time.monotonic() < end, outputs(tmp_path, array)
        time.sleep(0.2)
    slurm.run("scancel", f"{array}_0")
    while slurm.job(f"{array}_0")["JobState"] != "CANCELLED":
        assert time.monotonic() < end, slurm.job(f"{array}_0")
        time.sleep(0.2)
    slurm.run("scontrol", "requeue", f"{array}_0")
    slurm.run("scontrol", "update", f"jobid={array}_0", "StartTime=now")  # no 2-minute hold
    slurm.wait(array)
    task0 = slurm.job(f"{array}_0")
    assert (task0["JobState"], task0["Restarts"]) == ("COMPLETED", "1"), outputs(tmp_path, array)
    out0 = outputs(tmp_path, array)[f"flashbench-asv-{array}_0.out"]
    assert out0.count(f"1 new commit(s): {short[4]}") == 2, out0  # both attempts, appended
    assert results_on_branch(remote, "fake-a") == sorted(short[2:] + short[:2])
    runs = [line.split()[1:] for line in asv_log(tmp_path)]
    done = sorted(c for run in runs for c in run)
    assert done == sorted(commits), runs  # each commit measured (and pushed) once

    # 4. a rerun finds nothing new: no asv, the branch untouched
    tip = sh("git", "rev-parse", BRANCH, cwd=remote)
    array = submit("--array=0-1")
    slurm.wait(array)
    logs = outputs(tmp_path, array)
    # the tasks share the branch as it was at the submission (its last commit then)
    assert sum(f"no new commit in the last 4 of {commits[-1]}" in o for o in logs.values()) \
        == 2, logs
    assert asv_log(tmp_path) == [" ".join(["fake-a", *run]) for run in runs]
    assert sh("git", "rev-parse", BRANCH, cwd=remote) == tip


def running(command: str) -> list[int]:
    """PIDs of the processes whose command line is ``command``."""
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if (proc / "cmdline").read_bytes().rstrip(b"\0") == command.replace(" ", "\0").encode():
                pids.append(int(proc.name))
        except OSError:  # gone meanwhile
            pass
    return pids


@pytest.mark.slow
@pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))
def test_the_cluster_stops_every_process_it_started(tmp_path):
    """Daemons stopped by their PIDs, a running job's processes cancelled first."""
    cluster = Cluster(tmp_path)
    marker = f"sleep 3{os.getpid() % 1000:03d}"  # this test's own job
    try:
        cluster.start()
        pids = [p.pid for p in cluster.procs]
        cluster.sbatch("--wrap", marker, cwd=tmp_path)
        end = time.monotonic() + 30
        while not running(marker):
            assert time.monotonic() < end, "the job never started"
            time.sleep(0.2)
    finally:
        cluster.stop()
    assert not cluster.procs
    assert not [pid for pid in pids if Path(f"/proc/{pid}").exists()]
    assert not running(marker)


def test_a_push_while_the_array_runs_shifts_no_task_off_its_share(tmp_path):
    """A probe (2026-12-07), the script run as tasks 0 and 1 of one array: a commit pushed
    to main between them moved task 1's window (each task clones when it starts): it
    measured only the new commit, and two were never measured. The tasks now share the
    branch as it was at the array's submission (scontrol's SubmitTime; here a fake)."""
    remote, work, commits = project(tmp_path, commits=4)
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    submitted = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() + 1))
    (bin_ / "scontrol").write_text(f"#!/bin/sh\necho 'JobId=77 SubmitTime={submitted} "
                                   "EligibleTime=x'\n")
    (bin_ / "scontrol").chmod(0o755)
    time.sleep(2.1)  # the new commit is dated after the submission
    (work / "CHANGES.txt").write_text("pushed while the array ran\n")
    late = commit(work, "late")
    env = {**os.environ, **job_env(tmp_path, remote, FLASHBENCH_MAX_COMMITS="4",
                                   FLASHBENCH_MACHINE="fake-s",
                                   FLASHBENCH_ASV=f"{sys.executable} {FAKE}",
                                   FLASHBENCH_ASV_ARGS="--quick",
                                   FAKE_ASV_LOG=str(tmp_path / "asv.log"),
                                   FLASHBENCH_VENV=str(Path(sys.executable).parents[1])),
           "PATH": f"{bin_}{os.pathsep}{os.environ['PATH']}", "SLURM_ARRAY_JOB_ID": "77",
           "SLURM_ARRAY_TASK_COUNT": "2", "SLURM_ARRAY_TASK_MIN": "0"}

    def task(i: int) -> str:
        r = subprocess.run(["bash", str(SBATCH)], cwd=tmp_path, capture_output=True,
                           text=True, env={**env, "SLURM_ARRAY_TASK_ID": str(i)}, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout + r.stderr

    first = task(0)
    sh("git", "push", "-q", str(remote), "main", cwd=work)  # main moves between the tasks
    second = task(1)
    short = [c[:8] for c in commits]
    assert f"2 new commit(s): {short[0]} {short[2]}" in first, first
    assert f"2 new commit(s): {short[1]} {short[3]}" in second, second
    assert late[:8] not in first + second
