"""The replay node: the builder's replay table served from a Ray actor (algorithm.md §2, §7.2).

The table comes from `DMPOBuilder.make_table`, exactly as in the single-process agent: a
`FrameStackTable` for stacked pixel observations, under the builder's `"ratio"` rate limiter unless
the service config names another. A resumed run's table is loaded from the checkpoint's replay file.

The table's rate limiter blocks callers, so the actor is threaded and its methods run in separate
concurrency groups — inserts, samples and control calls (stats, save, close) each have their own
threads. A writer blocked by the ratio limiter can therefore never starve the sampler that would
unblock it, and `stats()` answers while both sides wait.

A sample waits at most `call_timeout` seconds inside the service and then returns what it was
admitted so far — a partial batch, or None — because the table has already counted those samples
against the ratio: dropping them would starve the learner while the counter keeps rising.
`replay_client.RemoteTableSampler` turns a partial batch back into the table's own
`RateLimiterTimeout(partial=...)`, so the learner's `PrefetchingIterator` joins partials into full
batches exactly as it does in one process. An insert waits as long as the limiter says: that wait is
the backpressure writers feel, and `close()` ends it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import ray

from dmpo.agent.builder import DMPOBuilder
from dmpo.run.distributed.common import NODE_OPTIONS


@dataclasses.dataclass(frozen=True)
class ReplayServiceConfig:
    """How the replay node is built and how many callers it serves at once."""

    seed: int | None = None
    rate_limiter: Any = None
    """A `dmpo.replay` rate limiter; None: the builder's `"ratio"` limiter."""
    max_concurrent_inserts: int = 8
    max_concurrent_samples: int = 4
    call_timeout: float = 1.0
    """Seconds a blocked sample waits inside the service before returning what it has."""


class ReplayService:
    """Holds the table; see the module docstring for the threading model."""

    def __init__(self, builder: DMPOBuilder, config: ReplayServiceConfig,
                 restore_path: str | None = None) -> None:
        self._call_timeout = config.call_timeout
        limiter = config.rate_limiter
        if limiter is None:
            limiter = builder.make_rate_limiter("ratio")
        self._table = builder.make_table(limiter, seed=config.seed)
        if restore_path is not None:
            self._table.load(restore_path)

    @ray.method(concurrency_group="insert")
    def insert_batch(self, items: Any, priorities: Any = None) -> int:
        """Inserts items with a leading batch dimension; returns how many were inserted."""
        self._table.insert_batch(items, priorities, timeout=None)
        return len(priorities) if priorities is not None else _leading_dim(items)

    @ray.method(concurrency_group="sample")
    def sample(self, batch_size: int, timeout: float | None = None) -> Any:
        """`[B, …]`, or fewer items (or None) if the limiter held the rest back (module docstring)."""
        from dmpo.replay import RateLimiterTimeout

        wait = self._call_timeout if timeout is None else min(timeout, self._call_timeout)
        try:
            return self._table.sample(batch_size, timeout=wait)
        except RateLimiterTimeout as timeout_error:
            return timeout_error.partial

    @ray.method(concurrency_group="control")
    def stats(self) -> Any:
        return self._table.stats()

    @ray.method(concurrency_group="control")
    def frame_stats(self) -> dict[str, float] | None:
        """Frames alive per stored item (frame-deduplicating tables only, else None)."""
        frame_stats = getattr(self._table, "frame_stats", None)
        return None if frame_stats is None else frame_stats()

    @ray.method(concurrency_group="control")
    def save(self, path: str) -> str:
        self._table.save(path)
        return path

    @ray.method(concurrency_group="control")
    def close(self) -> None:
        self._table.close()

    @ray.method(concurrency_group="control")
    def describe(self) -> dict[str, Any]:
        """What this node built (parity tests): table class, rate limiter, signature, capacity."""
        return {"table_class": type(self._table).__name__, "rate_limiter": self._table.rate_limiter,
                "signature": self._table.signature, "max_size": self._table.max_size}

    @ray.method(concurrency_group="control")
    def ping(self) -> bool:
        return True


def _leading_dim(items: Any) -> int:
    import tree

    return int(tree.flatten(items)[0].shape[0])


def make_replay_service(builder: DMPOBuilder, config: ReplayServiceConfig, *, restore_path: str | None = None,
                        name: str | None = None, namespace: str | None = None,
                        resources: dict[str, float] | None = None) -> Any:
    """Starts the replay node and returns its Ray actor handle."""
    groups = {
        "insert": config.max_concurrent_inserts,
        "sample": config.max_concurrent_samples,
        "control": 2,
    }
    cls = ray.remote(num_cpus=0, max_restarts=0, concurrency_groups=groups, **NODE_OPTIONS)(ReplayService)
    options: dict[str, Any] = {"resources": resources or {}}
    if name is not None:
        options.update(name=name, namespace=namespace)
    return cls.options(**options).remote(builder, config, restore_path)
