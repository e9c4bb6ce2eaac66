#!/usr/bin/env bash
# The steps of .github/workflows/review.yml (docs/review.md, "CI recipe"), run by a test
# (tests/test_pr_review.py) with the variables GitHub sets:
#
#   bash scripts/pr_review.sh review KIND [REVIEW ARGS...]   # in the pull request's checkout
#   bash scripts/pr_review.sh comment DIR                    # with a write token, no checkout
#
# review: `flashbench review BASE HEAD` of the pull request's base (with REVIEW_HEAD_DIR
# the merge commit's first parent, else the event's base sha, else
# origin/$GITHUB_BASE_REF) against its head: HEAD, or with REVIEW_HEAD_DIR (a second
# checkout, of the merge commit GitHub makes) that checkout's commit, fetched, so that the
# reviewing flashbench and its suites are the base's (this checkout) and the head's code
# is only the commit under review. The
# Markdown, under a verdict line, goes to $GITHUB_STEP_SUMMARY and to
# $REVIEW_DIR/KIND.md (uploaded for the comment job). Exit status: 0 nothing regressed;
# 1 regressed (the check fails; the verdict line quotes the review's summary); 2 "could not decide": said in the verdict
# line and a warning annotation, the check passes unless REVIEW_UNDECIDED=fail (exit 2
# with no report: its input refused, the check fails); 3 the review itself failed (the
# check fails). $FLASHBENCH is the command (flashbench).
#
# comment: one comment on the pull request ($GITHUB_EVENT_PATH: a workflow_run event's
# pull request, the number GitHub gives, never an artifact's), found by a hidden marker
# among the comments of github-actions[bot] and edited in place, else created: a section
# per machine kind, each DIR/*.md replacing its kind's, the other kinds' kept (a run of
# the GPU kinds alone keeps the CPU's verdict). A fork's pull request has none there: it
# gets the job summary only. No report in DIR (no review job ran): no comment, exit 0.
set -euo pipefail
MARKER='<!-- flashbench-review -->'
LIMIT=${REVIEW_COMMENT_LIMIT:-60000}  # bytes; a comment holds at most 65536 characters

verdict() {  # status kind [the review's own summary line] -> the line above the report
  local why=${3:+: $3}  # what regressed or stayed open, as the review says it (its words
  local open=": see the ambiguous rows; more --budget may settle them"  # for exit 1 were
  case "$1" in          # "slower or outside band" for an accuracy "worse")
    0) echo "### flashbench review on $2: nothing regressed (exit 0)" ;;
    1) echo "### flashbench review on $2: regressed (exit 1): the check fails$why" ;;
    2) echo "### flashbench review on $2: could not decide (exit 2)${why:-$open}" ;;
    refused) echo "### flashbench review on $2: the review refused its input (exit 2, no" \
                  "report): the check fails" ;;
    *) echo "### flashbench review on $2: the review itself failed (exit $1): the check fails" ;;
  esac
}

event() {  # a dotted path into the event's JSON, or nothing
  python3 - "$1" <<'EOF'
import json, os, sys
try:
    data = json.load(open(os.environ["GITHUB_EVENT_PATH"]))
    for key in sys.argv[1].split("."):
        data = data[int(key)] if isinstance(data, list) else data[key]
    print(data if data is not None else "")
except (KeyError, IndexError, ValueError, TypeError, OSError):
    pass
EOF
}

