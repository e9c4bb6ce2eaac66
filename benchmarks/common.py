"""Knowledge shared by the suites: timing knobs, imports that skip, inputs from a shape.

asv installs each commit's flashbench but runs *today's* benchmarks against it, so
every suite reaches flashbench through :func:`need`, which turns a missing module or
attribute into NotImplementedError: asv records the benchmark as skipped (NaN)
instead of failed. ``need`` takes alternative locations, so a function that moved
keeps older commits measurable; ``tests/test_benchmarks.py`` sets up every
benchmark at HEAD and fails on any skip whose reason is not a missing GPU, so a
rename cannot blank a series in silence. Grid points that do not apply (a backend
that does not take a dtype) are declared with asv's ``skip_params``, never skipped
from setup.

Every timed suite records the problem it ran as asv parameters: ``shape`` (the
text form of :class:`flashbench.inputs.Shape`, ``BxH[/Hkv]xNqxNkxd``), ``dtype`` and,
where it applies, ``causal`` and ``direction`` (fwd, bwd, fwd+bwd). The history
computes FLOPs from those columns; no other module needs to know a suite's shape.
"""

import importlib


class Benchmark:
    """Timing knobs written once (numpy's benchmarks/common.py habit).

    One round, 3-5 repeats within 4 s of samples: a commit's whole run stays within
    minutes on a 2-CPU machine. asv_runner >= 0.3 reruns ``setup`` before every
    timed call, so inputs are built in setup and never timed.
    """

    rounds = 1
    repeat = (3, 5, 4.0)
    timeout = 600


def need(module, *names: str):
    """Import ``flashbench.<module>`` (and attributes), or skip the benchmark.

    ``module`` is a name or a tuple of alternative names, tried in order: the first
    that has every attribute wins (``need(("measure", "check"), "measure_accuracy")``
    finds the function where it lives now and where older commits kept it).
    """
    alternatives = (module,) if isinstance(module, str) else tuple(module)
    errors = []
    for name in alternatives:
        try:
            mod = importlib.import_module(f"flashbench.{name}")
            attrs = [getattr(mod, n) for n in names]
        except (ImportError, AttributeError) as exc:
            errors.append(str(exc))
            continue
        if not names:
            return mod
        return attrs[0] if len(attrs) == 1 else attrs
    where = " or ".join(f"flashbench.{m}" for m in alternatives)
    raise NotImplementedError(f"this commit lacks {where}: {'; '.join(errors)}")


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


def timed_backend(name: str):
    """The callable timings run for backend ``name`` (Backend.timed_fn), or skip.

    Commits before timed_fn existed timed torch-sdpa together with a separate LSE
    pass: a different quantity, so those commits skip rather than mix the two.
    """
    get_backend = need("backends", "get_backend")
    try:
        backend = get_backend(name)
    except ValueError as exc:  # a backend this commit does not have yet
        raise NotImplementedError(f"this commit lacks backend {name!r}: {exc}") from None
    if not hasattr(backend, "timed_fn"):
        raise NotImplementedError("this commit's backends have no timed_fn")
    return backend.timed_fn


def torch_dtype(dtype: str):
    """torch dtype of a precision name, from the registry (or skip on older commits)."""
    return need(("kernels.checks",), "TORCH_DTYPES")[dtype]
