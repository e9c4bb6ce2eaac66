"""A stand-in for ``asv run`` in tests/test_fanout.py: for each commit of the hash file
it writes a results file (asv's results schema version 2) of one track, whose value
names the machine and the commit, into results/<machine>/, plus machine.json and
benchmarks.json, as asv would; it appends the commits it was given to $FAKE_ASV_LOG.
As asv, it refuses a commit range in an existing environment (-E existing:...), where
``--set-commit-hash C`` names the one commit (checked out in the current folder).
Faults, for a Slurm array task (tests/test_slurm.py): FAKE_ASV_FAIL=I fails task I
(exit 1, nothing written); FAKE_ASV_SLEEP=I:S makes task I's first attempt (not a
requeued one) sleep S seconds midway, after appending to $FAKE_ASV_LOG.started.

    python tests/fanout_fake_asv.py run --machine NAME HASHFILE:PATH [asv args ...]
    python tests/fanout_fake_asv.py run --machine NAME --set-commit-hash C -E existing:...
"""

import json
import os
import subprocess
import sys
import time
import zlib
from pathlib import Path

BENCH = "bench_fake.track_value"


def value(machine: str, commit: str) -> float:
    """A number that says which machine measured which commit."""
    return float(zlib.crc32(f"{machine}:{commit}".encode()))


def write_results(results: Path, machine: str, commits: list[str]) -> None:
    """What asv run writes for ``commits`` on ``machine`` under ``results``: one results
    file a commit (its value: :func:`value`), machine.json and benchmarks.json."""
    folder = results / machine
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "machine.json").write_text(json.dumps({"machine": machine, "version": 1}))
    (results / "benchmarks.json").write_text(json.dumps(
        {BENCH: {"name": BENCH, "type": "track", "unit": "unit", "param_names": [],
                 "params": [], "version": "1"}, "version": 2}))
    for i, commit in enumerate(commits):
        data = {"commit_hash": commit, "env_name": "fake", "date": 1700000000000 + i,
                "params": {"machine": machine, "cpu": f"CPU of {machine}"}, "python": "3",
                "requirements": {}, "env_vars": {},
                "result_columns": ["result", "params", "version"],
                "results": {BENCH: [[None if commit.startswith(
                    os.environ.get("FAKE_ASV_NULL") or "-") else value(machine, commit)],
                    [], "1"]}, "durations": {},
                "version": 2}
        (folder / f"{commit[:8]}-fake.json").write_text(json.dumps(data))


def main(argv: list[str]) -> int:
    assert argv[0] == "run", argv
    machine = argv[argv.index("--machine") + 1]
    task = os.environ.get("SLURM_ARRAY_TASK_ID")
    hashfile = next((a for a in argv if a.startswith("HASHFILE:")), None)
    if "-E" in argv and argv[argv.index("-E") + 1].startswith("existing"):
        if hashfile:  # asv's own words
            print("No range spec may be specified if benchmarking in an existing environment")
            return 1
        commit = argv[argv.index("--set-commit-hash") + 1]
        head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True)
        assert head.stdout.strip() == commit, "asv runs in a checkout of the commit"
        commits = [commit]
    else:
        commits = Path(hashfile[len("HASHFILE:"):]).read_text().split()
    if task is not None and os.environ.get("FAKE_ASV_FAIL") == task:
        print(f"asv: error: benchmark failed in task {task}", file=sys.stderr)
        return 1
    sleep = os.environ.get("FAKE_ASV_SLEEP", "").split(":")
    if task is not None and sleep[0] == task and os.environ.get("SLURM_RESTART_COUNT",
                                                                   "0") == "0":
        with open(os.environ["FAKE_ASV_LOG"] + ".started", "a") as log:
            log.write(f"{machine} {' '.join(commits)}\n")
        time.sleep(float(sleep[1]))
    write_results(Path("results"), machine, commits)
    with open(os.environ["FAKE_ASV_LOG"], "a") as log:
        log.write(f"{machine} {' '.join(commits)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
