"""The zygote user kernels' workers are forked from (:mod:`flashbench.backends.worker`).

A spawned worker pays python + torch (1.5-2 s here) per user backend. The zygote, one
process per harness (``python -m flashbench.backends.worker --zygote FD``), pays it once
and never runs a user's code, so every worker forked from it starts as clean as a spawned
one, with its own process, session and pipes. Messages are JSON over a SEQPACKET socket;
a worker's pipes and the harness's stderr travel as file descriptors; the zygote, the
workers' parent, reports their exit statuses. It imports torch and the worker's side
(:mod:`flashbench.backends.child`); Triton (whose import decorates triton.language's
helpers for the ``TRITON_INTERPRET`` of that moment) only where its workers interpret
(``TRITON_INTERPRET=1``, a CPU machine: 0.2 s a worker spared), a zygote per mode.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import traceback
import warnings
from collections.abc import Callable

from flashbench.kernels.validate import BackendFailed

__all__ = ["STARTUP_LIMIT", "START_ENV", "IDLE_ENV", "forking", "zygote", "zygote_pids",
           "start_worker", "zygote_env", "harness_path", "preload", "main"]

STARTUP_LIMIT = 120.0  # seconds for a worker's own start (python, torch), before any call
ANSWER_LIMIT = 30.0  # seconds for the zygote's answer to a fork or a status request
# torch.cuda.is_available() (the backend registry calls it at import) then asks NVML and
# never initialises CUDA: CUDA does not survive a fork once initialised (docs/gpu.md)
NVML_CHECK = {"PYTORCH_NVML_BASED_CUDA_CHECK": "1"}
START_ENV = "FLASHBENCH_WORKER_START"  # "spawn": a fresh process per worker
_ZYGOTES: list[_Zygote] = []


def zygote_pids() -> list[int]:
    """The zygotes' own processes (backends.strays leaves them alone)."""
    return [z.proc.pid for z in _ZYGOTES if z.proc is not None]


def forking() -> bool:
    """Whether workers are forked from the zygote here (else spawned)."""
    return (os.environ.get(START_ENV, "fork") != "spawn" and hasattr(socket, "send_fds")
            and hasattr(socket, "SOCK_SEQPACKET"))


def zygote(interpret: str | None = None) -> _Zygote:
    """This process's zygote, started (again) where there is none alive or where its
    ``TRITON_INTERPRET`` is not ``interpret`` (the workers'; "" unset, None: any)."""
    z = _ZYGOTES[0] if _ZYGOTES else None
    if (z is None or z.proc.poll() is not None or _stopped(z.proc.pid)
            or interpret not in (None, z.interpret)):
        _close_zygote()
        _ZYGOTES.append(_Zygote(os.environ.get("TRITON_INTERPRET", "") if interpret is None
                                else interpret))
    return _ZYGOTES[0]


def start_worker(spec: str, env: dict) -> _Forked:
    """A worker for ``spec`` forked from the zygote of its TRITON_INTERPRET; a zygote found
    dead (a kernel may kill its worker's parent) is replaced once, so that never fails
    another kernel."""
    for _ in range(2):
        forked = zygote(env.get("TRITON_INTERPRET", "")).fork(spec, env)
        if forked is not None:
            return forked
        _close_zygote()
    raise BackendFailed("its worker process could not be started: the zygote died twice")


def _close_zygote() -> None:
    while _ZYGOTES:
        _ZYGOTES.pop().close()


atexit.register(_close_zygote)


class _Zygote:
    """``python -m flashbench.backends.worker --zygote FD``: forks a worker per request
    (SEQPACKET JSON messages, the worker's pipes and stderr passed as file descriptors)
    and reports its exit status when asked (the zygote is its parent)."""

    def __init__(self, interpret: str = ""):
        self.interpret = interpret  # its TRITON_INTERPRET ("" unset): its workers' too
        env = {k: v for k, v in zygote_env().items() if k != "TRITON_INTERPRET"}
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "flashbench.backends.worker", "--zygote",
                 str(theirs.fileno())], pass_fds=[theirs.fileno()],
                env={**env, "TRITON_INTERPRET": interpret} if interpret else env,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            ours.close()
            raise BackendFailed(f"its worker process could not start: {exc}") from None
        finally:
            theirs.close()
        self.sock = ours
        if self._ask({"op": "hello"}, timeout=STARTUP_LIMIT) is None:
            raise BackendFailed(f"its worker process did not start within {STARTUP_LIMIT} s")

    def _ask(self, request: dict, fds: list[int] = (), timeout: float = ANSWER_LIMIT
             ) -> dict | None:
        """The zygote's reply; None where it is gone or silent, and then it is ended for
        good (a kernel may stop it: a late reply must never answer the next request)."""
        try:
            if _stopped(self.proc.pid):  # a kernel sent it SIGSTOP: replaced, not awaited
                raise OSError("the zygote was stopped")
            self.sock.settimeout(timeout)
            socket.send_fds(self.sock, [json.dumps(request).encode()], list(fds))
            data = self.sock.recv(1 << 16)
            if data:
                return json.loads(data)
        except OSError:  # a time-out included
            pass
        self.close()
        return None

    def fork(self, spec: str, env: dict) -> _Forked | None:
        """The forked worker (None: the zygote is gone)."""
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        try:  # the harness's fd 2, as a spawned worker inherits it
            reply = self._ask({"op": "fork", "spec": spec, "env": env, "cwd": os.getcwd()},
                              [req_r, rep_w, 2])
        finally:
            os.close(req_r)
            os.close(rep_w)
        if reply is None or "pid" not in reply:
            os.close(req_w)
            os.close(rep_r)
            if reply is None:
                return None
            raise BackendFailed(f"its worker process could not be started: {reply['error']}")
        return _Forked(self, reply["pid"], os.fdopen(req_w, "wb"), os.fdopen(rep_r, "rb"))

    def status(self, pid: int, block: bool) -> int | str | None:
        """The exit status of worker ``pid`` (None: it runs; "unknown": the zygote is gone
        or did not answer; ``block``: wait for the end, which a caller asks after a kill)."""
        reply = self._ask({"op": "wait", "pid": pid, "block": block})
        return "unknown" if reply is None else reply["status"]

    def close(self) -> None:
        self.sock.close()  # the zygote reads the end and exits ...
        if _stopped(self.proc.pid):  # ... unless a kernel stopped it: never waited for
            self.proc.kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # (stopped since, or stuck)
            self.proc.kill()
            self.proc.wait()


