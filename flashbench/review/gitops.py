"""git for the review: revisions, ancestry, uncommitted edits, and worktree sessions.

A :class:`Session` checks commits out under ``.asv/review/<session>/``, a folder locked
(:mod:`flashbench.infra.locks`) while the review runs and removed when it ends. A folder
whose lock can be taken belongs to a review that died: the next session removes it as it
starts (under a lock of ``.asv/review/``, so two reviews starting at once never take each
other's folder for stale).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

from flashbench.infra.locks import acquire, locked, release

SESSIONS = Path(".asv") / "review"
WATCHED = ("flashbench", "benchmarks")  # uncommitted edits here change what is measured


class GitError(RuntimeError):
    """git itself failed (exit status 3 of the CLI)."""


def git(*args: str, cwd: Path | str = ".") -> str:
    try:
        r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
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


def dirty_files(cwd: Path | str = ".", paths=WATCHED) -> list[str]:
    """Files under ``paths`` with uncommitted changes (staged, unstaged or untracked,
    ignored files excepted), as git names them."""
    out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "--",
                          *paths], cwd=cwd, capture_output=True, text=True)
    if out.returncode != 0:
        raise GitError(f"git status: {out.stderr.strip()}")
    return [line[3:] for line in out.stdout.splitlines() if line.strip()]


# --------------------------------------------------------------------------- sessions


def _remove_session(root: Path, folder: Path) -> None:
    for tree in ("base", "head"):
        path = folder / tree
        if path.exists():
            subprocess.run(["git", "worktree", "remove", "--force", "--force", str(path)],
                           cwd=root, capture_output=True)
    shutil.rmtree(folder, ignore_errors=True)


def _prune(root: Path) -> list[Path]:
    """Remove the worktrees of reviews that are gone (their lock can be taken); returns
    their folders. Called under the lock of ``SESSIONS``."""
    gone = []
    base = root / SESSIONS
    if base.is_dir():
        for folder in sorted(p for p in base.iterdir() if p.is_dir()):
            try:
                fd = acquire(folder / "lock", wait=False)
            except OSError:
                continue
            if fd is None:  # a live review holds it
                continue
            try:
                _remove_session(root, folder)
                gone.append(folder)
            finally:
                release(fd)
    subprocess.run(["git", "worktree", "prune"], cwd=root, capture_output=True)
    return gone


class Session:
    """A locked folder with the review's worktrees; removed when the ``with`` ends."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.folder = self.root / SESSIONS / f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._fd: int | None = None
        self.pruned: list[Path] = []  # folders of dead reviews removed as this one started

    def __enter__(self) -> Session:
        (self.root / SESSIONS).mkdir(parents=True, exist_ok=True)
        with locked(self.root / SESSIONS):  # a new folder is locked before others look
            self.pruned = _prune(self.root)
            self.folder.mkdir(parents=True)
            self._fd = acquire(self.folder / "lock")
        return self

    def worktree(self, name: str, commit: str) -> Path:
        """Check ``commit`` out (detached) into the session's folder ``name``."""
        path = self.folder / name
        git("worktree", "add", "--detach", "--force", str(path), commit, cwd=self.root)
        return path

    def close(self) -> None:
        if self._fd is None:
            return
        try:
            _remove_session(self.root, self.folder)
            subprocess.run(["git", "worktree", "prune"], cwd=self.root, capture_output=True)
        finally:
            release(self._fd)
            self._fd = None

    def __exit__(self, *exc) -> None:
        self.close()
