"""Measured error bands: per dtype x N x distribution x causal, over seeds.

:func:`measure_bands` runs each kernel (the flash model by default) on every :class:`Cell`
(N keys per query row, an input distribution, causal bottom-right or not), per seed on
:data:`ROWS_PER_SEED` (256) query rows of N keys at d = 64 (:func:`cell_shape`): a row's
error depends on how many keys it sums over, not on how many rows there are, so a few
hundred rows measure the band of an N x N problem. The inputs are rounded to the dtype as
a caller holds them (fp8: unrounded, its models quantise), and the yardstick is the
float64 reference of exactly those inputs: the band is the error the kernel adds, not the
rounding of the data (``versus``: :data:`VERSUS`). A :class:`Band` holds p50 / p99 / max
of the absolute and relative error pooled over every element of every seed, each seed's
max, and the baseline ratios; a non-finite output where the reference is finite is an
infinite error. Every statistic, exactly: docs/bands.md ("What a band is").
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import numpy as np

from flashbench import numerics, reference
from flashbench.accuracy import REL_FLOOR, to_numpy
from flashbench.accuracy.metrics import percentiles
from flashbench.inputs import precision
from flashbench.inputs.precision import DTYPES, Precision, get_precision
from flashbench.inputs.problem import DISTRIBUTIONS, Shape, make_qkv

__all__ = ["BAND_N", "SEEDS", "ROWS_PER_SEED", "HEAD_DIM", "VERSUS", "Cell", "Band", "storage_key",
           "band_dtypes", "cell_shape", "measure_bands", "caller_inputs", "element_errors"]

BAND_N = (256, 1024, 4096)  # keys per row: the default grid (the lecture's "N ~ 1k" and around)
SEEDS = 16  # default seeds per cell of `flashbench bands` (the table uses 64: docs/bands.md)
ROWS_PER_SEED = 256  # query rows per seed (heads x rows per head)
MAX_ROWS = 256  # query rows per head
HEAD_DIM = 64
VERSUS = ("fp64", "fp64-unrounded", "standard_model")
_SELF_QUANTISING = tuple(getattr(precision, "FP8_DTYPES", ()))  # models that scale inputs


@dataclass(frozen=True)
class Cell:
    """One band cell: N keys per query row, an input distribution, causal or not."""

    n: int
    dist: str = "normal"
    causal: bool = False

    def __post_init__(self):
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"N must be an int >= 1, got {self.n!r}")
        if self.dist not in DISTRIBUTIONS:
            raise ValueError(f"dist must be one of {DISTRIBUTIONS}, got {self.dist!r}")
        if not isinstance(self.causal, bool):
            raise TypeError(f"causal must be a bool, got {self.causal!r}")


def cell_shape(n: int, rows_per_seed: int = ROWS_PER_SEED, d: int = HEAD_DIM,
               rows: int | None = None, causal: bool = False, dv: int | None = None) -> Shape:
    """Shape drawn per seed for N = ``n`` keys: ``rows`` query rows per head, as many
    heads as make ``rows_per_seed`` rows. Default rows: causal ``min(256, n // 4)`` (at
    least 1: bottom-right, every row sees 3n/4 to n keys); not causal
    ``min(256, max(64, n // 4))``: at least 64, so that the score tiles are too large
    for the small-matrix kernels of the CPU's BLAS, which sum q.k in another order than
    larger ones (for scores of 1e4, a third of the fp32 error: the band would be too
    narrow for a kernel that sums in order)."""
    if rows is None:
        rows = max(1, min(MAX_ROWS, n // 4)) if causal else min(MAX_ROWS, max(64, n // 4))
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1 or (causal and rows > n):
        raise ValueError(f"rows must be an int >= 1 (<= N={n} when causal), got {rows!r}")
    if isinstance(rows_per_seed, bool) or not isinstance(rows_per_seed, int) \
            or rows_per_seed < 1:
        raise ValueError(f"rows_per_seed must be an int >= 1, got {rows_per_seed!r}")
    return Shape(1, max(1, rows_per_seed // rows), rows, n, d, dv)


@dataclass(frozen=True)
class Band:
    """The measured error band of one kernel in one dtype on one cell (module docstring).

    ``kernel``: "flash_model", "standard_model" or a backend name; ``versus``: what
    it is compared with ("fp64": the float64 reference of the same inputs, see
    :data:`VERSUS`); ``tensor``: "o" or "lse"; ``elements``: the compared elements,
    all seeds together; ``eps``: the dtype's machine epsilon (errors "in eps" divide
    by it).
    """

    kernel: str
    dtype: str
    n: int
    dist: str
    causal: bool
    tensor: str
    versus: str
    seeds: int
    elements: int
    eps: float
    abs_p50: float
    abs_p99: float
    abs_max: float
    rel_p50: float
    rel_p99: float
    rel_max: float
    seed_max_abs: tuple[float, ...]
    seed_rel_max: tuple[float, ...]
    ratio_p50: float | None = None
    ratio_p99: float | None = None
    ratio_max: float | None = None

    def as_dict(self) -> dict:
        d = asdict(self)
        d["seed_max_abs"], d["seed_rel_max"] = list(self.seed_max_abs), list(self.seed_rel_max)
        return d


def band_dtypes() -> tuple[str, ...]:
    """Every registry dtype but fp64 that :func:`flashbench.numerics.flash_model` models
    (tried on a tiny input: a dtype the models do not take yet is left out)."""
    q = np.linspace(-1.0, 1.0, 8).reshape(1, 2, 4)
    found = []
    for name in DTYPES:
        if name == "fp64":
            continue
        try:
            numerics.flash_model(q, q, q, name)
            numerics.standard_model(q, q, q, name)
        except (ValueError, TypeError, NotImplementedError):
            continue
        found.append(name)
    return tuple(found)


def caller_inputs(dtype: str | Precision, x: np.ndarray) -> np.ndarray:
    """``x`` as a caller of a ``dtype`` kernel holds it, in float64: rounded to the
    storage format (float32 for tf32), unrounded for the fp8 dtypes (their models
    quantise with their own scales). ``dtype``: a name or its Precision."""
    prec = get_precision(dtype)
    if prec.name in _SELF_QUANTISING:
        return x
    return prec.store(x).astype(np.float64)


def storage_key(dtype: str | Precision):
    """What a ``dtype`` kernel's inputs are rounded to (dtypes with one key share inputs)."""
    prec = get_precision(dtype)
    return "unrounded" if prec.name in _SELF_QUANTISING else np.dtype(prec.storage).name


def element_errors(out, ref: np.ndarray, seeds: int) -> tuple[np.ndarray, np.ndarray]:
    """(abs, rel) errors, each [seeds, elements] float64: ``|out - ref|`` (inf where out
    is not finite) and that over ``max(|ref|, 0.1 RMS(ref))``, RMS per seed (the
    relative error of :func:`flashbench.accuracy.error_stats`, per seed)."""
    o = to_numpy(out).reshape(seeds, -1)
    r = np.asarray(ref, dtype=np.float64).reshape(seeds, -1)
    a = np.abs(o - r)
    a[~np.isfinite(a)] = np.inf
    rms = np.sqrt(np.mean(r * r, axis=1))
    tau = np.where(rms > 0, REL_FLOOR * rms, 1.0)
    return a, a / np.maximum(np.abs(r), tau[:, None])


def _summary(a: np.ndarray, rel: np.ndarray) -> dict:
    flat_a, flat_r = a.ravel(), rel.ravel()
    a50, a99 = percentiles(flat_a, [50, 99])
    r50, r99 = percentiles(flat_r, [50, 99])
    return dict(abs_p50=float(a50), abs_p99=float(a99), abs_max=float(flat_a.max()),
                rel_p50=float(r50), rel_p99=float(r99), rel_max=float(flat_r.max()),
                seed_max_abs=tuple(float(x) for x in a.max(axis=1)),
                seed_rel_max=tuple(float(x) for x in rel.max(axis=1)), elements=a.size)


_OPENBLAS = ("scipy_openblas_{}_num_threads64_", "scipy_openblas_{}_num_threads",
             "openblas_{}_num_threads")


def _openblas():
    """(get, set) of the OpenBLAS that numpy loaded, or None (not Linux, not OpenBLAS)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "openblas" in line.lower()
                     and ".so" in line.split()[-1]}
        for path in sorted(paths):
            lib = ctypes.CDLL(path)
            for pattern in _OPENBLAS:
                get, put = (getattr(lib, pattern.format(w), None) for w in ("get", "set"))
                if get is not None and put is not None:
                    get.restype = ctypes.c_int
                    return get, put
    except OSError:
        return None
    return None


@contextmanager
def single_threaded_blas():
    """Run the block with one OpenBLAS thread, then restore the count. The models multiply
    many small tiles (256 x 64 by 64 x 64): threads cost more than they give, 4x the wall
    time of ``flashbench bands`` on this 2-CPU machine. A no-op without OpenBLAS."""
    found = _openblas()
    if found is None:
        yield
        return
    get, put = found
    before = get()
    put(ctypes.c_int(1))
    try:
        yield
    finally:
        put(ctypes.c_int(before))


def _draw(cell: Cell, seeds: Sequence[int], rows_per_seed: int, rows: int | None = None,
          d: int = HEAD_DIM, dv: int | None = None):
    shape = cell_shape(cell.n, rows_per_seed, d, rows=rows, causal=cell.causal, dv=dv)
    draws = [make_qkv(shape, cell.dist, seed) for seed in seeds]
    return tuple(np.concatenate([d[i] for d in draws]) for i in range(3))


def _backend_output(name: str, prec: Precision, inputs, causal: bool, say):
    """(o, lse, own: whether the LSE is the op's own) of backend ``name`` in ``prec`` as
    NumPy, or None (and why, via say)."""
    from flashbench.backends import get_backend

    backend = get_backend(name)
    if prec.name not in backend.dtypes:
        say(f"  {name} {prec.name}: skipped: it takes {', '.join(backend.dtypes)}")
        return None
    reason = backend.unavailable()
    if reason is not None:
        say(f"  {name} {prec.name}: skipped: {reason}")
        return None
    import torch

    from flashbench.backends import BackendFailed, BackendUnavailable
    from flashbench.backends.tensors import torch_dtype

    tensors = [torch.from_numpy(x).to(torch_dtype(prec)) for x in inputs]
    try:
        out = backend(*tensors, causal=causal)  # what it returned says whose LSE it is
    except BackendUnavailable as exc:  # this case's: a head dim Triton does not take
        say(f"  {name} {prec.name}: skipped: {exc}")  # (exit 3, after the models' cells)
        return None
    except BackendFailed as exc:  # non-finite where the reference is finite, or raised: an
        # infinite error, as the docs say (a probe: exit 3, "flashbench failed", no JSON)
        say(f"  {name} {prec.name}: failed ({exc}): its error counted infinite")
        rows = inputs[0].shape[:-1]
        return np.full((*rows, inputs[2].shape[-1]), np.inf), np.full(rows, np.inf), False
    return to_numpy(out[0]), to_numpy(out[1]), bool(getattr(out, "own_lse", backend.own_lse))


def _seed_list(seeds) -> tuple[int, ...]:
    if isinstance(seeds, bool):
        raise TypeError(f"seeds must be an int >= 1 or a sequence of ints, got {seeds!r}")
    if isinstance(seeds, int):
        if seeds < 1:
            raise ValueError(f"seeds must be >= 1, got {seeds}")
        return tuple(range(seeds))
    out = tuple(seeds)
    if not out or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                          for s in out):
        raise ValueError(f"seeds must be a non-empty sequence of ints >= 0, got {seeds!r}")
    return out


def measure_bands(dtypes: Sequence[str | Precision] | None = None, ns: Sequence[int] = BAND_N,
                  dists: Sequence[str] = DISTRIBUTIONS, causal: Sequence[bool] = (False, True),
                  seeds: int | Sequence[int] = SEEDS, kernels: Sequence[str] = ("flash_model",),
                  versus: Sequence[str] = ("fp64",), rows_per_seed: int = ROWS_PER_SEED,
                  rows: int | None = None, block: int = 64,
                  say: Callable[[str], None] = lambda msg: None, d: int = HEAD_DIM,
                  dv: int | None = None) -> list[Band]:
    """Measure the bands of every kernel x dtype x cell (module docstring).

    ``dtypes``: default :func:`band_dtypes`. ``seeds``: a count (seeds 0..count-1) or
    the seeds themselves. ``kernels``: "flash_model" and/or backend names
    (:mod:`flashbench.backends`; a backend that does not take a dtype or cannot run
    here is left out, and ``say`` says why). ``versus``: any of :data:`VERSUS`; the
    standard model is always measured against "fp64" too (the ratios need it) and
    returned as kernel "standard_model". ``rows_per_seed`` / ``rows``: query rows per
    seed and per head (:func:`cell_shape`; ``rows=N`` draws square problems). ``d``,
    ``dv``: the head dims drawn (default 64; a band at d = 80 is not d = 64's: the
    error of a row grows with the columns it sums). Returns Band records, O and LSE for
    each.
    """
    # the door: each name becomes its Precision here, once
    precs = tuple(get_precision(d) for d in (band_dtypes() if dtypes is None else dtypes))
    if any(p.name == "fp64" for p in precs):
        raise ValueError("dtype fp64 has no band: its models equal the reference")
    seed_ids = _seed_list(seeds)
    bad = [v for v in versus if v not in VERSUS]
    if bad or not versus:
        raise ValueError(f"versus must be some of {VERSUS}, got {list(versus)!r}")
    backends = [k for k in kernels if k not in ("flash_model", "standard_model")]
    if backends:  # unknown names fail here, before any cell is measured
        from flashbench.backends import get_backend

        for name in backends:
            get_backend(name)
    cells = [Cell(n, dist, bool(c)) for n in ns for dist in dists for c in causal]
    bands: list[Band] = []
    with single_threaded_blas():
        for cell in cells:
            say(f"N={cell.n} {cell.dist}{' causal' if cell.causal else ''}")
            inputs = _draw(cell, seed_ids, rows_per_seed, rows, d, dv)
            bands += _measure_cell(cell, inputs, precs, len(seed_ids), tuple(kernels),
                                   tuple(versus), block, say)
    return bands


def _measure_cell(cell, qkv, precs: Sequence[Precision], n_seeds, kernels, versus, block, say):
    q, k, v = qkv
    refs: dict = {}

    def ref_of(key, inputs):
        if key not in refs:
            refs[key] = reference.attention(*inputs, causal=cell.causal)
        return refs[key]

    out: list[Band] = []
    stand_in = set()  # backends whose LSE is flashbench's stand-in: no LSE band is theirs
    for prec in precs:
        inputs = tuple(caller_inputs(prec, x) for x in (q, k, v))
        ref = ref_of(storage_key(prec), inputs)
        std = numerics.standard_model(inputs[0], inputs[1], inputs[2], prec, causal=cell.causal)
        outputs = {"standard_model": std}
        for name in kernels:
            if name == "flash_model":
                outputs[name] = numerics.flash_model(*inputs, prec, block=block,
                                                     causal=cell.causal)
            elif name != "standard_model":
                got = _backend_output(name, prec, inputs, cell.causal, say)
                if got is not None:
                    outputs[name] = got[:2]
                    if not got[2] and name not in stand_in:
                        stand_in.add(name)
                        say(f"  {name}: no LSE band (it returns no LSE: flashbench's stand-in, "
                            "the same for every such op, is not its own)")
        against = {"fp64": ref}
        if "fp64-unrounded" in versus:
            against["fp64-unrounded"] = ref_of("unrounded", (q, k, v))
        if "standard_model" in versus:
            against["standard_model"] = tuple(to_numpy(x) for x in std)
        std_max = {}
        for kernel in ("standard_model", *[k for k in outputs if k != "standard_model"]):
            for vs, target in against.items():
                if vs not in versus and not (kernel == "standard_model" and vs == "fp64"):
                    continue
                if kernel == "standard_model" and vs == "standard_model":
                    continue
                for i, tensor in enumerate(("o", "lse")):
                    if tensor == "lse" and kernel in stand_in:
                        continue
                    a, rel = element_errors(outputs[kernel][i], target[i], n_seeds)
                    stats = _summary(a, rel)
                    ratio = {}
                    if vs == "fp64":
                        seed_max = a.max(axis=1)
                        if kernel == "standard_model":
                            std_max[tensor] = seed_max
                        else:
                            ratio = _ratios(seed_max, std_max[tensor])
                    out.append(Band(kernel, prec.name, cell.n, cell.dist, cell.causal, tensor,
                                    vs, n_seeds, eps=prec.eps, **stats, **ratio))
    return out


def _ratios(kernel_max: np.ndarray, standard_max: np.ndarray) -> dict:
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(standard_max > 0, kernel_max / standard_max,
                     np.where(kernel_max == 0, 0.0, np.inf))
    p50, p99 = percentiles(r, [50, 99])
    return {"ratio_p50": float(p50), "ratio_p99": float(p99), "ratio_max": float(r.max())}
