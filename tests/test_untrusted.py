"""The kernel under test is untrusted code (issue 24): whatever a user's kernel does to its
inputs, the process or stdout, it fails alone, by name, and every other verdict stands."""

import json
import subprocess
import sys
import textwrap

import pytest
from daemon_code import DAEMON
from hypothesis import given, settings
from hypothesis import strategies as st

from flashbench.cli import main

KERNELS = textwrap.dedent('''
    import math
    import os
    import sys
    import time

    import torch

    def _attn(q, k, v, causal=False, scale=None):
        scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
        s = (q.double() @ k.double().transpose(-1, -2)) * scale
        if causal:
            nq, nk = q.shape[-2], k.shape[-2]
            keep = torch.ones(nq, nk, dtype=torch.bool).tril(nk - nq)
            s = s.masked_fill(~keep, float("-inf"))
        lse = torch.logsumexp(s, -1)
        p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
        return (p @ v.double()).to(q.dtype), lse

    def good(q, k, v, causal=False, scale=None):
        return _attn(q, k, v, causal, scale)

    def vandal(q, k, v, causal=False, scale=None):
        out = _attn(q, k, v, causal, scale)
        q.mul_(3)
        k.zero_()
        v.add_(1)
        return out

    def vandal64(q, k, v, causal=False, scale=None):
        return vandal(q, k, v, causal, scale)
    vandal64.flashbench_dtypes = ("fp64", "fp32", "fp16", "bf16")

    def good64(q, k, v, causal=False, scale=None):
        return _attn(q, k, v, causal, scale)
    good64.flashbench_dtypes = ("fp64", "fp32", "fp16", "bf16")

    def exits(q, k, v, causal=False, scale=None):
        sys.exit(0)

    def interrupts(q, k, v, causal=False, scale=None):
        raise KeyboardInterrupt

    def dies(q, k, v, causal=False, scale=None):
        os._exit(0)

    def sparse(q, k, v, causal=False, scale=None):
        return _attn(q, k, v, causal, scale)[0].to_sparse()

    def meta(q, k, v, causal=False, scale=None):
        return torch.empty(*q.shape[:3], v.shape[-1], dtype=q.dtype, device="meta")

    def odd_object(q, k, v, causal=False, scale=None):
        return (x for x in range(3))

    def chatty(q, k, v, causal=False, scale=None):
        print("hello from the kernel")
        return _attn(q, k, v, causal, scale)

    def hangs(q, k, v, causal=False, scale=None):
        time.sleep(3600)

    def grad_vandal(q, k, v, causal=False, scale=None):
        o, lse = _attn(q, k, v, causal, scale)
        with torch.no_grad():
            q.mul_(3)
        return o, lse
    grad_vandal.flashbench_differentiable = True

    def whoami(q, k, v, causal=False, scale=None):
        with open(os.environ["WHOAMI"], "a") as f:
            f.write(f"{os.getpid()} {os.getppid()} {os.getsid(0)}\\n")
        return _attn(q, k, v, causal, scale)

    def _zygote_parent():
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            return b"--zygote" in f.read()  # never the harness (a spawned worker's parent)

    def stopper(q, k, v, causal=False, scale=None):
        if _zygote_parent():
            os.kill(os.getppid(), 19)  # SIGSTOP
        return _attn(q, k, v, causal, scale)

    def closer(q, k, v, causal=False, scale=None):
        os.closerange(3, 4096)  # the protocol pipes among them
        time.sleep(3600)

    def zygote_interprets(q, k, v, causal=False, scale=None):
        with open(f"/proc/{os.getppid()}/maps") as f:
            assert "libtriton" in f.read(), "the zygote did not import Triton"
        return _attn(q, k, v, causal, scale)

    def parricide(q, k, v, causal=False, scale=None):
        if _zygote_parent():
            os.kill(os.getppid(), 9)
        return _attn(q, k, v, causal, scale)

    print("imported and printing at import time")
''')


@pytest.fixture
def kernels(tmp_path, monkeypatch):
    """``fbuntrusted`` importable from a temp dir on sys.path (and by the workers)."""
    (tmp_path / "fbuntrusted.py").write_text(KERNELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "fbuntrusted", raising=False)
    yield tmp_path
    sys.modules.pop("fbuntrusted", None)


def check(capsys, *args, dtypes=("fp32",), shape="1x2x64x32"):
    rc = main(["check", "--shape", shape, "--causal", "off", "--dist", "normal",
               "--dtype", *dtypes, "--json", "--quiet", *args])
    out = capsys.readouterr().out
    return rc, json.loads(out)


