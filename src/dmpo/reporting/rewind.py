"""Rewinding a run's logs to the step of the checkpoint it resumes from (algorithm.md §9).

A run killed after a checkpoint has already logged rows past it; the resumed run logs those steps
again. `rewind_logs` cuts the CSV log back (`rewind_csv`) and marks the TensorBoard log so that
TensorBoard hides the events past the step (`purge_tensorboard`), so each step shows once.
`event_file_suffix` names every event file, the loggers' and the purge markers', so that
TensorBoard reads them in the order they were made.
"""

from __future__ import annotations

import csv
import os
import time
import uuid
from pathlib import Path

from dmpo.utils.files import atomic_write_bytes

__all__ = ["event_file_suffix", "purge_tensorboard", "rewind_csv", "rewind_logs"]


def event_file_suffix() -> str:
    """A unique event-file name suffix that sorts by creation time.

    tensorboardX names files by the second and host only and truncates an existing file, so two
    writers in one second need a unique suffix; TensorBoard reads a folder's files in name order, and
    a resume's purge marker (`purge_tensorboard`) must come after the files it purges and before the
    resumed writer's: nanoseconds first keeps that order within a second too."""
    return f".{time.time_ns():020d}.{os.getpid()}.{uuid.uuid4().hex[:8]}"


def purge_tensorboard(logdir: str | os.PathLike[str], last_step: int) -> bool:
    """Tells TensorBoard to hide the events of `logdir` past `last_step` that were written before now,
    through its own contract: an event file holding a `SessionLog.START` at `last_step + 1`
    (tensorboardX's `SummaryWriter(purge_step=...)`). Nothing is rewritten. Returns whether a marker
    was written (not for a folder without event files).

    Measured with TensorBoard 2.21's EventAccumulator (docs/results/reliability.md, "TensorBoard on
    resume"): no step shows twice after such a marker; readers that skip TensorBoard's purge semantics
    (tbparse) still list the killed run's events too."""
    from tensorboardX import SummaryWriter

    logdir = Path(logdir)
    if not any(logdir.glob("events.out.tfevents.*")):
        return False
    marker = SummaryWriter(logdir=str(logdir), purge_step=int(last_step) + 1,
                           filename_suffix=event_file_suffix())
    marker.close()
    return True


def _step_of(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None


def rewind_csv(path: str | os.PathLike[str], step_key: str, last_step: int) -> int:
    """Drops the rows of a CSV log whose `step_key` is past `last_step` (rewritten atomically, a torn
    last line dropped too); returns how many rows were dropped."""
    path = Path(path)
    if not path.is_file():
        return 0
    raw = path.read_bytes()
    if not raw.endswith(b"\n"):
        raw = raw[:raw.rfind(b"\n") + 1]
    lines = raw.decode("utf-8").splitlines(keepends=True)
    if not lines:
        atomic_write_bytes(path, raw)
        return 0
    header = next(csv.reader([lines[0]]))
    if step_key not in header:
        return 0
    column = header.index(step_key)
    kept = [lines[0]]
    for line in lines[1:]:
        cells = next(csv.reader([line]), [])
        step = _step_of(cells[column]) if column < len(cells) else None
        if step is None or step <= last_step:
            kept.append(line)
    dropped = len(lines) - len(kept)
    if dropped or len(raw) != path.stat().st_size:
        atomic_write_bytes(path, "".join(kept).encode("utf-8"))
    return dropped


def rewind_logs(run_dir: str | os.PathLike[str], label: str, step_key: str, last_step: int) -> int:
    """Cuts the CSV log of `label` back to `last_step` (the step of the checkpoint a run resumes from)
    and marks its TensorBoard log to hide the events past it (`purge_tensorboard`), so that rows
    written between that checkpoint and a kill do not appear twice. Returns how many CSV rows were
    dropped."""
    run_dir = Path(run_dir)
    dropped = rewind_csv(run_dir / "logs" / label / "logs.csv", step_key, last_step)
    tb = run_dir / "tb" / label
    if tb.is_dir():
        purge_tensorboard(tb, last_step)
    return dropped
