"""What a red team's kernels (2026-12-06, /tmp/rt11) did around `flashbench speed`'s clock
from their workers, each a test that failed before: a helper process double-forked out of
the worker's tree (re-parented to the harness, whose sweep reaped it as a zombie, silently:
31x over its honest twin, PASS); a run's reply made slow to parse while a thread finished
the outputs (4.2x, PASS); the harness's threads pinned to one CPU or put to SCHED_IDLE from
a kernel's import, so that torch's rows ran slow (an honest sdpa read 5.5x faster, PASS);
the busy reading summed a CPU's time since boot once the harness's affinity changed."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from flashbench.cli import main

SDPA = ("    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal,"
        " scale=scale)\n")


def _speed(capsys, *only: str, causal: str = "off", seed: int = 4) -> tuple[int, dict]:
    """One small ``flashbench speed`` run of ``only`` (fp32, 1x2x128x32): (its exit status,
    its --json report)."""
    rc = main(["speed", "--dtype", "fp32", "--json", "--quiet", "--seed", str(seed), "--shape",
               "1x2x128x32", "--causal", causal, "--only", *only])
    return rc, json.loads(capsys.readouterr().out)

ESCAPE = textwrap.dedent('''
    import os
    import time

    import torch

    _started = []


    def attn(q, k, v, causal=False, scale=None):
        if not _started:  # its first call: a helper out of the worker's tree
            _started.append(1)
            pid = os.fork()
            if pid == 0:
                if NEW_SESSION:
                    os.setsid()
                if os.fork() == 0:
                    time.sleep(LIFETIME)
                os._exit(0)
            os.waitpid(pid, 0)
''') + SDPA


@pytest.mark.parametrize("new_session, lifetime", [(True, 0.0), (False, 0.0), (False, 30.0)])
def test_a_process_double_forked_out_of_the_worker_fails_its_row(user_module, capsys,
                                                                  new_session, lifetime):
    code = ESCAPE.replace("NEW_SESSION", str(new_session)).replace("LIFETIME", str(lifetime))
    user_module("fbescape", code)
    user_module("fbstays", ESCAPE.replace("if not _started", "if False"))
    rc, report = _speed(capsys, "fbescape:attn", "fbstays:attn")
    rows = {r["backend"]: r for r in report["rows"]}
    assert rc == 1 and rows["fbstays:attn"]["status"] == "PASS", rows["fbstays:attn"]
    bad = rows["fbescape:attn"]
    assert bad["status"] == "FAIL", bad
    why = bad["failures"]["work outside the timed call"]
    assert why.startswith("a process left its worker's tree (a double fork"), why
    assert ("ended (a zombie)" in why) == (lifetime == 0.0), why


def test_the_harness_stops_a_cpu_worker_before_it_parses_the_runs_reply(monkeypatch):
    """The clock stops as a run's reply is read; the worker is stopped at that moment, before
    the reply is unpickled (a probe's replies took 400 ms to unpickle while a thread of its
    finished the outputs: 4.2x, PASS), and a reply over REPLY_BYTES is not read at all."""
    from flashbench.backends import worker as worker_module
    from flashbench.backends.worker import Worker
    from flashbench.infra import freeze
    from flashbench.kernels.validate import BackendFailed
    from flashbench.timed.commit import MemoryReader

    w = Worker("flashbench.kernels.torch_peers:sdpa_output")
    w.call({"op": "null"})
    reader, states = MemoryReader(w.proc.pid), []
    real = worker_module._unpack

    def unpack(data):
        freeze.wait_stopped(w.proc.pid)  # a signal sent takes hold in a moment (50 ms at most)
        with open(f"/proc/{w.proc.pid}/stat") as f:
            states.append(f.read().rsplit(")", 1)[1].split()[0])
        return real(data)

    monkeypatch.setattr(worker_module, "_unpack", unpack)
    try:
        w.call({"op": "null"}, on_reply=reader.stop)
        assert reader.held and states[-1] in "tT", states  # stopped (SIGSTOP) as parsed
        reader.resume()
        w.call({"op": "null"})
        assert states[-1] not in "tT", states  # going on, once let go
        with pytest.raises(BackendFailed, match="bytes"):
            w.call({"op": "null"}, most_bytes=8)
        with pytest.raises(BackendFailed, match="bytes"):  # and stopped for good
            w.call({"op": "null"})
    finally:
        if reader.held:
            reader.resume()
        w.close()


RESCHEDULE = textwrap.dedent('''
    import os

    import torch


    def _harness():
        with open(f"/proc/{os.getppid()}/stat") as f:  # the zygote's parent
            return int(f.read().rsplit(")", 1)[1].split()[1])


    _H = _harness()
    for _t in os.listdir(f"/proc/{_H}/task"):
        try:
            os.sched_setaffinity(int(_t), {min(os.sched_getaffinity(_H))})
            os.sched_setscheduler(int(_t), os.SCHED_IDLE, os.sched_param(0))
        except OSError:
            pass


    def attn(q, k, v, causal=False, scale=None):
''') + SDPA


def test_a_kernel_that_reschedules_the_harness_at_import_fails_the_run(user_module, capsys):
    user_module("fbresched", RESCHEDULE)
    cpus = os.sched_getaffinity(0)
    try:
        rc, report = _speed(capsys, "fbresched:attn", "torch-sdpa", seed=5)
    finally:  # this test's own process was the harness
        for t in os.listdir("/proc/self/task"):
            try:
                os.sched_setaffinity(int(t), cpus)
                os.sched_setscheduler(int(t), os.SCHED_OTHER, os.sched_param(0))
            except OSError:
                pass
    assert rc == 1 and report["passed"] is False
    (why,) = report["meta"]["interference"]
    assert why.startswith("this process's scheduling was changed before the first timing"), why
    assert "SCHED_IDLE" in why and why.endswith("set back"), why
    assert report["meta"]["host"]["cpus"] == len(cpus)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: no affinity to widen")
def test_the_busy_reading_keeps_the_cpus_it_started_with():
    """A reading of the CPUs' busy time after the affinity widened summed the new CPU's time
    since boot: "8114 CPUs busy" on 2."""
    code = ("import os\nfrom flashbench.infra.cpuload import machine_cpu, cpus_watched\n"
            "a = machine_cpu()\nos.sched_setaffinity(0, set(range(os.cpu_count())))\n"
            "b = machine_cpu()\nprint(b - a, len(cpus_watched()))")
    one = min(os.sched_getaffinity(0))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       check=True, preexec_fn=lambda: os.sched_setaffinity(0, {one}))
    gained, watched = r.stdout.split()
    assert watched == "1" and float(gained) < 1.0, r.stdout


SABOTEUR = textwrap.dedent('''
    import os
    import threading
    import time

    import torch


    def _leave():  # a process out of its worker's tree every 5 ms, from its import on
        while True:
            pid = os.fork()
            if pid == 0:
                if os.fork() == 0:
                    time.sleep(0.01)
                os._exit(0)
            os.waitpid(pid, 0)
            time.sleep(0.005)


    threading.Thread(target=_leave, daemon=True).start()


    def attn(q, k, v, causal=False, scale=None):
''') + SDPA


def test_a_kernel_that_leaves_processes_all_the_time_fails_no_other_row(user_module, capsys):
    """Each other kernel's worker is stopped while a row is timed: a saboteur's processes,
    left while another kernel's row ran, failed that row."""
    user_module("fbsaboteur", SABOTEUR)
    user_module("fbhonest", ESCAPE.replace("if not _started", "if False"))
    rc, report = _speed(capsys, "fbhonest:attn", "fbsaboteur:attn", "torch-sdpa", causal="both")
    status = {(r["backend"], r["causal"]): r["status"] for r in report["rows"]}
    why = {(r["backend"], r["causal"]): (r["failures"], r["reason"]) for r in report["rows"]}
    assert rc == 1 and report["passed"] is False
    for causal in (False, True):
        assert status["fbhonest:attn", causal] == "PASS", why
        assert status["torch-sdpa", causal] == "PASS", why
        assert status["fbsaboteur:attn", causal] == "FAIL", why
    assert report["meta"]["strays"], report["meta"]  # left between rows: the run's


