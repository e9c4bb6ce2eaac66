#!/usr/bin/env bash
# Set up .venv with the test tools (scripts/setup.sh --test), then, fastest first so a
# broken import fails in seconds: the linter (ruff check), the fast tests, and the slow
# ones (real asv runs, reviews in throw-away clones, the browser test), each in parallel
# workers (pytest-xdist: one per CPU, FLASHBENCH_TEST_WORKERS to choose). Extra arguments
# go to both pytest runs. pytest's own exit status is returned: 5 (no tests collected)
# fails like any other error.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
echo "== ruff check"
.venv/bin/ruff check .
echo "== fast tests"
.venv/bin/python -m pytest -m "not slow" -n "${FLASHBENCH_TEST_WORKERS:-auto}" "$@"
echo "== slow tests (asv runs, reviews, browser)"
.venv/bin/python -m pytest -m slow -n "${FLASHBENCH_TEST_WORKERS:-auto}" "$@"
