"""Which checkpoint folders to keep after a save (`TrainingCheckpoints.save` calls `prune`).

Rules, newest first by (step, index):

* the folder just written is always kept (it may sort before a newer, unusable one: after a resume
  that fell back from a corrupt `step_3000` to `step_2000`, the next save is `step_2500`);
* a folder that fails verification is not counted as kept: it is moved aside to
  `.corrupt-<name>` (hidden from `latest()`, its bytes kept for a post-mortem) and reported once,
  by that move, with a warning;
* the newest `keep` verified folders are kept (the one just written counts as verified), the older
  ones deleted: each is first renamed to `.removing-<name>-<pid>` (one atomic step), then its files
  deleted, so that another process listing and reading checkpoints meanwhile (the driver reporting one
  the learner node wrote) finds a whole folder or none, never one whose state.json is already gone.

So the newest verified checkpoint is never deleted by pruning. Only a folder that would be kept is
verified (each once per process, `checkpoints.verify` caches by file stats); older ones are deleted
unread.
"""

from __future__ import annotations

import os
import shutil
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dmpo.utils.checkpointing import CheckpointError

__all__ = ["CORRUPT_PREFIX", "REMOVING_PREFIX", "prune", "remove"]

CORRUPT_PREFIX = ".corrupt-"
REMOVING_PREFIX = ".removing-"


def remove(path: Path) -> None:
    """Deletes the folder `path` as readers see it at once (see the module docstring); a folder already
    gone is no error."""
    target = path.with_name(f"{REMOVING_PREFIX}{path.name}-{os.getpid()}")
    try:
        path.rename(target)
    except FileNotFoundError:
        return
    shutil.rmtree(target, ignore_errors=True)


def _move_aside(path: Path, error: CheckpointError) -> None:
    target = path.with_name(CORRUPT_PREFIX + path.name)
    index = 1
    while target.exists():
        target = path.with_name(f"{CORRUPT_PREFIX}{path.name}.{index}")
        index += 1
    path.rename(target)
    warnings.warn(f"checkpoint {path} is unusable ({error}); moved it aside to {target.name}",
                  RuntimeWarning, stacklevel=3)


def prune(paths: Sequence[Path], just_written: Path, keep: int,
          verify: Callable[[Path], Any]) -> list[Path]:
    """Applies the module's rules to `paths` (oldest first); returns the folders kept, oldest first."""
    kept: list[Path] = []
    for path in reversed(paths):
        if path == just_written:
            kept.append(path)
        elif len(kept) >= keep:
            remove(path)
        else:
            try:
                verify(path)
            except CheckpointError as error:
                _move_aside(path, error)
                continue
            kept.append(path)
    return kept[::-1]
