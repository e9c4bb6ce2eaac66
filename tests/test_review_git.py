"""review's git side on a tiny real repository: revisions, ancestry, uncommitted edits,
worktree sessions that clean up after themselves and after reviews that died."""

import os
import subprocess
import sys
import textwrap

import pytest

from flashbench.infra.git import ancestors, checked_out, resolve
from flashbench.review.gitops import Session, dirty_files

ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
       "GIT_COMMITTER_EMAIL": "t@t"}


def git(repo, *args, **env):
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True,
                          env={**os.environ, **ENV, **env}).stdout.strip()


@pytest.fixture
def repo(tmp_path):
    r = tmp_path / "repo"
    (r / "flashbench").mkdir(parents=True)
    (r / "flashbench" / "a.py").write_text("x = 1\n")
    (r / ".gitignore").write_text(".asv/\n")
    git(r, "init", "-q", "-b", "main")
    git(r, "add", "-A")
    git(r, "commit", "-qm", "one")
    (r / "README").write_text("two\n")
    git(r, "add", "-A")
    git(r, "commit", "-qm", "two", GIT_AUTHOR_DATE="2001-01-01T00:00:00")  # dated early
    git(r, "checkout", "-q", "-b", "side", "HEAD~1")
    (r / "SIDE").write_text("side\n")
    git(r, "add", "-A")
    git(r, "commit", "-qm", "side")
    git(r, "checkout", "-q", "main")
    return r


def worktrees(repo):
    return [line for line in git(repo, "worktree", "list", "--porcelain").splitlines()
            if line.startswith("worktree ")]


def test_revisions_and_ancestry(repo):
    head = resolve("HEAD", repo)
    assert len(head) == 40 and checked_out(repo) == head
    one, side = resolve("HEAD~1", repo), resolve("side", repo)
    assert ancestors(head, repo) == [head, one]  # git order, whatever the dates say
    assert side not in ancestors(head, repo)
    for bad in ("origin/mian", "", "-x", "HEAD~9"):
        with pytest.raises(ValueError, match="commit"):
            resolve(bad, repo)


def test_dirty_files_name_uncommitted_edits(repo):
    assert dirty_files(repo) == []
    (repo / "flashbench" / "a.py").write_text("x = 2\n")
    (repo / "flashbench" / "new.py").write_text("")
    (repo / "README").write_text("elsewhere\n")  # not under flashbench/ or benchmarks/
    assert sorted(dirty_files(repo)) == ["flashbench/a.py", "flashbench/new.py"]


def test_session_removes_its_worktrees_even_on_error(repo):
    with pytest.raises(RuntimeError, match="boom"):
        with Session(repo) as s:
            tree = s.worktree("base", resolve("HEAD~1", repo))
            assert (tree / "flashbench" / "a.py").exists() and len(worktrees(repo)) == 2
            raise RuntimeError("boom")
    assert len(worktrees(repo)) == 1 and not any((repo / ".asv" / "review").iterdir())


def test_stale_sessions_are_pruned_live_ones_kept(repo):
    stale = repo / ".asv" / "review" / "1-dead"
    stale.mkdir(parents=True)
    git(repo, "worktree", "add", "--detach", str(stale / "base"), "HEAD")
    # a live review in another process holds its session's lock
    live = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(os.getcwd())!r})
        from pathlib import Path
        from flashbench.review.gitops import Session
        with Session(Path({str(repo)!r})) as s:
            s.worktree("head", "HEAD")
            print(s.folder, flush=True)
            time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        folder = live.stdout.readline().strip()
        assert folder and len(worktrees(repo)) == 2  # the stale one went at its start
        assert not stale.exists()
        with Session(repo) as s:  # a second review starting: the live one is kept
            assert s.pruned == [] and os.path.isdir(folder) and len(worktrees(repo)) == 2
    finally:
        live.kill()
        live.wait()
    # killed without cleaning up: the next review removes what it left as it starts
    with Session(repo) as s:
        assert [str(p) for p in s.pruned] == [folder] and len(worktrees(repo)) == 1
    assert not any((repo / ".asv" / "review").iterdir())


def test_a_head_whose_suites_differ_from_todays_is_told_they_were_not_reviewed(tmp_path):
    """Reviewing a head that renamed TimeSoftmax measured the old suite on both sides and
    said nothing: the header now names head's benchmarks/ changes as not reviewed."""
    import subprocess
    from types import SimpleNamespace

    from flashbench.review.run import _dirty_notes

    def git(*args):
        return subprocess.run(["git", "-c", "user.email=a@b", "-c", "user.name=t", *args],
                              cwd=tmp_path, check=True, capture_output=True, text=True).stdout

    git("init", "-q", "-b", "main")
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "bench_x.py").write_text("class TimeSoftmax:\n    pass\n")
    git("add", "-A")
    git("commit", "-qm", "base")
    git("checkout", "-qb", "head")
    (tmp_path / "benchmarks" / "bench_x.py").write_text("class TimeSoftmaxRows:\n    pass\n")
    git("commit", "-qam", "rename")
    head = git("rev-parse", "HEAD").strip()
    git("checkout", "-q", "main")
    notes = _dirty_notes(SimpleNamespace(allow_dirty=False), tmp_path, head)
    assert any("Head's benchmarks/ differ from the suites that ran" in n
               and "benchmarks/bench_x.py" in n for n in notes), notes
    git("checkout", "-q", "head")
    (tmp_path / "benchmarks" / "bench_x.py").write_text("class Edited:\n    pass\n")
    notes = _dirty_notes(SimpleNamespace(allow_dirty=True), tmp_path, head)
    # head checked out: its uncommitted edits are said, and nothing of head's suites
    assert any("Uncommitted edits were NOT measured" in n for n in notes), notes
    assert not any("differ from the suites" in n for n in notes), notes
    # ... and, base given, that the suites that ran are head's own, changed since base (a
    # probe's head timed a private one-pass function under the public name: no note, exit 0)
    base = git("rev-parse", "main").strip()
    notes = _dirty_notes(SimpleNamespace(allow_dirty=True), tmp_path, head, base)
    assert any(n.startswith("The suites that ran are head's own, changed since base in "
                            "benchmarks/bench_x.py") for n in notes), notes
