"""Clients of the replay node: a bounded fire-and-forget writer and a prefetching sample stream.

`RemoteReplayWriter` is the `table_like` an actor's `BatchedWriter` flushes into. Each
`insert_batch` becomes one remote call that is not waited for, except that at most
`max_in_flight` calls may be outstanding: the next call first waits for the oldest to finish. When
the rate limiter holds inserts back, calls stay outstanding and the actor's environment loop stops
at that wait — the limiter's backpressure reaches the actors without a round trip per step.

`RemoteSampleStream` is the learner's iterator. A background thread keeps `num_in_flight` sample
calls outstanding and up to `prefetch_size` finished batches queued, so the learner only waits
when the replay node (or its rate limiter) really has nothing for it. Time spent waiting is
measured so the fraction of learner time starved of data can be reported.
"""

from __future__ import annotations

import collections
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import ray
import tree


class StreamClosed(RuntimeError):
    """The sample stream was closed while the learner waited for a batch."""


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
        self.blocked_seconds = 0.0

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
        start = time.monotonic()
        while len(self._pending) >= limit:
            oldest = self._pending[0]
            ready, _ = ray.wait([oldest], timeout=self._poll_seconds)
            if ready:
                self._pending.popleft()
                ray.get(oldest)  # re-raises a failed insert here
            elif self._should_stop():
                break
        self.blocked_seconds += time.monotonic() - start


class RemoteSampleStream:
    """Iterator of sampled batches from the replay node, prefetched on a background thread."""

    def __init__(self, service: Any, batch_size: int, *, num_in_flight: int = 2, prefetch_size: int = 4,
                 poll_seconds: float = 0.5) -> None:
        for name, value in (("batch_size", batch_size), ("num_in_flight", num_in_flight),
                            ("prefetch_size", prefetch_size)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        self._service = service
        self._batch_size = batch_size
        self._num_in_flight = num_in_flight
        self._poll_seconds = poll_seconds
        self._ready: queue.Queue[Any] = queue.Queue(maxsize=prefetch_size)
        self._closed = threading.Event()
        self._error: BaseException | None = None
        self.wait_seconds = 0.0
        self.batches = 0
        self._thread = threading.Thread(target=self._fetch_loop, name="replay-prefetch", daemon=True)
        self._thread.start()

    def __iter__(self) -> RemoteSampleStream:
        return self

    def __next__(self) -> Any:
        start = time.monotonic()
        try:
            while True:
                if self._error is not None:
                    raise RuntimeError("replay prefetch thread failed") from self._error
                if self._closed.is_set():
                    raise StreamClosed("replay sample stream is closed")
                try:
                    batch = self._ready.get(timeout=self._poll_seconds)
                except queue.Empty:
                    continue
                self.batches += 1
                return batch
        finally:
            self.wait_seconds += time.monotonic() - start

    def close(self) -> None:
        self._closed.set()
        self._thread.join(timeout=5.0)

    def _fetch_loop(self) -> None:
        pending: collections.deque[Any] = collections.deque()
        try:
            while not self._closed.is_set():
                while len(pending) < self._num_in_flight:
                    pending.append(self._service.sample.remote(self._batch_size))
                ready, _ = ray.wait([pending[0]], timeout=self._poll_seconds)
                if not ready:
                    continue
                batch = ray.get(pending.popleft())
                if batch is None:  # the rate limiter held it back; ask again
                    continue
                self._put(batch)
        except BaseException as error:  # surfaced to the learner by __next__
            self._error = error

    def _put(self, batch: Any) -> None:
        while not self._closed.is_set():
            try:
                self._ready.put(batch, timeout=self._poll_seconds)
                return
            except queue.Full:
                continue
