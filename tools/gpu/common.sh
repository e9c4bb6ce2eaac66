# Shared by the GPU scripts (scripts/gpu_session.sh) (sourced, never run):
#   gpu_start NAME OUTDIR BUDGET   sets REPO, OUT, PY, WHEELS, BUDGET, START, SUMMARY
#   say TEXT...                    prints a line and appends it to OUT/summary.txt
#   phase NAME LIMIT EXPECT CMD... runs CMD with a time limit (capped by the budget left),
#                                  output to OUT/NAME.log, one summary line; FAILED=1 when
#                                  its exit status is not EXPECT; a NAME not in
#                                  $GPU_SESSION_PHASES (where set: a window split over
#                                  several device calls) is skipped and says so
#   gpu_machine                    OUT/machine.txt: torch/Triton/CUDA versions, nvidia-smi
#   gpu_wheels                     asv, asv_runner, yyjson from $WHEELS into a private
#                                  target (PYTHONPATH), unless asv is importable already;
#                                  whatever GPU_SESSION_PHASES names (every call needs it)
# shellcheck shell=bash

gpu_start() {
  REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  mkdir -p "$2" || { echo "$1: cannot create OUTDIR $2" >&2; exit 2; }
  OUT=$(cd "$2" && pwd)
  PY=${PYTHON:-python3}
  WHEELS=${FLASHBENCH_WHEELS:-$REPO/wheels}
  BUDGET=$3
  START=$(date +%s)
  SUMMARY="$OUT/summary.txt"
  FAILED=0
  : > "$SUMMARY"
  export PYTHONUNBUFFERED=1
  # the tree may be owned by another user than the one running here: let git (and asv's
  # git calls) read it anyway
  export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=safe.directory GIT_CONFIG_VALUE_0='*'
  export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
}

say() { echo "$*" | tee -a "$SUMMARY"; }

phase() {
  local name=$1 limit=$2 expect=$3 left t0 rc status
  shift 3
  if [ -n "${GPU_SESSION_PHASES:-}" ] && [[ " $GPU_SESSION_PHASES " != *" $name "* ]]; then
    say "$name: skipped (not in GPU_SESSION_PHASES)"; return
  fi
  left=$(( BUDGET - ($(date +%s) - START) ))
  if [ "$left" -lt 20 ]; then
    say "$name: not run (budget of ${BUDGET}s spent)"; FAILED=1; return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  t0=$(date +%s)
  timeout --signal=TERM --kill-after=10 "$limit" "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  if [ "$rc" -eq "$expect" ]; then
    status="ok$([ "$expect" -ne 0 ] && echo " (exit $rc, as expected)")"
  else
    status="FAILED (exit $rc$([ $rc -eq 124 ] && echo ", time limit ${limit}s"))"
    [ "$expect" -ne 0 ] && status="$status where $expect was expected"
    FAILED=1
  fi
  say "$name: $status in $(( $(date +%s) - t0 ))s of ${limit}s (log: $name.log)"
}

gpu_wheels() {
  local site
  site=$(mktemp -d /tmp/flashbench-site.XXXXXX)
  if "$PY" -c "import asv, asv_runner, yyjson" 2>/dev/null; then
    say "wheels: asv already importable"
  elif ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    # every device call needs asv: never skipped by GPU_SESSION_PHASES
    GPU_SESSION_PHASES="" phase wheels 60 0 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
      --target "$site" "$WHEELS"/*.whl
    export PYTHONPATH="$PYTHONPATH:$site"
  else
    say "wheels: none in $WHEELS and no asv here: the asv phases will fail (gpu_wheels.sh)"
  fi
  export ASV_PYTHONPATH="$PYTHONPATH"  # asv passes this to the benchmark processes
}

gpu_machine() {
  { "$PY" -c "import flashbench.measure.timing as t, json; print(json.dumps(t.gpu_state(), indent=1))"
    nvidia-smi || true
    # the thread settings the CPU-side checks run with (an image may set OMP_NUM_THREADS)
    echo "OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset} nproc=$(nproc)"
    "$PY" -c "import torch; print('torch threads', torch.get_num_threads())"
  } > "$OUT/machine.txt" 2>&1
}