PEEK = textwrap.dedent('''
    import os

    import torch


    def _harness():
        parent = os.getppid()  # the zygote, whose parent is the harness; or the harness
        with open(f"/proc/{parent}/cmdline", "rb") as f:
            if b"--zygote" not in f.read():
                return parent
        with open(f"/proc/{parent}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])


    def _siblings():  # the other workers (a forked one's parent is the zygote)
        for n in os.listdir("/proc"):
            try:
                with open(f"/proc/{n}/cmdline", "rb") as f:
                    if b"flashbench.backends.worker" in f.read() and int(n) != os.getpid() \
                            and int(n) != os.getppid():
                        yield int(n)
            except (OSError, ValueError):
                continue


    _SAID = []
    for _pid in (_harness(), os.getppid(), *_siblings()):
        try:
            os.close(os.open(f"/proc/{_pid}/mem", os.O_RDWR))
            _SAID.append("opened")
        except OSError as exc:
            _SAID.append(type(exc).__name__)
    if "fbpeek2" in __name__ or os.environ.get("FB_PEEK_ONE"):
        with open(os.environ["FB_PEEK_OUT"], "w") as f:
            f.write(" ".join(_SAID))


    def attn(q, k, v, causal=False, scale=None):
''') + SDPA


@pytest.mark.parametrize("command", ["speed", "check"])
def test_a_kernel_cannot_open_the_harness_memory(user_module, capsys, tmp_path, monkeypatch,
                                                 command):
    """A red-team probe's kernel opened /proc/<harness>/mem for writing from its import (root,
    no Yama): the harness and the zygote are not dumpable while kernels run, and a worker
    holds no CAP_SYS_PTRACE (flashbench.infra.sealed)."""
    from flashbench.infra.sealed import dumpable

    out = tmp_path / "peek.txt"
    monkeypatch.setenv("FB_PEEK_OUT", str(out))
    user_module("fbpeek", PEEK)
    user_module("fbpeek2", PEEK)  # imported second: the first's worker is its sibling
    before = dumpable()
    args = (["--dtype", "fp32", "--json", "--shape", "1x2x64x32"]
            + (["--quiet", "--causal", "off", "--only", "fbpeek:attn", "fbpeek2:attn"]
               if command == "speed" else ["--backend", "fbpeek:attn", "--backend", "fbpeek2:attn"]))
    assert main([command, *args]) == 0
    capsys.readouterr()
    said = out.read_text().split()
    assert said[:2] == ["PermissionError", "PermissionError"], said  # the harness, zygote
    if os.geteuid() == 0:  # and, as root, the other kernel's worker (else the OS's scope)
        assert len(said) > 2 and set(said[2:]) == {"PermissionError"}, said
    assert dumpable() == before  # as it was, after the run


