"""Loggers: sinks for flat dictionaries of metrics (algorithm.md §9).

A logger receives one row at a time (`write(mapping)`) and is closed once at the end. Sinks:
terminal (`[Label] Key = value | …`), CSV (`<run>/logs/<label>/logs.csv`) and TensorBoard
(`<run>/tb/<label>`). `Dispatcher` fans a row out to several sinks and `TimeFilter` drops rows that
arrive too soon after the last written one. Every sink drops `None` values, so callers may log
optional metrics without branching. `make_logger` assembles the default stack (and, for a resumed
run, first rewinds the logs with `dmpo.reporting.rewind`).

A logger may also answer `will_write()`: whether a row written now would reach a sink (the filter
and the no-op logger say no when they would drop it), so a caller can skip computing or fetching a
row that would be thrown away. Loggers without the method are taken to write everything.
"""

from __future__ import annotations

import csv
import numbers
import os
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from dmpo.reporting.rewind import event_file_suffix, rewind_logs

__all__ = [
    "CSVLogger",
    "Dispatcher",
    "Logger",
    "NoOpLogger",
    "TensorBoardLogger",
    "TerminalLogger",
    "TimeFilter",
    "format_row",
    "make_logger",
    "will_write",
]


class Logger(Protocol):
    """Anything that accepts rows of metrics."""

    def write(self, data: Mapping[str, Any]) -> None: ...

    def close(self) -> None: ...


def will_write(logger: Any) -> bool:
    """`logger.will_write()` if it has one, else True (a logger is assumed to write every row)."""
    method = getattr(logger, "will_write", None)
    return True if method is None else bool(method())


def _drop_none(data: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in data.items() if value is not None}


def _title(name: str) -> str:
    """`episode_return` → `Episode Return`."""
    return " ".join(part.capitalize() for part in name.split("_") if part)


def _format_value(value: Any) -> str:
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    if isinstance(value, bool | np.bool_):
        return str(bool(value))
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        return f"{float(value):.3f}"
    return str(value)


def format_row(label: str, data: Mapping[str, Any]) -> str:
    """The terminal line for one row: keys sorted, Title Case, floats to 3 decimals, `None` dropped."""
    items = sorted(_drop_none(data).items())
    body = " | ".join(f"{_title(key)} = {_format_value(value)}" for key, value in items)
    return f"[{_title(label)}] {body}"


def _rich_print(line: str) -> None:
    # Imported lazily: rich is only needed when something is actually printed. A fresh Console writes
    # to whatever sys.stdout is now, so lines land above a live rich progress bar.
    from rich.console import Console

    Console(highlight=False, markup=False, soft_wrap=True).print(line)


class TerminalLogger:
    """Prints each row as one line, e.g. `[Learner] Loss = 0.123 | Steps = 10`."""

    def __init__(self, label: str, print_fn: Callable[[str], None] | None = None) -> None:
        self._label = label
        self._print = print_fn or _rich_print

    def write(self, data: Mapping[str, Any]) -> None:
        if _drop_none(data):
            self._print(format_row(self._label, data))

    def close(self) -> None:
        pass


def _csv_cell(value: Any) -> Any:
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value.item()
    if isinstance(value, np.generic):
        return value.item()
    return value


class CSVLogger:
    """Appends rows to `<directory>/logs/<label>/logs.csv`.

    The columns are fixed by the first row ever written to the file; later keys outside them are
    ignored (with one warning) and missing keys leave empty cells. The file is opened in append mode
    and each row is flushed as it is written, so a resumed run keeps adding to the same file under the
    same header and a killed process loses at most the row being written. A torn last line left by
    such a kill is cut off when the file is reopened.
    """

    def __init__(self, directory: str | os.PathLike[str], label: str) -> None:
        self.path = Path(directory) / "logs" / label / "logs.csv"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._columns: list[str] | None = self._existing_columns()
        self._file = open(self.path, "a", newline="", encoding="utf-8")  # closed in close()
        self._writer: csv.DictWriter[str] | None = None
        self._warned_extra = False

    def _existing_columns(self) -> list[str] | None:
        if not self.path.exists() or self.path.stat().st_size == 0:
            return None
        raw = self.path.read_bytes()
        if not raw.endswith(b"\n"):  # a write was interrupted: drop the partial row
            keep = raw.rfind(b"\n") + 1
            with open(self.path, "r+b") as f:
                f.truncate(keep)
            if keep == 0:
                return None
        with open(self.path, newline="", encoding="utf-8") as f:
            return next(csv.reader(f))

    @property
    def columns(self) -> list[str] | None:
        """The fixed header, or None before the first row."""
        return None if self._columns is None else list(self._columns)

    def write(self, data: Mapping[str, Any]) -> None:
        row = {key: _csv_cell(value) for key, value in _drop_none(data).items()}
        if self._columns is None:
            if not row:
                return
            self._columns = list(row)
            self._writer = self._make_writer()
            self._writer.writeheader()
        elif self._writer is None:
            self._writer = self._make_writer()
        extra = [key for key in row if key not in self._columns]
        if extra and not self._warned_extra:
            warnings.warn(
                f"{self.path}: keys {extra} are not among the columns fixed by the first row "
                f"{self._columns}; they are not written (warned once)",
                stacklevel=2,
            )
            self._warned_extra = True
        self._writer.writerow(row)
        self._file.flush()

    def _make_writer(self) -> csv.DictWriter[str]:
        assert self._columns is not None
        return csv.DictWriter(self._file, fieldnames=self._columns, extrasaction="ignore",
                              lineterminator="\n")

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