def rows(report, backend):
    return [r for r in report["backends"] if r["backend"] == backend]


def test_a_kernel_that_changes_its_inputs_fails_alone(kernels, capsys):
    """Probe 1: q.mul_(3); k.zero_(); v.add_(1) after a correct o: that kernel FAILs by
    name, the correct kernel run after it on the same case PASSes."""
    rc, report = check(capsys, "--backend", "fbuntrusted:vandal", "--backend", "fbuntrusted:good",
                       "--backend", "torch-naive")
    (bad,) = rows(report, "fbuntrusted:vandal")
    assert not bad["passed"] and "modified its inputs in place (q, k, v)" in bad["failed"]
    (good,) = rows(report, "fbuntrusted:good")
    assert good["passed"] and good["o_ratio"] < 2
    (peer,) = rows(report, "torch-naive")
    assert peer["passed"]
    assert rc == 1 and not report["passed"]


def test_a_vandal_declaring_fp64_cannot_reach_the_reference_or_the_yardsticks(kernels, capsys):
    """Probe 2: a kernel that declares fp64 got flashbench's own arrays (from_numpy does
    not copy); after it, every later dtype's yardstick came from corrupted inputs."""
    rc, report = check(capsys, "--backend", "fbuntrusted:vandal64",
                       "--backend", "fbuntrusted:good64", dtypes=("fp64", "fp32", "bf16"))
    assert all(not r["passed"] for r in rows(report, "fbuntrusted:vandal64"))
    goods = rows(report, "fbuntrusted:good64")
    assert [r["dtype"] for r in goods] == ["fp64", "fp32", "bf16"]
    assert all(r["passed"] for r in goods[1:])  # (fp64: its LSE is judged against 0 error)
    assert all(r["o"]["max_abs"] < 0.05 for r in goods + report["dtypes"])  # inputs untouched
    assert all(r["o_standard"]["max_abs"] < 0.05 for r in goods)  # the yardsticks too
    assert all(r["passed"] for r in report["dtypes"] + report["exactness"])
    assert rc == 1


WAYS_OUT = {
    "exits": "called sys.exit(0)",
    "interrupts": "raised KeyboardInterrupt",
    "dies": "its worker process ended during the call (exit status 0)",
    "sparse": "returned o as a torch.sparse_coo tensor; expected a dense (strided)",
    "meta": "returned o on the meta device",
    "odd_object": "returned a generator; expected o or (o, lse) torch tensors",
}


def test_each_way_out_fails_the_kernel_and_the_check_goes_on(kernels, capsys):
    """Probes 3 and 4: sys.exit, KeyboardInterrupt, a dying process and odd outputs FAIL
    each kernel with its reason, all in one check; the kernel after them is still judged."""
    names = [f"fbuntrusted:{fn}" for fn in WAYS_OUT]
    rc, report = check(capsys, *(a for n in names for a in ("--backend", n)),
                       "--backend", "fbuntrusted:good")
    for name, reason in zip(names, WAYS_OUT.values(), strict=True):
        (row,) = rows(report, name)
        assert not row["passed"] and reason in row["failed"], row
    assert rows(report, "fbuntrusted:good")[0]["passed"]
    assert rc == 1


def test_prints_do_not_reach_stdout(kernels, capsys):
    """Probe 4: a kernel that prints (at import and per call) leaves --json parseable."""
    rc, report = check(capsys, "--backend", "fbuntrusted:chatty")
    assert rc == 0 and rows(report, "fbuntrusted:chatty")[0]["passed"]


def test_prints_reach_the_stderr_the_harness_has_now(kernels, capfd):
    """A worker writes to the harness's stderr of the moment (passed at each start), not to
    the one its zygote was started with (an earlier test's capture)."""
    rc = main(["check", "--shape", "1x2x64x32", "--causal", "off", "--dist", "normal",
               "--dtype", "fp32", "--json", "--quiet", "--backend", "fbuntrusted:chatty"])
    out, err = capfd.readouterr()
    assert rc == 0 and json.loads(out)["passed"]
    assert "hello from the kernel" in err and "imported and printing at import time" in err


