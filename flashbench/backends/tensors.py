"""The torch side of a backend call that measure and bands need beside the registry.

The dtype a precision is stored in (:func:`torch_dtype`, :data:`TORCH_DTYPES`), k and v
repeated to q's heads for a backend without grouped-query attention (:func:`expand_kv`),
and the two ways a call ends without a result (:class:`BackendUnavailable`,
:class:`BackendFailed`). Written once in :mod:`flashbench.kernels.validate`; re-exported
here because a kernel is reached through ``flashbench.backends``, never directly from
measure, bands or the CLI (docs/architecture.md).
"""

from __future__ import annotations

from flashbench.kernels.validate import (
    TORCH_DTYPES,
    BackendFailed,
    BackendUnavailable,
    expand_kv,
    torch_dtype,
)

__all__ = ["TORCH_DTYPES", "torch_dtype", "expand_kv", "BackendUnavailable", "BackendFailed"]
