#!/usr/bin/env bash
# Set up .venv (scripts/setup.sh), make sure headless Chromium is there for the site
# test, and run the whole test suite. pytest's own exit status is returned: 5 (no
# tests collected) fails like any other error.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    echo "installing Debian's chromium and chromium-driver for the browser test"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      chromium chromium-driver >/dev/null
  else
    echo "the browser test needs: sudo apt-get install chromium chromium-driver" >&2
  fi
fi
exec .venv/bin/python -m pytest "$@"