def _whoami(kernels, monkeypatch, capsys, start, *others):
    monkeypatch.setenv("FLASHBENCH_WORKER_START", start)
    monkeypatch.setenv("WHOAMI", str(kernels / "who"))
    rc, report = check(capsys, "--only", "fbuntrusted:whoami", *others)
    assert rc == 0 and all(r["passed"] for r in report["backends"])
    assert {r["backend"] for r in report["backends"]} == {"fbuntrusted:whoami", *others}
    return {tuple(map(int, line.split())) for line in (kernels / "who").read_text().split("\n")
            if line}


def test_workers_are_forked_each_in_its_own_session_and_a_kernel_cannot_stop_the_rest(
        kernels, monkeypatch, capsys):
    """Each worker is the zygote's child (not the harness's), in a session of its own; a
    kernel that kills the zygote passes or fails alone and the next worker starts from a
    new one (parricide passes: its result is right; good, after it, passes)."""
    import os

    from flashbench.backends import zygote

    # on a CPU the workers interpret Triton: their zygote imported its interpreter
    cpu = () if __import__("torch").cuda.is_available() else ("fbuntrusted:zygote_interprets",)
    who = _whoami(kernels, monkeypatch, capsys, "fork", "fbuntrusted:parricide",
                  "fbuntrusted:good", *cpu)
    ((pid, ppid, sid),) = who
    assert ppid not in (os.getpid(), 1) and sid == pid
    assert zygote.zygote().proc.pid != ppid  # the one parricide killed was replaced
    os.kill(zygote.zygote().proc.pid, 9)  # killed just before a start: replaced too
    rc, report = check(capsys, "--backend", "fbuntrusted:good")
    assert rc == 0 and rows(report, "fbuntrusted:good")[0]["passed"]
    (kernels / "who").unlink()
    # FLASHBENCH_WORKER_START=spawn: as before (whoami alone: each spawned worker pays
    # python and torch, and the zygote is not involved)
    ((pid, ppid, sid),) = _whoami(kernels, monkeypatch, capsys, "spawn")
    assert ppid == os.getpid() and sid == pid


def test_a_worker_of_another_triton_mode_gets_a_zygote_of_its_own(monkeypatch):
    """Workers on a CPU run with TRITON_INTERPRET=1 and patch Triton's interpreter first
    thing, so their zygote imported it (0.2 s of CPU a worker; before, each worker did:
    the forked-workers test's zygote_interprets reads libtriton in its parent's maps).
    Triton's import decorates triton.language's helpers for the mode of that moment: a
    worker of another mode gets a zygote of its own; None asks for whichever is there."""
    import os

    from flashbench.backends import zygote as z

    class Proc:
        pid = os.getpid()  # running, never stopped

        def poll(self):
            return None

    class Zygote:  # the selection alone: no process started
        def __init__(self, interpret=""):
            self.interpret, self.proc, self.closed = interpret, Proc(), False

        def close(self):
            self.closed = True

    monkeypatch.setattr(z, "_Zygote", Zygote)
    monkeypatch.setattr(z, "_ZYGOTES", [])
    one = z.zygote("1")
    assert z.zygote("1") is one and z.zygote() is one and not one.closed
    zero = z.zygote("0")
    assert zero.interpret == "0" and one.closed and z.zygote() is zero
    assert z.zygote("").interpret == "" and zero.closed


def test_a_kernel_that_stops_the_zygote_or_closes_its_pipes_fails_alone(kernels, capsys):
    """A kernel that sends its worker's parent (the zygote) SIGSTOP: the next worker starts
    from a new zygote at once. A kernel that closes its pipes and sleeps: FAIL after the
    time limit, not a harness waiting for it for good."""
    rc, report = check(capsys, "--timeout", "3", "--backend", "fbuntrusted:stopper",
                       "--backend", "fbuntrusted:closer", "--backend", "fbuntrusted:good",
                       dtypes=("fp32", "fp16"))
    assert all(r["passed"] for r in rows(report, "fbuntrusted:stopper"))
    closed = rows(report, "fbuntrusted:closer")[0]
    assert "closed its pipes during the call and was stopped" in closed["failed"]
    assert all(r["passed"] for r in rows(report, "fbuntrusted:good"))
    assert rc == 1


@pytest.fixture(scope="module")
def real_process(tmp_path_factory):
    """One ``python -m flashbench.cli check`` as CI runs it (a process of its own), in the
    folder that holds fbuntrusted.py, with nothing on PYTHONPATH: a correct kernel and one
    that calls sys.exit (two tests read it: a real process costs seconds of CPU)."""
    import os

    folder = tmp_path_factory.mktemp("real")
    (folder / "fbuntrusted.py").write_text(KERNELS)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-m", "flashbench.cli", "check", "--shape",
                           "1x1x32x16", "--dtype", "fp32", "--causal", "off", "--dist",
                           "normal", "--quiet", "--only", "fbuntrusted:good",
                           "fbuntrusted:exits"], cwd=folder, capture_output=True, text=True,
                          env=env, timeout=300)


