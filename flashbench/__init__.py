"""flashbench: keeps FlashAttention-style attention kernels honest.

An exact float64 reference, precision models of a flash kernel and of plain attention,
flashbench's Triton kernels beside torch's and yours as backends, accuracy rules and
measured bands, asv suites per commit, their history as pandas, a pre-merge review and
the command line. Packages, one job each, data flowing one way down the list (inputs,
reference, numerics, kernels, backends, accuracy, bands, measure, infra, history,
review, site, cli): docs/architecture.md.

``flashbench.triton_attention`` and ``flashbench.tolerance`` (the shipped tolerance
table) are loaded on first use: ``import flashbench`` imports neither torch nor triton.
"""

__version__ = "0.1.0"


def __getattr__(name):
    if name == "triton_attention":
        from flashbench.kernels.attention import triton_attention

        return triton_attention
    if name == "tolerance":  # the shipped tolerance table (no torch import)
        from flashbench.bands.table import tolerance

        return tolerance
    raise AttributeError(f"module 'flashbench' has no attribute {name!r}")
