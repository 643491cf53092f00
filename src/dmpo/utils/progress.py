"""A live progress line for training: env steps of a total, episodes, returns, learner speed, ETA.

Built on `rich.progress`. It only draws on an interactive terminal (or when forced), so a run whose
output goes to a file or a pipe is unaffected; the statistics are tracked either way and can be read
with `summary()`.
"""

from __future__ import annotations

import collections
import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

__all__ = ["Progress"]

_RETURN_WINDOW = 10  # episodes in the running mean of returns
_RATE_WINDOW_SEC = 10.0  # seconds of history behind the learner-steps rate


def _stdout_is_tty() -> bool:
    isatty = getattr(sys.stdout, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (ValueError, OSError):  # closed or detached stream
        return False


class Progress:
    """Context manager showing training progress; `update()` takes running totals.

    Args:
      total_steps: environment steps the run aims for (None: unknown, no ETA).
      enabled: False never draws anything.
      force: draw even when stdout is not a terminal.
      console: rich Console to draw on (default: a new one on stdout).
      clock: time source for the learner-steps rate (injectable for tests).
    """

    def __init__(
        self,
        total_steps: int | None,
        *,
        enabled: bool = True,
        force: bool = False,
        description: str = "training",
        console: Any = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if total_steps is not None and (isinstance(total_steps, bool) or not isinstance(total_steps, int)
                                        or total_steps <= 0):
            raise ValueError(f"Progress total_steps must be a positive integer or None, got {total_steps!r}")
        self.total_steps = total_steps
        self.active = enabled and (force or _stdout_is_tty())
        self._description = description
        self._console = console
        self._clock = clock
        self._env_steps = 0
        self._episodes = 0
        self._learner_steps = 0
        self._last_return: float | None = None
        self._returns: collections.deque[float] = collections.deque(maxlen=_RETURN_WINDOW)
        self._learner_history: collections.deque[tuple[float, int]] = collections.deque()
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> Progress:
        if self.active:
            from rich import progress as rp

            self._bar = rp.Progress(
                rp.TextColumn("[bold]{task.description}"),
                rp.BarColumn(),
                rp.MofNCompleteColumn(),
                rp.TextColumn("{task.fields[stats]}"),
                rp.TimeRemainingColumn(),
                console=self._console,
            )
            self._bar.start()
            self._task = self._bar.add_task(self._description, total=self.total_steps,
                                            stats=self._stats_text())
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def update(
        self,
        *,
        env_steps: int | None = None,
        episodes: int | None = None,
        last_return: float | None = None,
        learner_steps: int | None = None,
    ) -> None:
        """Records new totals (env steps, episodes, learner steps) and/or a finished episode's return."""
        if env_steps is not None:
            self._env_steps = int(env_steps)
        if episodes is not None:
            self._episodes = int(episodes)
        if last_return is not None:
            self._last_return = float(last_return)
            self._returns.append(self._last_return)
        if learner_steps is not None:
            self._learner_steps = int(learner_steps)
            now = self._clock()
            self._learner_history.append((now, self._learner_steps))
            while len(self._learner_history) > 2 and now - self._learner_history[1][0] >= _RATE_WINDOW_SEC:
                self._learner_history.popleft()
        if self._bar is not None:
            self._bar.update(self._task, completed=self._env_steps, stats=self._stats_text())

    def learner_steps_per_second(self) -> float | None:
        """Learner steps per second over roughly the last 10 s of updates (None before two samples)."""
        if len(self._learner_history) < 2:
            return None
        (t0, s0), (t1, s1) = self._learner_history[0], self._learner_history[-1]
        return (s1 - s0) / (t1 - t0) if t1 > t0 else None

    def summary(self) -> dict[str, float | int | None]:
        """The statistics shown on the progress line."""
        return {
            "env_steps": self._env_steps,
            "episodes": self._episodes,
            "last_return": self._last_return,
            "mean_return": sum(self._returns) / len(self._returns) if self._returns else None,
            "learner_steps": self._learner_steps,
            "learner_steps_per_second": self.learner_steps_per_second(),
        }

    def _stats_text(self) -> str:
        stats = self.summary()
        parts = [f"episodes {stats['episodes']}"]
        if stats["last_return"] is not None:
            window = len(self._returns)
            parts.append(f"return {stats['last_return']:.1f} (mean{window} {stats['mean_return']:.1f})")
        parts.append(f"learner {stats['learner_steps']}")
        if stats["learner_steps_per_second"] is not None:
            parts.append(f"{stats['learner_steps_per_second']:.1f} upd/s")
        return " | ".join(parts)
