#!/usr/bin/env bash
# Download the wheels scripts/gpu_session.sh needs on a GPU machine that has no network:
# asv and what it imports, for Python 3.12 on manylinux x86_64 (the GPU image has torch,
# Triton, pandas, tabulate, pyyaml, packaging, pytest, hypothesis, but not these).
#
#   bash scripts/gpu_wheels.sh [DIR]      # default: $FLASHBENCH_WHEELS or ./wheels
#
# DIR is kept out of git (.git/info/exclude); carry it with the tree (the device tool's
# `carry`, with .git) and gpu_session.sh installs from it with --no-index.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
DIR=${1:-${FLASHBENCH_WHEELS:-$REPO/wheels}}
PY=${PYTHON:-python3}
# pinned: the versions flashbench's own environment uses; only what the image lacks
# (asv's other needs, build, packaging, pyyaml, tabulate and filelock, are there)
PINS=(asv==0.6.6 asv_runner==0.3.2 yyjson==4.0.6 json5==0.17.3 pympler==1.1
      importlib_metadata==10.2.0 virtualenv==21.15.11 distlib==0.4.4 platformdirs==4.14.8
      python-discovery==1.9.6 lazy_importer==0.1.0 zipp==4.1.2)
mkdir -p "$DIR"
if EXCLUDE=$(git -C "$REPO" rev-parse --path-format=absolute --git-path info/exclude 2>/dev/null)
then  # (a worktree's .git is a file: ask git where the exclude file is)
  rel=${DIR#"$REPO"/}
  if [ "$rel" != "$DIR" ] && ! grep -qx "/$rel/" "$EXCLUDE" 2>/dev/null; then
    mkdir -p "$(dirname "$EXCLUDE")" && echo "/$rel/" >> "$EXCLUDE"
  fi
fi
for pin in "${PINS[@]}"; do
  "$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any \
    -d "$DIR" "$pin"
done
ls -1 "$DIR"
du -sh "$DIR"
