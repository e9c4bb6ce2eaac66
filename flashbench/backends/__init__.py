"""Attention backends: every implementation as data (a :class:`Backend` record with an
availability reason), flashbench's, torch's and a user's. The package re-exports the public
API of its modules: the record (:mod:`.record`), the registry and its look-ups
(:mod:`.registry`), the two failures a backend call raises (:mod:`flashbench.kernels.validate`).
Users' functions: :mod:`.user`; decode backends: :mod:`.decode`; docs/backends.md.
"""

from flashbench.backends.record import TORCH_FLOATS, VARIANTS, Backend, Implementation
from flashbench.backends.registry import (
    BACKENDS,
    TRITON_FP8_HEAD_DIMS,
    TRITON_HEAD_DIMS,
    available_backends,
    get_backend,
    resolve_backends,
)
from flashbench.inputs.variant import variant_kwargs
from flashbench.kernels.validate import BackendFailed, BackendUnavailable

__all__ = ["Backend", "Implementation", "BACKENDS", "TRITON_HEAD_DIMS", "TRITON_FP8_HEAD_DIMS",
           "TORCH_FLOATS", "VARIANTS", "get_backend", "variant_kwargs", "available_backends",
           "resolve_backends", "BackendUnavailable", "BackendFailed"]
