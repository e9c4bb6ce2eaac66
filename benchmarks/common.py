"""Helpers shared by the suites: imports that skip on commits lacking a feature.

asv installs each commit's flashbench but runs *today's* benchmarks against it, so
every suite reaches flashbench through :func:`need`, which turns a missing module or
attribute into NotImplementedError: asv records the benchmark as skipped (NaN)
instead of failed.
"""

import importlib


def need(module: str, *names: str):
    """Import ``flashbench.<module>`` (and attributes), or skip the benchmark."""
    try:
        mod = importlib.import_module(f"flashbench.{module}")
        attrs = [getattr(mod, n) for n in names]
    except (ImportError, AttributeError) as exc:
        raise NotImplementedError(f"this commit lacks flashbench.{module}: {exc}") from None
    if not names:
        return mod
    return attrs[0] if len(attrs) == 1 else attrs


def qkv(shape_args, dist="normal", seed=0):
    """float64 (q, k, v) for Shape(*shape_args) from flashbench.inputs."""
    Shape, make_qkv = need("inputs", "Shape", "make_qkv")
    return make_qkv(Shape(*shape_args), dist, seed)


def timed_backend(name: str):
    """The callable timings run for backend ``name`` (Backend.timed_fn), or skip.

    Commits before timed_fn existed timed torch-sdpa together with a separate LSE
    pass: a different quantity, so those commits skip rather than mix the two.
    """
    get_backend = need("backends", "get_backend")
    backend = get_backend(name)
    if not hasattr(backend, "timed_fn"):
        raise NotImplementedError("this commit's backends have no timed_fn")
    return backend.timed_fn
