"""scripts/pr_review.sh, the steps of .github/workflows/review.yml and review-comment.yml,
run on a throw-away repository with the variables GitHub sets (GITHUB_EVENT_PATH,
GITHUB_BASE_REF, GITHUB_STEP_SUMMARY, GITHUB_OUTPUT, GITHUB_REPOSITORY), a fake
``flashbench review`` (exits with $FAKE_STATUS) and a fake ``gh`` (comments in a JSON
file): what reaches the job summary and the comment, and the exit statuses. Also the
workflows' shape: untrusted head code never meets a write token or a fork's GPU runner."""

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "pr_review.sh"
MARKER = "<!-- flashbench-review -->"

FAKE_FLASHBENCH = f"""#!{sys.executable}
import json, os, sys
args = sys.argv[1:]
json.dump(args, open(os.environ["FAKE_ARGS"], "w"))
status = int(os.environ["FAKE_STATUS"])
if status == 3:
    print("flashbench review: failed: git worktree add failed", file=sys.stderr)
    sys.exit(3)
if os.environ.get("FAKE_REFUSE"):  # bad input: one line, no report, exit 2
    print("flashbench review: error: bench 'bench_gpuu' matches no benchmark", file=sys.stderr)
    sys.exit(2)
text = "| benchmark | verdict |\\n|---|---|\\n| time_attention | " + os.environ["FAKE_ROW"] + " |\\n"
if os.environ.get("FAKE_SUMMARY"):
    text = "**" + os.environ["FAKE_SUMMARY"] + "**\\n\\n" + text
open(args[args.index("--output") + 1], "w").write(text)
print(text)
sys.exit(status)
"""

FAKE_GH = f"""#!{sys.executable}
import json, os, sys
args = sys.argv[1:]
state = os.environ["FAKE_GH_STATE"]
comments = json.load(open(state))
with open(state + ".calls", "a") as log:
    log.write(" ".join(a for a in args if not a.startswith("body=")) + "\\n")
assert args[0] == "api", args
method = args[args.index("--method") + 1] if "--method" in args else "GET"
path = [a for a in args[1:] if a.startswith("repos/")][0]
if method == "GET" and "/pulls/" in path:  # the pull request's head, where the test says
    if not os.environ.get("FAKE_PR_HEAD"):
        sys.exit(1)
    print(os.environ["FAKE_PR_HEAD"])
    sys.exit(0)
if method == "GET":
    assert path.endswith("/comments?per_page=100") and "--jq" in args, args
    for c in comments:
        print(json.dumps({{"id": c["id"], "user": c["user"], "body": c["body"]}}))
    sys.exit(0)
body = open(args[args.index("-F") + 1][len("body=@"):]).read()
if method == "PATCH":
    cid = int(path.rsplit("/", 1)[1])
    [c for c in comments if c["id"] == cid][0]["body"] = body
else:
    comments.append({{"id": 100 + len(comments), "user": "github-actions[bot]", "body": body}})
json.dump(comments, open(state, "w"))
print("{{}}")
"""


def sh(*args, cwd) -> str:
    return subprocess.run(args, cwd=cwd, check=True, capture_output=True, text=True).stdout


def executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def pr(tmp_path):
    """A repository with main (the base) and a branch (the head) checked out, the event
    of a pull request, the files GitHub gives a step, and the fakes."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    sh("git", "init", "-q", "-b", "main", cwd=repo)
    (repo / "kernel.py").write_text("v = 1\n")
    sh(*git, "add", ".", cwd=repo)
    sh(*git, "commit", "-qm", "base", cwd=repo)
    base = sh("git", "rev-parse", "HEAD", cwd=repo).strip()
    sh("git", "checkout", "-qb", "faster", cwd=repo)
    (repo / "kernel.py").write_text("v = 2\n")
    sh(*git, "commit", "-qam", "head", cwd=repo)
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"action": "synchronize", "number": 7, "pull_request": {
        "number": 7, "base": {"ref": "main", "sha": base}, "head": {"ref": "faster"}}}))
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    executable(bin_ / "flashbench", FAKE_FLASHBENCH)
    executable(bin_ / "gh", FAKE_GH)
    (tmp_path / "comments.json").write_text("[]")
    env = {**os.environ, "PATH": f"{bin_}{os.pathsep}{os.environ['PATH']}",
           "GITHUB_EVENT_PATH": str(event), "GITHUB_BASE_REF": "main",
           "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
           "GITHUB_OUTPUT": str(tmp_path / "output"), "GITHUB_REPOSITORY": "team/flashbench",
           "FAKE_ARGS": str(tmp_path / "args.json"), "FAKE_GH_STATE": str(tmp_path / "comments.json"),
           "REVIEW_DIR": str(tmp_path / "review-out"), "GIT_CONFIG_GLOBAL": os.devnull}
    return repo, base, env, tmp_path


def review(pr, status: int, row: str = "same", **extra) -> subprocess.CompletedProcess:
    repo, _, env, _ = pr
    return subprocess.run(["bash", str(SCRIPT), "review", "cpu-x86_64", "--jobs", "2"],
                          cwd=repo, capture_output=True, text=True,
                          env={**env, "FAKE_STATUS": str(status), "FAKE_ROW": row, **extra})


@pytest.mark.parametrize("status, shown, rc", [
    (0, "nothing regressed (exit 0)", 0),
    (1, "regressed (exit 1): the check fails", 1),
    (2, "could not decide (exit 2)", 0),
    (3, "the review itself failed (exit 3): the check fails", 3),
])
def test_review_step_summary_and_exit_status(pr, status, shown, rc):
    repo, base, env, tmp = pr
    r = review(pr, status, row="slower 1.31x")
    assert r.returncode == rc, r.stdout + r.stderr
    summary = (tmp / "summary.md").read_text()
    assert summary.startswith(f"### flashbench review on cpu-x86_64: {shown}"), summary
    if status == 3:  # no report: the review's own last words instead
        assert "git worktree add failed" in summary and "::error" in r.stdout
    else:
        assert "| time_attention | slower 1.31x |" in summary
    assert (tmp / "review-out" / "cpu-x86_64.md").read_text() == summary
    assert (tmp / "output").read_text() == f"status={status}\n"
    args = json.loads((tmp / "args.json").read_text())
    assert args[:3] == ["review", base, "HEAD"] and args[3:5] == ["--jobs", "2"]
    if status == 2:  # not hidden: a warning on the check, the verdict line above
        assert "::warning title=flashbench review on cpu-x86_64::could not decide" in r.stdout


@pytest.mark.parametrize("status, summary, shown", [
    (1, "REGRESSION: 2 result(s) got worse (accuracy); exit 1",
     "regressed (exit 1): the check fails: REGRESSION: 2 result(s) got worse (accuracy)"),
    (2, "NOT MEASURED: 3 timing(s), the sampling budget ran out or the machine was too busy",
     "could not decide (exit 2): NOT MEASURED: 3 timing(s)")])
def test_the_verdict_line_quotes_what_the_review_says(pr, status, summary, shown):
    """A red team's heads: the line read "slower or outside band" over an accuracy "worse"
    and over a head whose kernel failed; "see the ambiguous rows" over a timing not
    measured. It now quotes the report's own summary line."""
    _, _, _, tmp = pr
    r = review(pr, status, FAKE_SUMMARY=summary)
    line = (tmp / "summary.md").read_text().splitlines()[0]
    assert line.startswith(f"### flashbench review on cpu-x86_64: {shown}"), line
    if status == 1:
        assert f"::error title=flashbench review on cpu-x86_64::{line[4:]}" in r.stdout


def test_could_not_decide_fails_the_check_when_asked(pr):
    assert review(pr, 2, REVIEW_UNDECIDED="fail").returncode == 2


