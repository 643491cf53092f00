"""Client-side batching of inserts.

A distributed actor produces one item per environment step, but every call to a remote table
costs a round trip (≈ 1 ms for a Ray actor call, stack-notes.md). `BatchedWriter` collects items
in preallocated `[batch_size, ...]` buffers and hands them over with one `insert_batch` call.
Items are checked against a signature on arrival (the table's, if given, else the first item's),
so a malformed item fails at the actor's `insert`, not later inside the table.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from dmpo.replay.signature import Signature, SignatureError


class BatchInsertable(Protocol):
    def insert_batch(self, items: Any, priorities: Any = None, timeout: float | None = None) -> None: ...


class BatchedWriter:
    """Buffers items and forwards them `batch_size` at a time to `table_like.insert_batch`.

    `flush()` sends what is buffered (call it at shutdown; `close()` and leaving a `with` block do).
    If `insert_batch` raises, the buffered items are kept so a later flush can retry.
    """

    def __init__(
        self,
        table_like: BatchInsertable,
        batch_size: int,
        *,
        signature: Any = None,
        timeout: float | None = None,
    ):
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        self._table = table_like
        self._batch_size = batch_size
        self._timeout = timeout
        self._signature = Signature(signature) if signature is not None else None
        self._buffers: list[np.ndarray] | None = None
        self._priorities = np.ones(batch_size, dtype=np.float64)
        self._count = 0

    @property
    def pending(self) -> int:
        """Items buffered and not yet sent."""
        return self._count

    def _allocate(self) -> list[np.ndarray]:
        assert self._signature is not None
        return [
            np.empty((self._batch_size, *shape), dtype)
            for shape, dtype in zip(self._signature.shapes, self._signature.dtypes, strict=True)
        ]

    def insert(self, item: Any, priority: float = 1.0) -> None:
        if self._signature is None:
            try:
                self._signature = Signature(item)
            except TypeError as err:
                raise SignatureError(f"cannot infer a signature from the first item: {err}") from None
        leaves = self._signature.flatten_item(item)
        if self._buffers is None:
            self._buffers = self._allocate()
        row = self._count
        for buffer, leaf in zip(self._buffers, leaves, strict=True):
            buffer[row] = leaf
        self._priorities[row] = priority
        self._count = row + 1
        if self._count == self._batch_size:
            self.flush()

    def flush(self) -> None:
        """Send the buffered items (if any) with one insert_batch call."""
        if not self._count:
            return
        assert self._buffers is not None and self._signature is not None
        count = self._count
        items = self._signature.unflatten([buffer[:count] for buffer in self._buffers])
        priorities = self._priorities[:count]
        self._table.insert_batch(
            items, priorities=None if np.all(priorities == 1.0) else priorities.copy(), timeout=self._timeout
        )
        # Fresh buffers: the receiver may hold on to the arrays it was given.
        self._buffers = None
        self._priorities[:] = 1.0
        self._count = 0

    def close(self) -> None:
        self.flush()

    def __enter__(self) -> BatchedWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
