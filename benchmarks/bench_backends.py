"""CPU time (seconds per call) of the torch peers on CPU tensors.

What is timed is each backend's bare op (``Backend.timed_fn``: o only, no LSE pass),
on inputs built in setup (``Backend.prepare``: grouped K/V expanded there for a
backend that takes none, so the copy is never timed), new contents for every call and
every output checked in teardown (:class:`common.FreshCalls`). flex is compiled in setup (its
first call), so the timed calls run the compiled kernel. The Triton kernel is timed
only where it is compiled for a GPU (bench_gpu): under the interpreter its speed means
nothing and is never recorded; sdpa-efficient and sdpa-cudnn exist only on a GPU.

The grid is literal (asv addresses a grid point by its index, for every commit); a
point a backend does not take (a dtype) is declared in ``skip_params`` from
common.BACKEND_DTYPES (the registry's, literal: this module imports no torch); a backend
unavailable on this machine skips from setup with its reason.
Shapes are ``BxH[/Hkv]xNqxNkxd`` (:meth:`flashbench.inputs.Shape.spec`).
"""

from .common import (
    BACKEND_DTYPES,
    Benchmark,
    FreshCalls,
    qkv,
    shape_of,
    timed_backend,
    torch_dtype,
    verify,
)

BACKENDS = ["torch-naive", "torch-sdpa", "sdpa-flash", "sdpa-math", "flex"]
DTYPES = ["fp32"]  # CPU timings in fp32 only: 16-bit CPU paths say nothing of a GPU kernel
SHAPES = ["1x8x1024x1024x64", "1x8/2x1024x1024x64", "1x8x4096x4096x64"]
CAUSAL = [False, True]
TOL = {"fp32": 1e-4}  # max abs error of a checked output row (a stale row is off by ~0.1)
_WARM = set()  # grid points already run once in this process (asv reruns setup per sample)


def _not_applicable() -> list[tuple]:
    """Grid points whose backend does not take the dtype (common.BACKEND_DTYPES, the
    registry's, literal); every backend listed takes CPU tensors (tests/test_benchmarks.py
    holds both to the registry)."""
    return [(b, d, s, c) for b in BACKENDS if b in BACKEND_DTYPES for d in DTYPES
            if d not in BACKEND_DTYPES[b] for s in SHAPES for c in CAUSAL]


class TimeCPUBackend(Benchmark):
    params = (BACKENDS, DTYPES, SHAPES, CAUSAL)
    param_names = ["backend", "dtype", "shape", "causal"]
    skip_params = _not_applicable()

    def setup(self, backend, dtype, shape, causal):
        import torch

        b = timed_backend(backend)
        s = shape_of(shape)
        reason = b.unavailable_for(s, dtype)
        if reason is not None:
            raise NotImplementedError(reason)
        dt = torch_dtype(dtype)

        def make(seed):
            return b.prepare(*(torch.from_numpy(x).to(dt) for x in qkv(shape, seed=seed)),
                             device="cpu")

        self.call = FreshCalls(shape, b.timed_fn, make, tol=TOL[dtype], causal=causal,
                               fresh=1)  # k rewritten whole each call
        if (backend, dtype, shape, causal) not in _WARM:  # compile (flex) and warm up, once
            self.call()
            _WARM.add((backend, dtype, shape, causal))

    def time_backend(self, backend, dtype, shape, causal):
        self.call()

    def teardown(self, backend, dtype, shape, causal):
        verify(self)
