"""Launching flashbench's Triton kernels: compiled on a GPU, interpreted on CPU tensors.

:class:`TritonKernel` keeps a kernel's plain Python function beside its ``triton.jit``
object and chooses per kernel and per call, never for the process (:func:`interpreted_for`):
CUDA tensors run the compiled ``JITFunction`` (autotuned over ``configs``, or one fixed
:class:`Config`); CPU tensors run its interpreted twin (:mod:`flashbench.kernels.interpreter`).
``FLASHBENCH_TRITON_INTERPRET=1`` interprets CUDA tensors too; ``=0`` refuses the
interpreter (a CPU launch is then a ValueError). Do not set Triton's ``TRITON_INTERPRET``
instead: it makes every kernel decorated afterwards (torch.compile's too) interpreted,
and set after ``import triton`` it breaks the interpreter: docs/gpu.md ("Where it runs").

:func:`planning` records launches as the compilations they would trigger (one per config x
specialization, Triton's cache key): on ``device="meta"`` tensors it counts a work list's
compilations without a GPU. :func:`warming` compiles instead of launching.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from flashbench.kernels.interpreter import jitted_helpers_interpreted, twin

__all__ = ["Config", "TritonKernel", "interpreted_for", "default_interpreted", "planning",
           "ENV_FORCE"]

ENV_FORCE = "FLASHBENCH_TRITON_INTERPRET"  # "1": interpret even CUDA tensors; "0": never


@dataclass(frozen=True)
class Config:
    """One launch configuration: constexpr meta-parameters plus warps and pipeline stages.

    ``params`` holds the block sizes (``{"BLOCK_M": 128, "BLOCK_N": 64}``) as a sorted
    tuple of pairs so that configs hash and compare by value.
    """

    params: tuple[tuple[str, int], ...]
    num_warps: int = 4
    num_stages: int = 2

    @classmethod
    def of(cls, num_warps: int = 4, num_stages: int = 2, **params: int) -> Config:
        return cls(tuple(sorted(params.items())), num_warps, num_stages)

    @property
    def kwargs(self) -> dict[str, int]:
        return dict(self.params)

    def label(self) -> str:
        blocks = " ".join(f"{k}={v}" for k, v in self.params)
        return f"{blocks} warps={self.num_warps} stages={self.num_stages}"

    def triton(self):
        import triton

        return triton.Config(self.kwargs, num_warps=self.num_warps, num_stages=self.num_stages)

    @classmethod
    def from_triton(cls, cfg) -> Config:
        return cls(tuple(sorted(cfg.kwargs.items())), cfg.num_warps, cfg.num_stages)


def _force() -> bool | None:
    value = os.environ.get(ENV_FORCE, "").strip()
    if value in ("", None):
        return None
    if value not in ("0", "1"):
        raise ValueError(f"{ENV_FORCE} must be 0 or 1, got {value!r}")
    return value == "1"


def interpreter_refused() -> bool:
    """``FLASHBENCH_TRITON_INTERPRET=0``: launches that could only run interpreted are
    refused (:func:`interpreted_for`)."""
    return _force() is False


def _triton_interprets() -> bool:
    # the process was started with TRITON_INTERPRET=1: Triton interprets every kernel
    return os.environ.get("TRITON_INTERPRET", "") == "1"


def default_interpreted() -> bool:
    """True when flashbench's kernels run interpreted here: no CUDA GPU is visible to
    torch (a CPU-only machine has only CPU tensors, and interprets every launch, whatever
    ``FLASHBENCH_TRITON_INTERPRET`` says: with ``=0`` those launches are refused, not
    compiled), ``FLASHBENCH_TRITON_INTERPRET=1``, or the process was started with
    ``TRITON_INTERPRET=1``, which Triton itself then applies to every kernel."""
    if _force() is True or _triton_interprets():
        return True
    import torch

    return not torch.cuda.is_available()


def interpreted_for(device) -> bool:
    """Whether a launch on tensors of ``device`` runs interpreted: CPU tensors always,
    CUDA tensors only when ``FLASHBENCH_TRITON_INTERPRET=1`` (or ``TRITON_INTERPRET=1``);
    ``meta`` tensors (planning) never.

    ``FLASHBENCH_TRITON_INTERPRET=0`` means never: where a launch could only run
    interpreted (CPU tensors, or a process started with ``TRITON_INTERPRET=1``) it is
    a ValueError saying so, not a silent interpretation.
    """
    kind = getattr(device, "type", str(device))
    if kind == "meta":
        return False
    interpreted = kind == "cpu" or _force() is True or _triton_interprets()
    if interpreted and _force() is False:
        why = (f"tensors on {kind} run only under Triton's interpreter" if kind == "cpu"
               else "the process was started with TRITON_INTERPRET=1, so Triton interprets "
                    "every kernel")
        raise ValueError(f"{ENV_FORCE}=0 refuses the Triton interpreter, and {why}: give "
                         f"CUDA tensors (in a process without TRITON_INTERPRET=1), or unset "
                         f"{ENV_FORCE}")
    return interpreted


# ---------------------------------------------------------------- planning

_PLAN: contextvars.ContextVar = contextvars.ContextVar("flashbench_compile_plan", default=None)


@contextlib.contextmanager
def planning(plan=None):
    """Record launches as compilations instead of running them (see module docstring).

    Yields the :class:`flashbench.kernels.plan.CompilePlan` (a new one by default).
    """
    from flashbench.kernels.plan import CompilePlan

    plan = CompilePlan() if plan is None else plan
    token = _PLAN.set(plan)
    try:
        yield plan
    finally:
        _PLAN.reset(token)


def active_plan():
    """The plan being recorded, or None outside :func:`planning`."""
    return _PLAN.get()


_WARM: contextvars.ContextVar = contextvars.ContextVar("flashbench_warmup", default=None)


@contextlib.contextmanager
def warming(share: Callable[[int], bool] = lambda i: True):
    """Compile instead of launching (Triton's ``warmup``: kernels land in its disk cache,
    nothing runs): the i-th distinct compilation met is done where ``share(i)``.

    Worker processes on a GPU machine each replay a run's launches on ``device="meta"``
    tensors inside ``warming(lambda i: i % workers == me)``: the run proper then finds
    every kernel in Triton's cache (same code path, same cache key). Yields the
    compilations met so far, (kernel, signature, config) -> index."""
    seen: dict = {}
    token = _WARM.set((share, seen))
    try:
        yield seen
    finally:
        _WARM.reset(token)


def _spec(value, specialize: bool = True):
    """Triton 3.x's specialisation of one argument (``native_specialize_impl``'s rules):
    ints as i32/i64/u64, 1 as a constant, multiples of 16 marked 'D'; tensors as
    '*dtype' with 'D' when the address is 16-byte aligned; floats fp32."""
    if value is None:
        return ("constexpr", None)
    if isinstance(value, bool):
        return ("u1", None)
    if isinstance(value, int):
        kind = ("i32" if -2**31 <= value < 2**31 else "u64" if value >= 2**63 else "i64")
        if not specialize:
            return (kind, None)
        if value == 1:
            return ("constexpr", 1)
        return (kind, "D" if value % 16 == 0 else "")
    if isinstance(value, float):
        return ("fp32", None)
    if hasattr(value, "data_ptr") and hasattr(value, "dtype"):
        from flashbench.kernels.plan import triton_type_name

        kind = "*" + triton_type_name(value.dtype)
        if not specialize:
            return (kind, None)
        return (kind, "D" if value.data_ptr() % 16 == 0 else "")
    raise TypeError(f"cannot specialise a kernel argument of type {type(value).__name__}")


# ---------------------------------------------------------------- the kernel object

@dataclass
class TritonKernel:
    """A Triton kernel that runs compiled (CUDA tensors) or interpreted (CPU tensors).

    ``fn``: the kernel as a plain Python function (not decorated); its helpers are
    ordinary ``@triton.jit`` functions. ``name``: how plans and errors call it.
    ``do_not_specialize``: argument names Triton should not specialise on value
    (sizes that vary per shape: fewer compilations). ``autotune_key``: argument
    names the autotuner re-tunes on (argument dtypes are added by Triton).
    ``prune``: ``prune(configs: list[Config], named_args: dict, **constexprs) ->
    list[Config]``, the early pruning shared by the autotuner and the plan.
    """

    fn: Callable
    name: str
    do_not_specialize: Sequence[str] = ()
    autotune_key: Sequence[str] = ()
    prune: Callable | None = None
    # compile options for every compiled launch: fp fusion on (the folded softmax scale is
    # one fused multiply-add per score), as Triton 3.6-3.9 default but 3.10 will not
    options: dict = field(default_factory=lambda: {"enable_fp_fusion": True})
    _jit: object = field(default=None, repr=False)
    _tuned: dict = field(default_factory=dict, repr=False)

    @property
    def arg_names(self) -> list[str]:
        return list(self.fn.__code__.co_varnames[:self.fn.__code__.co_argcount])

    @property
    def jit(self):
        """The compiled kernel (``triton.jit`` of ``fn``), built on first use."""
        if self._jit is None:
            import triton

            self._jit = triton.jit(self.fn, do_not_specialize=list(self.do_not_specialize))
        return self._jit

    def autotuner(self, configs: Sequence[Config]):
        """``triton.autotune`` over ``configs`` with :attr:`prune` as early_config_prune
        (one autotuner per candidate list, built on first use)."""
        key = tuple(configs)
        tuner = self._tuned.get(key)
        if tuner is None:
            import triton

            prune = None
            if self.prune is not None:
                def prune(cfgs, named_args, **kwargs):
                    by_value = {Config.from_triton(c): c for c in cfgs}
                    kept = self.prune([Config.from_triton(c) for c in cfgs], named_args, **kwargs)
                    return [by_value[c] for c in kept]
            tuner = triton.autotune(
                configs=[c.triton() for c in configs], key=list(self.autotune_key),
                prune_configs_by=None if prune is None else {"early_config_prune": prune},
            )(self.jit)
            self._tuned[key] = tuner
        return tuner

    def _compiled_kwargs(self, constexprs: dict, config: Config) -> dict:
        # spelled as the autotuner spells a config's launch (constexprs, options, then
        # Config.all_kwargs()), so a fixed launch and an autotuned one of the same config
        # share one entry of Triton's in-memory cache, not only of its disk cache
        return {**constexprs, **self.options, **config.triton().all_kwargs()}

    def compiled_count(self) -> int | None:
        """Kernels compiled (or loaded from Triton's disk cache) by this process so far;
        None where this Triton keeps its caches elsewhere."""
        if self._jit is None:
            return 0
        caches = getattr(self._jit, "device_caches", None)
        try:
            return sum(len(entry[0]) for entry in caches.values())
        except (AttributeError, TypeError, IndexError):
            return None

    def best_config(self, configs: Sequence[Config]) -> Config | None:
        """The config the autotuner over ``configs`` chose at its last launch."""
        tuner = self._tuned.get(tuple(configs))
        best = getattr(tuner, "best_config", None)
        return None if best is None else Config.from_triton(best)

    def candidates(self, configs: Sequence[Config], args: Sequence,
                   constexprs: dict) -> list[Config]:
        """The configs an autotuned launch benchmarks (and compiles): ``prune`` applied."""
        if self.prune is None:
            return list(configs)
        named = dict(zip(self.arg_names, args, strict=False))
        kept = self.prune(list(configs), named, **constexprs)
        if not kept:
            raise ValueError(f"{self.name}: pruning left no config to launch")
        return kept

    def specialize(self, args: Sequence) -> list[tuple[str, str, object]]:
        """Triton's specialisation of the positional arguments: (name, type, attribute)."""
        return [(name, *_spec(value, specialize=name not in self.do_not_specialize))
                for name, value in zip(self.arg_names, args, strict=False)]

    def signature(self, args: Sequence, constexprs: dict) -> str:
        """Triton's specialisation of these arguments, as text (part of its cache key)."""
        parts = []
        for name, kind, attr in self.specialize(args):
            if kind == "constexpr":
                parts.append(f"{name}={attr}")
            else:
                parts.append(f"{name}:{kind}{attr or ''}")
        parts += [f"{k}={v}" for k, v in constexprs.items()]
        return ", ".join(parts)

    def launch(self, grid: Callable[[dict], tuple], args: Sequence, constexprs: dict, *,
               device, config: Config | None = None, configs: Sequence[Config] | None = None,
               interpret_config: Config | None = None) -> Config | None:
        """Launch over ``grid(meta)`` (meta: the chosen config's params).

        Compiled: with ``config`` (one fixed config) or ``configs`` (autotuned after
        ``prune``); returns the config used (for autotuning: the one chosen).
        Interpreted (:func:`interpreted_for` ``device``): ``config`` or, failing that,
        ``interpret_config`` gives the blocks; warps and stages mean nothing there.
        Inside :func:`planning`: records the compilations and launches nothing.
        """
        if (config is None) == (configs is None) and not interpreted_for(device):
            raise ValueError(f"{self.name}: give exactly one of config= or configs=")
        warm = _WARM.get()
        if warm is not None:
            share, seen = warm
            chosen = [config] if config is not None else self.candidates(configs, args, constexprs)
            sig = self.signature(args, constexprs)
            for cfg in chosen:
                if (self.name, sig, cfg) in seen:
                    continue
                seen[(self.name, sig, cfg)] = index = len(seen)
                if share(index):
                    self.jit.warmup(*args, grid=(1,), **self._compiled_kwargs(constexprs, cfg))
            return config
        plan = active_plan()
        if plan is not None:
            chosen = [config] if config is not None else self.candidates(configs, args, constexprs)
            sig = self.signature(args, constexprs)
            detail = (self, self.specialize(args), dict(constexprs))
            for cfg in chosen:
                plan.add(self.name, sig, cfg, autotuned=config is None, detail=detail)
            return config
        if interpreted_for(device):
            cfg = config or interpret_config
            if cfg is None:
                raise ValueError(f"{self.name}: an interpreted launch needs config= or "
                                 "interpret_config=")
            meta = {**constexprs, **cfg.kwargs}
            with jitted_helpers_interpreted():
                twin(self.fn)[grid(meta)](*args, **meta)
            return cfg
        if config is not None:
            self.jit[grid({**constexprs, **config.kwargs})](
                *args, **self._compiled_kwargs(constexprs, config))
            return config
        tuner = self.autotuner(configs)
        tuner[grid](*args, **constexprs, **self.options)
        return self.best_config(configs)
