#!/usr/bin/env bash
# The main job, on a fresh machine:
#   1. set up .venv (scripts/setup.sh);
#   2. flashbench check: exactness and per-dtype accuracy (exit 1 on FAIL);
#   3. asv on the current commit into results/ (the machine registered under a stable
#      name, see flashbench/infra/machine.py; skipped when results/ already holds it);
#   4. the history report (flashbench history -> history-report/);
#   5. the asv site, published with local JavaScript copies (.asv/html/).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PY=.venv/bin/python

echo "== 1/4 flashbench check"
.venv/bin/flashbench check

echo "== 2/4 asv run on $(git rev-parse --short HEAD)"
MACHINE=$($PY -m flashbench.infra.machine)
$PY -m asv run --machine "$MACHINE" --record-samples --skip-existing-commits "HEAD^!"

echo "== 3/4 flashbench history"
.venv/bin/flashbench history results --out history-report > /dev/null
echo "report: history-report/report.md (CSVs and PNG plots beside it)"

echo "== 4/4 asv site"
SITE=$($PY -m flashbench.site)
cat <<MSG

Done. Where to look:
  - accuracy report: the tables above (flashbench check)
  - benchmark history: history-report/report.md, errors.png, tflops.png
  - asv site: $SITE/index.html; serve it with  .venv/bin/python -m asv preview
MSG
