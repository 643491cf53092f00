"""The header every file dmpo writes carries, and the one function that reads it.

A file's header is two keys at the top level of its JSON (or msgpack) record:

    {"format": "dmpo.checkpoint", "format_version": 2, ...}

`format` names the kind of file, `format_version` is an integer that grows whenever a field is
added that an older reader must not ignore. Writers put `FileFormat.header()` into what they write;
readers call `read_header`, which returns the file's version (a reader branches on it where older
versions differ) and refuses, in one line naming the file:

* a file of another kind (its `format` names something else);
* a file newer than this dmpo reads (an older dmpo resuming a newer checkpoint would otherwise
  silently drop fields it does not know, e.g. its pending SGD steps);
* a malformed version.

Files written before the common header still read: each `FileFormat` lists the schemes it replaced
(`legacy`: the old format name, or None for a file that had none, and the key that held the old
version). Their versions are numbered on from them, so a version names one layout for good.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

__all__ = ["AGENT", "BEST", "CHECKPOINT", "CONFIG", "FORMAT_KEY", "NAME_KEY", "REPLAY", "RUN_INFO",
           "SNAPSHOT", "STATE", "SWEEP", "SWEEP_POINT", "FileFormat", "read_header"]

NAME_KEY = "format"
FORMAT_KEY = "format_version"


@dataclasses.dataclass(frozen=True)
class FileFormat:
    """One kind of file: its name, the newest version this dmpo writes (and reads), and the schemes
    of files written before the common header.

    Attributes:
      name: the header's `format`.
      version: the newest version; every older one is read.
      legacy: old format name (None: a file without one, or whose `format` held no name) -> `(key of
        its version, newest version under that scheme)`. A missing version key reads as version 1.
    """

    name: str
    version: int
    legacy: Mapping[str | None, tuple[str, int]] = dataclasses.field(default_factory=dict)

    def header(self) -> dict[str, Any]:
        """The header a writer puts at the top of its record."""
        return {NAME_KEY: self.name, FORMAT_KEY: self.version}


# Run files (JSON). Before the header they had no name and kept `format_version` (absent: 1).
STATE = FileFormat("dmpo.state", 1, {None: (FORMAT_KEY, 1)})  # a checkpoint's state.json
CONFIG = FileFormat("dmpo.config", 1, {None: (FORMAT_KEY, 1)})  # config.json, and configs inside files
RUN_INFO = FileFormat("dmpo.run", 1, {None: (FORMAT_KEY, 1)})  # run.json
BEST = FileFormat("dmpo.best", 1, {None: (FORMAT_KEY, 1)})  # snapshots/best.json
# A sweep's folder: sweep.json (commands, defining settings) and each grid point's flags.json.
SWEEP = FileFormat("dmpo.sweep", 1, {None: (FORMAT_KEY, 1)})
SWEEP_POINT = FileFormat("dmpo.sweep-point", 1, {None: (FORMAT_KEY, 1)})
# Binary files, which named themselves and kept their version under `version`.
CHECKPOINT = FileFormat("dmpo.checkpoint", 2, {"dmpo-checkpoint": ("version", 1)})  # a pytree file
REPLAY = FileFormat("dmpo.replay", 2, {"dmpo.replay.table": ("version", 1)})  # replay.npz
SNAPSHOT = FileFormat("dmpo.policy", 3, {"dmpo-policy-snapshot": ("version", 2)})  # policy snapshots
# DMPO.save's agent.json kept its version in `format` (1, 2).
AGENT = FileFormat("dmpo.agent", 3, {None: (NAME_KEY, 2)})


def read_header(data: Any, file_format: FileFormat, where: str, error: type[Exception] = ValueError) -> int:
    """The format version of `data` (a file's top-level record) as a `file_format` file; raises
    `error` with one line starting with `where` (the file) if it is not one, or is newer than this
    dmpo reads."""
    if not isinstance(data, Mapping):
        raise error(f"{where} is not a {file_format.name} file (its top level is not a record)")
    name = data.get(NAME_KEY)
    if name == file_format.name:
        key, newest = FORMAT_KEY, file_format.version
        found = data.get(key)
    else:
        scheme = file_format.legacy.get(name if isinstance(name, str) else None)
        if scheme is None:
            raise error(f"{where} is not a {file_format.name} file (its format is {name!r})")
        key, newest = scheme
        found = data.get(key, 1)
    if not isinstance(found, int) or isinstance(found, bool) or found < 1:
        raise error(f"{where}: {key} must be a positive integer, got {found!r}")
    if found > newest and name != file_format.name:  # no dmpo wrote such a file
        scheme_name = f"the pre-header format {name!r}" if isinstance(name, str) else "no format name"
        raise error(f"{where} has {scheme_name} with version {found}, which no dmpo wrote (the last "
                    f"was {newest})")
    if found > newest:
        raise error(f"{where} has format version {found}, but this dmpo reads {file_format.name} format "
                    f"version {file_format.version} at most; upgrade dmpo to read it")
    return found
