"""tools/gpu/history.py over real commits of a throw-away clone, with -E existing here.

The clone gets two commits whose flashbench differs (a probe module: VALUE = 1, then
2) and a probe suite reading it: each commit's results must hold its own value. The
GPU suite is selected too and skips cleanly (no GPU here); a CPU suite records samples.
"""

import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ["-m", "tools.gpu.history"]  # PYTHONPATH: the repository root
PROBE = '''
import os
import time


def track_probe():
    from flashbench import _probe
    return _probe.VALUE


def track_slow():
    open(os.environ["GH_MARK"], "w").close()
    time.sleep(120)
    return 0
'''


def git(repo, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo,
                   check=True, capture_output=True)


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    root = tmp_path_factory.mktemp("gh")
    repo = root / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True)
    (repo / "benchmarks" / "bench_probe.py").write_text(PROBE)
    (repo / "flashbench" / "_probe.py").write_text("VALUE = 1\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "probe 1")
    (repo / "flashbench" / "_probe.py").write_text("VALUE = 2\n")
    git(repo, "commit", "-qam", "probe 2")
    (root / "home").mkdir()
    return repo


def run(clone, *args, timeout=600, **kw):
    env = {**os.environ, "HOME": str(clone.parent / "home"), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *SCRIPT, "--repo", str(clone), *args],
                          capture_output=True, text=True, env=env, timeout=timeout, **kw)


def head(clone, n=0):
    return subprocess.run(["git", "rev-parse", f"HEAD~{n}"], cwd=clone, capture_output=True,
                          text=True, check=True).stdout.strip()


@pytest.mark.slow
def test_each_commit_is_recorded_with_its_own_flashbench(clone, tmp_path):
    from flashbench.history import load_results

    out = tmp_path / "results"
    # TimeSoftmax at N = 1024 only (asv selects parameter sets by regex): a CPU suite that
    # records samples, without the 16k rows' draws
    r = run(clone, "--machine", "nvidia-test-gpu", "--out", str(out), "--bench",
            r"bench_probe.track_probe|TimeSoftmax.time_softmax\(256, 1024,|bench_gpu", "-a",
            "repeat=3", "HEAD~2..HEAD")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 of 2 commits recorded" in r.stdout
    files = sorted((out / "nvidia-test-gpu").glob("*-existing-*.json"))
    assert len(files) == 2
    assert json.loads((out / "nvidia-test-gpu" / "machine.json").read_text())["machine"] \
        == "nvidia-test-gpu"
    probe = {}
    for f in files:
        data = json.loads(f.read_text())
        probe[data["commit_hash"]] = data["results"]["bench_probe.track_probe"][0][0]
        gpu = data["results"]["bench_gpu.TimeAttentionGPU.time_attention_gpu"][0]
        assert all(math.isnan(v) for v in gpu)  # skipped (NaN), never failed (null)
    assert probe == {head(clone, 1): 1, head(clone, 0): 2}
    df = load_results(out)
    soft = df[(df["benchmark"] == "bench_reference.TimeSoftmax.time_softmax")
              & (df["status"] == "ok")]
    assert len(soft) == 2 * 2 and soft["samples"].map(len).ge(3).all()  # samples kept
    assert set(soft["params"].astype(str).str.extract(r"N=(\d+)")[0]) == {"1024"}
    assert set(df["machine"]) == {"nvidia-test-gpu"}
    assert not list(tmp_path.glob(".gpu-history-*"))  # private folders gone
    # kernels unchanged between the two commits: said so
    assert "compiled kernels reused" in r.stdout


def refused(clone, capsys, *args) -> str:
    """main() in this process (the command's __main__ is sys.exit(main()); its real runs are
    the tests around): exit status 2, the one line it wrote to stderr."""
    from tools.gpu import history as mod

    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        mod.main(["--repo", str(clone), *args])
    out = capsys.readouterr()
    assert exc.value.code == 2, out.out + out.err
    return out.err


@pytest.mark.parametrize("args, message", [
    (["--machine", "m", "no-such-commit"], "COMMITS: 'no-such-commit' is not a commit"),
    (["--machine", "m", "HEAD..HEAD~1"], "range 'HEAD..HEAD~1' holds no commits"),
    (["--machine", "m", "..HEAD"], "range '..HEAD' must be A..B"),
    (["--machine", "../m", "HEAD"], "--machine must be letters"),
    (["--machine", "a/b", "HEAD"], "(a name, not a path)"),
    (["--machine", "m"], "name at least one commit"),
])
def test_bad_input_is_refused_with_one_line(clone, tmp_path, capsys, args, message):
    err = refused(clone, capsys, "--out", str(tmp_path / "results"), *args)
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "results").exists()


def test_out_that_is_a_file_is_refused(clone, tmp_path, capsys):
    (tmp_path / "results").write_text("")
    err = refused(clone, capsys, "--out", str(tmp_path / "results"), "--machine", "m", "HEAD")
    assert "is a file, not a results folder" in err


@pytest.mark.slow
def test_an_interrupted_commit_leaves_nothing_in_results(clone, tmp_path):
    out, mark = tmp_path / "results", tmp_path / "started"
    tmp = Path(tempfile.mkdtemp(prefix="fbt-"))  # short: asv puts a socket below it
    env = {**os.environ, "HOME": str(clone.parent / "home"), "PYTHONPATH": str(ROOT),
           "GH_MARK": str(mark), "TMPDIR": str(tmp)}
    proc = subprocess.Popen([sys.executable, *SCRIPT, "--repo", str(clone), "--machine",
                             "m", "--out", str(out), "--bench", "bench_probe.track_slow",
                             "HEAD"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    deadline = time.monotonic() + 300
    while not mark.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert mark.exists(), proc.communicate()
    assert list(tmp_path.glob(".gpu-history-*"))  # the run's private folder, mid-commit
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted during" in err and "nothing of it written" in err
    assert not list(out.glob("*/*.json"))  # no results file, no machine.json
    assert not list(tmp_path.glob(".gpu-history-*"))
    assert not list(tmp.iterdir()), list(tmp.rglob("*"))  # nor asv's forkserver folder
    tmp.rmdir()


def test_a_dead_runs_private_folder_is_removed(tmp_path):
    from tools.gpu import history as mod
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f"{mod.PARTIAL}{dead.pid}-abc"
    live = tmp_path / f"{mod.PARTIAL}{os.getpid()}-abc"
    (stale / "results").mkdir(parents=True)
    live.mkdir()
    assert mod.remove_stale(tmp_path) == [stale]
    assert not stale.exists() and live.exists()
