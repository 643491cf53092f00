"""What a run reports while and after it trains: logs (CSV, TensorBoard, terminal), the progress line,
experiment trackers, evaluation videos and plots of learning curves."""

from dmpo.reporting.logging import (
    CSVLogger,
    Dispatcher,
    Logger,
    NoOpLogger,
    TensorBoardLogger,
    TerminalLogger,
    TimeFilter,
    make_logger,
)
from dmpo.reporting.progress import Progress

__all__ = [
    "CSVLogger",
    "Dispatcher",
    "Logger",
    "NoOpLogger",
    "Progress",
    "TensorBoardLogger",
    "TerminalLogger",
    "TimeFilter",
    "make_logger",
]
