"""Knowledge shared by the suites: timing knobs, imports that skip, inputs from a shape.

asv installs each commit's flashbench but runs *today's* benchmarks against it, so every
suite reaches flashbench through :func:`need`, which turns a missing module or attribute
into NotImplementedError: asv records the benchmark as skipped (NaN) instead of failed.
``need`` takes alternative locations, so a function that moved keeps older commits
measurable; ``tests/test_benchmarks.py`` fails on any skip at HEAD whose reason is not a
missing GPU. Grid points that do not apply are declared with asv's ``skip_params``, never
skipped from setup. Every timed suite records the problem it ran as asv parameters
(``shape``, the text of :class:`flashbench.inputs.Shape`, ``dtype`` and, where they apply,
``causal`` and ``direction``), from which the history computes FLOPs. Peak memory is
measured in a fresh child process (:func:`peak_memory`): under asv's forkserver a
benchmark process is forked from a server that has imported every suite, and starts with
its memory. Why and how: docs/asv.md ("Skips, not failures", "Peak memory").
"""

import hashlib
import importlib
import inspect
import json
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import scipy.special

from . import floor

try:  # raised inside a benchmark (after setup), asv records a skip (NaN) only for this one:
    from asv_runner.benchmarks.mark import SkipNotImplemented  # any other error is a failure
except ImportError:  # the suites imported without asv (tests, tools)
    class SkipNotImplemented(NotImplementedError):
        """asv_runner's: a benchmark that does not apply, raised after its setup."""


class Benchmark:
    """Timing knobs written once (numpy's benchmarks/common.py habit).

    One round, 3-5 repeats within 4 s of samples: a commit's whole run stays within
    minutes on a 2-CPU machine. asv_runner >= 0.3 reruns ``setup`` before every
    timed call, so inputs are built in setup and never timed.
    """

    rounds = 1
    repeat = (3, 5, 4.0)
    timeout = 600


# Modules that moved into packages: tried at their new home first, then where older
# commits kept them (this table is what keeps those commits measurable).
NEW_HOME = {"precision": "inputs.precision", "validation": "inputs.validation",
            "measure_grad": "measure.backward", "timing": "measure.timing",
            "check": "measure.check", "machine": "infra.machine"}


# What each registry backend takes, literal, so that importing a suite imports no torch
# (flashbench.backends loads it: ~1.1 s of CPU in every asv discovery, forkserver and review
# listing): the dtypes (``Backend.dtypes``) and whether it has a backward anywhere
# (``Backend.differentiable``; flex's exists only on a GPU, so its points are decided in
# setup). tests/test_benchmarks.py holds this equal to the registry. An older commit's
# backend that does not take a point skips from setup ("no record"), as before.
TORCH_FLOATS = ("fp32", "fp16", "bf16")
BACKEND_DTYPES = {"torch-naive": TORCH_FLOATS, "torch-sdpa": TORCH_FLOATS,
                  "sdpa-flash": TORCH_FLOATS, "sdpa-efficient": TORCH_FLOATS,
                  "sdpa-cudnn": TORCH_FLOATS, "sdpa-math": TORCH_FLOATS,
                  "triton": TORCH_FLOATS, "triton-fp8": ("fp8",), "flex": TORCH_FLOATS}
NO_BACKWARD = ("triton-fp8",)
BACKWARD_ON_GPU_ONLY = ("flex",)


def need(module, *names: str):
    """Import ``flashbench.<module>`` (and attributes), or skip the benchmark where this
    commit lacks them (NotImplementedError); a commit whose module does not import fails.

    ``module`` is a name or a tuple of alternative names, tried in order: the first
    that has every attribute wins (``need(("measure", "check"), "measure_accuracy")``
    finds the function where it lives now and where older commits kept it).
    """
    alternatives = (module,) if isinstance(module, str) else tuple(module)
    alternatives = tuple(n for name in alternatives for n in (NEW_HOME.get(name), name) if n)
    errors = []
    for name in alternatives:
        try:  # any other failure of the import (one that raises) fails the benchmark
            mod = importlib.import_module(f"flashbench.{name}")
        except ModuleNotFoundError as exc:
            if not _absent(exc, f"flashbench.{name}"):
                raise  # a module it imports is missing: this commit is broken, not older
            errors.append(str(exc))
            continue
        try:
            attrs = [getattr(mod, n) for n in names]
        except AttributeError as exc:  # a name this commit's module does not have
            errors.append(str(exc))
            continue
        if not names:
            return mod
        return attrs[0] if len(attrs) == 1 else attrs
    where = " or ".join(f"flashbench.{m}" for m in alternatives)
    raise NotImplementedError(f"this commit lacks {where}: {'; '.join(errors)}")


