"""What of a folder tree the group or other users can reach: `open_to_others(top)` lists every path
(folders, sockets, files; `top` included) whose group or world bits give access and that the group or
the world can get to, i.e. every folder from `top` down to it lets them through (search bit).
A folder Ray makes 0777 inside an owner-only folder is not listed: no one else can get to it."""

from __future__ import annotations

import os
import stat

CLASSES = (("group", 0o070, 0o010), ("world", 0o007, 0o001))  # (who, access bits, search bit)


def _mode(path: str) -> int | None:
    try:
        return os.lstat(path).st_mode
    except FileNotFoundError:  # a temporary file gone meanwhile
        return None


def open_to_others(top: str) -> list[tuple[str, str, str]]:
    """(path, who, octal mode) for every path under `top` the group or the world can use."""
    found = []
    top_mode = _mode(top)
    if top_mode is None:
        return found
    # who -> the folders (by path) that `who` can pass through, from top down
    passable = {who: {top} if top_mode & search else set() for who, _, search in CLASSES}
    for who, access, _ in CLASSES:
        if top_mode & access:
            found.append((top, who, oct(top_mode)))
    for root, folders, files in os.walk(top):
        for name in folders + files:
            path = os.path.join(root, name)
            mode = _mode(path)
            if mode is None or stat.S_ISLNK(mode):
                continue
            for who, access, search in CLASSES:
                if root not in passable[who]:
                    continue
                if mode & access:
                    found.append((path, who, oct(mode)))
                if stat.S_ISDIR(mode) and mode & search:
                    passable[who].add(path)
    return found
