"""Writing options (``--output``, ``--json FILE``): checked before the work, written atomically.

One rule for every subcommand that writes a file the user named: before any work,
refuse (bad input, exit 2) a folder, a missing or unwritable folder, and an existing
file unless ``--force``; after the work, write to a temporary file beside the target
and move it into place in one step, so a reader never sees half a report and an
interrupted run leaves the old file whole. A file that appeared at the target while
the work ran is not overwritten without ``--force``: the text is kept beside it and the
error says where.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["output_file", "write_atomically"]


def output_file(path: str | None, option: str, force: bool) -> Path | None:
    """The target of ``option`` (``"--output"``), checked before the work; None for None.
    ValueError naming the option and the problem otherwise."""
    if path is None:
        return None
    target = Path(path)
    if not path or target.is_dir():
        raise ValueError(f"{option} {path!r} is a folder, not a file name")
    folder = target.absolute().parent
    if not folder.is_dir():
        raise ValueError(f"{option} {path}: {folder} " + (
            "is a file, not a folder" if folder.exists() else "(its folder) does not exist"))
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"{option} {path}: folder {folder} is not writable")
    if target.exists() and not force:
        raise ValueError(f"{option} {path}: the file exists (pass --force to overwrite it)")
    return target


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomically(target: Path, text: str, force: bool) -> None:
    """``text`` into ``target`` in one step (a temporary file beside it, then a rename);
    without ``force`` never over a file that appeared meanwhile (FileExistsError naming
    where the text is instead). A target that is not a regular file (``/dev/null``,
    ``/dev/stdout``, a pipe) is written into, never renamed over: ``check --save
    /dev/null`` run as root replaced the device with a file of tables, and every git
    command that read /dev/null as its config failed after it."""
    if target.exists() and not target.is_file() and not target.is_dir():
        with open(target, "w") as f:
            f.write(text)
        return
    fd, tmp = tempfile.mkstemp(dir=target.absolute().parent, prefix=f".{target.name}.",
                               suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        if force:
            os.replace(tmp, target)
            return
        os.link(tmp, target)  # fails if the target exists: no file of the user's is lost
    except FileExistsError:
        raise FileExistsError(f"{target} appeared while flashbench worked and was left as it "
                              f"was (pass --force to overwrite); the output is in {tmp}") from None
    except BaseException:
        os.unlink(tmp)
        raise
    os.unlink(tmp)