def _absent(exc: ModuleNotFoundError, module: str) -> bool:
    """Whether ``exc`` says ``module`` (or a package above it, below flashbench) is not in
    this commit; any other missing module, or an import that raises, fails the benchmark:
    a head whose flashbench cannot import is broken ("failed"), not skipped."""
    parts = module.split(".")
    return exc.name in {".".join(parts[:i]) for i in range(2, len(parts) + 1)}


def shape_of(spec: str):
    """The flashbench.inputs.Shape a ``shape`` parameter names (``Shape.parse``; commits
    before it existed get ``Shape(B, H, Nq, Nk, d)`` from the plain ``BxHxNqxNkxd`` form)."""
    Shape = need("inputs", "Shape")
    if hasattr(Shape, "parse"):
        return Shape.parse(spec)
    b, h, nq, nk, d = (int(x) for x in spec.split("x"))
    return Shape(b, h, nq, nk, d)


def qkv(spec: str, dist="normal", seed=0):
    """float64 (q, k, v) for the shape ``spec`` from flashbench.inputs.make_qkv."""
    make_qkv = need("inputs", "make_qkv")
    return make_qkv(shape_of(spec), dist, seed)


class FreshCalls:
    """A timed call whose every run sees new contents, its outputs checked after.

    ``POOL`` argument tuples (never one twice in a row) from seeds drawn per run
    (``make(seed)``: numpy arrays or torch tensors; default the float64
    ``qkv(spec, seed=)``). Each call takes the next tuple, overwrites one row (axis -2) of
    its first array with values of a bank drawn in setup (N(0, ``bank_scale``^2)) and
    rewrites the whole argument ``fresh`` (k is 1) as its setup contents x a factor
    in [0.5, 2) drawn per call (one multiply, no allocation): every output row changes, so
    a cache keyed on addresses, ``id()``, a fingerprint or a row's contents is stale.
    ``fresh=None`` (the default) keeps the one new row alone: no suite uses it (a cache
    that recomputed only the changed rows of TimeSoftmax and TimeMergeStates was right and
    faster); every suite names its ``fresh`` argument in its setup, so asv starts a new
    series where the timed work changed.
    ``stage`` (optional) brings arguments derived from the first (a forward's o and lse) up
    to date for the new row. The call keeps a copy of its
    output's new row and :data:`EXTRA` random others (``pick(out, rows)``). :meth:`verify`
    (teardown, outside the clock) replays each call's exact inputs and recomputes the kept
    rows (``want(args, row, **kwargs)`` on float64 arguments; default
    :func:`attention_row`), raising :class:`KernelFailed` for the first row off by more
    than ``tol`` x max(1, the row's largest value); then the fastest call against this
    machine's floor (:mod:`benchmarks.floor`: faster than its own matmul fails). docs/speed.md.
    """

    POOL, BANK = 2, 61  # coprime: a (slot, row values) pair returns after 122 calls; a
    # cache keyed on a slot hits from the third call on, as the review's first pair makes it
    FACTORS = 59  # per-call factors of the ``fresh`` argument (coprime with BANK and POOL)
    # rows checked beside the new one, drawn from the OS's entropy once a call has returned:
    # drawn in setup, a kernel read them from its caller's frame and computed those alone
    # (a red team, 2026-12-06: 28 ms a call against 57 honest, verify passed)
    EXTRA = 2

    def __init__(self, spec: str, fn, make=None, tol: float = 1e-9, *, want=None, pick=None,
                 stage=None, bank_scale: float = 1.0, fresh: int | None = None, **kwargs):
        rng = np.random.default_rng(int.from_bytes(os.urandom(8), "little"))
        self.fn, self.kwargs, self.tol, self.i, self.kept = fn, kwargs, tol, 0, []
        self.want, self.stage, self.fresh = want or attention_row, stage, fresh
        self.pick = pick or (lambda out, rows: (out[0] if isinstance(out, tuple | list)
                                                else out)[..., rows, :])
        make = make or (lambda seed: qkv(spec, seed=seed))
        self.slots = [make(int(s)) for s in rng.integers(2**31, size=self.POOL)]
        q = self.slots[0][0]
        self.bank = rng.standard_normal((self.BANK, q.shape[-1])) * bank_scale
        self.rows = rng.integers(q.shape[-2], size=self.BANK)
        self.n_rows = q.shape[-2]
        self.factors = [float(c) for c in rng.uniform(0.5, 2.0, self.FACTORS)]
        self.copy, self.mul = np.array, np.multiply
        # the floor's work (None: not judged), the arguments' torch dtype and device; a GPU's
        # calls are clocked from an idle device to an idle device (``sync``)
        self.work = floor.work(spec, self.slots[0], kwargs)
        self.dtype, self.device, self.sync = None, "cpu", None
        if not isinstance(q, np.ndarray):  # torch tensors: the bank in q's dtype and device
            import torch

            self.bank = torch.from_numpy(self.bank).to(dtype=q.dtype, device=q.device)
            self.copy, self.mul = torch.clone, torch.mul
            self.dtype, self.device = q.dtype, q.device.type
            self.sync = torch.cuda.synchronize if self.device == "cuda" else None
        self.fastest = float("inf")  # the fastest call, on the suites' own clock
        self.written = sorted({int(r) for r in self.rows})  # rows the bank overwrites
        self.base = [None if fresh is None else self.copy(s[fresh]) for s in self.slots]
        first = self.base if fresh == 0 else [s[0] for s in self.slots]
        self.original = [self.copy(f[..., self.written, :]) for f in first]

    def __call__(self):
        i = self.i
        self.i = i + 1
        slot = i % self.POOL
        args, base = self.slots[slot], self.base[slot]
        r = self.rows[i % self.BANK]
        if self.fresh == 0:  # the new row goes into the setup contents, then all is scaled
            base[..., r, :] = self.bank[i % self.BANK]
            self.mul(base, self.factors[i % self.FACTORS], out=args[0])
        else:
            args[0][..., r, :] = self.bank[i % self.BANK]
            if self.fresh is not None:
                self.mul(base, self.factors[i % self.FACTORS], out=args[self.fresh])
        if self.stage is not None:
            self.stage(args, r, **self.kwargs)
        if self.sync is not None:
            self.sync()
        t0 = floor.clock()
        out = self.fn(*args, **self.kwargs)
        if self.sync is not None:
            self.sync()
        self.fastest = min(self.fastest, floor.clock() - t0)
        if (why := _not_plain(out)) is not None:  # read lazily, it would compute now
            self.kept.append((i, None, why))
            return
        rows = [int(r), *(secrets.randbelow(self.n_rows) for _ in range(self.EXTRA))]
        self.kept.append((i, rows, self.copy(self.pick(out, rows))))

    def verify(self) -> None:
        def f64(x):
            return x if isinstance(x, np.ndarray) else x.detach().double().cpu().numpy()

        state = {}  # slot -> (its other arguments in float64, the first array as set up)
        for i, rows, got in self.kept:
            if rows is None:
                raise KernelFailed(f"timed call {i}: {got}")
            slot = i % self.POOL
            if slot not in state:
                args = self.slots[slot]
                first = self.copy(self.base[slot] if self.fresh == 0 else args[0])
                first[..., self.written, :] = self.original[slot]  # undo every call's row
                state[slot] = ([f64(t).copy() for t in args], first)
            args, first = state[slot]
            first[..., self.rows[i % self.BANK], :] = self.bank[i % self.BANK]
            factor = self.factors[i % self.FACTORS]  # each call's inputs, bit for bit
            args[0] = f64(self.mul(first, factor) if self.fresh == 0 else first)
            if self.fresh not in (None, 0):
                args[self.fresh] = f64(self.mul(self.base[slot], factor))
            for j, r in enumerate(rows):
                want = self.want(args, r, **self.kwargs)
                err = np.abs(f64(got)[..., j, :] - want).max()
                if not err <= self.tol * max(1.0, float(np.abs(want).max())):
                    raise KernelFailed(
                        f"timed call {i}: row {r} of its output is stale or wrong (max abs "
                        f"error {err:.3g} > {self.tol:g} x max(1, its largest value) against "
                        f"the float64 reference of the inputs it was given)")
        if self.kept and self.work is not None:
            why = floor.too_fast(self.fastest, *self.work, dtype=self.dtype,
                                 device=self.device)
            if why is not None:
                raise KernelFailed(f"faster than this machine can go: {why}")
        self.forget()

    def forget(self) -> None:
        """Drop the kept calls; the live contents become what the next replay starts from (a
        GPU suite's calls live on across asv's samples: :func:`prepared`)."""
        self.kept = []
        first = self.base if self.fresh == 0 else [s[0] for s in self.slots]
        self.original = [self.copy(f[..., self.written, :]) for f in first]