review() {
  local kind=${1:?usage: pr_review.sh review KIND [REVIEW ARGS...]}
  shift
  local out=${REVIEW_DIR:-review-out}
  local base
  base=$(event pull_request.base.sha)
  if [ -z "$base" ] || ! git cat-file -e "$base^{commit}" 2>/dev/null; then
    base=origin/${GITHUB_BASE_REF:?GITHUB_BASE_REF is not set: not a pull_request event}
  fi
  local head=HEAD
  if [ -n "${REVIEW_HEAD_DIR:-}" ]; then
    git fetch --quiet --no-tags "$REVIEW_HEAD_DIR" HEAD
    head=$(git rev-parse FETCH_HEAD)
  fi
  # the merge commit GitHub makes (REVIEW_HEAD_DIR; its second parent the pull request's
  # head where the event names one): its first parent is the base it merged into (the
  # event's base sha can lag the branch: the review blamed the pull request for what the
  # base gained meanwhile). A branch whose own tip merged main in keeps the event's base.
  local pr_head
  pr_head=$(event pull_request.head.sha)
  if [ -n "${REVIEW_HEAD_DIR:-}" ] && git rev-parse --verify -q "$head^2" >/dev/null &&
     { [ -z "$pr_head" ] || [ "$(git rev-parse "$head^2")" = "$pr_head" ]; }; then
    base=$(git rev-parse "$head^1")
  fi
  mkdir -p "$out"
  rm -f "$out/$kind.review.md"  # --output writes a new file only
  local status=0
  ${FLASHBENCH:-flashbench} review "$base" "$head" "$@" --output "$out/$kind.review.md" \
    >/dev/null 2>"$out/$kind.stderr" || status=$?
  local said=""  # the report's bold summary line ("**REGRESSION: ...; exit 1**")
  [ -s "$out/$kind.review.md" ] &&
    said=$(sed -n 's/^\*\*\(.*\)\*\*$/\1/p' "$out/$kind.review.md" | head -n 1)
  local shown=$status  # exit 2 without a report: bad input refused, no "could not decide"
  [ "$status" = 2 ] && [ ! -s "$out/$kind.review.md" ] && shown=refused
  {
    verdict "$shown" "$kind" "$said"
    echo
    if [ -s "$out/$kind.review.md" ]; then
      cat "$out/$kind.review.md"
    else
      echo '```'
      tail -n 20 "$out/$kind.stderr"
      echo '```'
    fi
    echo
  } > "$out/$kind.md"
  cat "$out/$kind.md" >> "${GITHUB_STEP_SUMMARY:-/dev/stdout}"
  echo "status=$status" >> "${GITHUB_OUTPUT:-/dev/null}"
  cat "$out/$kind.stderr" >&2
  case "$shown" in
    0) return 0 ;;
    2) echo "::warning title=flashbench review on $kind::could not decide (exit 2)"
       [ "${REVIEW_UNDECIDED:-pass}" = fail ] && return 2
       return 0 ;;
    *) echo "::error title=flashbench review on $kind::$(verdict "$shown" "$kind" "$said" |
         cut -c5-)"
       return "$status" ;;
  esac
}

