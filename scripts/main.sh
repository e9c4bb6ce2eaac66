#!/usr/bin/env bash
# The main job, from a fresh clone (README.md, "The main job"):
#   1. set up .venv (scripts/setup.sh);
#   2. flashbench check: exactness and per-dtype accuracy (its output: main-job/report/check.txt);
#   3. asv on the current commit, the first-run selection (every accuracy track and the
#      reference timings: every section of the report and every plot); --full: every suite;
#   4. the history report of the committed results/ plus this run (main-job/report/);
#   5. the asv site (.asv/html/), with local JavaScript copies.
# Everything it writes is untracked: main-job/ (.gitignore'd), .asv/, .venv/. asv runs from
# a copy of asv.conf.json whose results folder is main-job/results (the committed results/
# copied in): asv rewrites <results>/<machine>/machine.json on every run, never results/'s.
# Long waits print a progress line every 15 s; asv's own tables go to main-job/asv.log.
# MAIN_JOB_BENCH: another asv --bench selection; MAIN_JOB_SKIP: phases to leave out, among
# "setup check site" (tests/test_main_job.py runs the asv and report phases alone).
set -euo pipefail
cd "$(dirname "$0")/.."
FULL=0
case "${1:-}" in
  "") ;;
  --full) FULL=1 ;;
  *) echo "scripts/main.sh: unknown argument ${1} (only --full: every asv suite)" >&2; exit 2 ;;
esac
OUT=main-job
PY=.venv/bin/python
# The first run: every accuracy track (exact, seconds each) and the float64 reference's
# timings (TFLOP/s); the rest of the timings (backends, models, decode, memory) come with --full.
FIRST='^bench_(accuracy|bands|grad\.TrackGrad|variants\.TrackVariant|decode\.Track|reference\.TimeAttention)'
BENCH=${MAIN_JOB_BENCH:-$FIRST}
SKIP=" ${MAIN_JOB_SKIP:-} "
T0=$SECONDS
say() { printf '[%4ds] %s\n' $((SECONDS - T0)) "$*"; }

# logged LABEL LOG CMD...: CMD's output into LOG, a progress line every 15 s (with asv's
# latest "[ NN%] benchmark" line where LOG has one); CMD's exit status.
logged() {
  local label=$1 log=$2 pid i=0 status=0 last
  shift 2
  "$@" >"$log" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    i=$((i + 1))
    if [ $((i % 15)) = 0 ]; then
      last=$(grep -aoE '^\[ *[0-9.]+%\] [^ ]+ [^ ]+' "$log" 2>/dev/null | tail -n 1 || true)
      say "  ... $label: ${i} s${last:+; asv at ${last}}" >&2
    fi
  done
  wait "$pid" || status=$?
  return "$status"
}

mkdir -p "$OUT"
if [[ $SKIP != *" setup "* ]]; then
  say "== 1/5 set-up: .venv with torch and flashbench (a fresh clone: about 30-60 s)"
  if ! logged "set-up" "$OUT/setup.log" bash scripts/setup.sh; then
    tail -n 20 "$OUT/setup.log" >&2
    echo "scripts/main.sh: set-up failed (log: $OUT/setup.log)" >&2
    exit 1
  fi
  grep -a '^setup: torch' "$OUT/setup.log" | tail -n 1 || true
fi

HEAD=$(git rev-parse HEAD)
CHECK=0
if [[ $SKIP != *" check "* ]]; then
  say "== 2/5 flashbench check (exactness, accuracy per dtype; about 1 min)"
  logged "flashbench check" "$OUT/check.txt" .venv/bin/flashbench check --tables --save "$OUT" || CHECK=$?
else
  echo "flashbench check: skipped (MAIN_JOB_SKIP)" >"$OUT/check.txt"
  CHECK=skipped
fi
case "$CHECK" in
  skipped) CHECK_SAYS="skipped (MAIN_JOB_SKIP)" ;;
  0) CHECK_SAYS="PASS" ;;
  1) CHECK_SAYS="FAIL" ;;
  *) CHECK_SAYS="could not run (exit $CHECK)"; tail -n 5 "$OUT/check.txt" >&2 ;;
esac
say "   check: $CHECK_SAYS"

