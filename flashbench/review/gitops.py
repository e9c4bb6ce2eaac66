"""git for the review: uncommitted edits, and worktree sessions (revisions and ancestry:
:mod:`flashbench.infra.git`).

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

from flashbench.infra.git import GitError, git
from flashbench.infra.locks import acquire, locked, release

SESSIONS = Path(".asv") / "review"
WATCHED = ("flashbench", "benchmarks")  # uncommitted edits here change what is measured


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
