"""Batches for the learner, sampled ahead on a background thread (algorithm.md §2: prefetch 4).

`PrefetchingIterator` keeps at most `prefetch_size` sampled-but-unconsumed batches: a producer
takes a permit from a semaphore before each sample and the consumer returns it with every batch
it takes, so the rate limiter never sees more than `prefetch_size` batches run ahead of training.
Prefetched batches are therefore slightly stale (as in Acme). Batches are numpy; moving them to
a device is the learner's business.

Stopping: the producer never blocks for long. It samples with a short timeout and keeps whatever
a timed-out sample had already been given (`RateLimiterTimeout.partial`), so polling loses no
samples; between polls it checks the stop flag. `close()` therefore returns promptly even while
the table is starved, without closing the table. An exception in the producer (including
`TableClosedError`) is re-raised by the consumer's next `next()`; after that, or after `close()`,
the iterator is exhausted.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Protocol

import numpy as np
import tree

from dmpo.replay.rate_limiters import RateLimiterTimeout


class Sampleable(Protocol):
    def sample(self, batch_size: int, timeout: float | None = None) -> Any: ...


class _Failure:
    def __init__(self, error: BaseException):
        self.error = error


_DONE = object()


class PrefetchingIterator:
    """An iterator of `[batch_size, ...]` batches from `table_like`, prefetched on a thread.

    Args:
      table_like: anything with `sample(batch_size, timeout=...)` (a `Table` or a proxy of one).
      batch_size: items per batch.
      prefetch_size: most batches sampled ahead of the consumer (≥ 1).
      timeout: longest a `next()` waits for a batch before raising TimeoutError (None = forever).
      poll_interval: how long one sample call may block before the stop flag is checked again.
      num_workers: sampling threads. Table locking is short (frames are interleaved and batches
        joined outside the lock), and numpy copies release the GIL, so several workers help when
        assembling a batch is expensive (pixel stacks). Batches may then arrive out of order.
    """

    def __init__(
        self,
        table_like: Sampleable,
        batch_size: int,
        prefetch_size: int,
        *,
        timeout: float | None = None,
        poll_interval: float = 0.1,
        num_workers: int = 1,
    ):
        for name, value in (
            ("batch_size", batch_size),
            ("prefetch_size", prefetch_size),
            ("num_workers", num_workers),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be None or > 0 seconds, got {timeout!r}")
        if not poll_interval > 0:
            raise ValueError(f"poll_interval must be > 0 seconds, got {poll_interval!r}")
        self._table = table_like
        self._batch_size = batch_size
        self._timeout = timeout
        self._poll = poll_interval
        self._permits = threading.Semaphore(prefetch_size)
        self._ready: queue.SimpleQueue = queue.SimpleQueue()
        self._stop = threading.Event()
        self._finished = False
        self._count_lock = threading.Lock()
        self._produced = 0  # under _count_lock (several producers)
        self._consumed = 0  # written only by the consumer
        self._workers_done = 0
        self._threads = [
            threading.Thread(target=self._produce, name=f"replay-prefetch-{i}", daemon=True)
            for i in range(num_workers)
        ]
        for thread in self._threads:
            thread.start()

    # -- producer threads ----------------------------------------------------------------------

    def _produce(self) -> None:
        try:
            while not self._stop.is_set():
                if not self._permits.acquire(timeout=self._poll):
                    continue
                batch = self._sample_batch()
                if batch is None:  # stopped while sampling
                    break
                with self._count_lock:
                    self._produced += 1
                self._ready.put(batch)
        except BaseException as error:  # handed to the consumer
            self._ready.put(_Failure(error))
        finally:
            self._ready.put(_DONE)

    def _sample_batch(self) -> Any:
        """One full batch, assembled from partial samples if the table makes us wait; None if stopped."""
        parts: list = []
        needed = self._batch_size
        while needed:
            if self._stop.is_set():
                return None
            try:
                part = self._table.sample(needed, timeout=self._poll)
            except RateLimiterTimeout as timeout:
                if timeout.partial is None or not timeout.completed:
                    continue
                part = timeout.partial
            parts.append(part)
            needed -= tree.flatten(part)[0].shape[0]
        if len(parts) == 1:
            return parts[0]
        return tree.map_structure(lambda *leaves: np.concatenate(leaves), *parts)

    # -- consumer ------------------------------------------------------------------------------

    def __iter__(self) -> PrefetchingIterator:
        return self

    def __next__(self) -> Any:
        if self._finished:
            raise StopIteration
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        item = self._take(deadline)
        if isinstance(item, _Failure):
            self._finished = True
            self._stop.set()
            raise item.error
        self._consumed += 1
        self._permits.release()
        return item

    def _take(self, deadline: float | None) -> Any:
        """The next batch or failure from the queue; StopIteration once every worker is done."""
        while True:
            wait = self._poll if deadline is None else min(self._poll, deadline - time.monotonic())
            try:
                item = self._ready.get(timeout=max(wait, 0.0))
            except queue.Empty:
                if self._stop.is_set():
                    self._finished = True
                    raise StopIteration from None
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(
                        f"no batch of {self._batch_size} within {self._timeout} s "
                        "(the table is empty or the rate limiter is holding samples back)"
                    ) from None
                continue
            if item is not _DONE:
                return item
            self._workers_done += 1
            if self._workers_done == len(self._threads):
                self._finished = True
                raise StopIteration

    @property
    def ready(self) -> int:
        """Batches sampled and not yet taken by the consumer."""
        with self._count_lock:
            return self._produced - self._consumed

    def close(self, timeout: float | None = None) -> None:
        """Stop the producers and join them (each returns within about one poll interval)."""
        self._stop.set()
        self._finished = True
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in self._threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        alive = [t.name for t in self._threads if t.is_alive()]
        if alive:
            raise RuntimeError(f"prefetch threads {alive} did not stop within {timeout} s")

    def __enter__(self) -> PrefetchingIterator:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        stop = getattr(self, "_stop", None)
        if stop is not None:
            stop.set()
