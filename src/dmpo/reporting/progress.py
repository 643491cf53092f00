"""What training shows on the terminal: one live status line, with evaluation results printed above it.

The status line (`status_line(width)`) always shows the environment steps of the total and, once learning
has started and a rate is known, the ETA; episode return, evaluation return, learner updates per second
and episodes follow in that order, and are dropped from the right when the terminal is too narrow for
them. The ETA is measured from the first learner update on: the steps before it (filling replay, no
updates) run several times faster and would promise too early an end. At narrow widths the numbers are
abbreviated (`24k/100k`) so that no line wraps, down to 40 columns. It is drawn with `rich.live` (which
also keeps anything else printed meanwhile above the line) only on an interactive terminal.

Evaluation results are one short line each (`eval @ 40,000: 812.3 ± 11.2 over 5 episodes`, shorter forms
on a narrow terminal), printed above the live line on a terminal and as plain lines when output goes to a
file or a pipe. Off a terminal the status line is also printed as a plain line at every tenth of the
budget, so that a log file shows how far a run got; the full metric rows stay in the CSV and TensorBoard
logs.
"""

from __future__ import annotations

import collections
import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

__all__ = ["Progress", "format_evaluation"]

_RETURN_WINDOW = 10  # episodes in the running mean of returns
_RATE_WINDOW_SEC = 10.0  # seconds of history behind the learner-steps rate
_PLAIN_WIDTH = 120  # width of the status lines printed off a terminal
_PLAIN_REPORTS = 10  # status lines printed off a terminal over a whole run


