"""scripts/slurm_asv.sbatch submitted to a real single-node Slurm (tests/slurm_cluster.py):
a throw-away copy of this project (its working tree, 3 commits) behind a local bare
remote; ``sbatch --array=0-1`` runs REAL asv over the 3 commits, shared by the two tasks,
then the publish job (``--dependency=afterany``) writes the site and the history report.
The faults (tests/test_slurm_faults.py) use the fake asv instead."""

import os
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from slurm_cluster import slurm  # noqa: F401  (the fixture)

ROOT = Path(__file__).resolve().parents[1]
SBATCH = ROOT / "scripts" / "slurm_asv.sbatch"
BRANCH = "asv-results"
BENCH = "bench_reference.TimeSoftmax.time_softmax"


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
    remote, _, commits = project(tmp_path)
    env = job_env(tmp_path, remote, FLASHBENCH_MAX_COMMITS="3", FLASHBENCH_SITE_LAST="3",
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
