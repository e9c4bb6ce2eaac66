"""Compile plans: which kernel compilations a run will trigger, counted without a GPU.

Triton compiles a kernel once per (specialisation of its arguments, constexpr values,
warps, stages) and keeps it in memory for the process. An autotuned launch compiles
every config that survives pruning, for every new specialisation. A
:class:`CompilePlan` collects those (kernel, signature, config) triples, recorded by
:func:`flashbench.kernels.launch.planning` from the very launch code the run executes
(on ``device="meta"`` tensors), so the count cannot drift from the code.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Compile", "CompilePlan", "triton_type_name"]

# torch dtype name -> Triton's type name in signatures
_TRITON_TYPES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float64": "fp64",
                 "float8_e4m3fn": "fp8e4nv", "float8_e5m2": "fp8e5", "int8": "i8",
                 "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8", "bool": "u1"}


def triton_type_name(dtype) -> str:
    """Triton's name of a torch dtype (``torch.bfloat16`` -> ``"bf16"``)."""
    name = str(dtype).removeprefix("torch.")
    if name not in _TRITON_TYPES:
        raise ValueError(f"no Triton type for torch dtype {dtype}")
    return _TRITON_TYPES[name]


@dataclass(frozen=True)
class Compile:
    """One compilation: a kernel, its argument specialisation, a launch config."""

    kernel: str
    signature: str
    config: object  # flashbench.kernels.launch.Config

    def line(self) -> str:
        return f"{self.kernel} [{self.config.label()}] ({self.signature})"


@dataclass
class CompilePlan:
    """Distinct compilations in the order first recorded, plus how each was asked for."""

    compiles: dict[Compile, set] = field(default_factory=dict)
    launches: int = 0
    # (kernel, signature) -> (TritonKernel, [(arg, type, attr)], constexprs): enough to
    # compile it offline (flashbench.kernels.offline)
    details: dict[tuple[str, str], tuple] = field(default_factory=dict)

    def add(self, kernel: str, signature: str, config, autotuned: bool,
            detail: tuple | None = None) -> None:
        self.launches += 1
        key = Compile(kernel, signature, config)
        self.compiles.setdefault(key, set()).add("autotune" if autotuned else "fixed")
        if detail is not None:
            self.details.setdefault((kernel, signature), detail)

    def __len__(self) -> int:
        return len(self.compiles)

    def signatures(self) -> dict[tuple[str, str], list]:
        """(kernel, signature) -> the configs compiled for it."""
        out: dict[tuple[str, str], list] = {}
        for c in self.compiles:
            out.setdefault((c.kernel, c.signature), []).append(c.config)
        return out

    def lines(self) -> list[str]:
        """One line per signature with its configs, then the total (last line
        exactly ``compiles: N``)."""
        out = []
        for i, ((kernel, sig), configs) in enumerate(self.signatures().items(), 1):
            out.append(f"signature {i}: {kernel} ({sig})")
            for cfg in configs:
                how = "+".join(sorted(self.compiles[Compile(kernel, sig, cfg)]))
                out.append(f"    {cfg.label()}  [{how}]")
        sigs = len(self.signatures())
        out.append(f"{sigs} signatures, {self.launches} launches planned")
        out.append(f"compiles: {len(self)}")
        return out
