"""Studies: each answers one question once, with a figure (README.md lists them). Run one
from the repository root as ``python -m studies.<name>``; nothing in flashbench/ or
tests/ imports a study."""
