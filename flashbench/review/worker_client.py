"""The review's side of its measuring processes (:mod:`flashbench.review.worker_process`):
:class:`Worker` (one long-lived process holding one or more commits' trees, each a
*side*), :func:`peak_memory` (a fresh process per measurement: a peak only grows) and
:func:`list_suites`. A worker that dies in a request is restarted and the request answered
"failed" (a broken commit is a finding); one that cannot start raises :class:`WorkerError`.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import time
from contextlib import suppress
from pathlib import Path

from flashbench.infra import freeze

SCRIPT = Path(__file__).with_name("worker_process.py")
START_TIMEOUT = 300.0  # importing the suites (torch, triton) on a busy machine
WAIT_LINE_S = 60.0  # a progress line this often while one request is awaited


class WorkerError(RuntimeError):
    """A worker could not be started or answered nonsense (exit status 3)."""


HUGEPAGE_VARIABLE = "NUMPY_MADVISE_HUGEPAGE"
PROCESS_VARIABLE = "FLASHBENCH_REVIEW_PROCESS"  # flashbench/infra/pointfork.py's ENV
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")


def _env(tree: Path | None, threads: int | None = None, process: str | None = None) -> dict:
    """The workers' environment; ``tree`` first on PYTHONPATH (None: the worker puts each
    side's tree first on sys.path itself); ``process``: where timings run (pointfork)."""
    env = dict(os.environ)
    if process:
        env[PROCESS_VARIABLE] = process
    if threads:  # the measured code's thread pools (BLAS, OpenMP: numpy and torch)
        env.update({name: str(threads) for name in THREAD_VARIABLES})
    if tree is not None:
        env["PYTHONPATH"] = str(tree) + (os.pathsep + env["PYTHONPATH"]
                                         if env.get("PYTHONPATH") else "")
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # nothing written into the trees
    # no transparent huge pages for numpy's large arrays: a page fault there may stop to
    # compact memory (docs/review.md, "Timings"); a user's own setting stands
    env.setdefault(HUGEPAGE_VARIABLE, "0")
    return env


def _tail(path: Path) -> str:
    """The last line of a log ("" where there is none)."""
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1] if lines else ""


def lane_cpus(threads: int | None, jobs: int = 1) -> list[frozenset[int] | None]:
    """The CPUs each of ``jobs`` timing workers is pinned to (so a process does not move
    between a busier and a quieter core within a round): the last ``threads`` CPUs this
    process may use for the first, the ``threads`` before them for the second, ... (None
    without ``threads`` or affinity; one worker only where a CPU is left over). ValueError
    where they do not fit."""
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    if jobs > 1 and not threads:
        raise ValueError("more than one timing worker (--jobs) needs --threads: each "
                         "worker is pinned to CPUs of its own")
    if jobs > 1 and not hasattr(os, "sched_getaffinity"):
        raise ValueError("more than one timing worker (--jobs) needs CPU affinity "
                         "(os.sched_getaffinity), which this platform does not have")
    if not threads or not hasattr(os, "sched_getaffinity"):
        return [None]
    allowed = sorted(os.sched_getaffinity(0))
    if jobs == 1:  # pinned where a CPU is left over; more threads than CPUs: unpinned
        return [frozenset(allowed[-threads:]) if len(allowed) > threads else None]
    if jobs * threads > len(allowed):
        raise ValueError(f"--jobs {jobs} x --threads {threads} needs {jobs * threads} CPUs; "
                         f"this process may use {len(allowed)}")
    return [frozenset(allowed[len(allowed) - (i + 1) * threads:len(allowed) - i * threads])
            for i in range(jobs)]


