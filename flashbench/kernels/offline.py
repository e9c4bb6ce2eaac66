"""Compile a plan's kernels for a GPU architecture on a machine without a GPU.

Triton's wheel carries ptxas, so ``triton.compile`` can take a kernel to a cubin for
sm_90 (Hopper) here: every compilation a GPU run will trigger can be checked before
the run (it compiles, its shared memory fits, wgmma is used, registers do not spill)
and its compile time measured. Nothing is launched.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["OfflineCompile", "compile_plan"]


@dataclass(frozen=True)
class OfflineCompile:
    line: str  # the plan's line for this compilation
    seconds: float  # compile time here (this machine's CPU)
    shared_bytes: int | None
    registers: int | None
    spill_bytes: int | None  # local memory per thread (spills), from cuobjdump -res-usage
    wgmma: bool
    error: str | None = None
    wgmma_ops: int = 0  # wgmma.mma_async instructions in the PTX (Hopper tensor-core dots)
    mma_sync_ops: int = 0  # mma.sync instructions (the pre-Hopper path: a dot that missed wgmma)
    tma_ops: int = 0  # cp.async.bulk.tensor instructions in the PTX (TMA copies)
    warps: int | None = None  # warps launched: more than num_warps when warp-specialised
    setmaxnreg: int = 0  # setmaxnreg instructions (warp specialisation's register split)


def _resource_usage(cubin: bytes) -> tuple[int | None, int | None]:
    """(registers, local-memory bytes per thread: spills) from ``cuobjdump -res-usage``."""
    import triton

    cuobjdump = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    if not cubin or not cuobjdump.exists():
        return None, None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.cubin"
        path.write_bytes(cubin)
        out = subprocess.run([str(cuobjdump), "-res-usage", str(path)], capture_output=True,
                             text=True, timeout=300)
    regs = re.search(r"REG:(\d+)", out.stdout)
    local = re.search(r"LOCAL:(\d+)", out.stdout)
    return (int(regs[1]) if regs else None, int(local[1]) if local else None)


def compile_plan(plan, capability: int = 90, say=print) -> list[OfflineCompile]:
    """Compile every (signature, config) of ``plan`` for ``cuda:capability``."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.compiler import compile as triton_compile

    target = GPUTarget("cuda", capability, 32)
    results = []
    for c in plan.compiles:
        kernel, specs, constexprs = plan.details[(c.kernel, c.signature)]
        names = kernel.arg_names
        signature, constants, attrs = {}, {}, {}
        for i, (name, kind, attr) in enumerate(specs):
            if kind == "constexpr":
                signature[name], constants[(i,)] = "constexpr", attr
            else:
                signature[name] = kind
                if attr == "D":
                    attrs[(i,)] = [["tt.divisibility", 16]]
        for name, value in {**constexprs, **c.config.kwargs}.items():
            signature[name], constants[(names.index(name),)] = "constexpr", value
        options = {"num_warps": c.config.num_warps, "num_stages": c.config.num_stages,
                   **kernel.options}
        start = time.perf_counter()
        try:
            compiled = triton_compile(ASTSource(kernel.jit, signature, constants, attrs),
                                      target=target, options=options)
        except Exception as exc:  # report every failure, keep compiling the rest
            results.append(OfflineCompile(c.line(), time.perf_counter() - start, None, None,
                                          None, False, f"{type(exc).__name__}: {exc}"[:500]))
            say(f"FAILED {c.line()}: {results[-1].error}")
            continue
        seconds = time.perf_counter() - start
        ptx = compiled.asm.get("ptx", "")
        regs, spills = _resource_usage(compiled.asm.get("cubin", b""))
        r = OfflineCompile(c.line(), seconds, getattr(compiled.metadata, "shared", None),
                           regs, spills, "wgmma" in ptx,
                           wgmma_ops=len(re.findall(r"\bwgmma\.mma_async\b", ptx)),
                           mma_sync_ops=len(re.findall(r"\bmma\.sync\b", ptx)),
                           tma_ops=len(re.findall(r"\bcp\.async\.bulk\.tensor\b", ptx)),
                           warps=getattr(compiled.metadata, "num_warps", None),
                           setmaxnreg=len(re.findall(r"\bsetmaxnreg\b", ptx)))
        results.append(r)
        say(f"{seconds:5.1f} s  shared {r.shared_bytes} B  regs {r.registers}  "
            f"local {r.spill_bytes} B  wgmma {r.wgmma} ({r.wgmma_ops} ops, mma.sync "
            f"{r.mma_sync_ops})  tma {r.tma_ops}  warps {r.warps}  setmaxnreg {r.setmaxnreg}"
            f"  {c.line()}")
    return results
