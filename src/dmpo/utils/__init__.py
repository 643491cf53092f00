"""Infrastructure shared by the agents: loggers, counters and the progress display."""

from dmpo.utils.counting import Counter, CounterLike
from dmpo.utils.logging import (
    CSVLogger,
    Dispatcher,
    Logger,
    NoOpLogger,
    TensorBoardLogger,
    TerminalLogger,
    TimeFilter,
    make_logger,
)
from dmpo.utils.progress import Progress

__all__ = [
    "CSVLogger",
    "Counter",
    "CounterLike",
    "Dispatcher",
    "Logger",
    "NoOpLogger",
    "Progress",
    "TensorBoardLogger",
    "TerminalLogger",
    "TimeFilter",
    "make_logger",
]
