"""Atomic file replacement: readers, and a run killed at any moment, see the old file or the new one.

The new content goes to a temporary file in the destination's folder (so the rename cannot cross file
systems), is flushed and fsync'ed, then `os.replace`d over the destination. A failure removes the
temporary file and leaves the destination as it was.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

__all__ = ["atomic_write", "atomic_write_bytes", "atomic_write_text", "fsync_directory"]


def atomic_write(path: str | os.PathLike[str], write: Callable[[BinaryIO], object], *,
                 temp_prefix: str | None = None, sync_directory: bool = False) -> None:
    """Replaces `path` with what `write(file)` writes into a fresh binary file.

    Args:
      temp_prefix: name prefix of the temporary file (default `.<name>.`), so that an owner can find and
        delete those left by a killed writer.
      sync_directory: also fsync the folder, so the rename itself survives a power loss.
    """
    path = Path(path)
    prefix = f".{path.name}." if temp_prefix is None else temp_prefix
    fd, temp_name = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as file:
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