def test_the_base_branch_when_the_event_has_no_base_sha(pr):
    repo, _, env, tmp = pr
    (tmp / "event.json").write_text("{}")
    sh("git", "update-ref", "refs/remotes/origin/main", "main", cwd=repo)
    assert review(pr, 0).returncode == 0
    assert json.loads((tmp / "args.json").read_text())[1] == "origin/main"


def test_the_base_reviews_a_second_checkout_of_the_head(pr):
    """The workflow's layout: the base checked out (its flashbench reviews), the head in
    a second checkout: its commit is fetched and reviewed, never run as the reviewer."""
    repo, base, env, tmp = pr
    head = sh("git", "rev-parse", "HEAD", cwd=repo).strip()
    sh("git", "clone", "-q", str(repo), str(tmp / "head"), cwd=tmp)
    sh("git", "checkout", "-q", "main", cwd=repo)
    sh("git", "branch", "-qD", "faster", cwd=repo)  # the base checkout lacks the head
    assert review(pr, 0, REVIEW_HEAD_DIR=str(tmp / "head")).returncode == 0
    assert json.loads((tmp / "args.json").read_text())[:3] == ["review", base, head]
    assert sh("git", "rev-parse", "HEAD", cwd=repo).strip() == base


def test_a_refused_review_fails_the_check_and_is_not_called_undecided(pr):
    """A probe (2026-12-07): a typo in the review's arguments (`--bench bench_gpuu`: exit 2,
    no report) read "could not decide (exit 2): see the ambiguous rows; more --budget may
    settle them" (with a run of spaces inside) and passed the check, for good."""
    _, _, _, tmp = pr
    r = review(pr, 2, FAKE_REFUSE="1")
    assert r.returncode == 2, r.stdout + r.stderr
    summary = (tmp / "summary.md").read_text()
    assert summary.startswith("### flashbench review on cpu-x86_64: the review refused its "
                              "input (exit 2, no report): the check fails"), summary
    assert "matches no benchmark" in summary and "::error" in r.stdout
    undecided = review(pr, 2)  # with a report: could not decide, the check passes
    line = (tmp / "summary.md").read_text().splitlines()[-7:]
    assert undecided.returncode == 0 and any(
        x.endswith("could not decide (exit 2): see the ambiguous rows; more --budget may "
                   "settle them") for x in line), line


def test_the_base_is_the_merge_commits_first_parent(pr):
    """A probe (2026-12-07): the event's base sha lags the branch when main moved after the
    pull request was opened; GitHub's merge commit (the head under review) merged into
    main's newer tip, and the review of old base against it blamed the pull request for
    another one's change. The merge commit's first parent is the base now."""
    repo, base, env, tmp = pr
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    pr_head = sh("git", "rev-parse", "HEAD", cwd=repo).strip()
    sh("git", "checkout", "-q", "main", cwd=repo)
    (repo / "other.py").write_text("another pull request\n")
    sh(*git, "add", ".", cwd=repo)
    sh(*git, "commit", "-qm", "main moved", cwd=repo)
    moved = sh("git", "rev-parse", "HEAD", cwd=repo).strip()
    sh("git", "clone", "-q", str(repo), str(tmp / "merge"), cwd=tmp)
    sh(*git, "merge", "-q", "--no-ff", "-m", "merge", pr_head, cwd=tmp / "merge")
    merge = sh("git", "rev-parse", "HEAD", cwd=tmp / "merge").strip()
    sh("git", "reset", "-q", "--hard", base, cwd=repo)  # the job's checkout: the event's base
    event = json.loads((tmp / "event.json").read_text())
    event["pull_request"]["head"]["sha"] = pr_head
    (tmp / "event.json").write_text(json.dumps(event))
    assert review(pr, 0, REVIEW_HEAD_DIR=str(tmp / "merge")).returncode == 0
    assert json.loads((tmp / "args.json").read_text())[:3] == ["review", moved, merge]
    # a head whose second parent is not the pull request's head keeps the event's base
    event["pull_request"]["head"]["sha"] = moved
    (tmp / "event.json").write_text(json.dumps(event))
    assert review(pr, 0, REVIEW_HEAD_DIR=str(tmp / "merge")).returncode == 0
    assert json.loads((tmp / "args.json").read_text())[1] == base


