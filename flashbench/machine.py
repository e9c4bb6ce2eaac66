"""asv machine names: stable, and saying what the machine is.

``python -m flashbench.machine`` (or scripts/asv_machine.py) registers this machine
in ~/.asv-machine.json and prints its name.

CPU machines: ``cpu-<arch>-<N>cpu-<M>gb`` (e.g. cpu-x86_64-2cpu-24gb). GPU machines:
``<gpu>-<N>cpu`` (e.g. nvidia-h200-16cpu). asv's machine.json has no GPU field, so
the GPU model goes into the name and into the "cpu" field beside the processor.

It writes every field into ~/.asv-machine.json itself: ``asv machine --yes`` stores
only the fields that differ from its auto-detected defaults, which leaves the
results' machine.json without os, arch and cpu.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys


def gpu_model() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    names = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    return names[0] if out.returncode == 0 and names else None


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def register(name: str | None = None) -> str:
    """Write this machine's entry (named ``name``, default the derived one) and return the name."""
    ncpu = os.cpu_count() or 1
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    gpu = gpu_model()
    if gpu:
        derived = f"{re.sub(r'[^a-z0-9]+', '-', gpu.lower()).strip('-')}-{ncpu}cpu"
        cpu = f"{cpu_model()}; GPU: {gpu}"
    else:
        derived = f"cpu-{platform.machine()}-{ncpu}cpu-{round(ram / 2**30)}gb"
        cpu = cpu_model()
    name = name or derived
    path = os.path.expanduser("~/.asv-machine.json")
    machines = {"version": 1}
    if os.path.exists(path):
        with open(path) as f:
            machines.update(json.load(f))
    machines[name] = {"machine": name, "os": f"{platform.system()} {platform.release()}",
                      "arch": platform.machine(), "cpu": cpu, "num_cpu": str(ncpu),
                      "ram": str(ram // 1024)}
    with open(path, "w") as f:
        json.dump(machines, f, indent=4)
    return name


if __name__ == "__main__":
    print(register(sys.argv[1] if len(sys.argv) > 1 else None))
