"""What enters: problem shapes and seeded inputs (:mod:`.problem`), dtype names resolved to
their :class:`~flashbench.inputs.precision.Precision` (:mod:`.precision`), and the
argument checks every path shares (:mod:`.validation`)."""

from flashbench.inputs.problem import (
    DISTRIBUTIONS,
    ODD_SHAPES,
    PASS_FLOPS,
    Shape,
    make_qkv,
    visible_pairs,
)

__all__ = ["DISTRIBUTIONS", "ODD_SHAPES", "PASS_FLOPS", "Shape", "make_qkv", "visible_pairs"]
