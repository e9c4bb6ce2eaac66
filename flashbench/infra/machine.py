"""asv machine names: stable, and saying what the machine is.

``python -m flashbench.infra.machine`` (or scripts/asv_machine.py) registers this machine
in ~/.asv-machine.json and prints its name, made of everything that changes its speed:
``cpu-<arch>-<cpu token>-<N>cpu-<M>gb`` on a CPU machine, ``<gpu>-<cpu token>-<N>cpu`` on
a GPU one (the GPU model also in asv's ``cpu`` field: machine.json has no GPU field).
:func:`cpu_token` is the processor model without vendor marks, "CPU"/"Processor" and
clock speed. A machine's identity is (machine, cpu): :mod:`flashbench.history` groups by
both. Every field is written here, not by ``asv machine --yes`` (which leaves results
without os, arch and cpu), under a lock and by atomic replacement, so concurrent
registrations neither lose entries nor leave a half-written file. More: docs/asv.md
("Machines").
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import tempfile

from flashbench.infra.locks import locked

__all__ = ["identity", "register", "derived_name", "cpu_token", "cpu_model", "gpu_model",
           "check_machine_name", "asv_launch_method", "ASV_LAUNCH_ENV"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_NOISE = re.compile(r"\((r|tm)\)|\b(cpu|processor|genuine|intel|amd|\d+-core)\b|@.*$", re.I)


def check_machine_name(name: str) -> str:
    """A machine name is a name, never a path: letters, digits, '.', '_' and '-', not
    starting with '.' or '-' (so never '..'), at most 100 characters."""
    if not isinstance(name, str) or not _NAME.match(name) or ".." in name:
        raise ValueError(f"machine name must be letters, digits, '.', '_' or '-' (a name, "
                         f"not a path), got {name!r}")
    return name


def gpu_model() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    names = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    return names[0] if out.returncode == 0 and names else None


# With it, torch.cuda.is_available() asks NVML and never initialises CUDA, so asv's
# forkserver parent stays CUDA-free and its forked benchmarks may use the GPU
# (tests/test_gpu_suites.py records every CUDA-initialising call during the import).
ASV_LAUNCH_ENV = {"PYTORCH_NVML_BASED_CUDA_CHECK": "1"}


def asv_launch_method() -> str:
    """How asv starts benchmark processes, on every machine: "forkserver" (asv.conf.json's:
    the suites are imported once, not once per grid point), safe on a GPU with
    :data:`ASV_LAUNCH_ENV` in asv's environment."""
    return "forkserver"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cpu_token(model: str) -> str:
    """Short, name-safe processor token: 'Intel(R) Xeon(R) Processor' -> 'xeon',
    'AMD EPYC 7B13 64-Core Processor' -> 'epyc-7b13',
    'Intel(R) Xeon(R) Platinum 8480+' -> 'xeon-platinum-8480'."""
    words = re.sub(r"[^a-z0-9]+", " ", _NOISE.sub(" ", model).lower()).split()
    return "-".join(words[:3]) or "unknown"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def derived_name(cpu: str, gpu: str | None, ncpu: int, ram_bytes: int,
                 arch: str | None = None) -> str:
    """The machine name for these facts (module docstring)."""
    if gpu:
        return f"{_slug(gpu)}-{cpu_token(cpu)}-{ncpu}cpu"
    arch = arch or platform.machine()
    return f"cpu-{arch}-{cpu_token(cpu)}-{ncpu}cpu-{round(ram_bytes / 2**30)}gb"


def _write_atomic(path: str, data: dict) -> None:
    folder = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".asv-machine.", dir=folder)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=4)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def identity(name: str | None = None) -> tuple[str, str, int, int]:
    """(machine name, processor [; GPU], CPU count, RAM bytes) of this machine, registering
    nothing: ``name``, else :func:`derived_name`; the processor text is asv's ``cpu``
    field."""
    ncpu = os.cpu_count() or 1
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    gpu, cpu = gpu_model(), cpu_model()
    return (name or derived_name(cpu, gpu, ncpu, ram),
            f"{cpu}; GPU: {gpu}" if gpu else cpu, ncpu, ram)


def register(name: str | None = None) -> str:
    """Write this machine's entry (named ``name``, default :func:`derived_name`) into
    ~/.asv-machine.json and return the name. ValueError for a name that is a path, or
    an existing file that is not valid JSON (named, never overwritten)."""
    name, cpu, ncpu, ram = identity(name)
    name = check_machine_name(name)
    entry = {"machine": name, "os": f"{platform.system()} {platform.release()}",
             "arch": platform.machine(), "cpu": cpu, "num_cpu": str(ncpu),
             "ram": str(ram // 1024)}
    path = os.path.expanduser("~/.asv-machine.json")
    with locked(path + ".lock"):  # a read-modify-write of path
        machines = {"version": 1}
        if os.path.exists(path):
            try:
                with open(path) as f:
                    machines.update(json.load(f))
            except (OSError, ValueError) as exc:
                raise ValueError(f"{path} is not a readable asv machine file ({exc}); "
                                 "fix or remove it") from None
        if machines.get(name) != entry:
            machines[name] = entry
            _write_atomic(path, machines)
    return name


def main(argv=None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m flashbench.infra.machine",
                                description="Register this machine with asv (~/.asv-machine.json) "
                                "under a stable name that says what it is; print the name.")
    p.add_argument("name", nargs="?", help="the name to register (default: derived, e.g. "
                   "cpu-x86_64-xeon-2cpu-24gb)")
    args = p.parse_args(argv)
    try:
        print(register(args.name))
    except ValueError as exc:
        p.exit(2, f"flashbench.infra.machine: error: {exc}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
