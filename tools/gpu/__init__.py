"""The GPU harness (docs/gpu.md): ``bench`` (checks, then checked timings), its parts
(``checks``, ``decode``, ``headdims``, ``hopper``, ``variants``, ``report``), ``findings``
and ``history``; ``common.sh`` is sourced by scripts/gpu_session.sh. Each runs as
``python -m tools.gpu.<name>`` from the repository root (the session puts the root on
PYTHONPATH; the GPU image has no flashbench installed)."""
