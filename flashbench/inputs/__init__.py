"""What enters: problem shapes and seeded inputs (:mod:`.problem`), dtype names resolved to
their :class:`~flashbench.inputs.precision.Precision` (:mod:`.precision`), the
argument checks every path shares (:mod:`.validation`), and the attention variants as data
(:mod:`.variant`: causal, window, softcap, sinks; packed cu_seqlens checks), and a packed
batch's lengths, listed or drawn from a seeded distribution (:mod:`.lengths`), and the fp8
incoherent processing's orthogonal matrix (:mod:`.incoherent`)."""

from flashbench.inputs.problem import (
    DISTRIBUTIONS,
    ODD_SHAPES,
    PASS_FLOPS,
    Shape,
    make_qkv,
    visible_pairs,
)
from flashbench.inputs.variant import Variant, variant_of

__all__ = ["DISTRIBUTIONS", "ODD_SHAPES", "PASS_FLOPS", "Shape", "make_qkv", "visible_pairs",
           "Variant", "variant_of"]
