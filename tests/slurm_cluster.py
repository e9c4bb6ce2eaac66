"""A real single-node Slurm for the tests: munged, slurmctld and slurmd (Debian's slurm-wlm
and munge, which ``scripts/setup.sh --test`` installs as root) started in a temporary folder
with a munge key and a minimal slurm.conf of their own (one node: this machine's CPUs and
memory; its own ports; no cgroups: proctrack/linuxproc, task/none), stopped afterwards by
the PIDs started here, jobs cancelled first. Where it cannot start (not root, a package
missing, a daemon refused by the container) the test asking for it skips, saying why.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

NODE = "fbnode"
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "sinfo", "scontrol", "scancel")


class Unavailable(RuntimeError):
    """Slurm cannot run here; the message says why."""


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def memory_mb() -> int:
    """MemTotal in MiB, a tenth kept back (slurmd drains a node that claims more)."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024 * 9 // 10
    raise Unavailable("no MemTotal in /proc/meminfo")


class Cluster:
    """One started cluster: ``env`` (SLURM_CONF set) for every client command."""

    def __init__(self, root: Path):
        self.root = root
        self.conf = root / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.procs: list[subprocess.Popen] = []

    def run(self, *args: str, check: bool = True, **kw) -> str:
        r = subprocess.run(args, env=kw.pop("env", self.env), capture_output=True, text=True,
                           timeout=60, **kw)
        if check and r.returncode != 0:
            raise RuntimeError(f"{' '.join(args)}: {r.stderr.strip() or r.stdout.strip()}")
        return r.stdout.strip()

    def sbatch(self, *args: str, env: dict | None = None, cwd: Path | None = None) -> str:
        """Submit; the job id (an array's id)."""
        return self.run("sbatch", "--parsable", *args, env={**self.env, **(env or {})},
                        cwd=cwd).split(";")[0]

    def job(self, job: str) -> dict[str, str]:
        """``scontrol show job`` as a dict (an array task: ``ID_I``)."""
        out = self.run("scontrol", "-o", "show", "job", job)
        return dict(f.split("=", 1) for f in out.splitlines()[0].split() if "=" in f)

    def wait(self, *jobs: str, timeout: float = 120) -> None:
        """Until none of ``jobs`` (or their array tasks) is pending or running."""
        end = time.monotonic() + timeout
        while self.run("squeue", "-h", "-j", ",".join(jobs), check=False):
            if time.monotonic() > end:
                raise TimeoutError(f"jobs {jobs} still queued after {timeout} s:\n"
                                   + self.run("squeue", check=False))
            time.sleep(0.2)

    def start(self) -> None:
        root = self.root
        for sub in ("munge", "state", "spool", "log"):
            (root / sub).mkdir(mode=0o700)
        key = root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        ctld_port, d_port = free_ports(2)
        sock = root / "munge" / "sock"
        self.conf.write_text(f"""\
ClusterName=flashbench-test
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock}
StateSaveLocation={root / 'state'}
SlurmdSpoolDir={root / 'spool'}
SlurmctldPidFile={root / 'slurmctld.pid'}
SlurmdPidFile={root / 'slurmd.pid'}
SlurmctldLogFile={root / 'log' / 'slurmctld.log'}
SlurmdLogFile={root / 'log' / 'slurmd.log'}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
KillWait=2
NodeName={NODE} NodeHostname={socket.gethostname()} NodeAddr=127.0.0.1 \
CPUs={os.cpu_count()} RealMemory={memory_mb()} State=UNKNOWN
PartitionName=test Nodes={NODE} Default=YES MaxTime=INFINITE State=UP
""")
        self.spawn("munged", "-F", "--force", f"--key-file={key}", f"--socket={sock}",
                   f"--pid-file={root / 'munge' / 'pid'}", f"--seed-file={root / 'munge' / 'seed'}",
                   f"--log-file={root / 'log' / 'munged.log'}")
        self.until(lambda: sock.exists(), "munged made no socket")
        self.spawn("slurmctld", "-D", "-i", "-f", str(self.conf))
        self.spawn("slurmd", "-D", "-f", str(self.conf), "-N", NODE)
        self.until(lambda: self.run("sinfo", "-h", "-N", "-o", "%t", check=False) == "idle",
                   "the node never became idle in sinfo")

    def spawn(self, *cmd: str) -> None:
        log = open(self.root / "log" / f"{cmd[0]}.out", "wb")
        self.procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, env=self.env))
        log.close()

    def until(self, ready, what: str, timeout: float = 30) -> None:
        end = time.monotonic() + timeout
        while not ready():
            dead = [p for p in self.procs if p.poll() is not None]
            if dead or time.monotonic() > end:
                name = Path(dead[0].args[0]).name if dead else "slurmd"
                raise Unavailable(f"{what}: {name} said: {self.last_words(name)}")
            time.sleep(0.2)

    def last_words(self, name: str) -> str:
        lines = []
        for f in (self.root / "log").glob(f"{name}*"):
            lines += [x for x in f.read_text(errors="replace").splitlines() if "error" in x]
        return " | ".join(lines[-3:]) or "nothing"

    def stop(self) -> None:
        """Cancel every job, then stop the daemons started here (SIGTERM, then SIGKILL)."""
        if self.procs and self.procs[-1].poll() is None:
            jobs = self.run("squeue", "-h", "-o", "%A", check=False).split()
            if jobs:
                self.run("scancel", *set(jobs), check=False)
                try:
                    self.wait(*set(jobs), timeout=20)
                except (TimeoutError, RuntimeError):
                    pass
        for p in reversed(self.procs):
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs.clear()


def unavailable() -> str | None:
    """Why no Slurm can start here, or None."""
    if os.geteuid() != 0:
        return "a test Slurm needs root (slurmd runs jobs as their user)"
    missing = [c for c in (*DAEMONS, *CLIENTS) if shutil.which(c) is None]
    if missing:
        return (f"Slurm is not installed ({', '.join(missing)} missing): "
                "bash scripts/setup.sh --test as root installs Debian's slurmctld, slurmd, "
                "slurm-client and munge")
    return None


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A started single-node cluster (module-wide), stopped after the module's tests."""
    why = unavailable()
    if why:
        pytest.skip(why)
    cluster = Cluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
    except Unavailable as exc:
        cluster.stop()
        pytest.skip(f"Slurm could not start here: {exc}")
    except BaseException:
        cluster.stop()
        raise
    try:
        yield cluster
    finally:
        cluster.stop()
