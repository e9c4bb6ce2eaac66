#!/usr/bin/env bash
# One prepared command for a GPU machine with no network and no asv:
#
#   bash scripts/gpu_check.sh OUTDIR
#
# 1. asv, asv_runner and yyjson from the wheel folder carried with the tree
#    ($FLASHBENCH_WHEELS, default ./wheels; fill it with scripts/gpu_wheels.sh),
#    installed into OUTDIR/../ a temporary target, never into the system;
# 2. pytest: the GPU-only tests (-m gpu) and the kernel tests on the compiled kernel,
#    in parallel workers where pytest-xdist is installed;
# 3. python scripts/gpu_bench.py --quick (correctness, then checked timings);
# 4. asv run -E existing:<python> --record-samples of the GPU suites (benchmarks/
#    bench_gpu.py), the machine registered with flashbench.infra.machine, results under
#    OUTDIR/asv-results (needs the tree's .git: carry it).
#
# Everything goes under OUTDIR (logs, gpu-results/*.md|json, asv-results/, summary.txt).
# Each phase has a time limit and the whole stays under $GPU_CHECK_BUDGET seconds
# (default 540): a phase that runs out is stopped and the next one still runs.
# Exit status: 0 all phases passed, 1 a phase failed, 2 bad usage, 3 no GPU here.
# For testing the script on a machine without a GPU: GPU_CHECK_ALLOW_NO_GPU=1 runs every
# phase anyway (GPU tests skip, gpu_bench refuses, the asv GPU suites skip);
# GPU_CHECK_TESTS replaces the list of test files.
set -u
usage="usage: bash scripts/gpu_check.sh OUTDIR   (env: PYTHON, FLASHBENCH_WHEELS, GPU_CHECK_BUDGET)"
if [ $# -ne 1 ] || [ -z "${1:-}" ] || [ "${1#-}" != "$1" ]; then
  echo "$usage" >&2
  exit 2
fi
REPO=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$1" || { echo "gpu_check: cannot create OUTDIR $1" >&2; exit 2; }
OUT=$(cd "$1" && pwd)
PY=${PYTHON:-python3}
WHEELS=${FLASHBENCH_WHEELS:-$REPO/wheels}
BUDGET=${GPU_CHECK_BUDGET:-540}
START=$(date +%s)
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }

if [ "${GPU_CHECK_ALLOW_NO_GPU:-0}" != 1 ] &&
   ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  say "gpu_check: no CUDA GPU visible to torch ($PY): nothing to run here (this script is for a GPU machine)"
  exit 3
fi

export PYTHONUNBUFFERED=1
# the tree may be owned by another user than the one running here: let git (and asv's
# git calls) read it anyway
export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=safe.directory GIT_CONFIG_VALUE_0='*'
export TRITON_CACHE_AUTOTUNING=1  # asv starts a process per grid point: keep autotune results
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
FAILED=0

# phase NAME LIMIT_S CMD...: runs with a time limit (capped by what is left of the budget),
# output to OUT/NAME.log, one summary line with status and seconds.
phase() {
  local name=$1 limit=$2 left t0 rc
  shift 2
  left=$(( BUDGET - ($(date +%s) - START) ))
  if [ "$left" -lt 20 ]; then
    say "$name: not run (budget of ${BUDGET}s spent)"; FAILED=1; return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  t0=$(date +%s)
  timeout --signal=TERM --kill-after=10 "$limit" "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  local status=ok
  [ $rc -ne 0 ] && { status="FAILED (exit $rc$([ $rc -eq 124 ] && echo ", time limit ${limit}s"))"; FAILED=1; }
  say "$name: $status in $(( $(date +%s) - t0 ))s (log: $name.log)"
}

# -- 0: what this machine is
{
  "$PY" -c "import flashbench.measure.timing as t, json; print(json.dumps(t.gpu_state(), indent=1))"
  nvidia-smi || true
} > "$OUT/machine.txt" 2>&1

# -- 1: asv from the carried wheels
SITE=$(mktemp -d /tmp/flashbench-site.XXXXXX)
if "$PY" -c "import asv, asv_runner, yyjson" 2>/dev/null; then
  say "wheels: asv already importable"
elif ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  phase wheels 120 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --target "$SITE" "$WHEELS"/*.whl
  export PYTHONPATH="$PYTHONPATH:$SITE"
else
  say "wheels: none in $WHEELS and no asv here: the asv phase will not run (scripts/gpu_wheels.sh)"
fi
export ASV_PYTHONPATH="$PYTHONPATH"  # asv passes this to the benchmark processes

cd "$REPO" || exit 2

# -- 2: tests on the GPU (compiled kernel)
XDIST=()
"$PY" -c "import xdist" 2>/dev/null && XDIST=(-n 8)
TESTS=${GPU_CHECK_TESTS:-tests/test_triton.py tests/test_timing.py tests/test_backends.py \
tests/test_gpu_kernel.py tests/test_gpu_bench.py}
# shellcheck disable=SC2086  # TESTS is a list of paths
phase pytest 200 "$PY" -m pytest -q -p no:cacheprovider "${XDIST[@]}" \
  --junitxml="$OUT/pytest.xml" -m "gpu or not slow" $TESTS

# -- 3: the quick benchmark
phase gpu_bench 360 "$PY" "$REPO/scripts/gpu_bench.py" --quick --out "$OUT/gpu-results"

# -- 4: asv, GPU suites, samples recorded
if ! "$PY" -c "import asv" 2>/dev/null; then
  say "asv: not run (asv is not importable)"; FAILED=1
elif ! COMMIT=$(git -C "$REPO" rev-parse HEAD 2>/dev/null); then
  say "asv: not run (no git checkout here: carry .git with the tree)"; FAILED=1
else
  MACHINE=$("$PY" -m flashbench.infra.machine 2>>"$OUT/asv.log" | tail -1)
  "$PY" - "$REPO" "$OUT" <<'EOF' 2>>"$OUT/asv.log"
import json, sys
from asv.util import load_json
repo, out = sys.argv[1], sys.argv[2]
conf = load_json(f"{repo}/asv.conf.json", js_comments=True)
conf.update(repo=repo, benchmark_dir=f"{repo}/benchmarks", results_dir=f"{out}/asv-results",
            html_dir=f"{out}/asv-html", env_dir=f"{out}/asv-env")
json.dump(conf, open(f"{out}/asv.conf.json", "w"), indent=1)
EOF
  say "asv: machine $MACHINE, commit $COMMIT"
  phase asv 200 "$PY" -m asv run --config "$OUT/asv.conf.json" -E "existing:$(command -v "$PY")" \
    --set-commit-hash "$COMMIT" --machine "$MACHINE" --record-samples --launch-method spawn \
    --bench "bench_gpu" --show-stderr
fi

say "gpu_check: $(( $(date +%s) - START ))s in all; $([ $FAILED -eq 0 ] && echo "every phase passed" || echo "some phase FAILED: see the logs") ($OUT)"
tail -n 40 "$OUT/gpu_bench.log" 2>/dev/null | grep -E "^\||TFLOP|wrote" || true
exit $FAILED
