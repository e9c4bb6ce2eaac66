"""What a commit's code leaves running outside the review's timing workers: the process that
lists the suites and the one that measures a peak run that code with no worker around them.
A daemon left there (a double fork and a session of its own) lived through the whole
review: it could kill base's processes while it was timed and again in base alone, so that
a slower head read "coverage gained", OK (a red team, 2026-12-07's open end). Each such
process is killed and fails what left it (flashbench.infra.freeze.reaping)."""

import os
import textwrap
import time

import pytest
from daemon_code import DAEMON

from flashbench.review.worker_client import WorkerError, list_suites, peak_memory

AT_CALL = "def peakmem_left():\n" + textwrap.indent(DAEMON, "    ") + "\n\ndef time_x():\n    pass\n"
AT_IMPORT = DAEMON + "\n\ndef time_x():\n    pass\n"


def _tree(root, code):
    (root / "benchmarks").mkdir(parents=True)
    (root / "benchmarks" / "__init__.py").write_text("")
    (root / "benchmarks" / "suite.py").write_text(code)
    return root


def _gone(path, seconds: float = 10) -> bool:
    """The daemon whose pid ``path`` holds has ended (or was killed before it wrote it)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not path.exists() or not path.read_text():
            return True
        try:
            os.kill(int(path.read_text()), 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def test_a_daemon_the_suites_leave_at_import_fails_their_listing(tmp_path, monkeypatch):
    monkeypatch.setenv("DAEMON_PID", str(tmp_path / "daemon.pid"))
    tree = _tree(tmp_path / "tree", AT_IMPORT)
    started = time.monotonic()
    with pytest.raises(WorkerError, match=r"left 1 process\(es\) running, killed: pid \d+"):
        list_suites(tree, tree / "benchmarks", tmp_path / "list.log")
    assert time.monotonic() - started < 60  # not kept waiting on the daemon's output
    assert _gone(tmp_path / "daemon.pid")


def test_a_daemon_a_peak_memory_call_leaves_fails_that_value(tmp_path, monkeypatch):
    monkeypatch.setenv("DAEMON_PID", str(tmp_path / "daemon.pid"))
    tree = _tree(tmp_path / "tree", AT_CALL)
    assert [b["name"] for b in list_suites(tree, tree / "benchmarks", tmp_path / "l.log")] == \
        ["suite.peakmem_left", "suite.time_x"]  # listed: the daemon starts at the call
    got = peak_memory(tree, tree / "benchmarks", "suite.peakmem_left", 0, tmp_path / "p.log",
                      timeout=120)
    assert got["status"] == "failed" and "left 1 process(es) running" in got["reason"], got
    assert _gone(tmp_path / "daemon.pid")
