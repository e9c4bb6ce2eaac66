#!/usr/bin/env bash
# Set up .venv with the test tools (scripts/setup.sh --test), then the linter (ruff check,
# seconds) and every test in one pytest run over parallel workers (pytest-xdist: one per
# CPU, FLASHBENCH_TEST_WORKERS to choose; work stealing). The slow tests (real asv runs,
# reviews in throw-away clones, the browser test) start first (tests/conftest.py), so the
# fast ones fill the workers' tails: one run took 8 min 12 s of tests here where the fast
# and the slow run one after the other took 9 min 47 s. Extra arguments go to pytest
# (`-m "not slow"` for the fast ones alone). pytest's own exit status is returned: 5 (no
# tests collected) fails like any other error.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
echo "== ruff check"
.venv/bin/ruff check .
echo "== tests (slow ones first: asv runs, reviews, browser)"
.venv/bin/python -m pytest -n "${FLASHBENCH_TEST_WORKERS:-auto}" --dist worksteal "$@"
