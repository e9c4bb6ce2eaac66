"""The GPU benchmark's documented command (DESIGN.md): ``python scripts/gpu_bench.py --quick
--plan`` and every other use of this path run ``python -m tools.gpu.bench`` with the same
arguments, from any folder (the harness lives in tools/gpu/: docs/gpu.md)."""

import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
runpy.run_module("tools.gpu.bench", run_name="__main__", alter_sys=True)
