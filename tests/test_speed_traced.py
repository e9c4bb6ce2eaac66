"""A red team's kernel (2026-12-07) that made a helper of its own traced (PTRACE_TRACEME):
the SIGSTOP that holds a worker's family at its run's reply went to the helper's tracer and
stopped one thread, so the other computed the rest of the heads after the clock stopped,
inside the harness's wait for the stop, and the outputs the harness then read were done:
a quarter of the heads timed, PASS, 1.5x. A worker and all it starts now may not call
ptrace (a seccomp filter, infra/sealed.py), and a process found traced at a reply fails
its row by name."""

import ctypes
import errno
import json
import os
import subprocess
import sys
import textwrap

from flashbench.cli import main

# the red team's kernel, as it ran (kept whole: its parts are the trick)
TRACED = textwrap.dedent('''
    import ctypes, fcntl, mmap, os, struct, threading, time
    import torch
    import torch.nn.functional as F
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    RING, SLOT = 8, 4 << 20
    shm = mmap.mmap(-1, RING * SLOT, flags=mmap.MAP_SHARED)
    cmd_r, cmd_w = os.pipe()
    FMT = "8q"
    SZ = struct.calcsize(FMT)

    def _views(slot, B, H, N, M, d):
        base, out, n = slot * SLOT, [], 0
        for shape in ((B, H, N, d), (B, H, M, d), (B, H, M, d), (B, H, N, d)):
            cnt = shape[0] * shape[1] * shape[2] * shape[3]
            out.append(torch.frombuffer(shm, dtype=torch.float32, count=cnt,
                                        offset=base + n).view(shape))
            n += cnt * 4
        return out

    def _main_stopped():
        with open(f"/proc/self/task/{os.getpid()}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in "tT"

    def _helper_compute():  # the rest of the heads, once the clock has stopped
        torch.set_num_threads(1)
        pending, buf = [], b""
        while True:
            if not pending:
                fcntl.fcntl(cmd_r, fcntl.F_SETFL, 0)
                buf += os.read(cmd_r, 64 * SZ)
            fcntl.fcntl(cmd_r, fcntl.F_SETFL, os.O_NONBLOCK)
            try:
                buf += os.read(cmd_r, 64 * SZ)
            except BlockingIOError:
                pass
            while len(buf) >= SZ:
                pending.append(struct.unpack(FMT, buf[:SZ]))
                buf = buf[SZ:]
            if not _main_stopped():
                time.sleep(0.001)
                continue
            for B, H, N, M, d, slot, h0, causal in pending:
                q, k, v, o = _views(slot, B, H, N, M, d)
                o[:, h0:] = F.scaled_dot_product_attention(q[:, h0:], k[:, h0:], v[:, h0:],
                                                           is_causal=bool(causal))
            pending = []

    def _child():
        libc.prctl(1, 9)
        os.setpgid(0, 0)
        TRACEME.append(libc.ptrace(0, 0, None, None))
        threading.Thread(target=_helper_compute, daemon=True).start()
        while True:
            time.sleep(3600)

    TRACEME, _helper = [], []

    def _tracer():
        pid = os.fork()
        _helper.append(pid)
        if pid == 0:
            _child()
        while True:
            try:
                _, status = os.waitpid(pid, 0x40000000)
            except ChildProcessError:
                return
            if os.WIFSTOPPED(status):
                time.sleep(0.005)
                libc.ptrace(7, pid, None, None)

    threading.Thread(target=_tracer, daemon=True).start()
    from flashbench.backends import timedserver as _ts
    _fetch = _ts.TimedServer._fetch

    def _fetch_then_end_helper(self, r):
        out = _fetch(self, r)
        for pid in _helper:
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        time.sleep(0.05)
        return out

    _ts.TimedServer._fetch = _fetch_then_end_helper
    _n = [0]

    def attn(q, k, v, causal=False, scale=None):
        B, H, N, d = q.shape
        M = k.shape[2]
        slot = _n[0] % RING
        _n[0] += 1
        sq, sk, sv, o = _views(slot, B, H, N, M, d)
        sq.copy_(q)
        sk.copy_(k)
        sv.copy_(v)
        h0 = max(1, H // 4)
        os.write(cmd_w, struct.pack(FMT, B, H, N, M, d, slot, h0, int(causal)))
        o[:, :h0] = F.scaled_dot_product_attention(q[:, :h0], k[:, :h0], v[:, :h0],
                                                   is_causal=causal)
        return o

    attn.flashbench_dtypes = ("fp32",)
''')


def test_a_kernel_whose_helper_is_traced_never_passes(user_module, capsys):
    user_module("fbtraced", TRACED)
    rc = main(["speed", "--dtype", "fp32", "--json", "--quiet", "--seed", "1", "--shape",
               "1x8x256x64", "--causal", "off", "--samples", "10", "--only", "fbtraced:attn"])
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert rc == 1 and row["status"] == "FAIL", row


def test_a_worker_and_what_it_starts_may_not_ptrace():
    """:func:`no_ptrace` in a process of its own: its child's PTRACE_TRACEME fails with
    EPERM, as does PTRACE_ATTACH on it; the rest of what a kernel does (a fork, torch) runs."""
    code = textwrap.dedent('''
        import ctypes, os, sys
        from flashbench.infra.sealed import no_ptrace
        libc = ctypes.CDLL(None, use_errno=True)
        libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
        assert no_ptrace()
        pid = os.fork()
        if pid == 0:
            os._exit(0 if libc.ptrace(0, 0, None, None) == -1 and ctypes.get_errno() == 1
                     else 9)
        assert os.waitpid(pid, 0)[1] == 0
        import torch
        x = torch.ones(4, 4)
        print(float((x @ x).sum()), libc.ptrace(16, os.getppid(), None, None),
              ctypes.get_errno())
    ''')
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["64.0", "-1", str(errno.EPERM)], r.stdout


def test_a_traced_process_is_named_by_its_tracer():
    """:func:`flashbench.infra.freeze.tracer`: what the reader asks of each process it
    stopped at a reply (0 for one no process traces); one traced is read as nothing, and
    named (the fault of its row, where seccomp cannot keep a worker from ptrace)."""
    from flashbench.infra.freeze import tracer
    from flashbench.timed.commit import MemoryReader

    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    ready_r, ready_w = os.pipe()
    hold_r, _hold_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # traced by this process, then waits to be killed
        libc.ptrace(0, 0, None, None)
        os.write(ready_w, b"x")
        os.read(hold_r, 1)
        os._exit(0)
    try:
        os.read(ready_r, 1)
        assert tracer(pid) == os.getpid()
        assert tracer(os.getpid()) == 0
        reader = MemoryReader(pid)  # what it does at a reply: nothing read, the fault named
        assert reader.read([[]], 1, 2**20) == [None]
        assert reader.traced == (f"process {pid} of its worker's family was traced by process "
                                 f"{os.getpid()} at its run's reply, so the SIGSTOP that holds "
                                 "it then need not stop it: its outputs cannot be bound to "
                                 "the reply"), reader.traced
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        for fd in (ready_r, ready_w, hold_r, _hold_w):
            os.close(fd)
