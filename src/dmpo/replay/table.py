"""An in-process replay table: FIFO ring storage, a sampler and a Reverb-style rate limiter (algorithm.md §2).

Items are nests matching the table signature exactly (see `Signature`). The table holds at most
`max_size` items; inserting into a full table evicts the oldest (`deletes` += 1). Every item has a
key: its lifetime insert index, so the item with key k lives in slot k mod max_size.

Concurrency: one lock guards everything; inserts wait on one condition and samples on another,
each woken when the other side makes progress. A batch is admitted as that many single items in
order, taking as many as the limiter allows now and waiting for the rest, so batching never
changes what the limiter permits. Item data is copied in and out under the lock; checking and
flattening happen before it is taken.

Saving a table to a file and restoring it: `table_files`.

No jax here: the table runs inside Ray actors that must not initialise an accelerator.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

import numpy as np

from dmpo.replay.rate_limiters import (
    MinSize,
    RateLimiter,
    RateLimiterTimeout,
    SampleToInsertRatio,
    admissible_prefix,
)
from dmpo.replay.samplers import make_sampler
from dmpo.replay.signature import Signature
from dmpo.replay.storage import ArrayStorage
from dmpo.replay.table_files import TableFiles


class TableClosedError(RuntimeError):
    """The table was closed; pending and later inserts/samples raise this."""


@dataclasses.dataclass(frozen=True)
class TableStats:
    """A consistent snapshot of a table's counters (taken under its lock)."""

    name: str
    size: int
    max_size: int
    inserts: int
    samples: int
    deletes: int
    samples_per_insert: float  # samples / inserts so far (0.0 before the first insert)
    bytes_per_item: float  # storage bytes per stored item (FrameStackTable: measured, frames shared)
    rate_limiter: str  # the limiter and where the counters stand against it
    waiting_inserts: int  # calls currently blocked by the limiter
    waiting_samples: int
    closed: bool


class SampleBatch(NamedTuple):
    """What `Table.sample_with_info` returns."""

    data: Any  # the item nest, every leaf [B, ...]
    keys: np.ndarray  # int64 [B] lifetime insert index of each item (for update_priorities)
    probabilities: np.ndarray  # float64 [B] probability each item had of being drawn


def _check_timeout(timeout: float | None) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout >= 0:
        raise ValueError(f"timeout must be None or a number of seconds >= 0, got {timeout!r}")
    return time.monotonic() + timeout


def _check_priority(priority: Any) -> float:
    try:
        value = float(priority)
    except (TypeError, ValueError):
        raise ValueError(f"priority must be a finite number >= 0, got {priority!r}") from None
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"priority must be a finite number >= 0, got {priority!r}")
    return value


def _check_priorities(priorities: Any, count: int, name: str = "priorities") -> np.ndarray:
    if priorities is None:
        return np.ones(count, dtype=np.float64)
    values = np.asarray(priorities, dtype=np.float64)
    if values.shape != (count,):
        raise ValueError(f"{name} must have shape ({count},), got {values.shape}")
    if not np.all(np.isfinite(values) & (values >= 0)):
        raise ValueError(f"{name} must be finite and >= 0, got {values}")
    return values


def _check_max_size(max_size: Any) -> int:
    if isinstance(max_size, float) and max_size.is_integer():
        max_size = int(max_size)  # configs often write 1e6
    if isinstance(max_size, bool) or not isinstance(max_size, int | np.integer) or max_size < 1:
        raise ValueError(f"max_size must be an integer >= 1, got {max_size!r}")
    return int(max_size)


class Table(TableFiles):
    """A FIFO replay table with uniform or prioritized sampling and a rate limiter.

    Args:
      signature: nest of specs (anything with .shape/.dtype) every item must match exactly.
      max_size: capacity; the oldest item is evicted beyond it.
      rate_limiter: `MinSize` or `SampleToInsertRatio`; its min_size_to_sample must be ≤ max_size.
      sampler: "uniform" (algorithm.md §2) or "prioritized" (P ∝ priority**priority_exponent).
      priority_exponent: exponent for the prioritized sampler (≥ 0).
      seed: seeds the sampling RNG (PCG64); its state is saved with the table.
      name: used in messages and stats.
    """

    _storage_kind = "array"

    def __init__(
        self,
        signature: Any,
        max_size: int,
        rate_limiter: RateLimiter,
        *,
        sampler: Literal["uniform", "prioritized"] = "uniform",
        priority_exponent: float = 1.0,
        seed: int | None = None,
        name: str = "priority_table",
    ):
        max_size = _check_max_size(max_size)
        if not isinstance(rate_limiter, MinSize | SampleToInsertRatio):
            raise TypeError(
                f"rate_limiter must be MinSize or SampleToInsertRatio, got {type(rate_limiter).__name__}"
            )
        if rate_limiter.min_size_to_sample > max_size:
            raise ValueError(
                f"rate_limiter.min_size_to_sample={rate_limiter.min_size_to_sample} exceeds "
                f"max_size={max_size}: the table could never be sampled"
            )
        if isinstance(priority_exponent, bool) or not (
            isinstance(priority_exponent, int | float)
            and math.isfinite(priority_exponent)
            and priority_exponent >= 0
        ):
            raise ValueError(f"priority_exponent must be a finite number >= 0, got {priority_exponent!r}")
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        self._signature = Signature(signature)
        self._max_size = max_size
        self._limiter = rate_limiter
        self._name = name
        self._rng = np.random.Generator(np.random.PCG64(seed))
        self._sampler = make_sampler(sampler, max_size, self._rng, float(priority_exponent))
        self._storage = self._make_storage(self._signature, max_size)
        self._lock = threading.Lock()
        self._insert_cv = threading.Condition(self._lock)
        self._sample_cv = threading.Condition(self._lock)
        self._inserts = self._samples = self._deletes = 0
        self._waiting = {"insert": 0, "sample": 0}
        self._closed = False

    def _make_storage(self, signature: Signature, capacity: int) -> Any:
        return ArrayStorage(signature, capacity)

    # -- properties ----------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def max_size(self) -> int:
        return self._max_size

    @property
    def signature(self) -> Any:
        return self._signature.structure

    @property
    def rate_limiter(self) -> RateLimiter:
        return self._limiter

    @property
    def size(self) -> int:
        with self._lock:
            return self._inserts - self._deletes

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self._name!r}, max_size={self._max_size}, {self._limiter!r})"

    # -- admission -------------------------------------------------------------------------------

    def _admissible_inserts(self, wanted: int) -> int:
        ins, smp, dels, cap = self._inserts, self._samples, self._deletes, self._max_size
        size = ins - dels
        can_insert = self._limiter.can_insert
        # Item j of the batch sees j earlier inserts and the evictions those caused.
        return admissible_prefix(lambda j: can_insert(ins + j, smp, dels + max(0, size + j - cap)), wanted)

    def _admissible_samples(self, wanted: int) -> int:
        ins, smp, dels = self._inserts, self._samples, self._deletes
        can_sample = self._limiter.can_sample
        return admissible_prefix(lambda j: can_sample(ins, smp + j, dels), wanted)

    def _await(self, op: str, admissible: Callable[[int], int], wanted: int, deadline: float | None) -> int:
        """Wait (lock held) until ≥ 1 of `wanted` items is admissible; 0 means the deadline passed."""
        cv = self._insert_cv if op == "insert" else self._sample_cv
        if self._closed:
            raise TableClosedError(f"replay table {self._name!r} is closed")
        count = admissible(wanted)
        if count:
            return count
        self._waiting[op] += 1
        try:
            while True:
                if deadline is None:
                    cv.wait()
                else:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return 0
                    cv.wait(remaining)
                if self._closed:
                    raise TableClosedError(f"replay table {self._name!r} was closed while a {op} was waiting")
                count = admissible(wanted)
                if count:
                    return count
        finally:
            self._waiting[op] -= 1

    def _timeout_message(self, op: str, timeout: float | None, done: int, total: int) -> str:
        state = self._limiter.describe(self._inserts, self._samples, self._deletes)
        return f"{self._name}: {op} timed out after {timeout} s with {done}/{total} items admitted; {state}"

    # -- inserting -------------------------------------------------------------------------------

    def insert(self, item: Any, priority: float = 1.0, timeout: float | None = None) -> None:
        """Insert one unbatched item, waiting (up to `timeout` s) for the rate limiter."""
        leaves = self._signature.flatten_item(item)
        priority = _check_priority(priority)
        deadline = _check_timeout(timeout)
        prepared = self._storage.prepare_one(leaves)
        with self._lock:
            if not self._await("insert", self._admissible_inserts, 1, deadline):
                raise RateLimiterTimeout(self._timeout_message("insert", timeout, 0, 1))
            slot = self._inserts % self._max_size
            if self._inserts - self._deletes == self._max_size:
                self._deletes += 1  # FIFO: the slot being written holds the oldest item
            self._storage.write_one(slot, prepared)
            self._sampler.set_priority(slot, priority)
            self._inserts += 1
            self._sample_cv.notify_all()

    def insert_batch(self, items: Any, priorities: Any = None, timeout: float | None = None) -> None:
        """Insert a batch (leading dim on every leaf) as that many single inserts, in order.

        On timeout, the items already admitted stay inserted; `RateLimiterTimeout.completed` says
        how many.
        """
        leaves, count = self._signature.flatten_batch(items)
        priorities = _check_priorities(priorities, count)
        deadline = _check_timeout(timeout)
        if count == 0:
            return
        prepared = self._storage.prepare_batch(leaves, count)
        done = 0
        with self._lock:
            while done < count:
                # At most max_size per write so no slot is written twice in one chunk.
                wanted = min(count - done, self._max_size)
                admitted = self._await("insert", self._admissible_inserts, wanted, deadline)
                if not admitted:
                    message = self._timeout_message("insert_batch", timeout, done, count)
                    raise RateLimiterTimeout(message, completed=done)
                start = self._inserts % self._max_size
                self._deletes += max(0, self._inserts - self._deletes + admitted - self._max_size)
                self._storage.write_batch(start, prepared, done, admitted)
                self._sampler.set_priority_range(start, priorities[done : done + admitted])
                self._inserts += admitted
                done += admitted
                self._sample_cv.notify_all()

    # -- sampling --------------------------------------------------------------------------------

    def sample(self, batch_size: int, timeout: float | None = None) -> Any:
        """A batch of `batch_size` items drawn with replacement: the item nest with leaves [B, ...]."""
        return self._sample(batch_size, timeout, with_info=False).data

    def sample_with_info(self, batch_size: int, timeout: float | None = None) -> SampleBatch:
        """Like `sample`, also returning each item's key and sampling probability."""
        return self._sample(batch_size, timeout, with_info=True)

    def _sample(self, batch_size: int, timeout: float | None, with_info: bool) -> SampleBatch:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int | np.integer) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        deadline = _check_timeout(timeout)
        parts: list[tuple[list, Any, np.ndarray]] = []
        done = 0
        with self._lock:
            while done < batch_size:
                admitted = self._await("sample", self._admissible_samples, batch_size - done, deadline)
                if not admitted:
                    partial = self._join(parts, with_info=False).data if parts else None
                    message = self._timeout_message("sample", timeout, done, batch_size)
                    raise RateLimiterTimeout(message, completed=done, partial=partial)
                slots, probabilities = self._sampler.sample(self._inserts - self._deletes, admitted)
                keys = self._keys(slots) if with_info else None
                parts.append((self._storage.read(slots), keys, probabilities))
                self._samples += admitted
                done += admitted
                self._insert_cv.notify_all()
        return self._join(parts, with_info)

    def _join(self, parts: list, with_info: bool) -> SampleBatch:
        finalize = self._storage.finalize
        if len(parts) == 1:
            leaves, keys, probabilities = parts[0]
            leaves = finalize(leaves)
        else:
            leaves = [np.concatenate(column) for column in zip(*(finalize(p[0]) for p in parts), strict=True)]
            keys = np.concatenate([p[1] for p in parts]) if with_info else None
            probabilities = np.concatenate([p[2] for p in parts])
        return SampleBatch(self._signature.unflatten(leaves), keys, probabilities)

    def _keys(self, slots: np.ndarray) -> np.ndarray:
        newest = self._inserts - 1
        return newest - (newest - slots) % self._max_size

    def get(self, keys: Any) -> Any:
        """The items with these keys (lifetime insert indices) as a batch, without sampling.

        For inspection and tests: counters and the rate limiter are not involved. KeyError if a
        key is not in the table (never inserted, or evicted).
        """
        keys = np.asarray(keys)
        if keys.ndim != 1 or (keys.size and keys.dtype.kind not in "iu"):
            raise ValueError(f"keys must be a 1-D integer array, got {keys.dtype}{list(keys.shape)}")
        with self._lock:
            oldest = self._deletes
            missing = keys[(keys < oldest) | (keys >= self._inserts)]
            if missing.size:
                raise KeyError(
                    f"keys {missing[:5].tolist()} are not in the table (live: {oldest}..{self._inserts - 1})"
                )
            leaves = self._storage.read(keys.astype(np.int64) % self._max_size)
        return self._signature.unflatten(self._storage.finalize(leaves))

    # -- priorities ------------------------------------------------------------------------------

    def update_priorities(self, keys: Any, priorities: Any) -> int:
        """Set the priorities of the items with these keys; keys of evicted items are ignored.

        Returns how many keys were current. A uniform table accepts and ignores priorities.
        """
        keys = np.asarray(keys)
        if keys.ndim != 1 or (keys.size and keys.dtype.kind not in "iu"):
            raise ValueError(f"keys must be a 1-D integer array, got {keys.dtype}{list(keys.shape)}")
        keys = keys.astype(np.int64, copy=False)
        values = _check_priorities(priorities, keys.shape[0])
        with self._lock:
            oldest = self._deletes  # keys are consecutive: deletes = inserts − size
            current = (keys >= oldest) & (keys < self._inserts)
            self._sampler.set_priorities(keys[current] % self._max_size, values[current])
            return int(np.count_nonzero(current))

    # -- stats and shutdown ----------------------------------------------------------------------

    def stats(self) -> TableStats:
        with self._lock:
            ins, smp, dels = self._inserts, self._samples, self._deletes
            return TableStats(
                name=self._name,
                size=ins - dels,
                max_size=self._max_size,
                inserts=ins,
                samples=smp,
                deletes=dels,
                samples_per_insert=smp / ins if ins else 0.0,
                bytes_per_item=self._storage.bytes_per_item,
                rate_limiter=self._limiter.describe(ins, smp, dels),
                waiting_inserts=self._waiting["insert"],
                waiting_samples=self._waiting["sample"],
                closed=self._closed,
            )

    def close(self) -> None:
        """Close the table: every blocked and later insert/sample raises TableClosedError."""
        with self._lock:
            self._closed = True
            self._insert_cv.notify_all()
            self._sample_cv.notify_all()
