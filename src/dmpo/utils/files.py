"""Atomic file replacement: readers, and a run killed at any moment, see the old file or the new one.

The new content goes to a temporary file in the destination's folder (so the rename cannot cross file
systems), is flushed and fsync'ed, then `os.replace`d over the destination. A failure removes the
temporary file and leaves the destination as it was.

A kept file gets the mode a plain `open(path, "w")` would give it (0666 less the umask: 0644 under the
usual 022), so another user or a serving container can read a shipped policy; `mkstemp` alone would
leave every file 0600. `private=True` keeps a file 0600 for what must stay the owner's.

A folder of several files (a checkpoint, a saved agent) is written the same way by `atomic_directory`:
its files go into a temporary folder beside the destination, which is renamed into place once every
file is complete, so the destination never exists half-written.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

__all__ = ["atomic_directory", "atomic_write", "atomic_write_bytes", "atomic_write_json", "atomic_write_text",
           "current_umask", "fsync_directory", "kept_file_mode", "make_kept_directory"]


def current_umask() -> int:
    """The process's umask, read without changing it where the system says it (Linux: /proc), since
    setting it to read it back would race with other threads creating files."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def kept_file_mode() -> int:
    """The mode `open()` gives a new file: 0666 less the umask."""
    return 0o666 & ~current_umask()


def make_kept_directory(parent: str | os.PathLike[str], prefix: str) -> Path:
    """A fresh temporary folder in `parent` (to be renamed into place when complete) with the mode
    `mkdir` would give it (0777 less the umask), not `mkdtemp`'s 0700."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    os.chmod(path, 0o777 & ~current_umask())
    return path


def atomic_write(path: str | os.PathLike[str], write: Callable[[BinaryIO], object], *,
                 temp_prefix: str | None = None, sync_directory: bool = False, private: bool = False) -> None:
    """Replaces `path` with what `write(file)` writes into a fresh binary file.

    Args:
      temp_prefix: name prefix of the temporary file (default `.<name>.`), so that an owner can find and
        delete those left by a killed writer.
      sync_directory: also fsync the folder, so the rename itself survives a power loss.
      private: keep the file 0600 (readable by its owner only) instead of following the umask.
    """
    path = Path(path)
    prefix = f".{path.name}." if temp_prefix is None else temp_prefix
    fd, temp_name = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as file:
            if not private:
                os.fchmod(file.fileno(), kept_file_mode())
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp_name, path)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise
    if sync_directory:
        fsync_directory(path.parent)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Replaces `path` with `data` in one step."""
    atomic_write(path, lambda file: file.write(data))


def atomic_write_text(path: str | os.PathLike[str], text: str, encoding: str = "utf-8") -> None:
    """Replaces `path` with `text` in one step."""
    atomic_write_bytes(path, text.encode(encoding))


def fsync_directory(directory: str | os.PathLike[str]) -> None:
    """Makes renames inside `directory` durable; a no-op where folders cannot be opened."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> None:
    """`obj` as indented JSON, written atomically."""
    atomic_write_text(path, json.dumps(obj, indent=2) + "\n")


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike[str], *, temp_prefix: str | None = None) -> Iterator[Path]:
    """Yields a fresh temporary folder beside `path` to write into; when the block ends without an
    error the folder is fsync'ed and renamed to `path`, and the parent fsync'ed, so the new folder
    appears complete or not at all. An error (or a failed rename) removes the temporary folder.

    `path` must not exist: a folder is never replaced (`FileExistsError` before anything is written).

    Args:
      temp_prefix: name prefix of the temporary folder (default `.<name>.`), so that the owner of the
        parent can find and delete those left by a killed writer.
    """
    path = Path(path)
    if path.exists():
        raise FileExistsError(f"{path} exists; a complete folder is never replaced")
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = make_kept_directory(path.parent, f".{path.name}." if temp_prefix is None else temp_prefix)
    try:
        yield temp
        fsync_directory(temp)
        os.rename(temp, path)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    fsync_directory(path.parent)
