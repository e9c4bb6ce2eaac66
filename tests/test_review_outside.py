"""A review's timing sampled while processes outside it kept the machine busy is not judged
(`--outside-limit`, default 0.25 CPUs): a red team (2026-12-06) ran six reviews of a
README-only head beside a load of ~3 on 2 CPUs; one read TimeSoftmax one-shot N=1024
"slower 1.534 [1.32, 1.78]" (three rounds, 0.39-0.48 each), exit 1, and three more were
ambiguous. The sampler reads what processes outside the review used (/proc) around each
comparison's blocks; a verdict over the limit becomes "not measured" (machine-loaded, exit
2), its figures shown."""

import json
import math
import os
import subprocess
import sys
import time

import pytest

from flashbench.cli import main
from flashbench.infra.cpuload import outside_cpu
from flashbench.review.ab import Lane, Point, Sampler
from flashbench.review.model import Review
from flashbench.review.options import OUTSIDE_ENV, OUTSIDE_LIMIT, Options
from flashbench.review.paired import Paired, paired_rows

CHEAP = r"TimeAttention.*1024x1024x64|TimeSoftmax.*N=1024,"  # as tests/test_review.py's
SLOWER = [0.42, 0.48, 0.39, 0.45, 0.44, 0.41, 0.47, 0.43]  # log head/base: a clear "slower"


def _pair(outside: float, watched: float) -> Paired:
    p = Paired("bench_reference.TimeSoftmax.time_softmax", "N=1024", "seconds",
               base=[1e-3] * len(SLOWER), head=[1e-3 * math.exp(x) for x in SLOWER])
    p.load.cpu, p.load.wall = outside, watched
    return p


def test_a_verdict_sampled_beside_a_load_is_not_judged_and_keeps_its_figures():
    quiet, loaded, unread = _pair(0.5, 10.0), _pair(15.0, 10.0), _pair(0.0, 0.0)
    rows = paired_rows([quiet, loaded, unread], 1.1, 0.05 / 6, outside_limit=0.25)
    assert rows[0].verdict == "slower" and rows[0].regression  # 0.05 CPUs: judged
    assert rows[2].verdict == "slower"  # nothing read (no /proc): judged as before
    r = rows[1]
    assert (r.verdict, r.reason) == ("not measured", "machine-loaded")
    assert not r.regression and r.undecided
    assert "kept 1.50 CPUs busy" in r.detail and "read slower, not judged" in r.detail
    assert r.ratio == pytest.approx(rows[0].ratio) and r.ci_low > 1.3  # the figures stay
    review = Review("a", "b", "m", "cpu", "same-run A/B", 1.1, 0.02, rows=rows[1:2])
    assert review.status == 2 and "NOT MEASURED: 1 timing(s)" in review.summary()
    assert paired_rows([loaded], 1.1, 0.05 / 6)[0].verdict == "slower"  # inf: no limit
    few = _pair(15.0, 10.0)
    few.base, few.head = few.base[:2], few.head[:2]  # ambiguous: undecided, the load said
    (r,) = paired_rows([few], 1.1, 0.05 / 6, outside_limit=0.25)
    assert r.verdict == "ambiguous" and r.detail.startswith("processes outside the review")


def test_the_sampler_reads_the_load_around_each_comparisons_blocks():
    """A fake load: every window says 0.3 CPU-s were used outside; the rounds' windows are
    read (round 1's, then each step's), calibration's not (its imports, a compile)."""
    from flashbench.infra.cpuload import TICK

    readings = []

    def load(start=None):
        if start is None:
            readings.append("read")
            return ("t0",)
        return 0.3

    def measure(point, side, plan):
        return {"status": "ok", "number": 1, "samples": [1e-3 if side == "base" else 2e-3]}

    sampler = Sampler([Lane(measure)], 5.0, 1.1, 0.05 / 6, load=load)
    pairs, rows = sampler.run([Point("bench_x.TimeX.time_x", 0, "()", "time", "seconds")])
    (pair,) = pairs
    assert not rows and pair.rounds >= 3 and len(readings) >= 2
    windows = len(readings)  # round 1 and each step to a look: 0.3 less 2 ticks each
    assert windows >= 2 and pair.load.cpu == pytest.approx(windows * (0.3 - 2 * TICK))
    assert pair.load.wall > 0
    unread = Sampler([Lane(measure)], 5.0, 1.1, 0.05 / 6).run(
        [Point("bench_x.TimeX.time_x", 0, "()", "time", "seconds")])[0][0]
    assert unread.load.cpus is None


