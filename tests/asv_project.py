"""Build a throw-away git repository with a tiny asv suite and run real asv on it.

Used by the history tests: results written by asv itself, with string and None
parameters, skipped and failing benchmarks, a timing with a ``shape`` parameter,
samples, two machines and two environments ("existing" environments of two
different interpreter paths).
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

SUITE = '''
import math


class Params:
    params = (["a", "b"], [None, 1])
    param_names = ["word", "maybe"]

    def track_len(self, word, maybe):
        return len(word) * 10 + (0 if maybe is None else maybe)

    track_len.unit = "widgets"


class Skips:
    params = [1, 2, 3]
    param_names = ["n"]

    def setup(self, n):
        if n == 2:
            raise NotImplementedError("n=2 is not here")

    def track_square(self, n):
        if n == 3:
            raise ValueError("n=3 fails")
        return n * n


class Shaped:
    """A timing that records its problem as parameters, as flashbench's suites do."""

    params = (["1x2x64x64x16"], [False, True])
    param_names = ["shape", "causal"]

    def time_attention(self, shape, causal):
        sum(range(1000))


def time_sum():
    sum(range(1000))


def peakmem_list():
    [0] * 100000


def track_plain():
    return 42.5
'''


def git(repo, *args):
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"})


def make_repo(root: Path) -> Path:
    repo = root / "proj"
    (repo / "benchmarks").mkdir(parents=True)
    (repo / "benchmarks" / "__init__.py").write_text("")
    (repo / "benchmarks" / "suite.py").write_text(textwrap.dedent(SUITE))
    (repo / "asv.conf.json").write_text(json.dumps({
        "version": 1, "project": "proj", "repo": ".", "branches": ["main"],
        "benchmark_dir": "benchmarks", "results_dir": "results", "html_dir": "html",
        "environment_type": "existing"}))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "one")
    (repo / "README").write_text("two\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "two")
    return repo


_REGISTERED: set = set()  # (repo, machine, cpu) already in the repo's ~/.asv-machine.json


def run_asv(repo: Path, commit: str, machine: str, python: str, *extra: str,
            cpu: str | None = None):
    """asv run of ``commit`` as ``machine``; ``cpu``: the processor asv records in the
    results (``asv machine --cpu``; without it ``asv machine --yes`` stores none)."""
    env = {**os.environ, "HOME": str(repo)}  # a private ~/.asv-machine.json
    # forkserver: each benchmark a fork of one started interpreter (spawn started one a
    # benchmark: 3x the CPU); the results files asv writes are the same either way
    if (repo, machine, cpu) not in _REGISTERED:  # asv machine once (0.25 s of CPU a call)
        subprocess.run([sys.executable, "-m", "asv", "machine", "--yes", "--machine", machine,
                        *(["--cpu", cpu] if cpu else [])],
                       cwd=repo, check=True, capture_output=True, env=env)
        _REGISTERED.add((repo, machine, cpu))
    r = subprocess.run([sys.executable, "-m", "asv", "run", "-E", f"existing:{python}",
                        "--set-commit-hash", commit, "--machine", machine,
                        "--launch-method", "forkserver", *extra],
                       cwd=repo, capture_output=True, text=True, env=env)
    if r.returncode not in (0, 2):  # 2: some benchmark failed, as intended
        raise RuntimeError(r.stdout + r.stderr)
    return r
