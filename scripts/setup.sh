#!/usr/bin/env bash
# Create (or refresh) the local virtualenv .venv with flashbench.
#
#   bash scripts/setup.sh          # the package (the main job needs no more)
#   bash scripts/setup.sh --test   # + the test extra and, as root, Debian's chromium and
#                                  #   chromium-driver for the browser test of the asv site
#
# torch: a plain "torch" requirement pulls a multi-GB CUDA build when no torch is
# installed. This script keeps a torch that is already importable in .venv; on a
# machine without an NVIDIA GPU it installs the CPU build first (torch==2.13.0, which
# these machines keep on disk; elsewhere from the PyTorch CPU index), so that the
# project's "torch>=2.4" is already satisfied when flashbench is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
TEST=0
[ "${1:-}" = "--test" ] && TEST=1
# Debian's packages for the tests (as root) install in the background, beside pip.
# FLASHBENCH_APT_STATUS=FILE (scripts/test.sh): this script does not wait for them; the
# install's exit status goes to FILE when it ends ("0" at once when nothing is installed),
# its log to FILE.log, its process id to FILE.pid, and the caller waits (scripts/test.sh:
# beside its bytecode step).
APT_PID=
APT_STATUS=${FLASHBENCH_APT_STATUS:-}
APT_LOG=${APT_STATUS:+$APT_STATUS.log}
APT_LOG=${APT_LOG:-/tmp/flashbench-apt.$$.log}
[ -z "$APT_STATUS" ] || rm -f "$APT_STATUS" "$APT_STATUS.pid"
if [ "$TEST" = 1 ] && { ! command -v chromium >/dev/null 2>&1 \
    || ! command -v chromedriver >/dev/null 2>&1 || ! command -v shellcheck >/dev/null 2>&1 \
    || ! command -v slurmctld >/dev/null 2>&1; }; then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing Debian's chromium, chromium-driver (the browser test), shellcheck" \
      "and slurmctld, slurmd, slurm-client, munge (the test Slurm)"
    {
      rc=0
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
          chromium chromium-driver shellcheck slurmctld slurmd slurm-client munge; } \
          >"$APT_LOG" 2>&1 || rc=$?
      if [ -n "$APT_STATUS" ]; then
        echo "$rc" > "$APT_STATUS.tmp" && mv "$APT_STATUS.tmp" "$APT_STATUS"
      fi
      exit "$rc"
    } &
    APT_PID=$!
    [ -z "$APT_STATUS" ] || echo "$APT_PID" > "$APT_STATUS.pid"
  else
    echo "setup: the tests need: sudo apt-get install chromium chromium-driver shellcheck" \
      "slurmctld slurmd slurm-client munge" >&2
  fi
fi
[ -n "$APT_PID" ] || [ -z "$APT_STATUS" ] || echo 0 > "$APT_STATUS"
wait_apt() {
  [ -n "$APT_PID" ] && [ -z "$APT_STATUS" ] || return 0
  if ! wait "$APT_PID"; then
    tail -n 20 "$APT_LOG" >&2
    echo "setup: apt-get install failed" >&2
    exit 1
  fi
}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
VPY=.venv/bin/python
# One install run for torch and flashbench (one resolution, one install). uv (from PyPI, 2 s)
# installs what pip would, from the indexes, find-links and constraints pip is configured
# with, compiling the bytecode as pip does (PYTHONDONTWRITEBYTECODE may forbid writing it
# later), in a third of the time: 30 s against 84 s, fresh venvs one after the other here.
# pip does it where uv cannot be had or fails.
install() {
  if "$VPY" -m pip install -q uv >/dev/null 2>&1; then
    local args=() key value v
    local index=
    # pip prints each value as a Python repr: several values on lines of their own come as
    # one with "\n" in it; the environment's (":env:", pip's first choice) come first
    while IFS='=' read -r key value; do
      value=${value#\'}; value=${value%\'}; value=${value//\\n/ }
      case "$key" in
        *.extra-index-url) for v in $value; do args+=(--extra-index-url "$v"); done ;;
        *.index-url) [ -n "$index" ] || { index=$value; args+=(--index-url "$value"); } ;;
        *.find-links) for v in $value; do args+=(--find-links "$v"); done ;;
        *.constraint) for v in $value; do args+=(--constraint "$v"); done ;;
        *.trusted-host) for v in $value; do args+=(--allow-insecure-host "$v"); done ;;
        *.no-index) case "$value" in 1|true|yes|on) args+=(--no-index) ;; esac ;;
      esac
    done < <("$VPY" -m pip config list 2>/dev/null)
    "$VPY" -m uv pip install -q --python "$VPY" "${COMPILE[@]}" \
      --index-strategy unsafe-best-match "${args[@]}" "$@" && return 0
    echo "setup: uv failed; pip instead" >&2
  fi
  "$VPY" -m pip install -q "${PIP_COMPILE[@]}" "$@"
}
# Bytecode: compiled at install (all 12,000 modules: ~40 s of CPU here), since
# PYTHONDONTWRITEBYTECODE (set on these machines) would have every process compile what it
# imports anew. FLASHBENCH_LAZY_BYTECODE=1 (scripts/test.sh) installs without it: the test
# run then writes the bytecode of the ~2,200 modules it imports, once.
COMPILE=(--compile-bytecode)
PIP_COMPILE=()
if [ "${FLASHBENCH_LAZY_BYTECODE:-0}" = 1 ]; then
  COMPILE=()
  PIP_COMPILE=(--no-compile)
fi
TORCH=()
if ! "$VPY" -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    TORCH=(torch)
  else
    TORCH=(torch==2.13.0)
  fi
fi
PROJECT=.
[ "$TEST" = 1 ] && PROJECT=".[test]"
if ! install "${TORCH[@]}" -e "$PROJECT"; then
  [ "${TORCH[*]}" = "torch==2.13.0" ] || exit 1
  install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
  install -e "$PROJECT"
fi
wait_apt
# the versions from the installed metadata: importing torch and triton costs 3 s
echo "setup: $("$VPY" -c 'from importlib.metadata import version as v; print(", ".join(f"{p} {v(p)}" for p in ("torch", "triton", "numpy")))')"