CLONE = textwrap.dedent('''
    import ctypes
    import os
    import sys

    import torch

    _started = []


    def attn(q, k, v, causal=False, scale=None):
        if not _started:  # its first call: the zygote's child, the worker's sibling
            _started.append(1)
            pid = ctypes.CDLL(None, use_errno=True).syscall(56, 0x8000 | 17, 0, 0, 0, 0)
            if pid == 0:  # clone(CLONE_PARENT | SIGCHLD), x86-64's number
                os.setsid()
                os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(30)"])
''') + SDPA


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="clone's syscall number is x86-64's")
def test_a_process_cloned_as_the_workers_sibling_fails_its_row(user_module, capsys):
    """A second red team's helper (2026-12-06) was cloned with CLONE_PARENT: the zygote's
    child in a session of its own, on no reading and in no group the harness stopped; it
    precomputed each new content (34 of 34 calls hit, PASS)."""
    user_module("fbclone", CLONE)
    rc, report = _speed(capsys, "fbclone:attn")
    (row,) = report["rows"]
    assert rc == 1 and row["status"] == "FAIL", row
    assert "clone with CLONE_PARENT" in row["failures"]["work outside the timed call"], row


def test_a_module_written_during_the_run_is_not_imported_by_the_harness(tmp_path,
                                                                        monkeypatch):
    """A second red team's kernel wrote code into a module the harness imported later in
    the same run (it switched the plant check off: a zeros kernel PASSed, 54x) or in later
    runs (a torch module imported lazily)."""
    import importlib
    import py_compile

    from flashbench.measure.planted import ImportGuard

    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "fbold.py").write_text("X = 1\n")
    (tmp_path / "fbpyc.py").write_text("X = 1\n")
    py_compile.compile(str(tmp_path / "fbpyc.py"))  # genuine, made before the run
    guard = ImportGuard.install()
    try:
        (tmp_path / "fbnew.py").write_text("X = 2\n")  # a kernel's, during the run
        pyc = importlib.util.cache_from_source(str(tmp_path / "fbpyc.py"))
        code = compile("X = 666\n", str(tmp_path / "fbpyc.py"), "exec")
        with open(pyc, "r+b") as f:  # its header kept, its code another's
            header = f.read(16)
            f.seek(0)
            f.truncate()
            f.write(header + __import__("marshal").dumps(code))
        importlib.invalidate_caches()
        assert importlib.import_module("fbold").X == 1
        with pytest.raises(ImportError, match="written during this run"):
            importlib.import_module("fbnew")
        with pytest.raises(ImportError, match="does not compile to"):
            importlib.import_module("fbpyc")
        assert not os.path.exists(pyc)  # deleted
        assert [r.split(":")[0] for r in guard.refused] == [
            str(tmp_path / "fbnew.py"), str(tmp_path / "fbpyc.py")]
    finally:
        guard.remove()
        for name in ("fbold", "fbnew", "fbpyc"):
            sys.modules.pop(name, None)