def harness_path() -> str:
    """The harness's sys.path as a PYTHONPATH: what a worker (and the zygote) imports from."""
    return os.pathsep.join(os.path.abspath(p) for p in sys.path if p)


# OpenBLAS's threads sleep at once after a call instead of spinning (a kernel's own setting
# wins): numpy's BLAS spun through the harness's idle pauses, 0.4 s of CPU in 0.4 s, and an
# honest NumPy kernel read "work outside the timed call"
IDLE_ENV = {"OPENBLAS_THREAD_TIMEOUT": "4"}


def zygote_env() -> dict:
    """The zygote's environment: the harness's, its sys.path as PYTHONPATH (as a worker's),
    the NVML CUDA check, and :data:`IDLE_ENV` where the harness sets none. Each worker gets
    the harness's own back (OpenBLAS read IDLE_ENV when the zygote imported numpy)."""
    return {**IDLE_ENV, **os.environ, "PYTHONPATH": harness_path(), **NVML_CHECK}


def _stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (Linux's /proc; elsewhere: never)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False


def _leads_its_session(pid: int) -> bool:
    try:
        return os.getsid(pid) == pid
    except OSError:
        return False


class _Forked:
    """A worker forked by the zygote, with the part of Popen's interface Worker uses."""

    def __init__(self, zygote: _Zygote, pid: int, stdin, stdout):
        self.zygote, self.pid, self.stdin, self.stdout = zygote, pid, stdin, stdout
        self.returncode: int | str | None = None

    def poll(self) -> int | str | None:
        if self.returncode is None:
            status = self.zygote.status(self.pid, block=False)
            if status == "unknown" and _leads_its_session(self.pid):
                return None  # the zygote is gone (a kernel killed it), the worker is not
            self.returncode = status
        return self.returncode

    def wait(self) -> int | str:
        if self.returncode is None:
            self.returncode = self.zygote.status(self.pid, block=True)
        return self.returncode

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except OSError:
            pass


def preload() -> None:
    """What every worker imports, once: torch, the worker's side and, where the workers
    interpret (TRITON_INTERPRET=1, this zygote's mode), Triton's interpreter and
    flashbench's fixes to it, which each worker applies first thing."""
    import torch  # noqa: F401

    from flashbench.backends import child  # noqa: F401

    if os.environ.get("TRITON_INTERPRET") == "1":
        try:
            import triton.runtime.interpreter  # noqa: F401

            import flashbench.kernels.interpreter  # noqa: F401
        except ImportError:  # no triton here: nothing to preload
            pass


def main(fd: int, serve: Callable[[str], None]) -> None:
    """The zygote's loop (:class:`_Zygote`); a forked worker runs ``serve(spec)`` (the
    worker's protocol loop). It ends when the harness closes its end."""
    from flashbench.infra.sealed import set_dumpable

    set_dumpable(False)  # its workers' memory neighbour: none may read it (infra.sealed)
    preload()
    # Its second thread is torch's, idle; fork is how torch's DataLoader and asv's
    # forkserver start workers from processes that imported torch too.
    warnings.filterwarnings("ignore", ".*multi-threaded, use of fork", DeprecationWarning)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sock = socket.socket(fileno=fd)
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(sock, 1 << 20, 3)
        except OSError:
            return
        if not data:
            return  # the harness is gone or done
        request = json.loads(data)
        if request["op"] == "fork":
            reply = _fork_worker(sock, request, fds, serve)
        elif request["op"] == "wait":
            reply = _wait(request["pid"], request["block"])
        else:
            reply = {"ready": True}
        for f in fds:
            os.close(f)
        sock.send(json.dumps(reply).encode())


def _fork_worker(sock: socket.socket, request: dict, fds: list[int],
                 serve: Callable[[str], None]) -> dict:
    if len(fds) != 3:
        return {"error": f"a fork needs 3 descriptors, got {len(fds)}"}
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return {"pid": pid}
    status = 1
    try:  # the worker: its own session, pipes as stdin/stdout, the harness's stderr
        os.setsid()
        sock.close()
        for target, f in enumerate(fds):
            os.dup2(f, target)
        for f in set(fds) - {0, 1, 2}:
            os.close(f)
        os.environ.clear()
        os.environ.update(request["env"])
        # as ``python -m`` in the working folder: that folder first, then PYTHONPATH
        sys.path[:] = [request["cwd"], *(p for p in request["env"]["PYTHONPATH"].split(
            os.pathsep) if p)]
        importlib.invalidate_caches()
        os.chdir(request["cwd"])
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        serve(request["spec"])
        status = 0
    except BaseException:  # as a spawned worker would: the traceback on stderr
        traceback.print_exc()
    finally:
        sys.stderr.flush()
        os._exit(status)


def _wait(pid: int, block: bool) -> dict:
    try:
        done, status = os.waitpid(pid, 0 if block else os.WNOHANG)
    except ChildProcessError:
        return {"status": "unknown"}
    return {"status": None if done == 0 else os.waitstatus_to_exitcode(status)}
