"""The replay node: one `dmpo.replay.Table` served from a Ray actor (spec §2, §7.2).

The table's rate limiter blocks callers, so the actor is threaded and its methods run in separate
concurrency groups — inserts, samples and control calls (stats, save, close) each have their own
threads. A writer blocked by the ratio limiter can therefore never starve the sampler that would
unblock it, and `stats()` answers while both sides wait.

A sample waits at most `call_timeout` seconds inside the service and then returns None (the caller
asks again), so sampler threads are never held by a learner that went away. An insert waits as long
as the limiter says: that wait is the backpressure writers feel, and `close()` ends it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import ray

from dmpo.config import DMPOConfig


def make_rate_limiter(config: DMPOConfig) -> Any:
    """The distributed table's limiter (spec §2): the sample/insert ratio, or `MinSize` when it is off.

    The ratio's error buffer is `max(0.1·spi·min_replay_size, 2·spi, 1)` (Acme's JAX guard, spec §8.2
    item 25), so the window is always wide enough for writers and the sampler not to deadlock.
    """
    from dmpo.replay import MinSize, SampleToInsertRatio

    if config.samples_per_insert is None:
        return MinSize(config.min_replay_size)
    return SampleToInsertRatio.from_agent_defaults(float(config.samples_per_insert), config.min_replay_size)


@dataclasses.dataclass(frozen=True)
class ReplayServiceConfig:
    """How the replay node is built and how many callers it serves at once."""

    max_size: int
    rate_limiter: Any
    """A `dmpo.replay` rate limiter (a small frozen dataclass, so it travels to the node as is)."""
    seed: int | None = None
    max_concurrent_inserts: int = 8
    max_concurrent_samples: int = 4
    call_timeout: float = 1.0
    """Seconds a blocked call waits inside the service before giving up (see the module docstring)."""


class ReplayService:
    """Holds the table; see the module docstring for the threading model."""

    def __init__(self, signature: Any, config: ReplayServiceConfig, restore_path: str | None = None) -> None:
        from dmpo.replay import Table

        self._call_timeout = config.call_timeout
        limiter = config.rate_limiter
        if restore_path is not None:
            self._table = Table.restore(restore_path, rate_limiter=limiter)
        else:
            self._table = Table(signature, config.max_size, limiter, seed=config.seed)

    @ray.method(concurrency_group="insert")
    def insert_batch(self, items: Any, priorities: Any = None) -> int:
        """Inserts items with a leading batch dimension; returns how many were inserted."""
        self._table.insert_batch(items, priorities, timeout=None)
        return len(priorities) if priorities is not None else _leading_dim(items)

    @ray.method(concurrency_group="sample")
    def sample(self, batch_size: int) -> Any:
        """A batch `[B, …]`, or None if the rate limiter held it back for `call_timeout` seconds."""
        from dmpo.replay import RateLimiterTimeout

        try:
            return self._table.sample(batch_size, timeout=self._call_timeout)
        except RateLimiterTimeout:
            return None

    @ray.method(concurrency_group="control")
    def stats(self) -> Any:
        return self._table.stats()

    @ray.method(concurrency_group="control")
    def save(self, path: str) -> str:
        return str(self._table.save(path))

    @ray.method(concurrency_group="control")
    def close(self) -> None:
        self._table.close()

    @ray.method(concurrency_group="control")
    def ping(self) -> bool:
        return True


def _leading_dim(items: Any) -> int:
    import tree

    return int(tree.flatten(items)[0].shape[0])


def make_replay_service(signature: Any, config: ReplayServiceConfig, *, restore_path: str | None = None,
                        name: str | None = None, namespace: str | None = None) -> Any:
    """Starts the replay node and returns its Ray actor handle."""
    groups = {
        "insert": config.max_concurrent_inserts,
        "sample": config.max_concurrent_samples,
        "control": 2,
    }
    cls = ray.remote(num_cpus=0, max_restarts=0, concurrency_groups=groups)(ReplayService)
    options: dict[str, Any] = {}
    if name is not None:
        options.update(name=name, namespace=namespace)
    return cls.options(**options).remote(signature, config, restore_path)
