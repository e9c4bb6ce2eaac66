"""The site of the last N commits: ``python -m flashbench.site --last N``.

``asv publish`` parses every results file three times and runs its step detection on
every series of every commit, whatever range it is given: its cost grows with machines x
commits x grid points (docs/team.md, "The site at 3M rows"). A window of the last N
first-parent commits of each branch of asv.conf.json is published from a folder of links
to those commits' results files only (asv names them ``<first 8 hex of the commit>-<env>
.json``), with a copy of the configuration pointing at it; with one branch asv is also
given the range ``<branch>~N..<branch>``, so a file name shared by an older commit cannot
slip in.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

PATH_KEYS = ("repo", "results_dir", "html_dir", "env_dir", "benchmark_dir")


class WindowError(ValueError):
    """The window cannot be chosen (no git repository on disk, no such branch)."""


def last_commits(config: Path, conf: dict, last: int) -> tuple[set[str], str | None]:
    """The last ``last`` first-parent commits of each branch of ``conf`` (read from
    ``config``), through asv's own git plugin; and the asv range naming them when the
    configuration has one branch (None with several)."""
    from asv.config import Config
    from asv.repo import get_repo
    from asv.util import ProcessError, UserError

    repo_path = (config.parent / conf.get("repo", "")).resolve()
    on_disk = (repo_path / ".git").exists() or (repo_path / "objects").is_dir()
    if conf.get("dvcs", "git") != "git" or not on_disk:
        raise WindowError(f"--last needs the git repository on disk: {config}'s repo is "
                          f"{conf.get('repo')!r}")
    asv_conf = Config.from_json({**conf, "repo": str(repo_path), "dvcs": "git"})
    repo = get_repo(asv_conf)
    keep: set[str] = set()
    spec = None
    for branch in asv_conf.branches:
        name = repo.get_branch_name(branch)
        try:
            hashes = repo.get_hashes_from_range(name)  # git rev-list --first-parent, newest first
        except (ProcessError, UserError):
            hashes = []
        if not hashes:
            raise WindowError(f"--last: branch {name!r} has no commits in {repo_path}")
        keep.update(hashes[:last])
        spec = f"{name}~{last}..{name}" if len(hashes) > last else name
    return keep, spec if len(asv_conf.branches) == 1 else None


def link_window(results: Path, commits: set[str], tree: Path) -> int:
    """Make ``tree`` a results folder of links: benchmarks.json, every machine folder's
    machine.json, and the results files of ``commits``; returns how many of those."""
    prefixes = {c[:8] for c in commits}
    tree.mkdir()
    if (results / "benchmarks.json").exists():
        (tree / "benchmarks.json").symlink_to(results.resolve() / "benchmarks.json")
    count = 0
    for folder in sorted(p for p in results.iterdir() if p.is_dir()):
        if not (folder / "machine.json").exists():
            continue  # asv skips such a folder too
        (tree / folder.name).mkdir()
        (tree / folder.name / "machine.json").symlink_to(folder.resolve() / "machine.json")
        for entry in os.scandir(folder):
            name = entry.name
            if name.endswith(".json") and name[8:9] == "-" and name[:8] in prefixes:
                (tree / folder.name / name).symlink_to(Path(entry.path).resolve())
                count += 1
    return count


def window_config(config: Path, conf: dict, last: int, work: Path) -> tuple[Path, str | None,
                                                                            int]:
    """A copy of ``conf`` in ``work`` whose results folder holds the window's files only
    (``work/results``); returns (its path, the asv range or None, files in the window)."""
    keep, spec = last_commits(config, conf, last)
    base = config.parent
    copy = {k: (str((base / v).resolve()) if k in PATH_KEYS and isinstance(v, str) else v)
            for k, v in conf.items()}
    results = base / conf.get("results_dir", "results")
    if not results.is_dir():
        raise WindowError(f"no results folder {results} (asv.conf.json's results_dir)")
    files = link_window(results, keep, work / "results")
    copy["results_dir"] = str(work / "results")
    path = work / "asv.conf.json"
    path.write_text(json.dumps(copy, indent=1))
    return path, spec, files