MACHINE=$($PY -m flashbench.infra.machine)
mkdir -p "$OUT/results"
cp -R results/. "$OUT/results/"  # the committed history, read by the report and the site
$PY - "$OUT" <<'PY'
# asv.conf.json with absolute paths, results in main-job/results, and the branches this
# clone has (a clone of one branch has no "main": asv would refuse to run)
import json, pathlib, subprocess, sys
from flashbench.infra.asv import read_config
from flashbench.site.window import PATH_KEYS
out, root = pathlib.Path(sys.argv[1]).resolve(), pathlib.Path.cwd()
conf = read_config("asv.conf.json")
conf = {k: str((root / v).resolve()) if k in PATH_KEYS else v for k, v in conf.items()}
conf["results_dir"] = str(out / "results")
have = [b for b in conf.get("branches", []) if subprocess.run(
    ["git", "rev-parse", "--verify", "--quiet", b], capture_output=True).returncode == 0]
conf["branches"] = have or ["HEAD"]
(out / "asv.conf.json").write_text(json.dumps(conf, indent=1))
PY
ASV=("$PY" -m asv run --config "$OUT/asv.conf.json" -E "existing:$PWD/$PY" --machine "$MACHINE"
     --set-commit-hash "$HEAD" --record-samples --show-stderr)
DONE=$(find "$OUT/results/$MACHINE" -name "${HEAD:0:8}-*.json" 2>/dev/null | head -n 1)
ASV_STATUS=0
if [ "$FULL" = 1 ]; then
  say "== 3/5 asv: every suite on ${HEAD:0:8}, machine $MACHINE (about 4 min more)"
  logged "asv" "$OUT/asv.log" "${ASV[@]}" --skip-existing-successful || ASV_STATUS=$?
elif [ -n "$DONE" ]; then
  say "== 3/5 asv: ${HEAD:0:8} already measured on $MACHINE ($DONE); skipped"
  : >"$OUT/asv.log"
else
  say "== 3/5 asv: the first-run selection on ${HEAD:0:8}, machine $MACHINE (about 3-4 min on 2 CPUs)"
  logged "asv" "$OUT/asv.log" "${ASV[@]}" --bench "$BENCH" || ASV_STATUS=$?
fi
ASV_FAILED=$(grep -acE '(failed|timeout)$' "$OUT/asv.log" || true)
if [ "$ASV_STATUS" != 0 ]; then
  ASV_SAYS="asv failed (exit $ASV_STATUS): $(tail -n 1 "$OUT/asv.log")"
  say "   $ASV_SAYS"
else
  ASV_SAYS="${ASV_FAILED:-0} benchmarks failed"
fi
[ -n "$(git status --porcelain --untracked-files=no)" ] \
  && say "   note: the working tree has changes; asv measured them under ${HEAD:0:8}"

say "== 4/5 flashbench history (report, CSVs, plots)"
logged "flashbench history" "$OUT/history.log" \
  .venv/bin/flashbench history "$OUT/results" --out "$OUT/report" \
  || { tail -n 3 "$OUT/history.log" >&2; exit 1; }
mv "$OUT/check.txt" "$OUT/report/check.txt"

SITE="(not published: MAIN_JOB_SKIP)"
if [[ $SKIP != *" site "* ]]; then
  say "== 5/5 asv site"
  logged "asv publish" "$OUT/site.log" $PY -m flashbench.site --config "$OUT/asv.conf.json" \
    || { tail -n 3 "$OUT/site.log" >&2; exit 1; }
  SITE=$(tail -n 1 "$OUT/site.log")
fi

cat <<MSG

Done in $((SECONDS - T0)) s (wall clock). What was checked, what failed, where the files are:
  check     flashbench check: $CHECK_SAYS   (full output: $OUT/report/check.txt)
  asv       commit ${HEAD:0:8} on $MACHINE: $([ "$FULL" = 1 ] && echo "every suite" || echo "first-run selection (accuracy tracks, reference timings)"); $ASV_SAYS (log: $OUT/asv.log)
  more      every timing suite: bash scripts/main.sh --full
  report    $OUT/report/report.md: it opens with the answer (outside band, steps, failures)
  plots     $OUT/report/{errors,rules,bands,tflops}.png
  results   $OUT/results/ (committed results/ plus this run; untracked)
  site      $SITE/index.html; open it with  $PY -m asv preview --config $OUT/asv.conf.json
MSG
[ "$CHECK" = 0 ] || [ "$CHECK" = skipped ]
