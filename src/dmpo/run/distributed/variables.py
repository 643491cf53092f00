"""Getting the learner's policy variables to the acting nodes (algorithm.md §6.6, §7.3).

Learner side, `VariablePublisher`: `get()` answers `(version, [ObjectRef])`. The parameters are put
into Ray's object store once per learner version and every requester receives a reference to that
one object, so N actors asking at once cost one host copy on the learner, and on a multi-machine
cluster one transfer per machine rather than one per actor. A learner that steps faster than the
requests arrive makes every request a new version; `min_interval` seconds (0: off, the reference's
behaviour) lets all requests within that time share one copy, at the price of that much staleness.

Acting side, `AsyncVariableClient`: a `params_source` for the actors of `dmpo.agent.acting` (which
call it on every `update()`, i.e. after every environment step). Every `update_period` calls it starts
a fetch unless one is pending, and it checks a pending fetch with `ray.wait(timeout=0)` — so the
environment loop never waits for the learner — and swaps the new parameters in on the first call
after they arrive. Construction fetches once, blocking, so acting never starts from random weights.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import ray


class VariablePublisher:
    """Caches one object-store copy of the latest variables per version (thread-safe).

    Args:
      read: returns the current variables (a numpy pytree).
      version: returns the current version (the learner step).
      min_interval: seconds a copy keeps being served after it was made, even if the version moved on.
      clock: time source (injectable for tests).
    """

    def __init__(self, read: Callable[[], Any], version: Callable[[], int], *, min_interval: float = 0.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not min_interval >= 0:
            raise ValueError(f"min_interval must be >= 0 seconds, got {min_interval!r}")
        self._read = read
        self._version = version
        self._min_interval = min_interval
        self._clock = clock
        self._lock = threading.Lock()
        self._cached: tuple[int, Any, float] | None = None  # (version, ref, when it was made)
        self.copies = 0

    def get(self) -> tuple[int, list[Any]]:
        version = int(self._version())
        with self._lock:
            now = self._clock()
            stale = self._cached is None or (self._cached[0] != version
                                             and now - self._cached[2] >= self._min_interval)
            if stale:
                self._cached = (version, ray.put(self._read()), now)
                self.copies += 1
            assert self._cached is not None
            cached_version, ref, _ = self._cached
        return cached_version, [ref]  # wrapped in a list so Ray passes the reference, not the value


class AsyncVariableClient:
    """Non-blocking parameter source with a blocking first fetch (see the module docstring).

    Args:
      request: starts a fetch and returns an ObjectRef to `(version, [params_ref])`
        (`learner.get_variables.remote`).
      update_period: calls between fetches.
      timeout: seconds the blocking fetches may take before raising `GetTimeoutError`.
    """

    def __init__(self, request: Callable[[], Any], update_period: int, *, timeout: float = 300.0) -> None:
        if not isinstance(update_period, int) or update_period < 1:
            raise ValueError(f"variable update_period must be a positive integer, got {update_period!r}")
        self._request = request
        self._update_period = update_period
        self._timeout = timeout
        self._calls = 0
        self._pending: Any = None  # ObjectRef in flight
        self._pending_is_params = False  # False: waiting for (version, [ref]); True: for the params
        self._pending_version = -1
        self.version = -1
        self.num_fetches = 0
        self.fetch_seconds = 0.0  # wall time from request to arrival, summed over completed fetches
        self._requested_at = 0.0
        self.params: Any = None
        self.update(wait=True)

    def __call__(self) -> Any:
        """Counts one call, advances a pending fetch without waiting, returns the newest parameters."""
        self._calls += 1
        if self._pending is not None:
            self._advance(timeout=0.0)
        if self._pending is None and self._calls >= self._update_period:
            self._start()
        return self.params

    def update(self, wait: bool = False) -> Any:
        """`wait=True` fetches synchronously (bounded by `timeout`); otherwise the same as a call."""
        if not wait:
            return self()
        if self._pending is None:
            self._start()
        deadline = time.monotonic() + self._timeout
        while self._pending is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ray.exceptions.GetTimeoutError(
                    f"no variables from the learner within {self._timeout} s")
            self._advance(timeout=left)
        return self.params

    def _start(self) -> None:
        self._calls = 0
        self._requested_at = time.monotonic()
        self._pending = self._request()
        self._pending_is_params = False

    def _advance(self, timeout: float) -> None:
        ready, _ = ray.wait([self._pending], timeout=timeout)
        if not ready:
            return
        value = ray.get(self._pending)
        if not self._pending_is_params:
            self._pending_version, (params_ref,) = value
            self._pending = params_ref
            self._pending_is_params = True
            self._advance(timeout)
            return
        self.params = value
        self.version = self._pending_version
        self._pending = None
        self.num_fetches += 1
        self.fetch_seconds += time.monotonic() - self._requested_at
