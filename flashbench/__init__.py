"""flashbench: keeps FlashAttention-style attention kernels honest.

Modules (data flows down this list, never back up):

- :mod:`flashbench.precision`, :mod:`flashbench.validation`: formats and argument checks
- :mod:`flashbench.inputs`: seeded input distributions and shapes
- :mod:`flashbench.reference`: the float64 gold reference, one-shot and streamed
- :mod:`flashbench.numerics`: precision models of a flash kernel and of plain attention
- :mod:`flashbench.kernels`, :mod:`flashbench.backends`: the Triton kernel and torch peers
- :mod:`flashbench.accuracy`, :mod:`flashbench.timing`: error metrics, device timing
- :mod:`flashbench.check`: the accuracy report (``flashbench check``)
- :mod:`flashbench.history`, :mod:`flashbench.review`: asv results as pandas, pre-merge review

``flashbench.triton_attention`` is imported lazily: importing it picks the GPU or,
without one, the Triton interpreter.
"""

__version__ = "0.1.0"


def __getattr__(name):
    if name == "triton_attention":
        from flashbench.kernels.triton_fwd import triton_attention

        return triton_attention
    if name == "tolerance":  # the shipped tolerance table (no torch import)
        from flashbench.bands.table import tolerance

        return tolerance
    raise AttributeError(f"module 'flashbench' has no attribute {name!r}")
