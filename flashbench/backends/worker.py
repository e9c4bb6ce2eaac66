"""A user's kernel runs in a worker process of its own, one per user backend, kept for the run.

A user's kernel may call ``sys.exit``, ``os._exit``, hang, print, or crash the
interpreter; in the harness's process each of those ends or corrupts the whole check. In
a child each becomes that kernel's FAIL with the reason, and a hang is stopped at the
per-call time limit (:data:`DEFAULT_TIME_LIMIT`, ``flashbench check --timeout``). Workers
are forked from a zygote that imported python and torch once
(:mod:`flashbench.backends.zygote`: a start in a fraction of a second, not 1.5-2 s);
``FLASHBENCH_WORKER_START=spawn`` starts ``python -m flashbench.backends.worker SPEC``
instead. The child prints the kernel's output to stderr (the protocol has pipes of its
own), ignores SIGINT, runs CUDA itself where there is a GPU and, on a CPU machine, starts
with ``TRITON_INTERPRET=1`` unless it is set. Requests and replies are ``torch.save``
frames (copies), loaded with ``weights_only``. Why, and the probes: docs/check.md.
"""

from __future__ import annotations

import atexit
import io
import os
import select
import signal
import statistics
import struct
import subprocess
import sys
import time

from flashbench.backends.zygote import (
    IDLE_ENV,
    STARTUP_LIMIT,
    forking,
    harness_path,
    start_worker,
)
from flashbench.infra import freeze
from flashbench.inputs.validation import DEFAULT_TIME_LIMIT, check_time_limit
from flashbench.kernels.validate import BackendFailed, BackendUnavailable

__all__ = ["DEFAULT_TIME_LIMIT", "Worker", "OverLimit", "time_limit", "set_time_limit",
           "close_all", "worker_of", "worker_pids"]


class OverLimit(BackendFailed):
    """A call ran past the time limit and its worker was stopped (a FAIL like any other)."""


_LIMIT = [DEFAULT_TIME_LIMIT]
_WORKERS: list[Worker] = []
_HEADER = struct.Struct("<Q")


def worker_pids() -> list[int]:
    """The running workers' own processes (backends.strays leaves them alone)."""
    return [w.proc.pid for w in _WORKERS if w.proc is not None]


def set_time_limit(seconds: float) -> None:
    """The per-call time limit of every worker call from now on (``--timeout``)."""
    _LIMIT[0] = check_time_limit(seconds)


def time_limit() -> float:
    return _LIMIT[0]


def _pack(obj) -> bytes:
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    data = buf.getvalue()
    return _HEADER.pack(len(data)) + data


def _unpack(data: bytes):
    import torch

    return torch.load(io.BytesIO(data), weights_only=True)


def _read(fd: int, n: int, deadline: float | None) -> bytes | None:
    """n bytes from ``fd``; None at the deadline; EOFError when the other side is gone."""
    chunks, left = [], n
    while left:
        if deadline is not None:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                return None
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