def comment(pr, event: dict) -> subprocess.CompletedProcess:
    _, _, env, tmp = pr
    (tmp / "run-event.json").write_text(json.dumps(event))
    return subprocess.run(["bash", str(SCRIPT), "comment", str(tmp / "review-out")],
                          cwd=tmp, capture_output=True, text=True,
                          env={**env, "GITHUB_EVENT_PATH": str(tmp / "run-event.json")})


RUN = {"workflow_run": {"event": "pull_request", "pull_requests": [{"number": 7}]}}


def test_one_comment_edited_in_place(pr):
    _, _, env, tmp = pr
    state = tmp / "comments.json"
    # someone else's comment quoting the marker is never edited
    state.write_text(json.dumps([{"id": 5, "user": "mallory", "body": MARKER + "\nmine"}]))
    review(pr, 1, row="slower 1.31x")
    r = comment(pr, RUN)
    assert r.returncode == 0 and "commented on pull request #7" in r.stdout, r.stderr
    review(pr, 0, row="same")
    r = comment(pr, RUN)
    assert r.returncode == 0 and "updated comment 101 on pull request #7" in r.stdout, r.stderr
    comments = json.loads(state.read_text())
    assert [c["id"] for c in comments] == [5, 101]
    assert comments[0]["body"] == MARKER + "\nmine"
    body = comments[1]["body"]
    assert body.startswith(MARKER + "\n<!-- flashbench-review:cpu-x86_64: -->\n"
                           "### flashbench review on cpu-x86_64: nothing regressed")
    assert "| time_attention | same |" in body and "slower" not in body
    calls = [c for c in (tmp / "comments.json.calls").read_text().splitlines()
             if "/pulls/" not in c]  # the pull request's head asked (test_a_stale_run_...)
    assert [c.split()[2] if c.split()[1] == "--method" else "GET" for c in calls] == [
        "GET", "POST", "GET", "PATCH"]
    assert all("team/flashbench/issues/" in c for c in calls)


def _run(sha: str) -> dict:
    return {"workflow_run": {**RUN["workflow_run"], "head_sha": sha}}


def test_a_stale_run_finishing_last_keeps_the_newer_pushs_sections(pr):
    """A probe (2026-12-07): the comment job of an older push's run (a re-run, a label's
    run) finishing after the newer push's replaced the newer sections: a current H100
    regression gone, a stale "nothing regressed" shown as current, and the newer CPU verdict
    marked "from an earlier push". The pull request's head now decides."""
    _, _, env, tmp = pr
    new, old = "b" * 40, "a" * 40
    out = tmp / "review-out"
    out.mkdir(exist_ok=True)
    for kind in ("cpu-x86_64", "nvidia-h100"):
        (out / f"{kind}.md").write_text(f"### flashbench review on {kind}: regressed (exit 1)\n")
    assert comment(pr, _run(new)).returncode == 0
    (out / "cpu-x86_64.md").unlink()
    (out / "nvidia-h100.md").write_text("### flashbench review on nvidia-h100: nothing "
                                         "regressed (exit 0)\n")
    env["FAKE_PR_HEAD"] = new
    r = comment(pr, _run(old))
    assert r.returncode == 0, r.stderr
    body = json.loads((tmp / "comments.json").read_text())[-1]["body"]
    assert "nvidia-h100: regressed (exit 1)" in body and "nothing regressed" not in body, body
    assert "From an earlier push" not in body, body  # both sections are the newest push's
    # an older push's section the newer run did not replace is still marked as such
    (out / "nvidia-h100.md").unlink()
    (out / "cpu-x86_64.md").write_text("### flashbench review on cpu-x86_64: nothing "
                                       "regressed (exit 0)\n")
    env["FAKE_PR_HEAD"] = "c" * 40
    assert comment(pr, _run("c" * 40)).returncode == 0
    body = json.loads((tmp / "comments.json").read_text())[-1]["body"]
    assert f"_From an earlier push ({new[:8]}): not reviewed again for cccccccc._" in body


