#!/usr/bin/env bash
# The main job: set up .venv, then run the accuracy report (flashbench check).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/flashbench check