class Worker:
    """The parent's handle on one user backend's worker (started on first use)."""

    def __init__(self, spec: str):
        self.spec = spec
        self.proc: subprocess.Popen | None = None
        self.stopped: str | None = None  # why later calls are not run (a time-out)
        self.saw_interpreter = False  # a call launched a Triton kernel interpreted
        self.round_trip_s = 0.0  # the last call's, from sent to the reply read (speedworker)
        self.trusted_null_s: float | None = None  # an empty request's, before any user code
        self.trusted_flush_s = 0.0  # what an L2 flush adds to one, before any user code

    def interpreted(self) -> bool:
        """Whether any call so far ran a Triton kernel under the interpreter."""
        return self.saw_interpreter

    def _start(self) -> None:
        import torch

        env = {**IDLE_ENV, **os.environ}  # (a spawned worker: as the zygote's)
        env["PYTHONPATH"] = harness_path()
        if "TRITON_INTERPRET" not in env and not torch.cuda.is_available():
            env["TRITON_INTERPRET"] = "1"  # the only way a Triton kernel runs on a CPU
        if forking():
            self.proc = start_worker(self.spec, env)
        else:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "flashbench.backends.worker", self.spec],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                start_new_session=True)
        _WORKERS.append(self)
        # the worker's own start (python, torch) is not the kernel's time: wait for its
        # "ready" before any call's --timeout clock runs
        fd, deadline = self.proc.stdout.fileno(), time.monotonic() + STARTUP_LIMIT
        try:
            head = _read(fd, _HEADER.size, deadline)
            body = None if head is None else _read(fd, _HEADER.unpack(head)[0], deadline)
        except EOFError:
            body = None
        if body is None or not _unpack(body).get("ready"):
            status = self.proc.poll()
            self.close()
            raise BackendFailed(f"its worker process did not start within {STARTUP_LIMIT} s"
                                if status is None else
                                f"its worker process ended before it was ready (exit status "
                                f"{status})")
        # an empty request's round trip before the kernel's module is imported here (at the
        # first request that needs it): what the empty requests a timing subtracts may cost
        # (a module that slowed them read 2.3x faster: speedworker)
        trips, flushed = [], []
        for _ in range(5):
            self.call({"op": "null"})
            trips.append(self.round_trip_s)
        for _ in range(4):  # and one L2 flush's (a GPU's; nothing on a CPU): the first makes
            self.call({"op": "null", "flushes": 1})  # its buffer
            flushed.append(self.round_trip_s)
        self.trusted_null_s = statistics.median(trips)
        self.trusted_flush_s = max(statistics.median(flushed[1:]) - self.trusted_null_s, 0.0)

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                try:  # its own session: the kernel's own child processes go too
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except OSError:
                    self.proc.kill()
            self.proc.wait()
            for pipe in (self.proc.stdin, self.proc.stdout):
                pipe.close()
            self.proc = None
        if self in _WORKERS:
            _WORKERS.remove(self)

    def call(self, request: dict, on_reply=None, most_bytes: int | None = None,
             on_clock=None) -> dict:
        """The child's reply to ``request``; BackendFailed when it times out or ends, or its
        reply is longer than ``most_bytes``. Replies ``{"failed": why}`` / ``{"unavailable":
        why}`` are raised as such. ``on_reply()`` runs as the reply's last byte is read,
        before it is parsed (speedworker: the worker stopped there); ``on_clock()`` once the
        clock has started, before the request is written (speedworker: the call's inputs
        posted, the worker waiting on its pipe). Every other worker is held still meanwhile,
        with what it started (:func:`flashbench.infra.freeze.held`): a red-team probe's
        kernel (2026-12-07) SIGKILLed another user's worker during its call from a helper
        of its own, and that honest kernel FAILed ("ended during the call"); this worker,
        where they were held here, is continued first (one a helper stopped would time
        out; a speed row holds them and continues its worker once, at its start)."""
        others = [w.proc.pid for w in _WORKERS if w is not self and w.proc is not None]
        fresh = [p for p in others if not freeze.is_held(p)]  # held here (check), not by a row
        with freeze.held(*others):
            if fresh and self.proc is not None:  # one stopped by another's process before
                freeze.resume(self.proc.pid)  # (a row that held them resumed it: once)
            try:
                return self._call(request, on_reply, most_bytes, on_clock)
            except BackendFailed as exc:  # a SIGKILL another's process sent just before
                if not fresh or "(exit status -9)" not in str(exc):  # they were held lands
                    raise  # in the call: once more, in a new worker, the others held
                return self._call(request, on_reply, most_bytes, on_clock)

    def _call(self, request: dict, on_reply, most_bytes, on_clock) -> dict:
        if self.stopped is not None:
            raise BackendFailed(self.stopped)
        if self.proc is None or self.proc.poll() is not None:
            self.close()
            self._start()
        limit = time_limit()
        deadline = time.monotonic() + limit
        try:
            frame = _pack(request)
            sent = time.perf_counter()
            if on_clock is not None:
                try:
                    on_clock()
                except BaseException:  # its pages half written: never reused
                    self.close()
                    raise
            self.proc.stdin.write(frame)
            self.proc.stdin.flush()
            deadline = time.monotonic() + limit  # its time limit starts once it is sent
            fd = self.proc.stdout.fileno()
            head = _read(fd, _HEADER.size, deadline)
            size = None if head is None else _HEADER.unpack(head)[0]
            if size is not None and most_bytes is not None and size > most_bytes:
                self.close()
                self.stopped = (f"its worker's reply to a {request.get('op')!r} request was "
                                f"{size} bytes (at most {most_bytes} are read); it was stopped")
                raise BackendFailed(self.stopped)
            body = None if head is None else _read(fd, size, deadline)
            self.round_trip_s = time.perf_counter() - sent  # this process's clock: the pipe's
            if body is not None and on_reply is not None:
                on_reply()
        except (EOFError, BrokenPipeError):
            status = _ended(self.proc, deadline)
            self.close()
            if status is None:  # alive without its pipes: stopped, never waited on for good
                raise BackendFailed("its worker process closed its pipes during the call "
                                    "and was stopped") from None
            raise BackendFailed(f"its worker process ended during the call (exit status "
                                f"{status}): os._exit, a crash or a signal") from None
        if body is None:
            self.close()
            self.stopped = (f"not run: an earlier call exceeded the per-call time limit of "
                            f"{limit:g} s (--timeout)")
            raise OverLimit(f"exceeded the per-call time limit of {limit:g} s "
                            f"(--timeout); its worker was stopped")
        reply = _unpack(body)
        self.saw_interpreter = self.saw_interpreter or bool(reply.get("interpreted"))
        if "failed" in reply:
            raise BackendFailed(reply["failed"])
        if "unavailable" in reply:
            raise BackendUnavailable(reply["unavailable"])
        return reply


