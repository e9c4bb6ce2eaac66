"""A kernel's worker is held still with everything it started (flashbench.infra.freeze;
issue 35): a red-team probe (2026-12-07) forked a helper into a process group of its own
(setpgid, the worker's session kept), which ran on while the worker's group was stopped for
torch's row. Here a process tree like that worker's: each of its processes stops with it
and goes on after, a nested hold leaves it to the outer one, and a stop from outside is
counted."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from flashbench.infra import freeze

# a session leader (as a worker is) with: a child in a group of its own, that child's own
# child with SIGCHLD ignored, forking a short-lived process every 5 ms, and a child that left
# the session (setsid): each prints its pid
TREE = textwrap.dedent('''
    import os, signal, sys, time
    def loop():
        while True:
            time.sleep(0.001)
    def spawner():
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)
        while True:
            if os.fork() == 0:
                t = time.time()
                while time.time() - t < 0.002:
                    pass
                os._exit(0)
            time.sleep(0.005)
    pids = []
    for kind in ("group", "setsid"):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            if kind == "group":
                os.setpgid(0, 0)
                if os.fork() == 0:
                    os.write(w, f"{os.getpid()} ".encode())
                    spawner()
            else:
                os.setsid()
            os.write(w, f"{os.getpid()} ".encode())
            loop()
        pids.append(pid)
    time.sleep(0.3)
    print(" ".join(str(p) for p in pids), flush=True)
    loop()
''')


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


@pytest.fixture
def tree():
    proc = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        proc.stdout.readline()
        yield proc.pid
    finally:  # its descendants first (the setsid one outlived a killpg of the leader)
        freeze.end_descendants(proc.pid)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="Linux's /proc")
def test_a_worker_is_held_with_its_group_its_session_and_its_descendants(tree):
    members = freeze.family(tree)
    assert len(members) >= 4  # the leader, the grouped child and its spawner, the setsid one
    assert os.getpid() not in members
    with freeze.held(tree):
        held = freeze.family(tree)
        time.sleep(0.05)  # a spawner still running would have forked again meanwhile
        assert freeze.family(tree) == held
        assert {p: _state(p) for p in held} == {p: "T" for p in held}
        with freeze.held(tree):  # nested: left to the outer hold
            pass
        assert all(_state(p) == "T" for p in held)
    time.sleep(0.05)
    assert all(_state(p) in ("S", "R") for p in members if _state(p) is not None)
    # stopped from outside between two holds (a kernel's process may): resume continues it
    for p in members:
        try:
            os.kill(p, signal.SIGSTOP)
        except ProcessLookupError:  # one of the spawner's 2 ms children, ended
            pass
    freeze.resume(tree)
    time.sleep(0.05)
    assert all(_state(p) in ("S", "R") for p in members if _state(p) is not None)


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="Linux's /proc")
def test_a_stop_from_outside_is_counted():
    code = f"import os, signal, time\nos.kill({os.getpid()}, signal.SIGSTOP)\ntime.sleep(0.05)\n" \
           f"os.kill({os.getpid()}, signal.SIGCONT)"
    with freeze.counting_continues():
        before = freeze.continued()
        subprocess.run([sys.executable, "-c", code], check=True)
        time.sleep(0.01)  # the handler runs at the next bytecode of the main thread
        assert freeze.continued() == before + 1
    subprocess.run([sys.executable, "-c", code], check=True)  # not counted outside it
    assert freeze.continued() == before + 1


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="Linux's /proc")
def test_a_workers_descendants_end_before_it_does(tree):
    """The review's worker ends what its sides' code left first (a red team's helper, in a
    group of its own, outlived the review and killed base's processes in the base-alone
    worker): every live descendant, the spawner's short-lived children too."""
    members = freeze.family(tree) - {tree}  # (a spawner's child may end meanwhile)
    assert len(members) >= 3 and freeze.end_descendants(tree) >= 3
    time.sleep(0.05)
    assert all(_state(p) in (None, "Z") for p in members), {p: _state(p) for p in members}
    assert _state(tree) in ("S", "R")
    assert freeze.family(tree) - {tree} <= {p for p in freeze.family(tree)
                                            if _state(p) in (None, "Z")}


def test_what_a_block_leaves_running_is_killed_and_what_it_found_is_kept(tmp_path):
    """reaping(): an orphan of a process the block started (a double fork into a session
    of its own) comes back here, is killed and named; a child started before the block and
    one the block waited for are not touched; a nested block leaves it to the outer."""
    before = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    pid_file = tmp_path / "daemon.pid"
    daemon = ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
              f"        open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
              "        time.sleep(60)\n    os._exit(0)\nos.wait()\n")
    try:
        with freeze.reaping() as outer:
            with freeze.reaping() as inner:
                subprocess.run([sys.executable, "-c", "print('waited for')"], check=True,
                               capture_output=True)
            assert inner == []
            subprocess.run([sys.executable, "-c", daemon], check=True)
            deadline = time.monotonic() + 10
            while not (pid_file.exists() and pid_file.read_text()):
                assert time.monotonic() < deadline, "the daemon never started"
                time.sleep(0.05)
            pid = int(pid_file.read_text())
            assert os.getsid(pid) != os.getsid(0)  # out of reach of a group or session kill
        assert len(outer) == 1 and outer[0].startswith(f"pid {pid}: "), outer
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # killed and reaped here: no zombie either
        assert before.poll() is None  # what ran before the block runs on
    finally:
        before.kill()
        before.wait()
