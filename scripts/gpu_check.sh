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
# shellcheck source=scripts/gpu_common.sh
source "$(dirname "$0")/gpu_common.sh"
gpu_start gpu_check "$1" "${GPU_CHECK_BUDGET:-540}"

if [ "${GPU_CHECK_ALLOW_NO_GPU:-0}" != 1 ] &&
   ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  say "gpu_check: no CUDA GPU visible to torch ($PY): nothing to run here (this script is for a GPU machine)"
  exit 3
fi

export TRITON_CACHE_AUTOTUNING=1  # asv starts a process per grid point: keep autotune results

# -- 0: what this machine is
gpu_machine

# -- 1: asv from the carried wheels
gpu_wheels

cd "$REPO" || exit 2

# -- 2: tests on the GPU (compiled kernel)
XDIST=()
"$PY" -c "import xdist" 2>/dev/null && XDIST=(-n 8)
TESTS=${GPU_CHECK_TESTS:-tests/test_triton.py tests/test_timing.py tests/test_backends.py \
tests/test_gpu_kernel.py tests/test_gpu_bench.py}
# shellcheck disable=SC2086  # TESTS is a list of paths
phase pytest 200 0 "$PY" -m pytest -q -p no:cacheprovider "${XDIST[@]}" \
  --junitxml="$OUT/pytest.xml" -m "gpu or not slow" $TESTS

# -- 3: the quick benchmark
phase gpu_bench 360 0 "$PY" "$REPO/scripts/gpu_bench.py" --quick --out "$OUT/gpu-results"

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
  phase asv 200 0 "$PY" -m asv run --config "$OUT/asv.conf.json" -E "existing:$(command -v "$PY")" \
    --set-commit-hash "$COMMIT" --machine "$MACHINE" --record-samples --launch-method spawn \
    --bench "bench_gpu" --show-stderr
fi

say "gpu_check: $(( $(date +%s) - START ))s in all; $([ $FAILED -eq 0 ] && echo "every phase passed" || echo "some phase FAILED: see the logs") ($OUT)"
tail -n 40 "$OUT/gpu_bench.log" 2>/dev/null | grep -E "^\||TFLOP|wrote" || true
exit $FAILED