def _ended(proc, deadline: float) -> int | str | None:
    """The exit status of a worker whose pipes closed: it is ending, or it closed them
    and lives on (None once the call's time limit, at least 2 s more, has passed)."""
    until = max(deadline, time.monotonic() + 2.0)
    while (status := proc.poll()) is None and time.monotonic() < until:
        time.sleep(0.01)
    return status


def worker_of(backend) -> Worker | None:
    """The worker process behind a user's backend (its accuracy callable is bound to it);
    None for a backend that runs in this process."""
    args = getattr(backend.fn, "args", None) or (None,)
    return args[0] if isinstance(args[0], Worker) else None


def close_all() -> None:
    """Stop every worker (the end of a check; at exit)."""
    for worker in list(_WORKERS):
        worker.close()


atexit.register(close_all)


# ---------------------------------------------------------------- the child


def _serve(spec: str) -> None:
    from flashbench.backends import child
    from flashbench.infra.sealed import worker_sealed

    worker_sealed()  # no ptrace of the harness from here on (infra.sealed)

    proto_in = os.fdopen(os.dup(0), "rb")
    proto_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # the kernel's prints go to stderr, never into the protocol or --json
    sys.stdout = sys.stderr
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    server = child.Server(spec)
    proto_out.write(_pack({"ready": True}))  # the user's module is imported on first call
    proto_out.flush()
    while True:
        head = proto_in.read(_HEADER.size)
        if len(head) < _HEADER.size:
            return  # the harness is gone or done
        request = _unpack(proto_in.read(_HEADER.unpack(head)[0]))
        proto_out.write(_pack(server.handle(request)))
        proto_out.flush()


if __name__ == "__main__":
    if sys.argv[1] == "--zygote":
        from flashbench.backends.zygote import main

        main(int(sys.argv[2]), _serve)
    else:
        _serve(sys.argv[1])