def _stdout_is_tty() -> bool:
    isatty = getattr(sys.stdout, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (ValueError, OSError):  # closed or detached stream
        return False


def _duration(seconds: float | None) -> str:
    if seconds is None or seconds != seconds or seconds < 0:
        return "-:--:--"
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def _short(number: int) -> str:
    """`24,000` → `24k`, `1,500,000` → `1.5M`: a count in at most 5 characters."""
    for size, unit in ((1_000_000_000, "G"), (1_000_000, "M"), (1_000, "k")):
        if number >= size:
            value = number / size
            text = f"{value:.1f}" if value < 10 and number % size else f"{value:.0f}"
            return text.removesuffix(".0") + unit
    return str(number)


def format_evaluation(env_steps: int | None, returns: list[float], width: int | None = None) -> str:
    """`eval @ 40,000: 812.3 ± 11.2 over 5 episodes` (population std of the episode returns); with a
    `width`, the longest of ever shorter forms that fits it (`eval @ 40k: 812.3 ± 11.2 (5 ep)`)."""
    count = len(returns)
    mean = sum(returns) / count
    std = (sum((r - mean) ** 2 for r in returns) / count) ** 0.5
    return format_score(env_steps, mean, std, count, width)


def format_score(env_steps: int | None, mean: float, std: float, count: int, width: int | None = None) -> str:
    """`format_evaluation` of a round known by its mean, (population) std and episode count."""
    where, short = (f" @ {env_steps:,}", f" @ {_short(env_steps)}") if env_steps is not None else ("", "")
    score = f"{mean:.1f} ± {std:.1f}"
    forms = [f"eval{where}: {score} over {count} episode{'s' if count != 1 else ''}",
             f"eval{where}: {score} ({count} ep)",
             f"eval{short}: {score} ({count} ep)",
             f"eval{short}: {score}",
             f"eval{short}: {mean:.1f}"]
    return next((form for form in forms if width is None or len(form) <= width), forms[-1])


class Progress:
    """Context manager showing training progress; `update()` takes running totals.

    Args:
      total_steps: environment steps the run aims for (None: unknown, no ETA).
      enabled: False shows nothing at all (statistics are still tracked).
      live: False never draws the live line (evaluation and plain status lines are still printed).
      force: draw the live line even when stdout is not a terminal.
      console: rich Console to draw on (default: a new one on stdout).
      clock: time source for rates and the ETA (injectable for tests).
      print_fn: where lines go off a terminal (default: `print(..., flush=True)`).
    """

    def __init__(
        self,
        total_steps: int | None,
        *,
        enabled: bool = True,
        live: bool = True,
        force: bool = False,
        description: str = "train",
        console: Any = None,
        clock: Callable[[], float] = time.monotonic,
        print_fn: Callable[[str], None] | None = None,
    ) -> None:
        if total_steps is not None and (isinstance(total_steps, bool) or not isinstance(total_steps, int)
                                        or total_steps <= 0):
            raise ValueError(f"Progress total_steps must be a positive integer or None, got {total_steps!r}")
        self.total_steps = total_steps
        self.enabled = enabled
        self.active = enabled and live and (force or _stdout_is_tty())
        self._lock = threading.Lock()  # the live line is drawn on rich's refresh thread
        self._description = description
        self._console = console
        self._clock = clock
        self._print = print_fn or (lambda line: print(line, flush=True))
        self._env_steps = 0
        self._episodes = 0
        self._learner_steps = 0
        self._last_return: float | None = None
        self._eval_return: float | None = None
        self._returns: collections.deque[float] = collections.deque(maxlen=_RETURN_WINDOW)
        self._learner_history: collections.deque[tuple[float, int]] = collections.deque()
        self._start: tuple[float, int] | None = None  # (time, env steps) when learning was first seen
        self._learning_reported = False  # whether any update gave learner steps
        self._next_plain_report = 0
        self._live: Any = None

    def __enter__(self) -> Progress:
        if self.active:
            from rich.console import Console
            from rich.live import Live

            console = self._console or Console(highlight=False)
            self._live = Live(self, console=console, refresh_per_second=4, transient=False,
                              redirect_stdout=True, redirect_stderr=True)
            self._live.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        if self._live is not None:
            self._live.refresh()
            self._live.stop()
            self._live = None

    def __rich_console__(self, console: Any, options: Any) -> Any:
        from rich.text import Text

        yield Text(self.status_line(options.max_width), no_wrap=True, overflow="crop")

    def update(
        self,
        *,
        env_steps: int | None = None,
        episodes: int | None = None,
        last_return: float | None = None,
        learner_steps: int | None = None,
    ) -> None:
        """Records new totals (env steps, episodes, learner steps) and/or a finished episode's return."""
        with self._lock:
            self._record(env_steps, episodes, last_return, learner_steps)
        self._plain_report()

    def _record(self, env_steps: int | None, episodes: int | None, last_return: float | None,
                learner_steps: int | None) -> None:
        now = self._clock()
        if learner_steps is not None:
            self._learning_reported = True
        if env_steps is not None:
            self._env_steps = int(env_steps)
            # The ETA's clock starts with learning (or at once for a caller that reports no updates).
            learning = bool(learner_steps) or not self._learning_reported
            if self._start is None and learning:
                self._start = (now, self._env_steps)
        if episodes is not None:
            self._episodes = int(episodes)
        if last_return is not None:
            self._last_return = float(last_return)
            self._returns.append(self._last_return)
        if learner_steps is not None:
            self._learner_steps = int(learner_steps)
            self._learner_history.append((now, self._learner_steps))
            while len(self._learner_history) > 2 and now - self._learner_history[1][0] >= _RATE_WINDOW_SEC:
                self._learner_history.popleft()

    def evaluation(self, env_steps: int | None, returns: list[float]) -> None:
        """Prints one evaluation round's result above the status line (or as a plain line)."""
        if not returns:
            return
        with self._lock:
            self._eval_return = sum(returns) / len(returns)
        if self.enabled:
            width = self._live.console.width if self._live is not None else None
            self.print(format_evaluation(env_steps, returns, width))

    def evaluation_score(self, env_steps: int | None, mean: float, std: float, count: int) -> None:
        """`evaluation` of a round known by its mean, (population) std and episode count (a logged row)."""
        with self._lock:
            self._eval_return = mean
        if self.enabled:
            width = self._live.console.width if self._live is not None else None
            self.print(format_score(env_steps, mean, std, count, width))

    def print(self, line: str) -> None:
        """A line above the live status line (or a plain line off a terminal)."""
        if not self.enabled:
            return
        if self._live is not None:
            self._live.console.print(line, highlight=False, markup=False, soft_wrap=True)
        else:
            self._print(line)

    def _plain_report(self) -> None:
        if not self.enabled or self.active or self.total_steps is None:
            return
        if self._env_steps >= self._next_plain_report:
            if self._env_steps > 0:
                self._print(self.status_line(_PLAIN_WIDTH))
            period = max(self.total_steps // _PLAIN_REPORTS, 1)
            self._next_plain_report = (self._env_steps // period + 1) * period

    def learner_steps_per_second(self) -> float | None:
        """Learner steps per second over roughly the last 10 s of updates (None before two samples)."""
        if len(self._learner_history) < 2:
            return None
        (t0, s0), (t1, s1) = self._learner_history[0], self._learner_history[-1]
        return (s1 - s0) / (t1 - t0) if t1 > t0 else None

    def eta_seconds(self) -> float | None:
        """Seconds to `total_steps` at the env-step rate seen since learning started (None: unknown, as
        before the first learner update and until some env steps have passed since)."""
        if self.total_steps is not None and self._env_steps >= self.total_steps:
            return 0.0
        if self.total_steps is None or self._start is None:
            return None
        t0, s0 = self._start
        elapsed, done = self._clock() - t0, self._env_steps - s0
        if done <= 0 or elapsed <= 0:
            return None
        return (self.total_steps - self._env_steps) * elapsed / done

    def summary(self) -> dict[str, float | int | None]:
        """The statistics shown on the status line."""
        return {
            "env_steps": self._env_steps,
            "episodes": self._episodes,
            "last_return": self._last_return,
            "mean_return": sum(self._returns) / len(self._returns) if self._returns else None,
            "eval_return": self._eval_return,
            "learner_steps": self._learner_steps,
            "learner_steps_per_second": self.learner_steps_per_second(),
        }

    def status_line(self, width: int) -> str:
        """The status line fitted to `width` columns: steps and ETA always, then as many of return,
        evaluation return, updates/s and episodes as fit, in that order."""
        with self._lock:
            return self._fit(width)

    def _head(self, short: bool) -> str:
        """Steps of the budget, and the ETA once it is known: `24,000/100,000 steps 24% ETA 0:08:51`."""
        count = _short if short else (lambda number: f"{number:,}")
        if self.total_steps is not None:
            percent = min(100, 100 * self._env_steps // self.total_steps)
            steps = f"{count(self._env_steps)}/{count(self.total_steps)} steps {percent}%"
        else:
            steps = f"{count(self._env_steps)} steps"
        eta = self.eta_seconds()
        return steps if eta is None else f"{steps} ETA {_duration(eta)}"

    def _fit(self, width: int) -> str:
        stats = self.summary()
        head = f"{self._description} {self._head(short=False)}"
        optional = []
        if stats["last_return"] is not None:
            optional.append(f"return {stats['last_return']:.1f} (mean{len(self._returns)} "
                            f"{stats['mean_return']:.1f})")
        if stats["eval_return"] is not None:
            optional.append(f"eval {stats['eval_return']:.1f}")
        if stats["learner_steps_per_second"] is not None:
            optional.append(f"{stats['learner_steps_per_second']:.1f} upd/s")
        optional.append(f"episodes {stats['episodes']}")
        line = head
        for part in optional:
            if len(line) + 3 + len(part) > width:
                break
            line = f"{line} | {part}"
        if len(line) > width:  # narrower than steps and ETA: the description goes first, then digits
            line = line.removeprefix(f"{self._description} ")
        if len(line) > width:
            line = self._head(short=True)
        return line