def _scalar(value: Any) -> float | None:
    """The value as a float if it is a real scalar, else None."""
    if isinstance(value, np.ndarray):
        if value.ndim != 0 or value.dtype.kind not in "biuf":
            return None
        value = value.item()
    if isinstance(value, numbers.Real | np.bool_):
        return float(value)
    return None


class TensorBoardLogger:
    """Writes the scalar values of each row to a tensorboardX event file under `<directory>/tb/<label>`.

    The x-axis is `data[step_key]` when `step_key` is given and present in the row, otherwise the
    number of rows written before this one. Non-scalar values (strings, arrays) are skipped.
    """

    def __init__(self, directory: str | os.PathLike[str], label: str, step_key: str | None = None,
                 flush_secs: int = 10) -> None:
        from tensorboardX import SummaryWriter

        self.logdir = Path(directory) / "tb" / label
        self.logdir.mkdir(parents=True, exist_ok=True)
        self._writer = SummaryWriter(logdir=str(self.logdir), flush_secs=flush_secs,
                                     filename_suffix=event_file_suffix())
        self._step_key = step_key
        self._count = 0

    def write(self, data: Mapping[str, Any]) -> None:
        data = _drop_none(data)
        step = self._count
        if self._step_key is not None and self._step_key in data:
            step_value = _scalar(data[self._step_key])
            if step_value is not None:
                step = int(step_value)
        for key, value in data.items():
            scalar = _scalar(value)
            if scalar is not None:
                self._writer.add_scalar(key, scalar, global_step=step)
        self._count += 1

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class Dispatcher:
    """Writes every row to each of several loggers."""

    def __init__(self, loggers: Iterable[Logger]) -> None:
        self._loggers = list(loggers)

    def write(self, data: Mapping[str, Any]) -> None:
        for logger in self._loggers:
            logger.write(data)

    def will_write(self) -> bool:
        return any(will_write(logger) for logger in self._loggers)

    def close(self) -> None:
        for logger in self._loggers:
            logger.close()


class TimeFilter:
    """Passes a row on only if at least `time_delta` seconds passed since the last row passed on.

    The first row always passes; `time_delta == 0` passes everything. `clock` is injectable for tests.
    """

    def __init__(self, logger: Logger, time_delta: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not time_delta >= 0:
            raise ValueError(f"TimeFilter time_delta must be >= 0 seconds, got {time_delta!r}")
        self._logger = logger
        self._time_delta = time_delta
        self._clock = clock
        self._last_written: float | None = None

    def _due(self, now: float) -> bool:
        return self._last_written is None or now - self._last_written >= self._time_delta

    def will_write(self) -> bool:
        """Whether a row written now would pass (and the logger behind would write it)."""
        return self._due(self._clock()) and will_write(self._logger)

    def write(self, data: Mapping[str, Any]) -> None:
        now = self._clock()
        if self._due(now):
            self._logger.write(data)
            self._last_written = now

    def close(self) -> None:
        self._logger.close()


class NoOpLogger:
    """Discards everything."""

    def write(self, data: Mapping[str, Any]) -> None:
        pass

    def will_write(self) -> bool:
        return False

    def close(self) -> None:
        pass


def make_logger(
    label: str,
    run_dir: str | os.PathLike[str] | None,
    *,
    time_delta: float = 1.0,
    terminal: bool = True,
    csv: bool = True,
    tensorboard: bool = True,
    step_key: str | None = None,
    print_fn: Callable[[str], None] | None = None,
    resume_from_step: int | None = None,
    extra_sinks: Sequence[Logger] = (),
) -> Logger:
    """The default logger: terminal + CSV + TensorBoard behind one time filter.

    With `run_dir=None` nothing is written to disk (CSV and TensorBoard are skipped). With
    `resume_from_step` (a resumed run: the checkpoint's value of `step_key`) the existing logs are
    first cut back to that step (`rewind_logs`), so that they continue without duplicate steps.
    `extra_sinks` get the same rows (e.g. an experiment tracker's, `dmpo.reporting.trackers`).
    """
    if resume_from_step is not None and run_dir is not None:
        if step_key is None:
            raise ValueError(f"logger {label!r}: resume_from_step needs the step_key of its rows")
        rewind_logs(run_dir, label, step_key, int(resume_from_step))
    sinks: list[Logger] = []
    if terminal:
        sinks.append(TerminalLogger(label, print_fn=print_fn))
    if run_dir is not None:
        if csv:
            sinks.append(CSVLogger(run_dir, label))
        if tensorboard:
            sinks.append(TensorBoardLogger(run_dir, label, step_key=step_key))
    sinks.extend(extra_sinks)
    if not sinks:
        return NoOpLogger()
    logger: Logger = sinks[0] if len(sinks) == 1 else Dispatcher(sinks)
    return TimeFilter(logger, time_delta) if time_delta > 0 else logger