def test_the_limit_is_the_options_else_the_environments_else_a_quarter_cpu(monkeypatch):
    monkeypatch.delenv(OUTSIDE_ENV, raising=False)
    assert Options().outside_cpus == OUTSIDE_LIMIT == 0.25
    monkeypatch.setenv(OUTSIDE_ENV, "1.5")
    assert Options().outside_cpus == 1.5 and Options(outside_limit=0.1).outside_cpus == 0.1
    assert Options(outside_limit=math.inf).outside_cpus == math.inf
    for bad in (-0.1, math.nan, "lots", True):
        with pytest.raises(ValueError, match="outside_limit must be a number of CPUs >= 0"):
            Options(outside_limit=bad).check()
    monkeypatch.setenv(OUTSIDE_ENV, "-1")
    with pytest.raises(ValueError, match=f"{OUTSIDE_ENV} must be a number of CPUs"):
        Options().check()


def test_a_bad_outside_limit_is_refused_with_one_line(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["review", "main", "HEAD", "--outside-limit", "-1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1 and "--outside-limit" in err[0], err


def test_outside_cpu_counts_its_own_children_as_its_own_and_a_stranger_as_outside(tmp_path):
    """Read as (the CPUs' busy time, the run's own): a child's second of CPU is the run's
    own; a stranger's (a process a shell left behind, not a descendant) only the machine's.
    Each spins for a second of its own CPU time, however loaded the machine (other load only
    adds to the machine's reading)."""
    done = tmp_path / "done"
    spin = ("import time, pathlib, sys\nwhile time.process_time() < 1.0: pass\n"
            "pathlib.Path(sys.argv[1]).write_text('1')\n")
    start = outside_cpu()
    if start[0] is None:
        pytest.skip("no /proc/stat here")
    assert subprocess.run([sys.executable, "-c", spin, str(tmp_path / "child")]).returncode == 0
    end = outside_cpu()
    assert end[1] - start[1] > 0.95 and end[0] - start[0] > 0.9, (start, end)
    start = outside_cpu()
    subprocess.run(["sh", "-c", f"{sys.executable} -c \"{spin}\" {done} &"], check=True)
    deadline = time.monotonic() + 60
    while not done.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.1)  # its exit, and /proc/stat's next tick
    end = outside_cpu()
    assert done.exists() and end[1] - start[1] < 0.5, (start, end)
    assert end[0] - start[0] > 0.9 and outside_cpu(start) > 0.9, (start, end)


@pytest.mark.slow
def test_a_no_op_review_beside_a_busy_machine_is_not_measured(tmp_path):
    """A real review (a subprocess) of a no-op head with a busy loop outside it (a CPU of
    two: the limit four times over): every timing not measured or ambiguous, exit 2."""
    repo = tmp_path / "repo"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for args, cwd in ((["clone", "-q", root, str(repo)], tmp_path),
                      (["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                        "--allow-empty", "-m", "a no-op head"], repo)):
        subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"],
                                 start_new_session=True)]
    try:
        r = subprocess.run([sys.executable, "-m", "flashbench.cli", "review", "HEAD~1", "HEAD",
                            "--bench", CHEAP, "--budget", "10", "--threads", "1", "--json",
                            "--outside-limit", "0.25"], cwd=repo, capture_output=True,
                           text=True, timeout=600, env={**os.environ, "HOME": str(tmp_path)})
    finally:
        for s in spinners:
            s.kill()
            s.wait()
    assert r.returncode == 2, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    timed = [x for x in doc["rows"] if x["kind"] == "time"]
    assert timed and not [x for x in timed if x["verdict"] in ("slower", "faster", "same")]
    # "not measured" (machine-loaded) where a verdict was read, "ambiguous" where none was
    # (a machine loaded several times over decides little): each says the load
    assert all(x["reason"] in ("machine-loaded", "budget-exhausted", "too-few-samples",
                               "budget-unmeasured", "machine-busy") for x in timed), timed
    assert all("processes outside the review kept" in x["detail"] for x in timed
               if x["samples"]), timed
    assert any("Processes outside the review kept" in n for n in doc["notes"]), doc["notes"]