def _verdict(stdout: str, kernel: str) -> str:
    """The verdict of ``kernel``'s (first) row in the compact text view."""
    line = next(ln for ln in stdout.splitlines() if ln.split()[:1] == [kernel])
    return next(w for w in line.split() if w in ("PASS", "FAIL"))


def test_a_kernel_next_to_the_working_folder_is_found(real_process):
    """``flashbench check --backend mod:fn`` run in the folder that holds mod.py, with
    nothing on PYTHONPATH: the worker imports it as ``python -m`` would (that folder
    first on sys.path). Before: FAIL, cannot import fbuntrusted:good."""
    r = real_process
    assert _verdict(r.stdout, "fbuntrusted:good") == "PASS", r.stdout[-2000:] + r.stderr
    assert "cannot import" not in r.stdout


def test_the_zygote_never_initialises_cuda():
    """The zygote imports what every worker needs, among it the backend registry, whose
    import calls torch.cuda.is_available(): with the zygote's environment (the NVML
    check) no call initialises CUDA, so workers forked from it may use the GPU; without
    it the recorder sees cudaGetDeviceCount (the control: the registry's import run again
    in the same process without that variable; one python and torch, not two)."""
    import os

    from cuda_recorder import RECORDER

    from flashbench.backends.zygote import zygote_env

    code = RECORDER + textwrap.dedent("""
        import importlib, os
        from flashbench.backends.zygote import preload
        preload()
        print(json.dumps(calls))
        del os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"]
        import flashbench.backends.registry as registry
        importlib.reload(registry)
        print(json.dumps(calls))
    """)
    env = zygote_env()
    assert env["PYTORCH_NVML_BASED_CUDA_CHECK"] == "1"
    env["TRITON_INTERPRET"] = "1"  # a CPU machine's zygote: Triton's interpreter imported
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True, cwd=os.getcwd()).stdout
    got = [json.loads(line) for line in out.splitlines()]
    assert got[0] == [] and "cudaGetDeviceCount" in got[1]


def test_a_hanging_kernel_is_stopped_at_the_time_limit(kernels, capsys):
    """Probe 4: a kernel that hangs FAILs after --timeout seconds (the first call; later
    calls are not run), and the rest of the check reports."""
    rc, report = check(capsys, "--timeout", "3", "--backend", "fbuntrusted:hangs",
                       "--backend", "fbuntrusted:good", dtypes=("fp32", "fp16"))
    stopped_at(3, rows(report, "fbuntrusted:hangs"), rows(report, "fbuntrusted:good"))
    assert rc == 1


def stopped_at(limit, hanging, correct):
    """The time-limit probe's verdict on the rows of a check (forward or decode): the
    hanging kernel's first call FAILs at ``limit`` seconds, its second is not run, and
    every row of the correct kernel checked beside it PASSes."""
    first, second = hanging
    assert f"exceeded the per-call time limit of {limit} s" in first["failed"]
    assert "not run: an earlier call exceeded the per-call time limit" in second["failed"]
    assert correct and all(r["passed"] for r in correct)


def test_gradients_of_a_kernel_that_changes_its_inputs_fail(kernels, capsys):
    rc, report = check(capsys, "--backend", "fbuntrusted:grad_vandal")
    (grad,) = [r for r in report["gradients"] if r["kernel"] == "fbuntrusted:grad_vandal"]
    assert "modified its inputs in place (q)" in grad["failed"]
    assert rc == 1


def test_sys_exit_in_a_real_process_gives_a_table_and_exit_1(real_process):
    """Probe 3 as CI sees it: a separate process, exit status 1 and a RESULT line."""
    r = real_process
    assert r.returncode == 1, r.stderr
    assert "RESULT: FAIL" in r.stdout and "called sys.exit(0)" in r.stdout
    assert _verdict(r.stdout, "fbuntrusted:exits") == "FAIL"


