#!/usr/bin/env bash
# The GPU session's phase "speed" (scripts/gpu_session.sh): `flashbench speed` on the device,
# every row's timed outputs checked, a JSON report per run under OUTDIR:
#   fwd     2x16x2048x128 bf16, causal and not: triton, sdpa-flash, sdpa-cudnn, and the same
#           triton and sdpa-flash as a user's kernels (tools/gpu/userkernels.py: a worker
#           process, the harness's clock less the empty requests', the worker's L2 flush)
#   fwd_posted  sdpa-flash and the user's again, the user's inputs posted inside the clock
#           (FLASHBENCH_GPU_POSTING=1, flashbench.timed.placed: a CPU's default, untried on
#           a GPU): the price of posting there, the user row over sdpa-flash against fwd's
#   fp8     the same shape in e4m3 on triton-fp8: the % peak against the fp8 matmul peak
#   fwdbwd  forward + backward, causal: triton, sdpa-flash, and sdpa-flash as a user's
#   decode  a paged GQA cache of 8 sequences, 256 to 32768 keys, on the decode backends
#           (GB/s of the cache read against the run's copy bandwidth)
#   softcap 1x16/4x2048x128 bf16, causal, softcap 30: triton and torch-naive
#   varlen  a packed prefill with Q:K chunks (queries over longer keys, bottom-right causal)
#           on triton's packed forward, beside triton's dense forward run above
#   dsinks  `flashbench check --pass bwd --sinks` at 1x4/1x2048x128 bf16, causal: Triton's
#           dsinks against its per-head limit in the dtype the interpreter gets wrong (the
#           CPU's Triton takes ~300 x 300 only); OUTDIR/dsinks.json. The float64 reference
#           and models are the cost: 17 s at 1x4/1x1024x128 on this 2-CPU machine, x4 here
# (varlen and dsinks compile kernels the quick plan does not: last, so that a phase cut by
# its limit loses them first)
# (2026-12-04, an H200: 4x16x4096x128 took over 160 s for the fwd run's first 4 rows;
# 2x16x2048x128, 4 rows: 74 s with the run's start, half of it (py-spy) judging outputs on
# the CPU: inputs rebuilt, float64 rows, the same-dtype model, since made lazy.)
#
#   bash tools/gpu/speed.sh OUTDIR [--dry-run]   (--dry-run: small CPU cases, no GPU)
# Exit status: 0 every run exited 0, 1 some run did not (its .err says why), 2 usage.
set -u
if [ $# -lt 1 ] || [ -z "$1" ]; then
  echo "usage: bash tools/gpu/speed.sh OUTDIR [--dry-run]" >&2
  exit 2
fi
OUT=$1
DRY=0
[ "${2:-}" = "--dry-run" ] && DRY=1
PY=${PYTHON:-python3}
mkdir -p "$OUT" || exit 2
FAILED=0
SEED=${GPU_SPEED_SEED:-20261204}
U=tools.gpu.userkernels

# run NAME ARGS...: flashbench speed ARGS --json > OUT/NAME.json, its stderr in OUT/NAME.err
run() {
  local name=$1 t0 rc
  shift
  t0=$(date +%s)
  "$PY" -m flashbench.cli speed --json --seed "$SEED" "$@" > "$OUT/$name.json" 2> "$OUT/$name.err"
  rc=$?
  [ "$rc" -eq 0 ] || FAILED=1
  echo "$name: exit $rc in $(( $(date +%s) - t0 ))s: flashbench speed $*"
}

if [ $DRY -eq 1 ]; then
  S=1x2x256x64
  # one run: the script's plumbing and the user path (the passes and decode have tests)
  run fwd --shape $S --dtype bf16 --backend sdpa-flash --backend "$U:sdpa_flash"
  exit $FAILED
fi

# the kernels these runs launch are the quick plan's (tools/gpu/bench.py): compiled in 8
# processes first, into the session's TRITON_CACHE_DIR
t0=$(date +%s)
"$PY" -c "from tools.gpu import bench; e = bench.precompile(True, 8); print('errors:', e) if e else None"
echo "precompile: $(( $(date +%s) - t0 ))s"
S=2x16x2048x128
run fwd --shape $S --dtype bf16 --causal both --backend triton --backend sdpa-flash \
  --backend sdpa-cudnn --backend "$U:triton" --backend "$U:sdpa_flash"
# the user's sdpa-flash again, its inputs posted inside the clock as on a CPU (the fills
# before the stage are a GPU's default): its ratio to sdpa-flash against fwd.json's
FLASHBENCH_GPU_POSTING=1 run fwd_posted --shape $S --dtype bf16 --causal both \
  --backend sdpa-flash --backend "$U:sdpa_flash"
run fp8 --shape $S --dtype fp8 --backend triton-fp8
run fwdbwd --shape $S --dtype bf16 --causal on --pass fwdbwd --backend triton \
  --backend sdpa-flash --backend "$U:sdpa_flash"
run decode --decode --dtype bf16 --decode-case 8x32/8x1x128:32768,16384,8192,4096,2048,1024,512,256:p256
run softcap --shape 1x16/4x2048x128 --dtype bf16 --causal on --softcap 30 --backend triton \
  --backend torch-naive
run varlen --varlen 1024:4096,2048:2048,512:6144,4096:4096 --shape 1x16/4x1024x128 --dtype bf16 \
  --causal on --backend triton
t0=$(date +%s)
"$PY" -m flashbench.cli check --pass bwd --sinks --shape 1x4/1x2048x128 --dtype bf16 \
  --causal on --only triton --json > "$OUT/dsinks.json" 2> "$OUT/dsinks.err"
rc=$?
[ "$rc" -eq 0 ] || FAILED=1
echo "dsinks: exit $rc in $(( $(date +%s) - t0 ))s: flashbench check --pass bwd --sinks"
exit $FAILED