ZYGOTE = textwrap.dedent('''
    import os
    import resource

    import torch

    _Z = os.getppid()  # a forked worker's parent: the zygote, whose later workers inherit
    for _t in os.listdir(f"/proc/{_Z}/task"):
        os.sched_setscheduler(int(_t), os.SCHED_IDLE, os.sched_param(0))
    with open(f"/proc/{_Z}/status") as _f:
        _kb = int(next(line for line in _f if line.startswith("VmSize")).split()[1])
    resource.prlimit(_Z, resource.RLIMIT_AS, ((_kb + 1024) * 1024,) * 2)


    def attn(q, k, v, causal=False, scale=None):
''') + SDPA


def test_a_kernel_that_limits_the_zygote_changes_no_other_kernels_verdict(user_module,
                                                                          capsys):
    """A second red team's kernel set the zygote to SCHED_IDLE (nice 19, one CPU) or its
    address space to 1 MB from its import: workers forked later inherited it (an honest
    kernel read 3-14x slower, or FAILed "can't allocate memory"). The zygote and each row's
    worker are compared with the harness at each row, set back or started again."""
    user_module("fbzygote", ZYGOTE)
    user_module("fbhonest2", ESCAPE.replace("if not _started", "if False"))
    rc, report = _speed(capsys, "fbzygote:attn", "fbhonest2:attn")
    rows = {r["backend"]: r for r in report["rows"]}
    honest = rows["fbhonest2:attn"]
    assert rc == 1 and honest["status"] == "PASS", (honest["failures"], honest["reason"])
    said = " ".join(report["meta"]["interference"])
    assert "the zygote (every worker forked from it inherits it) was not scheduled" in said
    assert "SCHED_IDLE" in said and "resource limits" in said, said


LIMITS = textwrap.dedent('''
    import os
    import resource

    import torch

    with open(f"/proc/{os.getppid()}/stat") as _f:  # the zygote's parent: the harness
        _H = int(_f.read().rsplit(")", 1)[1].split()[1])
    _soft, _hard = resource.prlimit(_H, resource.RLIMIT_NOFILE)
    resource.prlimit(_H, resource.RLIMIT_NOFILE, (_soft - 1, _hard))


    def attn(q, k, v, causal=False, scale=None):
''') + SDPA


def test_a_kernel_that_lowers_the_harness_limits_fails_the_run(user_module, capsys):
    import resource

    user_module("fblimits", LIMITS)
    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        rc, report = _speed(capsys, "fblimits:attn")
    finally:  # this test's process was the harness
        resource.setrlimit(resource.RLIMIT_NOFILE, before)
    assert rc == 1 and any("resource limits were changed by a kernel's import" in why
                           for why in report["meta"]["interference"]), report["meta"]


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
def test_a_process_started_in_the_rows_first_clock_tick_is_the_rows():
    """/proc counts a start time in whole clock ticks, truncated: a helper its kernel
    started within 10 ms of its row's start read as older than the row, was told to no row
    and its run FAILed with every row PASS (a clean-clone CI, 2026-12-07: the CLONE_PARENT
    test above). Each of these children starts after ``since`` and is the row's."""
    from flashbench.backends.strays import escaped, now_since_boot

    for _ in range(10):
        since = now_since_boot()
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                                 start_new_session=True)
        try:
            after, before = escaped(since)
        finally:
            child.kill()
            child.wait()
        assert any(f"pid {child.pid}:" in s for s in after), (after, before)
        assert not any(f"pid {child.pid}:" in s for s in before), (after, before)


def test_a_kernel_that_moves_its_inputs_storage_is_named_for_it(user_module, capsys):
    """A probe (2026-12-07): a kernel that calls ``q.share_memory_()`` (what
    torch.multiprocessing does to a tensor it sends to a pool) read "modified its inputs in
    place: q in 10 of 33 pool inputs", though no value changed: the harness read back the
    old pages. Its storage moved, so the harness's later inputs would not reach it: still
    a fault, now named for what it did; a kernel that sends a copy passes."""
    user_module("fbmoves", "import torch\n\n\ndef attn(q, k, v, causal=False, scale=None):\n"
                "    q.share_memory_()\n" + SDPA)
    user_module("fbcopies", "import torch\n\n\ndef attn(q, k, v, causal=False, scale=None):\n"
                "    q.clone().share_memory_()\n" + SDPA)
    rc, report = _speed(capsys, "fbmoves:attn", "fbcopies:attn")
    rows = {r["backend"]: r for r in report["rows"]}
    assert rc == 1 and rows["fbcopies:attn"]["status"] == "PASS", rows["fbcopies:attn"]
    why = rows["fbmoves:attn"]["failures"]
    assert any(v.startswith("q's storage moved by a call (its data no longer where it was "
                            "handed: Tensor.share_memory_()") for v in why.values()), why
