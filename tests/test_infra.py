"""flashbench.infra's shared plumbing: asv's configuration, asv as a subprocess, git."""

import os
import subprocess
import sys

import pytest

from flashbench.infra.asv import last_words, read_config, run_asv_process
from flashbench.infra.git import GitError, git, resolve, toplevel
from flashbench.site.publish import PublishError, _config


def test_read_config_reads_comments_as_asv_does(tmp_path):
    conf = tmp_path / "asv.conf.json"
    conf.write_text('{\n  // a comment, as in the project\'s file\n  "version": 1,\n'
                    '  "results_dir": "results"\n}\n')
    assert read_config(conf) == {"version": 1, "results_dir": "results"}


@pytest.mark.parametrize("text", [None, "{ not json", "[1, 2"])
def test_a_missing_or_broken_config_names_the_file(tmp_path, text):
    conf = tmp_path / "asv.conf.json"
    if text is not None:
        conf.write_text(text)
    with pytest.raises(ValueError, match=str(conf)):
        read_config(conf)
    with pytest.raises(PublishError, match="cannot read the asv configuration.*asv.conf.json"):
        _config(str(conf))


def test_an_asv_process_gets_a_private_tmpdir_removed_after(tmp_path):
    r = run_asv_process([sys.executable, "-c", "import os, tempfile; "
                         "d = tempfile.gettempdir(); open(os.path.join(d, 'sock'), 'w'); "
                         "print(d)"], tmp_path)
    folder = r.stdout.strip()
    assert r.returncode == 0 and os.path.basename(folder).startswith("flashbench-asv-")
    assert folder != os.environ.get("TMPDIR") and not os.path.exists(folder)


def test_an_echoed_asv_process_streams_its_lines_timed_and_still_returns_them(tmp_path):
    """tools/gpu/history.py echoes asv's progress into its log as it comes (a run cut by
    the GPU session's time limit used to leave nothing of its progress)."""
    import io

    echo = io.StringIO()
    r = run_asv_process([sys.executable, "-c", "import sys; print('one', flush=True); "
                         "print('two', file=sys.stderr, flush=True); print('three')"], tmp_path, echo=echo)
    assert r.returncode == 0 and r.stdout.split() == ["one", "two", "three"]
    lines = echo.getvalue().splitlines()
    assert [line.split("] ", 1)[1] for line in lines] == ["one", "two", "three"]
    assert all(line.startswith("[") and line.split("]")[0].endswith("s") for line in lines)


def test_last_words_is_the_last_line_that_says_something():
    assert last_words("first\n  the error  \n\n  \n") == "the error"
    assert last_words("") == "no output"


def test_git_errors_name_the_revision_and_the_folder(tmp_path):
    with pytest.raises(ValueError, match="is not inside a git repository"):
        toplevel(tmp_path)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    assert toplevel(tmp_path).resolve() == tmp_path.resolve()
    with pytest.raises(ValueError, match="revision 'nope' is not a commit"):
        resolve("nope", tmp_path)
    with pytest.raises(ValueError, match="must be a commit name"):
        resolve("--all", tmp_path)
    with pytest.raises(GitError, match="git log"):
        git("log", cwd=tmp_path)  # no commits yet: git's own words


@pytest.mark.parametrize("last", ["0", "-3", "some"])
def test_the_site_refuses_a_bad_last_in_one_line_with_status_2(last, capsys):
    """``python -m flashbench.site`` parses with the subcommands' parser, now in
    flashbench.infra.args (site may not import flashbench.cli): one line on stderr, exit 2."""
    from flashbench.site.publish import main

    with pytest.raises(SystemExit) as ended:
        main(["--last", last])
    err = capsys.readouterr().err
    assert ended.value.code == 2 and err.count("\n") == 1
    assert err.startswith("python -m flashbench.site: error:") and "integer >= 1" in err


def test_git_takes_extra_environment_on_top_of_this_process(tmp_path):
    """The one git runner (the fan-out job and the review-power study use it too): ``env``
    adds variables, such as an author or a private index, without losing PATH or HOME."""
    git("init", "-q", cwd=tmp_path)
    who = {"GIT_AUTHOR_NAME": "fan-out", "GIT_AUTHOR_EMAIL": "f@o",
           "GIT_COMMITTER_NAME": "fan-out", "GIT_COMMITTER_EMAIL": "f@o"}
    git("commit", "-q", "--allow-empty", "-m", "x", cwd=tmp_path, env=who)
    assert git("log", "-1", "--format=%an <%ae>", cwd=tmp_path) == "fan-out <f@o>"
    index = tmp_path / "private-index"
    git("read-tree", "HEAD", cwd=tmp_path, env={"GIT_INDEX_FILE": str(index)})
    assert index.exists()


@pytest.mark.parametrize("content", [None, "{not json"])
def test_the_site_refuses_a_missing_or_unreadable_config_with_status_2(tmp_path, content,
                                                                       capsys):
    """A probe: ``--config`` naming no file exited 3, as a failed ``asv publish`` does; a
    configuration the user named wrongly is bad input: one line naming it, exit 2."""
    from flashbench.site.publish import main

    conf = tmp_path / "asv.conf.json"
    if content is not None:
        conf.write_text(content)
    with pytest.raises(SystemExit) as ended:
        main(["--config", str(conf)])
    err = capsys.readouterr().err
    assert ended.value.code == 2 and err.count("\n") == 1, err
    assert "--config" in err and str(conf) in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ([] if content is None
                                                           else ["asv.conf.json"])
