"""The shared counter: one root `Counter` in a Ray actor, and the proxy that child counters push to.

Every node owns a local child `Counter(parent=RemoteCounter(service), prefix=...)`; the child
accumulates and pushes its counts at most once per second (spec §7.5), so the service sees a bounded
number of calls however fast the nodes step. The driver reads the totals from the service for the
progress line and the stop conditions, and the learner stores them in its checkpoint for resume.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ray

from dmpo.utils.counting import Counter

Number = int | float


class CounterService:
    """Root counter living in its own Ray actor (threaded: calls never wait on each other long)."""

    def __init__(self) -> None:
        self._counter = Counter()

    def increment(self, **counts: Number) -> dict[str, Number]:
        return self._counter.increment(**counts)

    def get_counts(self) -> dict[str, Number]:
        return self._counter.get_counts()

    def restore(self, counts: Mapping[str, Number]) -> dict[str, Number]:
        """Adds checkpointed totals (resume); counts pushed before this call are kept on top."""
        return self._counter.increment(**counts)

    def ping(self) -> bool:
        return True


RemoteCounterService = ray.remote(num_cpus=0, max_concurrency=8)(CounterService)


class RemoteCounter:
    """Parent proxy for a local `Counter`: forwards a push to the counter service and waits for totals.

    The wait is bounded by `timeout` seconds so a dead service surfaces as an error in the pushing node
    instead of a hang.
    """

    def __init__(self, service: Any, timeout: float = 60.0) -> None:
        self._service = service
        self._timeout = timeout

    def increment(self, **counts: Number) -> dict[str, Number]:
        return ray.get(self._service.increment.remote(**counts), timeout=self._timeout)

    def get_counts(self) -> dict[str, Number]:
        return ray.get(self._service.get_counts.remote(), timeout=self._timeout)


def make_child_counter(service: Any, prefix: str, time_delta: float = 1.0) -> Counter:
    """A node's local counter, pushing `<prefix>_<key>` counts to the service at most every `time_delta` s."""
    return Counter(parent=RemoteCounter(service), prefix=prefix, time_delta=time_delta)
