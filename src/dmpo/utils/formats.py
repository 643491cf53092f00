"""Format versions of the files a run writes for later reading.

`state.json` (a checkpoint's counters), `config.json` and `run.json` carry a `"format_version"`
key; the policy snapshot carries its own `"version"` (`dmpo.agent.policies.snapshot.VERSION`).
A file without the
key was written before versions existed and reads as version 1. A reader refuses a file newer than
the version it knows, naming both, instead of silently dropping fields it does not know (an older
dmpo resuming a newer checkpoint would otherwise lose, e.g., its pending SGD steps). Raise a version
here whenever a field is added that an older reader must not ignore.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["CONFIG_FORMAT", "FORMAT_KEY", "RUN_INFO_FORMAT", "STATE_FORMAT", "check_format"]

FORMAT_KEY = "format_version"
STATE_FORMAT = 1
CONFIG_FORMAT = 1
RUN_INFO_FORMAT = 1


def check_format(data: Mapping[str, Any], supported: int, where: str,
                 error: type[Exception] = ValueError) -> None:
    """Raises `error` when `data` was written in a format newer than `supported` (or a malformed one)."""
    found = data.get(FORMAT_KEY, 1)
    if not isinstance(found, int) or isinstance(found, bool) or found < 1:
        raise error(f"{where}: {FORMAT_KEY} must be a positive integer, got {found!r}")
    if found > supported:
        raise error(f"{where} has format version {found}, but this dmpo reads format version "
                    f"{supported} at most; upgrade dmpo to read it")