def _not_plain(out) -> str | None:
    """Why a timed call's output (or an item of its plain tuple or list) is not plain data:
    exactly a numpy array or a torch tensor, a number or None. A red team's head
    (2026-12-07) returned an ndarray subclass that computed a row only when it was read: the
    rows checked were right, the call did a fraction of the work, the review read it
    "faster" (0.15x)."""
    torch = sys.modules.get("torch")
    plain = (np.ndarray, *(() if torch is None else (torch.Tensor,)), float, int, bool)
    for x in out if type(out) in (tuple, list) else (out,):  # a subclass's items may lie
        if x is None or type(x) in plain or (isinstance(x, np.generic)
                                             and type(x).__module__ == "numpy"):
            continue
        return (f"returned a {type(x).__module__}.{type(x).__qualname__}, not exactly a "
                "numpy array or torch tensor (a subclass or wrapper may compute when read)")
    return None


def verify(suite) -> None:
    """A suite's teardown: :meth:`FreshCalls.verify` of the calls its setup made. None where
    setup skipped (asv runs teardown after a skipped setup too: an old commit stays NaN)."""
    call = suite.__dict__.pop("call", None)
    if call is not None:
        call.verify()


def attention_row(args, r: int, causal=False, block=None, window=(-1, -1), softcap=None,
                  sinks=None):
    """Row ``r`` of attention(q, k, v) in float64 on that one query row, the k, v heads read
    in place for grouped queries: [..., H, dv]. Computed here, by scipy's logsumexp, with
    the variants' contract (DESIGN.md; window, softcap, sinks), never by the commit's
    reference, which TimeAttention and TimeVariantReference time: a change that broke it
    would otherwise check itself (one that dropped the softcap passed until 2026-12-06)."""
    q, k, v = args[:3]
    h, hkv, nk = q.shape[-3], k.shape[-3], k.shape[-2]
    diag = r + nk - q.shape[-2]  # the key on this row's bottom-right diagonal
    left, right = window
    lo = 0 if left < 0 else max(0, diag - left)
    hi = nk if right < 0 else min(nk, diag + right + 1)
    hi = min(hi, diag + 1) if causal else hi
    # grouped k, v heads read in place: q's heads as (kv head, group), no repeated copy
    qr = q[..., r, :].reshape(*q.shape[:-3], hkv, h // hkv, q.shape[-1])
    s = np.einsum("...gd,...nd->...gn", qr, k[..., lo:max(lo, hi), :]) / np.sqrt(q.shape[-1])
    if softcap is not None:
        s = softcap * np.tanh(s / softcap)
    if sinks is not None:  # a key with no value: it joins the denominator only
        sink = np.broadcast_to(np.asarray(sinks, np.float64).reshape(hkv, h // hkv, 1),
                               (*s.shape[:-1], 1))
        s = np.concatenate([s, sink], axis=-1)
    if s.shape[-1] == 0:  # a row that sees no key (nor a sink): a zero row
        return np.zeros((*q.shape[:-2], v.shape[-1]))
    p = np.exp(s - scipy.special.logsumexp(s, axis=-1, keepdims=True))[..., :max(0, hi - lo)]
    o = np.einsum("...gn,...nd->...gd", p, v[..., lo:max(lo, hi), :])
    return o.reshape(*q.shape[:-2], v.shape[-1])


def timed_backend(name: str):
    """The Backend record timings run for backend ``name``, or skip: they call its
    ``timed_fn`` (the bare op) on inputs from its ``prepare``.

    Commits before timed_fn and prepare existed timed torch-sdpa together with a
    separate LSE pass: a different quantity, so those commits skip rather than mix
    the two.
    """
    get_backend = need("backends", "get_backend")
    try:
        backend = get_backend(name)
    except ValueError as exc:  # a backend this commit does not have yet
        raise NotImplementedError(f"this commit lacks backend {name!r}: {exc}") from None
    if not (hasattr(backend, "timed_fn") and hasattr(backend, "prepare")):
        raise NotImplementedError("this commit's backends have no timed_fn/prepare")
    return backend


def torch_dtype(dtype: str):
    """torch dtype of a precision name, from the registry (or skip on older commits)."""
    return need(("kernels.validate", "kernels.checks"), "TORCH_DTYPES")[dtype]


class KernelFailed(RuntimeError):
    """A kernel ran and gave no valid result (it raised, returned the wrong shape, NaN
    where the reference is finite): the benchmark FAILS (asv records null), never skips."""


def record_or_raise(rec, what: str):
    """A measurement record, or raise: NotImplementedError (asv skips) for a kernel that
    cannot run here (``Unavailable``, or a reason string from an older commit);
    :class:`KernelFailed` (asv records a failure) for a ``Failed`` record, naming
    ``what`` (kernel and dtype) and the reason."""
    if isinstance(rec, str):
        raise NotImplementedError(rec)
    if type(rec).__name__ == "Failed":
        raise KernelFailed(f"{what} failed: {rec.reason}")
    if type(rec).__name__ == "Unavailable":
        raise NotImplementedError(rec.reason)
    return rec


class TrackStandard:
    """The same-dtype standard model's own max abs error against float64, per dtype x causal
    x shape (``params``), seed 0, N(0, 1): the yardstick of every kernel's baseline ratio,
    forward (``grad`` False: O, LSE) or backward (dq, dk, dv). A head that makes the
    standard model worse makes every ratio "better" while no kernel changed (a red team's
    head rounded fp32's standard O through fp16: ratios 0.8 -> 0.002, "OK", exit 0);
    tracked, the standard's own error regresses ("worse") in the review and the history."""

    param_names = ["dtype", "causal", "shape"]
    timeout = 600
    grad = False

    def __init_subclass__(cls, **kwargs):
        """asv's version hashes a track's, setup's and setup_cache's own source: here the
        computation lives in :meth:`errors_of_standard`, so the version is set to a hash of
        every method the suite runs (an edit to this class starts a new series and is a
        changed benchmark to the review, as an edit to a suite of its own would be)."""
        super().__init_subclass__(**kwargs)
        methods = [*vars(TrackStandard).values(), *vars(cls).values()]
        cls.version = hashlib.sha256("".join(
            inspect.getsource(f) for f in methods if inspect.isfunction(f)).encode()).hexdigest()

    def errors_of_standard(self) -> dict:
        """{(dtype, causal, shape): {tensor: max abs error}}: each suite's ``setup_cache``
        (one of its own: asv keys a cache by the function's file and line, so one inherited
        setup_cache gave the backward's tracks the forward's cache, every value n/a)."""
        try:
            make_qkv, error_stats = need("inputs", "make_qkv"), need("accuracy", "error_stats")
            get_precision = need("precision", "get_precision")
            if self.grad:
                grad_output = need("measure_grad", "grad_output")  # older commits' home too
                truth, model = need("reference", "attention_grad"), need(
                    "numerics", "standard_model_grad")
            else:
                truth, model = need("reference", "attention"), need("numerics", "standard_model")
        except NotImplementedError as exc:  # an older commit: every benchmark skips
            return {"missing": str(exc)}
        names, (dtypes, causals, shapes) = ("dq", "dk", "dv") if self.grad else ("o", "lse"), \
            self.params
        results = {}
        for shape in shapes:
            inputs = make_qkv(shape_of(shape), "normal", 0)
            if self.grad:
                inputs = (*inputs, grad_output(shape_of(shape), 0))
            for causal in causals:
                ref = truth(*inputs, causal=causal)
                for dtype in known_dtypes(dtypes):
                    prec = get_precision(dtype)
                    std = model(*inputs, prec, causal=causal)
                    results[(dtype, causal, shape)] = {
                        t: error_stats(std[i], ref[i], prec)["max_abs"]
                        for i, t in enumerate(names)}
        return results

    def setup(self, results, dtype, causal, shape):
        found = results.get((dtype, causal, shape))
        if found is None:
            raise NotImplementedError(results.get("missing", f"no {dtype} standard model "
                                                             "in this commit"))
        self.errors = found

    def error(self, name: str) -> float:
        return self.errors[name]


def known_dtypes(dtypes) -> list[str]:
    """The dtypes of ``dtypes`` this commit models (its registry, or numerics.DTYPES
    before the registry existed): older commits lack fp8."""
    try:
        registry = need("precision", "DTYPES")
    except NotImplementedError:
        registry = need("numerics", "DTYPES")
    return [d for d in dtypes if d in registry]


def record_field(rec, name):
    """A record's field: measure's dataclasses, or the dicts older commits returned. An
    LSE the kernel does not return (None: not judged, the record's lse_note says so) is
    not applicable: asv's SkipNotImplemented with that note (called from a track, after
    setup: a plain NotImplementedError there is recorded as failed, null, as 30 band ratios
    of cb3b56b9's run were); so is a field this commit's records lack (the band ratios
    before the band rule). A peer's LSE is flashbench's
    stand-in (float64 logsumexp rounded to fp32, one value for every peer: docs/asv.md)."""
    try:
        value = rec[name] if isinstance(rec, dict) else getattr(rec, name)
    except (KeyError, AttributeError):
        raise SkipNotImplemented(f"this commit records no {name}") from None
    if value is None and name.startswith("lse"):
        raise SkipNotImplemented(f"{name}: LSE {getattr(rec, 'lse_note', 'not recorded')}")
    if value is None:
        raise SkipNotImplemented(f"{name}: not recorded")
    return value


def band_ratio(rec, tensor: str) -> float:
    """The band rule's ratio (passes at <= 1); NaN where it does not judge: fp32, a stand-in
    LSE, commits before the decode band rule (raising in a track records a failure)."""
    value = getattr(rec, f"{tensor}_band_ratio", None)
    return float("nan") if value is None else value


# -- GPU suites: one prepared timed call per grid point and process ----------------------


def require_gpu():
    """Skip without a CUDA GPU that torch sees."""
    # Cheap test first: no NVIDIA driver means no GPU, without importing torch.
    if not (shutil.which("nvidia-smi") or os.path.exists("/proc/driver/nvidia/version")):
        raise NotImplementedError("no NVIDIA GPU on this machine")
    import torch

    if not torch.cuda.is_available():
        raise NotImplementedError("torch sees no CUDA GPU")


_PREPARED: dict = {}  # grid point -> its timed call, built once per process


def prepared(key: tuple, build):
    """The timed call of grid point ``key``: built (and run once: compilation and
    autotuning stay out of the samples) by the first setup of this process; the later
    setups asv runs before each sample find it here. A :class:`common.FreshCalls` forgets
    the warm-up call's output (it is not a sample)."""
    if key not in _PREPARED:
        require_gpu()
        import torch

        fn = build()
        fn()
        torch.cuda.synchronize()
        if isinstance(fn, FreshCalls):
            fn.forget()
        _PREPARED[key] = fn
    return _PREPARED[key]


# -- peak memory in a fresh process ---------------------------------------------------

_STATUS = "/proc/self/status"
PEAK_EXIT_SKIP = 3  # the child's exit status for "this commit lacks it" (NotImplementedError)
_CHILD = f"""
import ctypes, importlib, json, os, signal, sys
try:  # die with the benchmark process (asv kills it on timeout)
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
except (OSError, AttributeError):
    pass
if sys.path and sys.path[0] in ("", "."):
    del sys.path[0]  # the working directory must not shadow the installed flashbench
sys.path.append(sys.argv[1])  # the benchmarks package, after the installed packages
try:
    call = getattr(importlib.import_module(sys.argv[2]), sys.argv[3])(*json.loads(sys.argv[4]))
except NotImplementedError as exc:
    print(exc, file=sys.stderr)
    sys.exit({PEAK_EXIT_SKIP})
call()
with open({_STATUS!r}) as f:
    kib = [line.split()[1] for line in f if line.startswith("VmHWM:")][0]
print("VmHWM", int(kib) * 1024)
"""


def require_peak_memory() -> None:
    """Skip where a process cannot read its own peak resident memory (not Linux)."""
    if not os.path.exists(_STATUS):
        raise NotImplementedError(f"peak memory is read from {_STATUS} (VmHWM): Linux only")


def peak_memory_env() -> dict:
    """The measured child's environment: this one, with numpy's transparent-huge-page
    advice off unless the user set NUMPY_MADVISE_HUGEPAGE (as in the review's workers).
    With the kernel's defrag setting "madvise" the faults on the one-shot's 2 GiB scores
    stop to compact memory: at N = 16384 3.3 s user + 15.2 s system with the advice,
    3.7 + 1.3 without, the same peak (2,197,800 against 2,198,052 KiB VmHWM)."""
    return {**os.environ,
            "NUMPY_MADVISE_HUGEPAGE": os.environ.get("NUMPY_MADVISE_HUGEPAGE", "0")}


def peak_memory(module: str, factory: str, args: list, timeout: float) -> int:
    """Peak resident memory, in bytes, of a fresh Python process that makes one call.

    The child is ``sys.executable`` (the benchmark's environment, so it imports the
    commit's installed flashbench), with this benchmarks package appended to its
    ``sys.path``; it imports ``module`` (a suite of this package, e.g.
    "benchmarks.bench_memory"), calls ``factory(*args)`` (which imports what it needs
    from flashbench and makes the inputs) and then the zero-argument callable that
    returns, once. The number is the child's VmHWM (``/proc/self/status``): the high
    water mark of *its own* resident set, so it includes the interpreter, numpy,
    the flashbench modules imported and the inputs (about 35 MB before the inputs
    here), as asv's spawn-mode ``peakmem_`` did, and nothing of the parent's.

    Why not ``ru_maxrss``: Linux folds the pre-exec memory of a forked child into its
    maxrss at exec (a child of a 300 MiB process reads >= 300 MiB in ru_maxrss, from
    ``getrusage(RUSAGE_CHILDREN)`` in the parent as from ``RUSAGE_SELF`` in the child,
    while its VmHWM reads 11 MiB): the forkserver's memory would come back in.

    The child's exit status 3 means this commit lacks what it measures
    (SkipNotImplemented: asv skips, from a track as from setup); any other failure raises
    RuntimeError with the child's last output (asv records a failure).
    """
    root = Path(__file__).resolve().parents[1]
    try:
        r = subprocess.run([sys.executable, "-c", _CHILD, str(root), module, factory,
                            json.dumps(args)], capture_output=True, text=True, timeout=timeout,
                           env=peak_memory_env())
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{module}.{factory}{tuple(args)}: the measured process ran "
                           f"past {timeout:g} s and was killed") from None
    if r.returncode == PEAK_EXIT_SKIP:
        raise SkipNotImplemented(r.stderr.strip() or "this commit lacks what is measured")
    lines = r.stdout.split()
    if r.returncode != 0 or len(lines) < 2 or lines[-2] != "VmHWM":
        raise RuntimeError(f"{module}.{factory}{tuple(args)}: the measured process exited "
                           f"{r.returncode}: {(r.stderr or r.stdout)[-2000:]}")
    return int(lines[-1])
