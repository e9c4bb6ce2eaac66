#!/usr/bin/env bash
# Set up .venv with the test tools (scripts/setup.sh --test), then the linter (ruff check,
# seconds) and every test in one pytest run over parallel workers (pytest-xdist, work
# stealing): one more worker than CPUs (FLASHBENCH_TEST_WORKERS to choose), since many
# tests wait on processes they start (asv, reviews, kernels' workers) and two workers left
# a CPU idle: on this 2-CPU machine 3 workers took 511 s of tests at 1.92 CPUs busy, 2
# workers 576 s (one run each, one after the other). The slow tests (real asv runs,
# reviews in throw-away clones, the browser test) start first (tests/conftest.py), so the
# fast ones fill the workers' tails. Each test process keeps one thread a BLAS/OpenMP pool
# (tests/conftest.py): a thread per CPU in each of 3 workers oversubscribed the CPUs and
# spun (user CPU -32% on the benchmark set-up tests). Extra arguments go to pytest
# (`-m "not slow"` for the fast ones alone). pytest's own exit status is returned: 5 (no
# tests collected) fails like any other error.
set -euo pipefail
cd "$(dirname "$0")/.."
# Debian's packages (the browser, Slurm and shellcheck tests) install beside the bytecode
# step and ruff: setup leaves them to finish there, and the tests start once they have
APT_STATUS=$(mktemp -u /tmp/flashbench-apt.XXXXXX)
FLASHBENCH_APT_STATUS=$APT_STATUS FLASHBENCH_LAZY_BYTECODE=1 bash scripts/setup.sh --test
# the bytecode of what the tests import, written once (setup compiled none: 32 s of CPU for
# 12,000 modules, ~3,000 of them used: 12 s), by two processes (one a CPU) before the test
# workers would race to compile the same modules; torch.compile's (dynamo, inductor, sympy,
# networkx: ~1,000 modules, 3.4 s of CPU a process that compiles them) was left to the
# workers and the review workers that import it first
unset PYTHONDONTWRITEBYTECODE
.venv/bin/python -c "import torch, triton, flashbench.cli, flashbench.backends, \
flashbench.measure.run, flashbench.review.run, torch._dynamo, torch._inductor.compile_fx, \
torch.nn.attention.flex_attention" &
.venv/bin/python -c "import numpy, pandas, scipy.stats, statsmodels.api, matplotlib.pyplot, \
hypothesis, asv_runner, flashbench.history"
wait $!
echo "== ruff check"
.venv/bin/ruff check .
[ -s "$APT_STATUS" ] || echo "== waiting for Debian's packages (log: $APT_STATUS.log)"
until [ -s "$APT_STATUS" ]; do
  # an install killed before it could write its status: not waited for forever
  if [ -s "$APT_STATUS.pid" ] && ! kill -0 "$(cat "$APT_STATUS.pid")" 2>/dev/null &&
     [ ! -s "$APT_STATUS" ]; then
    echo 1 > "$APT_STATUS"
  fi
  sleep 0.2
done
if [ "$(cat "$APT_STATUS")" != 0 ]; then
  tail -n 20 "$APT_STATUS.log" >&2
  echo "setup: apt-get install failed" >&2
  exit 1
fi
rm -f "$APT_STATUS" "$APT_STATUS.log" "$APT_STATUS.pid"
echo "== tests (slow ones first: asv runs, reviews, browser)"
CPUS=$(.venv/bin/python -c "import os; print(len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count())")
WORKERS=${FLASHBENCH_TEST_WORKERS:-$((CPUS + 1))}
.venv/bin/python -m pytest -n "$WORKERS" --dist worksteal "$@"
