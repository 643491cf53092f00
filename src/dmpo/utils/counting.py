"""Hierarchical counters of steps, episodes and wall time (algorithm.md §7.5).

A root `Counter` holds totals. A child counter (actor, evaluator, learner) counts locally and, at
most once every `time_delta` seconds, pushes the counts it gathered since the last push to its
parent under prefixed keys (`<prefix>_<key>`) and caches the parent's totals in return. Its view
`get_counts()` is therefore "parent totals as of the last push + what I counted since", which keeps
the number of calls to a (possibly remote) parent bounded while the view stays exact for the child's
own keys.
"""

from __future__ import annotations

import numbers
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

__all__ = ["Counter", "CounterLike"]

Number = int | float


class CounterLike(Protocol):
    """What a child needs from its parent: possibly a proxy for a counter in another process."""

    def increment(self, **counts: Number) -> dict[str, Number]: ...


def _plain(value: Any, name: str) -> Number:
    """A JSON-friendly int/float from a count value (numpy scalars included)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"count {name!r} must be a real number, got {value!r}")
    return int(value) if isinstance(value, numbers.Integral) else float(value)


class Counter:
    """Thread-safe hierarchical counter.

    Args:
      parent: counter that receives this one's counts (prefixed), or None for a root.
      prefix: prepended with `_` to every key pushed to the parent and shown by `get_counts`.
      time_delta: minimum seconds between pushes to the parent; 0 pushes on every call.
      clock: time source (injectable for tests).
    """

    def __init__(
        self,
        parent: CounterLike | None = None,
        prefix: str = "",
        time_delta: float = 1.0,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not time_delta >= 0:
            raise ValueError(f"Counter time_delta must be >= 0 seconds, got {time_delta!r}")
        self._parent = parent
        self._prefix = prefix
        self._time_delta = time_delta
        self._clock = clock
        self._local: dict[str, Number] = {}  # counted here and not yet pushed (all counts for a root)
        self._cache: dict[str, Number] = {}  # parent's totals as returned by the last push
        self._last_sync: float | None = None
        self._lock = threading.RLock()

    def _key(self, key: str) -> str:
        return f"{self._prefix}_{key}" if self._prefix else key

    def increment(self, **counts: Number) -> dict[str, Number]:
        """Adds `counts` to this counter and returns the current view (see `get_counts`)."""
        plain = {key: _plain(value, key) for key, value in counts.items()}
        with self._lock:
            for key, value in plain.items():
                self._local[key] = self._local.get(key, 0) + value
            return self._view(force_sync=False)

    def get_counts(self) -> dict[str, Number]:
        """Parent totals as of the last push plus this counter's unpushed counts (prefixed)."""
        with self._lock:
            return self._view(force_sync=False)

    def sync(self) -> dict[str, Number]:
        """Pushes unpushed counts to the parent now (e.g. before shutdown) and returns the view."""
        with self._lock:
            return self._view(force_sync=True)

    def _view(self, force_sync: bool) -> dict[str, Number]:
        if self._parent is not None:
            now = self._clock()
            due = self._last_sync is None or now - self._last_sync >= self._time_delta
            if force_sync or due:
                pushed = {self._key(key): value for key, value in self._local.items()}
                self._cache = dict(self._parent.increment(**pushed))
                self._local = {}
                self._last_sync = now
        view = dict(self._cache)
        for key, value in self._local.items():
            prefixed = self._key(key)
            view[prefixed] = view.get(prefixed, 0) + value
        return view

    def get_steps_key(self) -> str:
        """The key under which this counter's `steps` appear: `<prefix>_steps` or `steps`."""
        return self._key("steps")

    def state_dict(self) -> dict[str, dict[str, Number]]:
        """JSON-serialisable state (unpushed counts and parent cache) for exact resume."""
        with self._lock:
            return {"counts": dict(self._local), "cache": dict(self._cache)}

    def load_state_dict(self, state: Mapping[str, Mapping[str, Number]]) -> None:
        """Restores what `state_dict` returned; the next call pushes to the parent again."""
        missing = {"counts", "cache"} - set(state)
        if missing:
            raise KeyError(f"Counter state is missing {sorted(missing)}; expected keys 'counts' and 'cache'")
        with self._lock:
            self._local = {key: _plain(value, key) for key, value in state["counts"].items()}
            self._cache = {key: _plain(value, key) for key, value in state["cache"].items()}
            self._last_sync = None
