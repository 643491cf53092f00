"""Which mount a path lives on, read from /proc/self/mountinfo (Linux): for error messages that
name the file system a problem comes from (e.g. one without `flock`)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

MOUNTINFO = "/proc/self/mountinfo"


@dataclasses.dataclass(frozen=True)
class Mount:
    mount_point: str
    fs_type: str
    source: str

    def __str__(self) -> str:
        return f"{self.mount_point} ({self.fs_type} from {self.source})"


def _unescape(field: str) -> str:
    # mountinfo writes space, tab, newline and backslash in paths as octal escapes (\040 ...)
    return field.encode().decode("unicode_escape") if "\\" in field else field


def mount_of(path: str | os.PathLike[str], mountinfo: str = MOUNTINFO) -> Mount | None:
    """The mount holding `path` (the longest mount point above it), or None when unknown."""
    try:
        text = Path(mountinfo).read_text()
    except OSError:
        return None
    target = os.path.realpath(path)
    best: Mount | None = None
    for line in text.splitlines():
        # id parent major:minor root mount-point options [optional fields...] - type source super-options
        before, separator, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if not separator or len(fields) < 5 or len(tail) < 2:
            continue
        point = _unescape(fields[4])
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best.mount_point)):
            best = Mount(point, tail[0], _unescape(tail[1]))
    return best
