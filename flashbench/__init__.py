"""flashbench: keeps FlashAttention-style attention kernels honest.

Packages (data flows down this list, never back up; docs/architecture.md):

- :mod:`flashbench.inputs`: shapes, seeded inputs, dtype names, argument checks
- :mod:`flashbench.reference`: the float64 truth, one-shot and streamed
- :mod:`flashbench.numerics`: precision models of a flash kernel and of plain attention
- :mod:`flashbench.kernels`, :mod:`flashbench.backends`: the Triton kernels, torch peers, yours
- :mod:`flashbench.accuracy`, :mod:`flashbench.bands`: error metrics, rules, measured bands
- :mod:`flashbench.measure`: what ``flashbench check`` measures, timing, footprints
- :mod:`flashbench.infra`: machine names, locks
- :mod:`flashbench.history`, :mod:`flashbench.review`, :mod:`flashbench.site`: asv results
  as pandas, the pre-merge review, the offline asv site
- :mod:`flashbench.cli`: the command line

``flashbench.triton_attention`` is imported lazily: importing it picks the GPU or,
without one, the Triton interpreter.
"""

__version__ = "0.1.0"

from flashbench import _moved  # noqa: E402  (old module paths, deprecated)

_moved.install()


def __getattr__(name):
    if name == "triton_attention":
        from flashbench.kernels.attention import triton_attention

        return triton_attention
    if name == "tolerance":  # the shipped tolerance table (no torch import)
        from flashbench.bands.table import tolerance

        return tolerance
    raise AttributeError(f"module 'flashbench' has no attribute {name!r}")