def test_a_run_of_one_kind_keeps_the_other_kinds_sections(pr):
    """A red team (2026-12-06): the label "review-gpu" runs the GPU kinds alone, and its
    comment job rewrote the one comment without the CPU's verdict (a CPU regression gone
    from the pull request). Each kind's section now replaces only its own; one from an
    earlier push says so."""
    _, _, _, tmp = pr
    review(pr, 1, row="slower 1.31x")
    assert comment(pr, _run("a" * 40)).returncode == 0
    out = tmp / "review-out"
    (out / "cpu-x86_64.md").unlink()  # the label's run: a GPU kind's report alone
    (out / "nvidia-h200.md").write_text("### flashbench review on nvidia-h200: nothing "
                                        "regressed (exit 0)\n\n| gpu | same |\n")
    r = comment(pr, _run("a" * 40))
    assert r.returncode == 0 and "updated comment 100" in r.stdout, r.stderr
    body = json.loads((tmp / "comments.json").read_text())[0]["body"]
    cpu = body.index("### flashbench review on cpu-x86_64: regressed (exit 1)")
    gpu = body.index("### flashbench review on nvidia-h200: nothing regressed")
    assert body.startswith(MARKER + "\n") and cpu < gpu and "| slower 1.31x |" in body
    assert "earlier push" not in body  # the same head
    (out / "nvidia-h200.md").write_text("### flashbench review on nvidia-h200: regressed "
                                        "(exit 1)\n\n| gpu | slower |\n")
    assert comment(pr, _run("b" * 40)).returncode == 0  # its own section replaced, once
    body = json.loads((tmp / "comments.json").read_text())[0]["body"]
    assert body.count("### flashbench review on nvidia-h200") == 1 and "| gpu | slower |" in body
    assert "| slower 1.31x |" in body  # the CPU's, from the earlier push, marked so
    assert body.count("_From an earlier push (aaaaaaaa): not reviewed again for bbbbbbbb._") == 1


def test_a_reports_own_text_cannot_open_or_replace_a_section(pr):
    """A fresh-eyes review: a GPU report quoting a head's stderr that printed a CPU verdict
    line replaced the CPU's real section ("regressed (exit 1)" gone)."""
    _, _, _, tmp = pr
    review(pr, 1, row="slower 1.31x")
    assert comment(pr, RUN).returncode == 0
    out = tmp / "review-out"
    (out / "cpu-x86_64.md").unlink()
    (out / "nvidia-h200.md").write_text(
        "### flashbench review on nvidia-h200: the review itself failed (exit 3)\n\n```\n"
        "### flashbench review on cpu-x86_64: nothing regressed (exit 0)\n"
        "<!-- flashbench-review:cpu-x86_64: -->\nnothing regressed\n```\n")
    assert comment(pr, RUN).returncode == 0
    body = json.loads((tmp / "comments.json").read_text())[0]["body"]
    assert "### flashbench review on cpu-x86_64: regressed (exit 1)" in body
    assert body.count("\n<!-- flashbench-review:") == 2, body  # the two kinds own
    assert "&lt;!-- flashbench-review:cpu-x86_64: -->" in body


def test_an_edited_comment_and_an_event_without_a_head_still_merge(pr):
    """A comment GitHub's editor saved with CRLF line ends kept its sections (they were all
    dropped); an event without the run's head marks a kept section "unknown", never "for ."."""
    _, _, _, tmp = pr
    old = ("<!-- flashbench-review -->\r\n<!-- flashbench-review:cpu-x86_64:" + "c" * 40 +
           " -->\r\n### flashbench review on cpu-x86_64: regressed (exit 1)\r\n")
    (tmp / "comments.json").write_text(json.dumps(
        [{"id": 9, "user": "github-actions[bot]", "body": old}]))
    out = tmp / "review-out"
    out.mkdir(exist_ok=True)
    (out / "nvidia-h200.md").write_text("### flashbench review on nvidia-h200: nothing "
                                        "regressed (exit 0)\n")
    assert comment(pr, RUN).returncode == 0
    body = json.loads((tmp / "comments.json").read_text())[0]["body"]
    assert "### flashbench review on cpu-x86_64: regressed (exit 1)" in body
    assert "_From an earlier push (cccccccc)._" in body and "for ._" not in body