TRITON_KERNELS = textwrap.dedent('''
    import math

    import torch
    import triton
    import triton.language as tl


    @triton.jit
    def _attn(Q, K, V, O, L, scale, N: tl.constexpr, D: tl.constexpr, DOUBLE_V: tl.constexpr):
        bh = tl.program_id(0)
        rows = tl.arange(0, N)
        offs = bh * N * D + rows[:, None] * D + tl.arange(0, D)[None, :]
        q = tl.load(Q + offs)
        k = tl.load(K + offs)
        v = tl.load(V + offs)
        if DOUBLE_V:  # bf16 + bf16: the interpreter adds the raw bits
            v = v + v
        s = tl.dot(q, tl.trans(k)).to(tl.float32) * scale
        m = tl.max(s, 1)
        p = tl.exp(s - m[:, None])
        l_sum = tl.sum(p, 1)
        acc = tl.dot(p.to(v.dtype), v).to(tl.float32)
        if DOUBLE_V:
            acc = acc * 0.5
        tl.store(O + offs, (acc / l_sum[:, None]).to(O.dtype.element_ty))
        tl.store(L + bh * N + rows, m + tl.log(l_sum))


    def _run(q, k, v, causal, scale, double_v):
        B, H, N, D = q.shape
        scale = 1 / math.sqrt(D) if scale is None else scale
        q, k, v = (t.contiguous() for t in (q, k, v))
        o = torch.empty_like(q)
        lse = torch.empty(B, H, N, dtype=torch.float32, device=q.device)
        _attn[(B * H,)](q, k, v, o, lse, scale, N, D, double_v)
        return o, lse


    def attn(q, k, v, causal=False, scale=None):
        return _run(q, k, v, causal, scale, False)


    def doubled(q, k, v, causal=False, scale=None):
        return _run(q, k, v, causal, scale, True)
''')


@pytest.fixture
def triton_kernels(tmp_path, monkeypatch):
    (tmp_path / "fbtriton_user.py").write_text(TRITON_KERNELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # the worker sets it on a CPU
    yield tmp_path


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="the interpreter: CPU")
def test_a_correct_user_triton_kernel_passes_in_bf16_under_the_interpreter(triton_kernels,
                                                                            capsys):
    """Probe 5: the interpreter's bf16 tl.dot (triton issue 11584) and fp32 -> bf16 cast
    made a correct user kernel FAIL with errors of 1e8; now it passes. A kernel whose
    bf16 arithmetic the interpreter gets wrong FAILs with the interpreter named."""
    rc, report = check(capsys, "--backend", "fbtriton_user:attn", "--backend",
                       "fbtriton_user:doubled", dtypes=("fp32", "bf16"), shape="1x2x32x16")
    interpreted(rows(report, "fbtriton_user:attn"), rows(report, "fbtriton_user:doubled"))
    assert rc == 1


def interpreted(good, doubled):
    """Probe 5's verdict on the fp32 and bf16 rows of a check (forward or decode): the
    correct interpreted kernel PASSes both, with no note; the one doubling bf16 v PASSes
    fp32 and FAILs bf16 with Triton's interpreter named as the likely cause."""
    assert [r["dtype"] for r in good] == ["fp32", "bf16"] and all(r["passed"] for r in good)
    assert good[1]["o_ratio"] < 2 and "note" not in good[1]
    fp32, bf16 = doubled
    assert fp32["passed"] and "note" not in fp32  # fp32 arithmetic is right there
    assert not bf16["passed"] and "Triton's interpreter" in (bf16.get("note") or bf16["failed"])


@settings(max_examples=30)
@given(st.lists(st.floats(width=32, allow_nan=True, allow_infinity=True), min_size=1,
                max_size=64))
def test_interpreter_casts_round_to_nearest_even_like_the_gpu(values):
    """The fixed interpreter casts: fp32 -> bf16 as torch rounds (to nearest even), fp32 ->
    e4m3 as torch's cast of the value clipped to +-448 (cvt.rn.satfinite)."""
    import numpy as np
    import torch

    from flashbench.kernels.interpreter import _fp32_to_bf16_rtne, _fp32_to_e4m3_rtne

    x = np.array(values, dtype=np.float32)
    t = torch.from_numpy(x)
    num = ~np.isnan(x)
    got = _fp32_to_bf16_rtne(x)
    assert np.array_equal(got[num], t.to(torch.bfloat16).view(torch.int16).numpy()
                          .view(np.uint16)[num])
    assert np.all((got[~num] & 0x7F80) == 0x7F80) and np.all(got[~num] & 0x7F)  # NaN stays
    want = t.clamp(-448, 448).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    got = _fp32_to_e4m3_rtne(x)
    assert np.array_equal(got[num], want[num]) and np.all(got[~num] & 0x7F == 0x7F)


