"""The GPU harness (docs/gpu.md): ``bench`` (checks, then checked timings), its parts
(``checks``, ``decode``, ``headdims``, ``hopper``, ``variants``, ``report``), ``findings``
and ``history``; ``speed.sh`` runs ``flashbench speed`` on the device, with
``userkernels`` timed as a user's; ``common.sh`` is sourced by scripts/gpu_session.sh. Each runs as
``python -m tools.gpu.<name>`` from the repository root (the session puts the root on
PYTHONPATH; the GPU image has no flashbench installed)."""
