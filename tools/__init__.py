"""Code the repository runs beside the package, never installed with it: the GPU harness
(``tools.gpu``), the generators of ``flashbench/data/`` (``tools.data``), the deliberately
wrong kernels tests and studies share (``tools.defects``) and the synthetic asv corpus
(``tools.asv_corpus``). Run from the repository root: ``python -m tools.gpu.bench``.
docs/architecture.md, "Outside the package"."""