def test_an_installed_entry_point_that_changes_its_inputs_fails_alone(kernels, capsys):
    """Probe 1 through the entry-point group: the correct entry point after the vandal
    PASSes (it got ratio 2679 before)."""
    installed(kernels, "fbuntrusted-plugin",
              "[flashbench.backends]\naavandal = fbuntrusted:vandal\nzzgood = fbuntrusted:good\n")
    rc, report = check(capsys, "--backend", "aavandal", "--backend", "zzgood")
    (bad,) = rows(report, "aavandal")
    assert "modified its inputs in place" in bad["failed"]
    (good,) = rows(report, "zzgood")
    assert good["passed"] and good["o_ratio"] < 2
    assert rc == 1


def installed(folder, package: str, entry_points: str) -> None:
    """An installed distribution ``package`` 0.1 (metadata in ``folder``, on sys.path) whose
    entry_points.txt is ``entry_points``: what importlib.metadata, and so flashbench, find."""
    dist = folder / f"{package.replace('-', '_')}-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(entry_points)


def test_the_time_limit_counts_the_kernel_not_the_workers_start(kernels, capsys):
    """The worker's own start (python, torch: seconds) comes before the first call's
    --timeout clock: a quick kernel passes a 1 s limit that its worker's start exceeds."""
    rc, report = check(capsys, "--timeout", "1", "--backend", "fbuntrusted:good")
    assert rc == 0 and all(r["passed"] for r in rows(report, "fbuntrusted:good"))


KERNEL_WITH_DAEMON = DAEMON + """
import torch


def attn(q, k, v, causal=False, scale=None):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
"""


def _daemon_kernel(tmp_path, monkeypatch) -> None:
    """``fbdaemon:attn`` importable here and by the workers; its daemon's pid file set."""
    (tmp_path / "fbdaemon.py").write_text(KERNEL_WITH_DAEMON)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("DAEMON_PID", str(tmp_path / "daemon.pid"))


def test_a_daemon_a_kernel_leaves_is_killed_and_fails_the_run(tmp_path, monkeypatch, capsys):
    """A probe's kernel (2026-12-05) left a setsid'd daemon at import, which stopped the
    harness while the peers were timed (the kernel 7.7x "faster"), or rewrote --json after
    the harness exited. The harness is its descendants' subreaper: the daemon is found,
    killed before any timing, and the run FAILs naming it."""
    import json
    import os
    import time

    from flashbench.cli import main

    _daemon_kernel(tmp_path, monkeypatch)
    rc = main(["speed", "--quiet", "--json", "--shape", "1x2x128x32", "--causal", "off",
               "--dtype", "fp32", "--seed", "5", "--only", "fbdaemon:attn"])
    report = json.loads(capsys.readouterr().out)
    pid = int((tmp_path / "daemon.pid").read_text())
    assert rc == 1 and not report["passed"], report["meta"]
    assert any(s.startswith(f"pid {pid}: ") and "left by a kernel's import" in s
               for s in report["meta"]["strays"]), report["meta"]["strays"]
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}"):
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{pid}"), f"the daemon {pid} lives on"
    sys.modules.pop("fbdaemon", None)


def test_a_daemon_a_kernel_leaves_fails_check_too(tmp_path, monkeypatch, capsys):
    """The same daemon under `flashbench check`: it lived on after check had exited
    (2026-12-07), where it could rewrite the --json file check wrote. Now check is its
    subreaper too: it is killed once the workers end and the check FAILs (exit 1) naming
    it, the kernel's outputs right."""
    import json
    import os

    from flashbench.cli import main

    _daemon_kernel(tmp_path, monkeypatch)
    rc = main(["check", "--quiet", "--json", "--shape", "1x2x32x16", "--causal", "off",
               "--dtype", "fp32", "--pass", "fwd", "--only", "fbdaemon:attn"])
    report = json.loads(capsys.readouterr().out)
    pid = int((tmp_path / "daemon.pid").read_text())
    got = rows(report, "fbdaemon:attn")
    assert got and all(r["passed"] for r in got)  # its outputs are right
    assert rc == 1 and not report["passed"], report["meta"]
    assert [s for s in report["meta"]["strays"] if s.startswith(f"pid {pid}: ")], \
        report["meta"]["strays"]
    assert not os.path.exists(f"/proc/{pid}"), f"the daemon {pid} lives on"
    sys.modules.pop("fbdaemon", None)
