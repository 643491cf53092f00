"""An acting node: its own environment and seed, the target policy, experience to replay (algorithm.md §7.2).

Per step: `select_actions` with the builder's behaviour policy (a Gaussian sample) → environment
step → the builder's n-step adder → `BatchedWriter` → `RemoteReplayWriter` (one remote call per
batch, bounded in flight, so the rate limiter's backpressure stops this loop) → `actor.update()` →
the variable client, which fetches the learner's target policy every `variable_update_period` steps
without waiting for it. With `num_envs` = N > 1 the node steps N environments in lockstep
(`dmpo.agent.environment_loop`): one batched policy call per step, one adder per environment, all
into the one writer; environment i is built with `lockstep_env_seeds(seed, N)[i]` (environment 0 with
the node's seed, as with one environment).

The node is a threaded Ray actor: `run()` loops over episodes on one thread while `stop()` and
`stats()` answer on another. `run()` returns (after finishing its current episode) once `stop()` is
called or `max_steps` is reached, having flushed its writer and pushed its counts.

The run's budget (`total_steps`, `TrainConfig.steps`) is held by the actors themselves: at every
episode end a node pushes its counts to the counter service and reads the total back, and stops once
the total reaches the budget. Every episode counted before the total crossed it is below the budget,
and each node finishes at most one episode after that, so a run ends with fewer than
`steps + actors × longest episode` environment steps, whenever the driver's polls come.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import ray

from dmpo.run.distributed.common import ACTING_NODE_ENV, NODE_OPTIONS, NodeSettings, make_node_logger
from dmpo.run.distributed.counter_service import make_child_counter
from dmpo.run.distributed.replay_client import RemoteReplayWriter
from dmpo.run.distributed.variables import AsyncVariableClient
from dmpo.utils.seeds import lockstep_env_seeds


class ActorNode:
    """See the module docstring. `persist_logs`: only actor 0 writes its logs to the run directory."""

    def __init__(self, settings: NodeSettings, index: int, seed: int, learner: Any, replay: Any,
                 counter_service: Any, *, persist_logs: bool, insert_batch_size: int = 32,
                 max_inserts_in_flight: int = 2, total_steps: int | None = None) -> None:
        from dmpo.agent.environment_loop import EnvironmentLoop
        from dmpo.replay import BatchedWriter

        builder = settings.builder
        self.index = index
        self.seed = seed
        self._total_steps = total_steps
        self._counter_service = counter_service
        self._stop = threading.Event()
        self._settings = settings
        self._variables = AsyncVariableClient(learner.get_variables.remote, settings.variable_update_period)
        self._writer = RemoteReplayWriter(replay, max_in_flight=max_inserts_in_flight,
                                          should_stop=self._stop.is_set)
        self._batcher = BatchedWriter(self._writer, insert_batch_size, signature=builder.signature)
        # update_period=1: the variable client itself decides when to fetch (every call is cheap).
        self._adders = builder.make_adders(self._batcher, settings.num_envs)  # one per environment
        self._actor = builder.make_actor(self._variables, seed=seed, adders=self._adders)
        self._counter = make_child_counter(counter_service, "actor", settings.counter_time_delta)
        # The label the single-process trainer logs its episodes under, so tools read both modes alike.
        self._logger = make_node_logger("environment_loop", settings.run_dir if persist_logs else None,
                                        time_delta=settings.log_time_delta)
        self._make_loop = lambda environments: EnvironmentLoop(
            environments, self._actor, self._counter, self._logger, label="environment_loop",
            should_stop=self._stop.is_set, on_episode_end=self._count_episode)
        self.steps = 0
        self.episodes = 0

    def _count_episode(self, row: dict[str, Any]) -> None:
        self.steps += int(row["episode_length"])
        self.episodes += 1
        # One push per episode: the run's budget (module docstring) and the run's schedule, checked at
        # this episode end with the shared total, as one process checks at each of its episode ends
        # (`dmpo.lifecycle.schedule`, held by the counter service).
        total = int(self._counter.sync().get("actor_steps", 0))
        episode_return = float(np.sum(row["episode_return"]))
        # No timeout: a due checkpoint is written before this node goes on (a dead service raises).
        ray.get(self._counter_service.check_schedule.remote(total, episode_return))
        if self._total_steps is not None and total >= self._total_steps:
            self._stop.set()

    def describe(self) -> dict[str, Any]:
        """What this node built (parity tests): its adder's settings, signature and budget."""
        adder = self._adders[0]
        return {"num_adders": len(self._adders), "adder_class": type(adder).__name__,
                "n_step": adder.n_step, "discount": float(adder.discount),
                "signature": self._settings.builder.signature, "total_steps": self._total_steps}

    def run(self, max_steps: int | None = None) -> dict[str, Any]:
        """Acts until `stop()` or until at least `max_steps` steps of this node; returns `stats()`."""
        try:
            # Built on the thread that steps it: a pixel environment's OpenGL context belongs to the
            # thread that created it, and Ray runs methods on other threads than the constructor's.
            environments = [self._settings.env_factory(s)
                            for s in lockstep_env_seeds(self.seed, self._settings.num_envs)]
            counted = self.steps
            taken = self._make_loop(environments).run(num_steps=max_steps)
            self.steps = counted + taken  # with N > 1 also the steps of the episodes dropped at the stop
            self._batcher.flush()
            self._writer.flush()
        finally:
            self._counter.sync()
            self._logger.close()
        return self.stats()

    def stop(self) -> None:
        self._stop.set()

    def ping(self) -> int:
        return self.steps

    def stats(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "seed": self.seed,
            "steps": self.steps,
            "episodes": self.episodes,
            "variable_version": self._variables.version,
            "variable_fetches": self._variables.num_fetches,
            "variable_fetch_seconds": self._variables.fetch_seconds,
            "insert_blocked_seconds": self._writer.blocked_seconds,
            "items_sent": self._writer.items_sent,
        }


def make_actor_node(settings: NodeSettings, index: int, seed: int, learner: Any, replay: Any,
                    counter_service: Any, *, resources: dict[str, float] | None = None, **kwargs: Any) -> Any:
    """Starts actor `index` as a Ray actor (not restarted by Ray: the driver replaces it with a new seed)."""
    cls = ray.remote(num_cpus=0, max_concurrency=3, max_restarts=0, **NODE_OPTIONS)(ActorNode)
    return cls.options(runtime_env={"env_vars": dict(ACTING_NODE_ENV)}, resources=resources or {}).remote(
        settings, index, seed, learner, replay, counter_service, **kwargs)
