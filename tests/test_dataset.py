"""PrefetchingIterator: shapes, the prefetch bound, clean shutdown, error propagation, no lost samples."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from dm_env import specs

from dmpo.replay import (
    MinSize,
    PrefetchingIterator,
    SampleToInsertRatio,
    Table,
    TableClosedError,
)

pytestmark = pytest.mark.timeout(120)  # a blocking bug should fail, not hang the suite

SIGNATURE = {"obs": specs.Array((3,), np.float32), "k": specs.Array((), np.int64)}


def items(keys):
    keys = np.asarray(keys, dtype=np.int64)
    return {"obs": np.repeat(keys[:, None], 3, 1).astype(np.float32), "k": keys}


def wait_for(predicate, seconds=10.0):
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


def test_yields_batches_of_the_right_shape():
    table = Table(SIGNATURE, 50, MinSize(1), seed=0)
    table.insert_batch(items(range(50)))
    with PrefetchingIterator(table, batch_size=8, prefetch_size=2) as iterator:
        for _, batch in zip(range(5), iterator, strict=False):
            assert batch["obs"].shape == (8, 3) and batch["obs"].dtype == np.float32
            assert batch["k"].shape == (8,) and batch["k"].dtype == np.int64
            np.testing.assert_array_equal(batch["obs"], np.repeat(batch["k"][:, None], 3, 1))


class CountingPermits:
    """Stands in for a PrefetchingIterator's permit semaphore: counts the polls that found no room."""

    def __init__(self, semaphore) -> None:
        self._semaphore = semaphore
        self.refused = 0

    def acquire(self, *args, **kwargs) -> bool:
        got = self._semaphore.acquire(*args, **kwargs)
        self.refused += not got
        return got

    def release(self, *args, **kwargs) -> None:
        self._semaphore.release(*args, **kwargs)


def count_refusals(iterator: PrefetchingIterator) -> CountingPermits:
    iterator._permits = permits = CountingPermits(iterator._permits)  # read anew at every poll
    return permits


def wait_for_refusals(permits: CountingPermits, count: int) -> None:
    """Until `count` more polls found no room: each producer had the chance to run further ahead."""
    start = permits.refused
    wait_for(lambda: permits.refused >= start + count)


def test_keeps_at_most_prefetch_size_batches_ahead():
    table = Table(SIGNATURE, 50, MinSize(1), seed=0)
    table.insert_batch(items(range(50)))
    iterator = PrefetchingIterator(table, batch_size=4, prefetch_size=3, poll_interval=0.01)
    permits = count_refusals(iterator)
    wait_for(lambda: iterator.ready == 3)
    wait_for_refusals(permits, 2)
    assert iterator.ready == 3 and table.stats().samples == 12
    next(iterator)
    wait_for(lambda: table.stats().samples == 16)
    wait_for_refusals(permits, 2)
    assert iterator.ready == 3 and table.stats().samples == 16
    iterator.close()


def test_close_while_the_producer_waits_on_an_empty_table():
    table = Table(SIGNATURE, 10, MinSize(1))
    iterator = PrefetchingIterator(table, batch_size=4, prefetch_size=2, poll_interval=0.02)
    wait_for(lambda: table.stats().waiting_samples == 1)
    started = time.monotonic()
    iterator.close(timeout=5)
    assert time.monotonic() - started < 1.0
    assert not any(t.is_alive() for t in iterator._threads) and not table.stats().closed
    with pytest.raises(StopIteration):
        next(iterator)


def test_table_close_reaches_the_consumer():
    table = Table(SIGNATURE, 10, MinSize(1))
    iterator = PrefetchingIterator(table, batch_size=4, prefetch_size=2, poll_interval=5.0)
    wait_for(lambda: table.stats().waiting_samples == 1)
    table.close()  # wakes the producer's sample immediately, whatever the poll interval
    with pytest.raises(TableClosedError):
        next(iterator)
    with pytest.raises(StopIteration):
        next(iterator)
    iterator.close(timeout=5)


def test_producer_errors_are_raised_in_the_consumer():
    class Broken:
        def __init__(self):
            self.calls = 0

        def sample(self, batch_size, timeout=None):
            self.calls += 1
            if self.calls == 2:
                raise ValueError("boom")
            return items(np.zeros(batch_size))

    with PrefetchingIterator(Broken(), batch_size=2, prefetch_size=1) as iterator:
        assert next(iterator)["k"].shape == (2,)
        with pytest.raises(ValueError, match="boom"):
            next(iterator)
        with pytest.raises(StopIteration):
            next(iterator)


def test_consumer_timeout():
    table = Table(SIGNATURE, 10, MinSize(1))
    with PrefetchingIterator(
        table, batch_size=2, prefetch_size=1, timeout=0.2, poll_interval=0.05
    ) as iterator:
        with pytest.raises(TimeoutError, match="no batch of 2 within 0.2 s"):
            next(iterator)


def test_partial_samples_are_kept_across_polls():
    """A starved producer polls with short timeouts; the samples each poll got must not be lost."""
    limiter = SampleToInsertRatio(1.0, 1, (0.0, 100.0))  # one sample per insert
    table = Table(SIGNATURE, 100, limiter, seed=0)
    iterator = PrefetchingIterator(table, batch_size=8, prefetch_size=1, timeout=10, poll_interval=0.01)

    def trickle():
        for k in range(32):
            table.insert({"obs": np.full(3, k, np.float32), "k": np.int64(k)})
            time.sleep(0.006)

    writer = threading.Thread(target=trickle)
    writer.start()
    batches = [next(iterator) for _ in range(4)]
    writer.join()
    iterator.close()
    assert all(b["k"].shape == (8,) for b in batches)
    assert table.stats().samples == 32  # every admitted sample reached the consumer


def test_argument_errors():
    table = Table(SIGNATURE, 10, MinSize(1))
    for kwargs, name in (({"batch_size": 0}, "batch_size"), ({"prefetch_size": 0}, "prefetch_size")):
        with pytest.raises(ValueError, match=name):
            PrefetchingIterator(table, **{"batch_size": 2, "prefetch_size": 1, **kwargs})
    with pytest.raises(ValueError, match="timeout"):
        PrefetchingIterator(table, 2, 1, timeout=0)


def test_several_workers_share_the_prefetch_bound():
    table = Table(SIGNATURE, 50, MinSize(1), seed=0)
    table.insert_batch(items(range(50)))
    iterator = PrefetchingIterator(table, batch_size=4, prefetch_size=3, poll_interval=0.01, num_workers=3)
    batches = [next(iterator) for _ in range(10)]
    assert all(b["k"].shape == (4,) for b in batches)
    permits = count_refusals(iterator)
    wait_for(lambda: iterator.ready == 3)
    wait_for_refusals(permits, 2 * 3)  # two polls of each of the three workers
    assert table.stats().samples == (10 + 3) * 4  # consumed + at most prefetch_size ahead
    iterator.close(timeout=5)
    assert not any(t.is_alive() for t in iterator._threads)
