"""A kernel's helper process in a group of its own cannot act while another kernel works
(issue 35). A red-team probe (2026-12-07) forked, at its module's import, a helper that
left its worker's process group (setpgid) but not its session: only the worker and its
group were stopped while other rows were timed, so the helper stopped the harness 20 ms at
a time while torch's row was timed (the kernel "8.76x faster", PASS), forked busy children
it never waited for (2.6x, PASS), or SIGKILLed another user's worker during its call (that
honest kernel FAILed). Each test here failed before: the worker's whole family is held now,
and a stop of the harness from outside is the run's fault."""

import json
import textwrap

import pytest

from flashbench.cli import main

HELPER = textwrap.dedent('''
    import ctypes, mmap, os, signal, struct, time

    import torch

    CALLED = mmap.mmap(-1, 8)  # shared with the helper: the kernel's calls so far
    ACTION = os.environ.get("FB_HELPER_ACTION", "watch")
    MARK = os.environ["FB_HELPER_MARK"]


    def _stat(pid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                x = f.read().rsplit(")", 1)[1].split()
            return x[0], int(x[1])
        except OSError:
            return None, None


    def _harness():
        parent = os.getppid()
        with open(f"/proc/{parent}/cmdline", "rb") as f:
            if b"--zygote" in f.read():  # forked from the zygote: its parent
                return _stat(parent)[1]
        return parent


    def _helper(worker, harness):
        ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG: SIGKILL
        os.setpgid(0, 0)  # a group of its own, the worker's session kept
        held_since = None
        while True:
            state, _ = _stat(worker)
            if state is None or state == "Z":
                os._exit(0)
            calls = struct.unpack("q", CALLED[:8])[0]
            if ACTION == "watch":  # its worker held 20 ms while this one runs: the marker
                if state in "tT":
                    held_since = held_since or time.monotonic()
                    if time.monotonic() - held_since > 0.02:
                        open(MARK, "w").write("ran while its worker was held\\n")
                else:
                    held_since = None
            elif ACTION in ("kill", "pause"):  # every other worker the zygote forked
                zygote = _stat(worker)[1]
                for n in os.listdir("/proc"):
                    if n.isdigit() and int(n) != worker and _stat(int(n))[1] == zygote \\
                            and _stat(int(n))[0] not in "tT":
                        os.kill(int(n), signal.SIGKILL if ACTION == "kill" else signal.SIGSTOP)
                        open(MARK, "a").write(f"{ACTION} {n}\\n")
            time.sleep(0.001)


    _worker = os.getpid()
    if os.environ.get("FB_HELPER_WORKER") is None and _stat(_worker)[1] is not None:
        os.environ["FB_HELPER_WORKER"] = "1"  # its worker's import: a helper (not the harness's)
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)
        _h = _harness()
        if os.fork() == 0:
            try:
                _helper(_worker, _h)
            finally:
                os._exit(0)


    def fwd(q, k, v, causal=False, scale=None):
        CALLED[:8] = struct.pack("q", struct.unpack("q", CALLED[:8])[0] + 1)
        if ACTION == "stop" and struct.unpack("q", CALLED[:8])[0] == 3:  # the harness stopped
            os.kill(_h, signal.SIGSTOP)  # once, from its call (the harness waits on the
            time.sleep(0.03)  # reply then: a helper's stop could meet the harness stopping
            os.kill(_h, signal.SIGCONT)  # it, and neither would go on)
            open(MARK, "w").write("stopped the harness\\n")
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                                scale=scale)
''')

HONEST = textwrap.dedent('''
    import torch


    def fwd(q, k, v, causal=False, scale=None):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                                scale=scale)
''')


@pytest.fixture
def helper(user_module, tmp_path, monkeypatch):
    user_module("fbhelper", HELPER)
    user_module("fbhonest", HONEST)
    mark = tmp_path / "mark"
    monkeypatch.setenv("FB_HELPER_MARK", str(mark))
    monkeypatch.delenv("FB_HELPER_WORKER", raising=False)

    def run(action: str, *args: str):
        monkeypatch.setenv("FB_HELPER_ACTION", action)
        return mark

    return run


def _speed(capsys, *only: str) -> tuple[int, dict]:
    rc = main(["speed", "--dtype", "fp32", "--json", "--quiet", "--seed", "3", "--shape",
               "1x2x128x32", "--samples", "20", "--causal", "off", "--only", *only])
    return rc, json.loads(capsys.readouterr().out)


def test_a_helper_in_a_group_of_its_own_is_held_with_its_worker(helper, capsys):
    mark = helper("watch")
    rc, report = _speed(capsys, "fbhelper:fwd", "torch-sdpa", "fbhonest:fwd")
    rows = {r["backend"]: r for r in report["rows"]}
    assert not mark.exists(), mark.read_text()  # it never ran while its worker was held
    assert rows["torch-sdpa"]["status"] == "PASS" and rows["fbhonest:fwd"]["status"] == "PASS"
    assert report["meta"]["interference"] == []
    assert rc in (0, 1)  # its own row: its polling may read as work in its idle pauses, and
    # its helper, killed by the worker's end, may be found as a stray


def test_a_kernel_that_stops_the_harness_fails_the_run(helper, capsys):
    mark = helper("stop")
    rc, report = _speed(capsys, "fbhelper:fwd")
    assert mark.read_text() == "stopped the harness\n"
    said = report["meta"]["interference"]
    assert any("stopped from outside and continued (SIGCONT) while fbhelper:fwd was timed"
               in s for s in said), said
    assert rc == 1 and report["passed"] is False


@pytest.mark.parametrize("action", ["kill", "pause"])
def test_a_kernel_that_kills_or_stops_another_users_worker_fails_no_honest_kernel(
        helper, capsys, action):
    """pause: SIGSTOP, which left the honest worker's next call to time out (--timeout)."""
    mark = helper(action)
    rc = main(["check", "--json", "--quiet", "--dtype", "fp32", "--shape", "1x2x64x32",
               "--causal", "off", "--dist", "normal", "--timeout", "20", "--only",
               "fbhelper:fwd", "fbhonest:fwd"])
    report = json.loads(capsys.readouterr().out)
    honest = [r for r in report["backends"] if r["backend"] == "fbhonest:fwd"]
    assert honest and all(r["passed"] for r in honest), [r.get("failed") for r in honest]
    # its helper dies with its worker (PR_SET_DEATHSIG), or is found alive a moment after
    # the workers ended and fails the check as a process the kernel left (common.strays_fail)
    assert rc == 0 or (rc == 1 and report["meta"].get("strays")), report["meta"]
    assert mark.exists()  # it killed or stopped the honest worker between its calls