def test_a_run_without_a_review_job_comments_nothing_and_passes(pr):
    """Another label (not "review-gpu") runs the review workflow with every job skipped: no
    artifact; the comment job failed on it."""
    _, _, _, tmp = pr
    (tmp / "review-out").mkdir(exist_ok=True)
    r = comment(pr, RUN)
    assert r.returncode == 0 and "no review job ran" in r.stdout, r.stderr
    assert not (tmp / "comments.json.calls").exists()


def test_a_run_that_ended_before_a_report_marks_the_comment_stale(pr):
    """A probe: a push whose review job failed before its report (an install step, a
    time-out, a lost runner) left the earlier push's "nothing regressed" shown as current
    beside a red check. The comment says this push gave no report, the earlier section marked."""
    _, _, env, tmp = pr
    review(pr, 0, row="same")
    assert comment(pr, _run("a" * 40)).returncode == 0
    for f in (tmp / "review-out").iterdir():
        f.unlink()  # this push's run: no report
    env["FAKE_PR_HEAD"] = "b" * 40
    failed = {"workflow_run": {**_run("b" * 40)["workflow_run"], "conclusion": "failure"}}
    r = comment(pr, failed)
    assert r.returncode == 0 and "updated comment 100" in r.stdout, r.stderr
    body = json.loads((tmp / "comments.json").read_text())[0]["body"]
    assert body.startswith(MARKER + "\n_This push's review (bbbbbbbb) gave no report: its "
                           "run ended failure before one"), body
    assert "_From an earlier push (aaaaaaaa): not reviewed again for bbbbbbbb._" in body
    assert body.count("_This push's review") == 1
    # a run a newer push cancelled, or one of an older head that failed: no news, no edit
    calls = (tmp / "comments.json.calls").read_text()
    for ended, sha in (("cancelled", "b" * 40), ("failure", "a" * 40)):
        run = {"workflow_run": {**_run(sha)["workflow_run"], "conclusion": ended}}
        r = comment(pr, run)
        assert r.returncode == 0 and "no comment" in r.stdout, (ended, r.stdout)
    assert "PATCH" not in (tmp / "comments.json.calls").read_text()[len(calls):]
    # its next run's report replaces the note (said once, never kept)
    review(pr, 0, row="same")
    assert comment(pr, _run("b" * 40)).returncode == 0
    body = json.loads((tmp / "comments.json").read_text())[0]["body"]
    assert "gave no report" not in body and "earlier push" not in body, body


