#!/usr/bin/env bash
# one-off device probe (not committed): speed and review under py-spy
set -u
OUT=$1
rm -rf .git t && git clone -q gitcopy t && mv t/.git .git && rm -rf t && git checkout -q -- .
site=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" wheels/*.whl pyspy/*.whl
export PYTHONPATH=$PWD:$site PYTHONUNBUFFERED=1 PYTORCH_NVML_BASED_CUDA_CHECK=1
export TRITON_CACHE_DIR=/tmp/tc TRITON_CACHE_AUTOTUNING=1 ASV_PYTHONPATH=$PWD:$site
export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=safe.directory GIT_CONFIG_VALUE_0='*'
SPY="$site/bin/py-spy record -f raw -r 20 --nonblocking --subprocesses"
t0=$(date +%s)
timeout -s INT -k 5 95 $SPY -o "$OUT/speed.raw" -- python3 -m flashbench.cli speed --json --seed 7 \
  --shape 2x16x2048x128 --dtype bf16 --causal off --backend triton --backend sdpa-flash \
  --backend tools.gpu.userkernels:triton --backend tools.gpu.userkernels:sdpa_flash \
  > "$OUT/speed.json" 2> "$OUT/speed.err"
echo "speed rc $? in $(( $(date +%s) - t0 ))s"
BASE=$(git rev-parse HEAD)
idx=$(mktemp -u /tmp/ix.XXXX)
{ git show "$BASE:README.md"; echo; echo "<!-- probe -->"; } > /tmp/noop.md
GIT_INDEX_FILE=$idx git read-tree "$BASE"
blob=$(git hash-object -w /tmp/noop.md)
GIT_INDEX_FILE=$idx git update-index --cacheinfo "100644,$blob,README.md"
tree=$(GIT_INDEX_FILE=$idx git write-tree)
NOOP=$(git -c user.name=p -c user.email=p@p commit-tree "$tree" -p "$BASE" -m noop)
t0=$(date +%s)
timeout -s INT -k 5 125 $SPY -o "$OUT/review.raw" -- python3 -m flashbench.cli review "$BASE" "$NOOP" \
  --bench bench_gpu --factor 1.05 --budget 50 --json --output "$OUT/review-noop.json" \
  > "$OUT/review.log" 2>&1
echo "review rc $? in $(( $(date +%s) - t0 ))s"
ls -la "$OUT"
