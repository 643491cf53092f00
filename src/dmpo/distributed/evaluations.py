"""The driver's side of evaluation rounds: each row the evaluator logs reaches the driver once.

`EvaluationRows` keeps at most one `rows(start)` call to the evaluator outstanding and never waits for
it during a monitoring pass (`poll()`), so a starting or busy evaluator never slows the driver's
loop; `drain(timeout)` waits, for the last rows when the program stops. Every new row, in order, is
handed to `on_row` with its index — the one place the driver acts on evaluations
(`DistributedProgram._on_evaluation`).
A replaced evaluator node starts again from its first row (`reset`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ray


class EvaluationRows:
    """See the module docstring. `evaluator` is the evaluator node's handle (None: no evaluator)."""

    def __init__(self, on_row: Callable[[int, dict[str, Any]], None]) -> None:
        self._on_row = on_row
        self._evaluator: Any = None
        self._seen = 0  # rows of the current evaluator node handed on
        self._pending: Any = None

    def reset(self, evaluator: Any) -> None:
        """Collects from a new evaluator node (a replacement numbers its rows from 0 again)."""
        self._evaluator, self._seen, self._pending = evaluator, 0, None

    def poll(self) -> None:
        """Hands on the rows of an answered call and sends the next one; never waits."""
        if self._evaluator is None:
            return
        if self._pending is not None:
            ready, _ = ray.wait([self._pending], timeout=0)
            if not ready:
                return
            self._take(self._pending, timeout=None)
        self._pending = self._evaluator.rows.remote(self._seen)

    def drain(self, timeout: float) -> None:
        """Waits up to `timeout` seconds for every row logged so far (stopping); quiet if the node is gone."""
        if self._evaluator is None:
            return
        if self._pending is not None:
            self._take(self._pending, timeout)
        try:
            self._take(self._evaluator.rows.remote(self._seen), timeout)
        except Exception:  # the node is already gone
            pass

    def _take(self, ref: Any, timeout: float | None) -> None:
        self._pending = None
        try:
            rows = ray.get(ref, timeout=timeout)
        except Exception:  # a dead evaluator: the program replaces it and calls reset()
            return
        for row in rows:  # one call outstanding at a time: each answer starts where the last one ended
            self._seen += 1
            self._on_row(self._seen - 1, row)