class Worker:
    """``worker_process.py serve`` holding ``trees`` (side -> tree): one request, one reply
    (JSON lines). ``errors`` holds the sides whose suites do not import (their requests
    are answered "failed")."""

    def __init__(self, label: str, trees: dict[str, Path], bench_dir: Path, log: Path,
                 threads: int | None = None, cpus: frozenset[int] | None = None,
                 process: str | None = None):
        self.label, self.trees, self.bench_dir, self.log = label, dict(trees), bench_dir, log
        self.threads, self.process = threads, process
        self.cpus = cpus  # pinned to these CPUs (None: wherever the OS schedules it)
        self.proc: subprocess.Popen | None = None
        self.errors: dict[str, str] = {}  # discovery failed in these sides: why
        self.closed = False  # close()d: requests raise instead of restarting the process
        self.say = None  # (text) -> None: a line a minute while a request is awaited
        self.per_request = (False, "")  # (a process per timing request?, why), on start
        self.unforked = None  # why a request meant for a child was answered in the worker
        self.ended = False  # the last read met the end of the worker's output

    def start(self) -> Worker:
        self.stop()
        sides = [f"{side}={tree}" for side, tree in self.trees.items()]
        with open(self.log, "a") as err:
            try:
                self.proc = subprocess.Popen(
                    [sys.executable, str(SCRIPT), "serve", str(self.bench_dir), *sides],
                    cwd=next(iter(self.trees.values())), env=_env(None, self.threads, self.process),
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                    bufsize=1)
            except OSError as exc:
                raise WorkerError(f"cannot start the {self.label} worker: {exc}") from None
        if self.cpus:
            try:
                os.sched_setaffinity(self.proc.pid, self.cpus)
            except (OSError, AttributeError):  # not Linux, or the CPUs went away
                self.cpus = None
        first = self._read(START_TIMEOUT)
        if first is None:
            raise WorkerError(f"the {self.label} worker did not start: {_tail(self.log)}")
        if "error" in first:
            raise WorkerError(f"the {self.label} worker: {first['error']}")
        self.errors = dict(first.get("errors") or {})
        self.per_request = first.get("process") == "request", str(first.get("why") or "")
        return self

    def _read(self, timeout: float | None) -> dict | None:
        assert self.proc is not None and self.proc.stdout is not None
        if not select.select([self.proc.stdout], [], [], timeout)[0]:
            return None
        line = self.proc.stdout.readline()
        if not line:
            self.ended = True
            return None
        try:
            return json.loads(line)
        except ValueError:
            raise WorkerError(f"the {self.label} worker wrote {line[:200]!r}") from None

    def ask(self, timeout: float | None = None, side: str | None = None, **request) -> dict:
        """Send one request to ``side`` (may be left out where the worker holds one); a
        worker that dies or overruns ``timeout`` seconds is restarted and the request
        answered ``{"status": "failed", ...}``."""
        side = side if side is not None else next(iter(self.trees))
        return self._send(request, timeout, side=side)

    def ask_pair(self, order: tuple[str, str], timeout: float | None = None,
                 **request) -> dict:
        """Send one ``pair`` request (worker_process.py's ``pair_point``: both sides' calls of one
        grid point, interleaved); a failure names its ``side``."""
        return self._send(request, timeout, op="pair", order=list(order))

    def _send(self, request: dict, timeout: float | None, **fields) -> dict:
        if self.closed:
            raise WorkerError(f"the {self.label} worker was closed")
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        request.update(fields)
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        except OSError:
            pass  # it died; the read below sees the end
        self.ended = False
        reply = self._awaited(request, timeout)
        if reply is None:
            if not self.ended and self.proc.poll() is None:
                why = f"timed out after {timeout or 0:.0f} s"
            else:  # its end of file may come before the exit status is seen
                why = f"worker died ({_tail(self.log)})"
            self.stop()
            return {"status": "failed", "reason": why}
        if "error" in reply:
            raise WorkerError(f"the {self.label} worker: {reply['error']}")
        self.unforked = self.unforked or reply.pop("unforked", None)
        return reply

    def _awaited(self, request: dict, timeout: float | None) -> dict | None:
        """The reply, read within ``timeout`` s; every WAIT_LINE_S s without one, a line to
        :attr:`say` (a hanging head kept a review silent for 18 minutes)."""
        if self.say is None or timeout is None:
            return self._read(timeout)
        start = time.monotonic()
        while True:
            chunk = max(0.0, min(WAIT_LINE_S, timeout - (time.monotonic() - start)))
            t0 = time.monotonic()
            reply = self._read(chunk)
            waited = time.monotonic() - start
            if (reply is not None or waited >= timeout or self.proc.poll() is not None
                    or time.monotonic() - t0 < chunk - 0.05):  # an end of file, not a wait
                return reply
            what = request.get("name") or request.get("op")
            self.say(f"still waiting on {request.get('side') or 'both sides'} of {what} "
                     f"after {waited:.0f} s (stopped as failed at {timeout:.0f} s)")

    def close(self) -> None:
        """Stop the process for good: a request made after this (a sampling thread still
        running after an interrupt) raises WorkerError instead of starting it again."""
        self.closed = True
        self.stop()

    def stop(self) -> None:
        """End the process: ask, then SIGTERM, then SIGKILL; never leaves it behind."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            if proc.poll() is None:  # what its sides' code left first (infra.freeze)
                freeze.end_descendants(proc.pid)
                with suppress(OSError):
                    proc.stdin.write('{"op": "exit"}\n')
                    proc.stdin.flush()
                try:
                    proc.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    proc.terminate()
                    try:
                        proc.wait(timeout=3)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
        finally:
            for stream in (proc.stdin, proc.stdout):
                with suppress(OSError):
                    stream.close()


# the suites listed by a fresh process that only imports them (a worker's guard would
# first import torch._dynamo: seconds of CPU for a process that runs no benchmark)
LISTING = ("import json, sys; sys.path.insert(0, {here!r}); import worker_process as w; "
           "print(json.dumps({{'benchmarks': w.Suites({root!r}).describe()}}))")


def _script(args: list, tree: Path, log: Path, timeout: float, threads: int | None = None
            ) -> tuple[dict | None, str]:
    """``python args`` run in ``tree``: (its last line's JSON or None, why); what it left
    running is killed and fails it (:func:`flashbench.infra.freeze.reaping`)."""
    with open(log, "a") as err, tempfile.TemporaryFile("w+") as out:  # not a pipe: one
        with freeze.reaping() as left:  # a process it left holds open kept run() waiting
            try:
                r = subprocess.run([sys.executable, *map(str, args)], cwd=tree, stdout=out,
                                   env=_env(Path(tree), threads), stderr=err, text=True,
                                   timeout=timeout)
            except subprocess.TimeoutExpired:
                r = None
        out.seek(0)
        lines = out.read().strip().splitlines()
    if left:
        return None, f"it left {len(left)} process(es) running, killed: {'; '.join(left[:3])}"
    if r is None:
        return None, f"timed out after {timeout:.0f} s"
    if r.returncode != 0 or not lines:
        return None, f"exit {r.returncode} ({_tail(log)})"
    return json.loads(lines[-1]), ""


def peak_memory(tree: Path, bench_dir: Path, name: str, index: int, log: Path,
                timeout: float, threads: int | None = None) -> dict:
    """One fresh-process peak-memory measurement (bytes) of a grid point."""
    reply, why = _script([SCRIPT, "peakmem", bench_dir, name, index], tree, log, timeout,
                         threads)
    return reply or {"status": "failed", "reason": why}


def list_suites(root: Path, bench_dir: Path, log: Path) -> list[dict]:
    """Today's benchmarks, discovered by a fresh process on the working tree itself."""
    code = LISTING.format(here=str(SCRIPT.parent), root=str(Path(bench_dir).resolve()))
    reply, why = _script(["-c", code], root, log, START_TIMEOUT)
    if reply is None:
        raise WorkerError(f"the benchmarks in {bench_dir} do not import: {why}")
    return reply["benchmarks"]
