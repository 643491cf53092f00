"""The learner's run loop, shared by the overlapped single-process agent and the learner node.

Each pass takes the next batch *outside* the lock, then steps under it. Waiting for data while
holding the lock would deadlock with whoever needs that lock to produce the data: the acting thread
taking a checkpoint (it is the only inserter), or an actor waiting for its first parameters (the
learner node serves them under the same lock).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

from dmpo.agent.learning.learner import BatchSlot


class SteppingLoop:
    """Feeds `learner` (built on `handoff`) with batches from `batches`: `learner.batches_per_step`
    batches per `step()` call, counted in updates (`self.steps`).

    `after_step` runs under the lock after every call (e.g. to publish the new parameters).
    """

    def __init__(self, learner: Any, batches: Iterator[Any], handoff: BatchSlot, *,
                 lock: threading.Lock, stop: threading.Event,
                 after_step: Callable[[], None] | None = None) -> None:
        self.learner = learner
        self._batches = batches
        self._handoff = handoff
        self._lock = lock
        self._stop = stop
        self._after_step = after_step
        self.steps = 0

    def run(self, max_steps: int | None = None) -> int:
        """Steps until `stop` is set, the batches run out, or `self.steps` reaches `max_steps`."""
        per_call = self.learner.batches_per_step
        while not self._stop.is_set() and (max_steps is None or self.steps < max_steps):
            try:
                batches = [next(self._batches) for _ in range(per_call)]
            except StopIteration:
                break
            with self._lock:
                if self._stop.is_set():
                    break
                for batch in batches:
                    self._handoff.put(batch)
                self.learner.step()
                self.steps += per_call
                if self._after_step is not None:
                    self._after_step()
        return self.steps
