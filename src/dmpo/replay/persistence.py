"""Table files: one `.npz` archive with a JSON header, written atomically, read without pickle.

Layout: member `__header__` holds UTF-8 JSON (the file header of `dmpo.utils.formats`,
`"format": "dmpo.replay"`, then counters, configs, RNG state; version 1 files say
`"format": "dmpo.replay.table", "version": 1` and read the same);
every other member is a plain numeric array. Writing goes to a temporary file in the target
directory, is fsync'ed, then `os.replace`d over the destination, so a crash leaves either the old
file or the new one. Reading uses `allow_pickle=False`; a truncated or damaged file (zip CRCs are
checked on read) raises `CheckpointError` naming the file.
"""

from __future__ import annotations

import json
import os
import zipfile
from typing import Any

import numpy as np

from dmpo.utils.checkpointing import CheckpointError  # the one checkpoint error; imports no jax
from dmpo.utils.files import atomic_write
from dmpo.utils.formats import REPLAY, read_header

_HEADER = "__header__"


def write_archive(path: str | os.PathLike, header: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    """Atomically write `header` and `arrays` to `path`."""
    path = os.fspath(path)
    header = {**REPLAY.header(), **header}
    encoded = np.frombuffer(json.dumps(header).encode("utf-8"), dtype=np.uint8)
    atomic_write(path, lambda file: np.savez(file, **{_HEADER: encoded}, **arrays))


def read_archive(path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Header and arrays of a table file; CheckpointError if it cannot be a complete table file."""
    path = os.fspath(path)
    try:
        with np.load(path, allow_pickle=False) as archive:
            if not isinstance(archive, np.lib.npyio.NpzFile):
                raise CheckpointError(f"{path}: not a replay table archive (a bare .npy array)")
            header = json.loads(bytes(archive[_HEADER]).decode("utf-8"))
            arrays = {name: archive[name] for name in archive.files if name != _HEADER}
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        raise
    except CheckpointError:
        raise
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, KeyError, UnicodeDecodeError) as err:
        raise CheckpointError(
            f"{path}: replay table file is truncated or corrupt ({type(err).__name__}: {err})"
        ) from err
    read_header(header, REPLAY, path, CheckpointError)
    return header, arrays