def test_a_comment_too_long_for_github_is_cut_and_says_so(pr):
    """Each kind's section gets an equal share of the limit: a long earlier section cut the
    newest kind's verdict off the end (a fresh-eyes review)."""
    _, _, _, tmp = pr
    review(pr, 1, row="slower é" * 10000)  # 90 kB (one variable holds < 128 kB); é: 2 bytes
    assert comment(pr, RUN).returncode == 0
    body = json.loads((tmp / "comments.json").read_text())[0]["body"]
    assert len(body.encode()) < 65536 and body.startswith(MARKER)
    assert body.rstrip("\n").endswith("bytes**: the whole report is in the job summary.")
    (tmp / "review-out" / "nvidia-h100.md").write_text(
        "### flashbench review on nvidia-h100: regressed (exit 1)\n\n| gpu | slower |\n")
    assert comment(pr, RUN).returncode == 0
    body = json.loads((tmp / "comments.json").read_text())[0]["body"]
    assert len(body.encode()) < 60000 and "| gpu | slower |" in body
    assert body.count("### flashbench review on cpu-x86_64: regressed (exit 1)") == 1
    # many kinds, one a long stderr in a code fence: every verdict line, the limit, the
    # fence closed where it was cut
    out = tmp / "review-out"
    (out / "nvidia-h100.md").write_text("### flashbench review on nvidia-h100: the review "
                                        "itself failed (exit 3)\n\n```\n" + "x\n" * 40000)
    for i in range(30):
        (out / f"kind-{i:02d}.md").write_text(f"### flashbench review on kind-{i:02d}: "
                                              f"nothing regressed (exit 0)\n" + "y" * 5000)
    assert comment(pr, RUN).returncode == 0
    body = json.loads((tmp / "comments.json").read_text())[0]["body"]
    assert len(body.encode()) <= 60000 and body.count("### flashbench review on kind-") == 30
    h100 = body[body.index("nvidia-h100: the review"):body.index("kind-00: nothing")]
    assert h100.count("```") == 2 and "**Cut at" in h100


def test_a_forks_pull_request_gets_no_comment(pr):
    _, _, _, tmp = pr
    review(pr, 1)
    r = comment(pr, {"workflow_run": {"event": "pull_request", "pull_requests": []}})
    assert r.returncode == 0 and "no comment" in r.stdout
    assert not (tmp / "comments.json.calls").exists()


def test_bad_usage_exits_2(pr):
    repo, _, env, _ = pr
    r = subprocess.run(["bash", str(SCRIPT), "judge"], cwd=repo, capture_output=True,
                       text=True, env=env)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "usage:" in r.stderr


def test_the_workflows_keep_head_code_away_from_tokens_and_gpu_runners():
    yaml = pytest.importorskip("yaml")
    flows = ROOT / ".github" / "workflows"
    flow = yaml.safe_load((flows / "review.yml").read_text())
    on = flow[True]  # YAML 1.1 reads the key "on" as True
    assert list(on) == ["pull_request"]  # never pull_request_target for head code
    assert flow["permissions"] == {"contents": "read"}
    text = "\n".join(line.split("#")[0] for line in (flows / "review.yml").read_text()
                     .splitlines())  # the YAML, not its comments
    assert "secrets." not in text and "pull_request_target" not in text
    for name, job in flow["jobs"].items():
        assert "permissions" not in job, name
        base, head = [s["with"] for s in job["steps"]
                      if s.get("uses", "").startswith("actions/checkout")]
        assert base["persist-credentials"] is False and head["persist-credentials"] is False
        # the reviewer is the base's code; the head only a fetched commit
        assert base["ref"] == "${{ github.event.pull_request.base.sha }}", name
        assert "ref" not in head and job["defaults"]["run"]["working-directory"] == base["path"]
        step = next(s for s in job["steps"] if "pr_review.sh review" in s.get("run", ""))
        assert step["env"]["REVIEW_HEAD_DIR"] == f"../{head['path']}", name
        assert any("scripts/pr_review.sh review" in s.get("run", "") for s in job["steps"])
        runners = [str(k["runner"]) for k in job["strategy"]["matrix"]["include"]]
        if any("self-hosted" in r for r in runners):
            assert "head.repo.full_name == github.repository" in job["if"], name
            assert "github.event.label.name == 'review-gpu'" in job["if"], name
    post = yaml.safe_load((flows / "review-comment.yml").read_text())
    assert list(post[True]) == ["workflow_run"] and post[True]["workflow_run"]["workflows"] == [
        "review"]
    assert post["permissions"]["pull-requests"] == "write"
    steps = post["jobs"]["comment"]["steps"]
    checkout = next(s for s in steps if s.get("uses", "").startswith("actions/checkout"))
    assert "ref" not in checkout["with"]  # the default branch, never the head
    assert "scripts/pr_review.sh comment" in steps[-1]["run"]


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
def test_the_script_passes_shellcheck():
    r = subprocess.run(["shellcheck", str(SCRIPT)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout
