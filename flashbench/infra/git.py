"""git, run one way for every caller: revisions, ancestry, the repository's root.

The review (:mod:`flashbench.review`) and tools/gpu/history.py name commits the same
way and fail the same way: :class:`GitError` where git itself fails (its last words in
the message), ValueError naming the revision where a name is not a commit.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


class GitError(RuntimeError):
    """git itself failed (exit status 3 of the CLI)."""


def git(*args: str, cwd: Path | str = ".", env: dict | None = None) -> str:
    """git's stdout, stripped; GitError with git's last line where it fails. ``env``:
    variables set on top of this process's environment (an index file, an author)."""
    try:
        r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                           env={**os.environ, **env} if env else None)
    except OSError as exc:
        raise GitError(f"cannot run git: {exc}") from None
    if r.returncode != 0:
        msg = (r.stderr.strip() or r.stdout.strip()).splitlines()
        raise GitError(f"git {' '.join(args)}: {msg[-1] if msg else f'exit {r.returncode}'}")
    return r.stdout.strip()


def toplevel(cwd: Path | str = ".") -> Path:
    """The repository's root folder; ValueError outside a git repository."""
    try:
        return Path(git("rev-parse", "--show-toplevel", cwd=cwd))
    except GitError:
        raise ValueError(f"{Path(cwd).resolve()} is not inside a git repository") from None


def resolve(rev: str, cwd: Path | str = ".") -> str:
    """Full hash of ``rev``; ValueError naming the revision when it is not a commit."""
    if not isinstance(rev, str) or not rev or rev.startswith("-"):
        raise ValueError(f"revision must be a commit name, got {rev!r}")
    try:
        return git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", cwd=cwd)
    except GitError:
        raise ValueError(f"revision {rev!r} is not a commit in this repository") from None


def checked_out(cwd: Path | str = ".") -> str | None:
    """The commit the working tree is on (None in a repository without commits)."""
    try:
        return git("rev-parse", "--verify", "--quiet", "HEAD^{commit}", cwd=cwd)
    except GitError:
        return None


def ancestors(commit: str, cwd: Path | str = ".") -> list[str]:
    """``commit`` and its ancestors, newest first in git's topological order."""
    out = git("rev-list", "--topo-order", commit, cwd=cwd)
    return out.split() if out else []
