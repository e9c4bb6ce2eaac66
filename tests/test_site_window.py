"""``python -m flashbench.site --last N``: the site of the last N commits, on a tiny
results tree (two machines, one measuring every other commit) published by real asv.

The JavaScript packages are replaced by empty folders (no npm, no network); the browser
test of the whole site is tests/test_site.py (slow).
"""

import importlib
import json
import subprocess
from pathlib import Path

import pytest
from asv_project import git
from fanout_fake_asv import BENCH, value, write_results

from flashbench.site.window import WindowError, link_window

ROOT = Path(__file__).resolve().parents[1]
site = importlib.import_module("flashbench.site.publish")  # the package exports publish()


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A git repository of 8 commits on main; machine "every" measured each of them,
    "sparse" every other one (the oldest first); a stray file named like the newest
    commit's results holds the oldest commit."""
    root = tmp_path_factory.mktemp("proj")
    git(root, "init", "-q", "-b", "main")
    for i in range(8):
        git(root, "commit", "-q", "--allow-empty", "-m", f"c{i}")
    commits = subprocess.run(["git", "rev-list", "--reverse", "main"], cwd=root, check=True,
                             capture_output=True, text=True).stdout.split()
    write_results(root / "results", "every", commits)
    write_results(root / "results", "sparse", commits[::2])
    stray = json.loads((root / "results" / "every" / f"{commits[0][:8]}-fake.json").read_text())
    (root / "results" / "every" / f"{commits[-1][:8]}-stray.json").write_text(json.dumps(stray))
    (root / "asv.conf.json").write_text(json.dumps({
        "version": 1, "project": "proj", "repo": ".", "branches": ["main"], "dvcs": "git",
        "results_dir": "results", "html_dir": "html"}))
    return root, commits


@pytest.fixture(autouse=True)
def no_npm(tmp_path, monkeypatch):
    cache = tmp_path / "vendor-cache"
    for name in {p.split("/", 1)[0] for p in site.LOCAL.values()}:
        (cache / name).mkdir(parents=True)
    monkeypatch.setattr(site, "fetch_vendor", lambda: cache)


def published(project, tmp_path, last=None):
    root, _ = project
    html = site.publish(config=str(root / "asv.conf.json"), html_dir=str(tmp_path / "html"),
                        last=last)
    index = json.loads((html / "index.json").read_text())
    graphs = {p.parent.name: json.loads(p.read_text())
              for p in (html / "graphs").rglob(f"{BENCH}.json")
              if p.parent.name.startswith("machine-")}  # not graphs/summary/
    return index, graphs


def test_last_n_publishes_only_the_last_n_commits_of_every_machine(project, tmp_path):
    root, commits = project
    index, graphs = published(project, tmp_path / "all")
    assert sorted(index["revision_to_hash"].values()) == sorted(commits)
    assert sorted(graphs) == ["machine-every", "machine-sparse"]
    assert len(graphs["machine-every"]) == 8 and len(graphs["machine-sparse"]) == 4

    index, graphs = published(project, tmp_path / "last3", last=3)
    window = commits[-3:]
    assert sorted(index["revision_to_hash"].values()) == sorted(window)  # not the stray file
    assert sorted(graphs) == ["machine-every", "machine-sparse"]
    rev = {h: int(r) for r, h in index["revision_to_hash"].items()}
    assert graphs["machine-every"] == [[rev[c], value("every", c)] for c in window]
    assert graphs["machine-sparse"] == [[rev[commits[6]], value("sparse", commits[6])]]
    assert not list(tmp_path.joinpath("last3").glob(".*"))  # no work folder left

    assert site.main(["--config", str(root / "asv.conf.json"), "--html-dir",
                      str(tmp_path / "cli"), "--last", "all"]) == 0
    assert len(json.loads((tmp_path / "cli" / "index.json").read_text())["revision_to_hash"]) == 8
    index, graphs = published(project, tmp_path / "more", last=50)
    assert sorted(index["revision_to_hash"].values()) == sorted(commits)
    assert len(graphs["machine-every"]) == 8


def test_window_links_the_commits_files_and_every_machine(project, tmp_path):
    root, commits = project
    n = link_window(root / "results", {commits[-1], commits[1]}, tmp_path / "tree")
    files = sorted(str(p.relative_to(tmp_path / "tree")) for p in (tmp_path / "tree").rglob("*")
                   if p.is_file())
    assert n == 3  # every: the newest, its stray namesake, the second; sparse: none
    assert files == sorted(["benchmarks.json", "every/machine.json", "sparse/machine.json",
                            f"every/{commits[-1][:8]}-fake.json",
                            f"every/{commits[-1][:8]}-stray.json",
                            f"every/{commits[1][:8]}-fake.json"])
    assert (root / "results" / "every" / f"{commits[1][:8]}-fake.json").is_file()


def test_last_needs_a_repository_on_disk(project, tmp_path):
    conf = tmp_path / "asv.conf.json"
    conf.write_text(json.dumps({"version": 1, "project": "x", "branches": ["main"],
                                "repo": "https://example.org/x.git", "results_dir": "r"}))
    with pytest.raises(WindowError, match="--last needs the git repository on disk"):
        site.publish(config=str(conf), html_dir=str(tmp_path / "html"), last=2)
    root, _ = project
    with pytest.raises(ValueError, match="last must be a positive whole number"):
        site.publish(config=str(root / "asv.conf.json"), last=0)


@pytest.mark.parametrize("last", ["0", "-3", "two"])
def test_bad_last_is_one_line_naming_the_option(project, last, capsys):
    root, _ = project
    with pytest.raises(SystemExit) as stop:
        site.main(["--config", str(root / "asv.conf.json"), f"--last={last}"])
    err = capsys.readouterr().err
    assert stop.value.code == 2
    assert "argument --last" in err and err.count("\n") == 1


def test_a_window_failure_is_one_line_exit_3(tmp_path, capsys):
    conf = tmp_path / "asv.conf.json"
    conf.write_text(json.dumps({"version": 1, "project": "x", "branches": ["main"],
                                "repo": "nowhere", "results_dir": "r"}))
    assert site.main(["--config", str(conf), "--last", "5"]) == 3
    err = capsys.readouterr().err
    assert "--last needs the git repository on disk" in err and err.count("\n") == 1


def test_a_window_without_results_is_said(tmp_path, capsys):
    """A probe (2026-12-07): `--last 5` on a branch whose last 5 commits have no results
    published a site with no graphs, exit 0, nothing said."""
    root = tmp_path / "proj"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    for i in range(3):
        git(root, "commit", "-q", "--allow-empty", "-m", f"c{i}")
    commits = subprocess.run(["git", "rev-list", "--reverse", "main"], cwd=root, check=True,
                             capture_output=True, text=True).stdout.split()
    write_results(root / "results", "every", commits[:1])
    (root / "asv.conf.json").write_text(json.dumps({
        "version": 1, "project": "proj", "repo": ".", "branches": ["main"], "dvcs": "git",
        "results_dir": "results", "html_dir": "html"}))
    assert site.main(["--config", str(root / "asv.conf.json"), "--html-dir",
                      str(tmp_path / "html"), "--last", "2"]) == 0
    err = capsys.readouterr().err
    assert "warning: no results in the last 2 commits of any branch" in err, err
    assert site.main(["--config", str(root / "asv.conf.json"), "--html-dir",
                      str(tmp_path / "html"), "--last", "3"]) == 0
    assert "warning" not in capsys.readouterr().err