comment() {
  local dir=${1:?usage: pr_review.sh comment DIR}
  local pr body id
  pr=$(event workflow_run.pull_requests.0.number)
  if ! [[ "$pr" =~ ^[0-9]+$ ]]; then
    echo "pr_review: no pull request of this repository in the event (a fork's): no comment"
    return 0
  fi
  shopt -s nullglob
  local reports=() f
  for f in "$dir"/*.md; do  # KIND.md: the verdict line over the report (KIND.review.md)
    [[ "$f" == *.review.md ]] || reports+=("$f")
  done
  local note='' ended head current=
  ended=$(event workflow_run.conclusion)
  head=$(event workflow_run.head_sha)
  pr_head() {  # the pull request's head now: a run of an older push that finishes last (a
    # re-run, a label's run) replaced the newer push's sections, marked "earlier" (a probe)
    gh api "repos/$GITHUB_REPOSITORY/pulls/$pr" --jq .head.sha 2>/dev/null || true
  }
  if [ "${#reports[@]}" = 0 ]; then
    # its jobs ended before a report (an install step failed, a time-out, a lost runner):
    # the comment's sections, an earlier push's "nothing regressed" among them, showed as
    # current beside a red check (a probe); said only of the pull request's head (a newer
    # push's cancelling this run is no news), never of another label's run (skipped jobs)
    [[ "$ended" =~ ^(failure|timed_out)$ ]] && current=$(pr_head)
    if [[ "$ended" =~ ^(failure|timed_out)$ ]] && { [ -z "$current" ] || [ "$current" = "$head" ]; }; then
      note="_This push's review (${head:0:8}) gave no report: its run ended ${ended}"
      note+=" before one (the run's log says why)._"
    else
      echo "pr_review: no review report in $dir (no review job ran, or a newer push's"
      echo "  run replaced this one): no comment"
      return 0
    fi
  else
    current=$(pr_head)
  fi
  body=$(mktemp)
  : > "$body.old"
  id=$(gh api --paginate "repos/$GITHUB_REPOSITORY/issues/$pr/comments?per_page=100" \
         --jq '.[] | {id, user: .user.login, body}' | python3 -c '
import json, sys
for line in sys.stdin:
    c = json.loads(line)
    if c["user"] == "github-actions[bot]" and c["body"].startswith(sys.argv[1]):
        open(sys.argv[2], "w").write(c["body"])
        print(c["id"])
        break' "$MARKER" "$body.old")
  # a section per machine kind, each opened by a hidden line naming its kind and the head it
  # reviewed: this run's reports replace their kinds' and the other kinds' stay, marked when
  # from an earlier push (the label "review-gpu" runs the GPU kinds alone: their run rewrote
  # the comment without the CPU's verdict); a report's own text cannot open a section (a
  # head's stderr, quoted in its report, is its own); each section gets an equal share of
  # the limit, so that every kind's verdict line stays
  PR_REVIEW_NOTE=$note python3 - "$MARKER" "$body.old" "$head" \
    "$LIMIT" "$current" "${reports[@]}" > "$body" <<'EOF'
import os, re, sys
marker, old, head, limit, current, *reports = sys.argv[1:]
note = os.environ.get("PR_REVIEW_NOTE", "")  # above the sections: this run's own word
opens = re.compile(r"^<!-- flashbench-review:([\w.-]+):(\w*) -->\r?\n", re.M)
stale = re.compile(r"\A_From an earlier push \(\w*\)[^\n]*\n\s*")
text = open(old).read()
found = list(opens.finditer(text))
sections = {m[1]: (m[2], stale.sub("", text[m.end():n.start() if n else len(text)]).strip())
            for m, n in zip(found, found[1:] + [None])}
now = current or head  # the pull request's head (this run's where GitHub did not say)
for path in reports:  # KIND.md: its kind is its file's name
    kind = os.path.basename(path)[:-3]
    if head != now and sections.get(kind, ("",))[0] == now:
        continue  # this run reviewed an older push: the newer push's section stays
    body = open(path).read().replace("<!-- flashbench-review", "&lt;!-- flashbench-review")
    sections[kind] = (head, body.strip())
def opening(kind, sha):
    line = f"<!-- flashbench-review:{kind}:{sha} -->\n"
    if sha != now:  # kept from a run of another head (or of an unknown one)
        line += (f"_From an earlier push ({sha[:8] or 'unknown'})"
                 + (f": not reviewed again for {now[:8]}" if now else "") + "._\n\n")
    return line
cut = "\n\n**Cut at {} bytes**: the whole report is in the job summary."
spare = int(limit) - len(marker) - len(note.encode()) - 3 - sum(
    len(opening(k, sha).encode()) + len(cut) + 12 for k, (sha, _) in sections.items())
share = max(spare // max(len(sections), 1), 0)  # bytes of report a section
out = [marker + "\n" + (note + "\n\n" if note else "")]
for kind, (sha, body) in sections.items():
    raw = body.encode()
    if len(raw) > share:  # whole characters, a code fence left open closed
        body = raw[:share].decode("utf-8", "ignore")
        body += "\n```" * (body.count("```") % 2) + cut.format(share)
    out.append(opening(kind, sha) + body + "\n\n")
sys.stdout.write("".join(out))
EOF
  if [ -n "$id" ]; then
    gh api --method PATCH "repos/$GITHUB_REPOSITORY/issues/comments/$id" -F "body=@$body" \
      >/dev/null
    echo "pr_review: updated comment $id on pull request #$pr"
  else
    gh api --method POST "repos/$GITHUB_REPOSITORY/issues/$pr/comments" -F "body=@$body" \
      >/dev/null
    echo "pr_review: commented on pull request #$pr"
  fi
  rm -f "$body" "$body.old"
}

case "${1:-}" in
  review) shift; review "$@" ;;
  comment) shift; comment "$@" ;;
  *) echo "usage: pr_review.sh review KIND [REVIEW ARGS...] | comment DIR" >&2; exit 2 ;;
esac
