"""Clients of the replay node: a bounded fire-and-forget writer and a prefetching sample stream.

`RemoteReplayWriter` is the `table_like` an actor's `BatchedWriter` flushes into. Each
`insert_batch` becomes one remote call that is not waited for, except that at most
`max_in_flight` calls may be outstanding: the next call first waits for the oldest to finish. When
the rate limiter holds inserts back, calls stay outstanding and the actor's environment loop stops
at that wait — the limiter's backpressure reaches the actors without a round trip per step.

`RemoteTableSampler` is the replay node seen as a table to sample from: the learner node wraps it
in the builder's dataset (a `PrefetchingIterator` with one worker thread per sample call kept in
flight), the same iterator the overlapped single-process agent uses, so partial samples are kept
in both modes. `TimedBatches` measures how long the learner waited for data.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import ray
import tree


class RemoteReplayWriter:
    """`insert_batch` forwarded to the replay node with at most `max_in_flight` calls outstanding."""

    def __init__(self, service: Any, *, max_in_flight: int = 2, poll_seconds: float = 1.0,
                 should_stop: Callable[[], bool] | None = None) -> None:
        if not isinstance(max_in_flight, int) or max_in_flight < 1:
            raise ValueError(f"max_in_flight must be a positive integer, got {max_in_flight!r}")
        self._service = service
        self._max_in_flight = max_in_flight
        self._poll_seconds = poll_seconds
        self._should_stop = should_stop or (lambda: False)
        self._pending: collections.deque[Any] = collections.deque()
        self.items_sent = 0  # submitted to the replay node (applied or still in flight)
        self._blocked_seconds = 0.0  # waits that have ended
        self._blocked_since: float | None = None  # start of the wait under way

    @property
    def blocked_seconds(self) -> float:
        """Time spent waiting for the replay node, the wait under way included (so that a reading
        taken mid-wait, e.g. by a benchmark's window, never counts a long wait twice or late)."""
        since = self._blocked_since
        return self._blocked_seconds + (time.monotonic() - since if since is not None else 0.0)

    def insert_batch(self, items: Any, priorities: Any = None, timeout: float | None = None) -> None:
        del timeout  # the wait below is bounded by should_stop instead
        self._wait_until_fewer_than(self._max_in_flight)
        self._pending.append(self._service.insert_batch.remote(items, priorities))
        self.items_sent += int(tree.flatten(items)[0].shape[0])

    def insert(self, item: Any, priority: float = 1.0, timeout: float | None = None) -> None:
        batched = tree.map_structure(lambda x: np.asarray(x)[None], item)
        self.insert_batch(batched, np.asarray([priority]), timeout)

    def flush(self) -> None:
        """Waits until every outstanding insert has been applied."""
        self._wait_until_fewer_than(1)

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def _wait_until_fewer_than(self, limit: int) -> None:
        start = self._blocked_since = time.monotonic()
        try:
            while len(self._pending) >= limit:
                oldest = self._pending[0]
                ready, _ = ray.wait([oldest], timeout=self._poll_seconds)
                if ready:
                    self._pending.popleft()
                    ray.get(oldest)  # re-raises a failed insert here
                elif self._should_stop():
                    break
        finally:
            self._blocked_seconds += time.monotonic() - start
            self._blocked_since = None


class RemoteTableSampler:
    """`sample(batch_size, timeout)` of the replay node, with `Table.sample`'s timeout contract.

    The node returns a partial batch (or None) when its rate limiter held the rest back; this
    raises `RateLimiterTimeout(partial=...)` for it, as a local table does, so the builder's
    `PrefetchingIterator` keeps every sampled item and joins partials into full batches.
    """

    def __init__(self, service: Any) -> None:
        self._service = service

    def sample(self, batch_size: int, timeout: float | None = None) -> Any:
        from dmpo.replay import RateLimiterTimeout

        part = ray.get(self._service.sample.remote(batch_size, timeout))
        got = 0 if part is None else int(tree.flatten(part)[0].shape[0])
        if got < batch_size:
            raise RateLimiterTimeout(f"replay node: {got}/{batch_size} items admitted within {timeout} s",
                                     completed=got, partial=part)
        return part


class TimedBatches:
    """Wraps the learner's batch iterator, adding up the time `next()` waited for data."""

    def __init__(self, batches: Any) -> None:
        self._batches = batches
        self.wait_seconds = 0.0
        self.batches = 0

    def __iter__(self) -> TimedBatches:
        return self

    def __next__(self) -> Any:
        start = time.monotonic()
        try:
            batch = next(self._batches)
        finally:
            self.wait_seconds += time.monotonic() - start
        self.batches += 1
        return batch

    def close(self) -> None:
        self._batches.close()
