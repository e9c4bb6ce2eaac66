"""Machine identity: names say the processor, are names (never paths), and concurrent
registrations lose nothing."""

import json
import os
import subprocess
import sys

import pytest

from flashbench.infra.machine import check_machine_name, cpu_token, derived_name, register


@pytest.mark.parametrize("model,token", [
    ("Intel(R) Xeon(R) Processor", "xeon"),
    ("AMD EPYC 7B13 64-Core Processor", "epyc-7b13"),
    ("Intel(R) Xeon(R) Platinum 8480+", "xeon-platinum-8480"),
    ("Intel(R) Core(TM) i7-9700K CPU @ 3.60GHz", "core-i7-9700k"),
    ("", "unknown"),
])
def test_cpu_token(model, token):
    assert cpu_token(model) == token


def test_two_processors_get_two_names():
    xeon = derived_name("Intel(R) Xeon(R) Processor", None, 2, 24 * 2**30, "x86_64")
    epyc = derived_name("AMD EPYC 7B13 64-Core Processor", None, 2, 24 * 2**30, "x86_64")
    assert xeon == "cpu-x86_64-xeon-2cpu-24gb" and epyc == "cpu-x86_64-epyc-7b13-2cpu-24gb"
    gpu = derived_name("Intel(R) Xeon(R) Platinum 8480+", "NVIDIA H200", 16, 0)
    assert gpu == "nvidia-h200-xeon-platinum-8480-16cpu"


@pytest.mark.parametrize("bad", ["../../../somewhere", "../x", "a/b", "..", ".hidden", "",
                                 "-rf", "x" * 101, "a..b", 3])
def test_a_machine_name_is_never_a_path(bad):
    with pytest.raises(ValueError, match="machine name"):
        check_machine_name(bad)


def test_register_refuses_a_path_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(ValueError, match="not a path"):
        register("../evil")
    assert not (tmp_path / ".asv-machine.json").exists()
    assert register("good-name") == "good-name"
    data = json.loads((tmp_path / ".asv-machine.json").read_text())
    assert data["good-name"]["cpu"] and data["version"] == 1


def test_register_names_a_corrupt_file_and_keeps_it(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".asv-machine.json").write_text("{half")
    with pytest.raises(ValueError, match="not a readable asv machine file"):
        register("m")
    assert (tmp_path / ".asv-machine.json").read_text() == "{half"


def test_concurrent_registrations_lose_nothing(tmp_path):
    env = {**os.environ, "HOME": str(tmp_path)}
    code = "import sys; from flashbench.infra.machine import register; register(sys.argv[1])"
    procs = [subprocess.Popen([sys.executable, "-c", code, f"m{i}"], env=env,
                              stderr=subprocess.PIPE, text=True) for i in range(16)]
    errors = [p.communicate()[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), errors
    data = json.loads((tmp_path / ".asv-machine.json").read_text())
    assert {f"m{i}" for i in range(16)} <= set(data)


def test_one_lock_helper_is_exclusive_across_processes(tmp_path):
    """flashbench.infra.locks: what machine, site and review sessions lock with."""
    import textwrap

    from flashbench.infra import locks

    for target in (tmp_path / "folder", tmp_path / "file.lock"):
        if target.name == "folder":
            target.mkdir()
        holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from flashbench.infra.locks import acquire
            fd = acquire({str(target)!r})
            print("held", flush=True)
            sys.stdin.readline()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout.readline().strip() == "held"
            assert locks.acquire(target, wait=False) is None  # held elsewhere
        finally:
            holder.stdin.close()
            holder.wait(timeout=30)
        fd = locks.acquire(target, wait=False)  # its holder is gone: free
        assert fd is not None
        locks.release(fd)
        with locks.locked(target):
            assert locks.acquire(target, wait=False) is None  # flock: per open descriptor
    assert sorted(p.name for p in (tmp_path / "folder").iterdir()) == []  # no lock file


@pytest.mark.parametrize("gpu", [None, "NVIDIA H200"])
def test_the_review_runs_asv_forkserver_with_cuda_kept_out_of_the_parent(tmp_path, monkeypatch,
                                                                          gpu):
    """Every machine, GPU or not, runs asv under forkserver with the NVML CUDA check in
    asv's environment (a spawned process per grid point is what broke the GPU window)."""
    from flashbench.infra import machine
    from flashbench.review import asvrun

    monkeypatch.setattr(machine, "gpu_model", lambda: gpu)
    monkeypatch.setattr(asvrun, "register", lambda name: None)
    (tmp_path / "asv.conf.json").write_text(json.dumps({"version": 1, "repo": "."}))
    seen = {}

    def fake_run(cmd, cwd, env=None):
        seen.update(cmd=cmd, env=env)
        return subprocess.CompletedProcess(cmd, 1, "", "boom")

    monkeypatch.setattr(asvrun, "run_asv_process", fake_run)
    with pytest.raises(asvrun.AsvError, match="wrote no results"):
        asvrun.run_asv(tmp_path, "0" * 40, "m1", quick=True, existing=False, bench=None,
                       log=lambda _: None)
    cmd = seen["cmd"]
    assert cmd[cmd.index("--launch-method") + 1] == "forkserver"
    assert seen["env"]["PYTORCH_NVML_BASED_CUDA_CHECK"] == "1"
