#!/usr/bin/env bash
# Set up .venv (scripts/setup.sh) and run the whole test suite.
# pytest's own exit status is returned: 5 (no tests collected) fails like any error.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
