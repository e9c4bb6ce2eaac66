"""The generators of the tables in ``flashbench/data/``, run from the repository root:
``python -m tools.data.make_tolerances`` (tolerances.json, case_bands.json) and
``python -m tools.data.make_winsorised_variance`` (winsorised_variance.json)."""
