"""The evaluator node: the target policy's mean on `environment_factory(True)` (spec §7.2, §8.2 item 17).

It evaluates in rounds: fetch the learner's latest target policy (blocking — a round always scores
the newest weights), play `episodes_per_round` episodes without an adder, then wait until
`period_seconds` have passed since the round began. Episodes go to the `evaluator` logger and the
`evaluator_*` counts; the latest returns are kept for the driver's progress line.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import ray

from dmpo.distributed.common import (
    ACTING_NODE_ENV,
    NodeSettings,
    make_environment,
    make_networks,
    make_node_logger,
)
from dmpo.distributed.counter_service import make_child_counter
from dmpo.distributed.variables import AsyncVariableClient


class EvaluatorNode:
    """See the module docstring."""

    def __init__(self, settings: NodeSettings, seed: int, learner: Any, counter_service: Any, *,
                 episodes_per_round: int = 1, period_seconds: float = 0.0) -> None:
        from dmpo.acting import Actor
        from dmpo.runners.environment_loop import EnvironmentLoop

        if not isinstance(episodes_per_round, int) or episodes_per_round < 1:
            raise ValueError(f"episodes_per_round must be a positive integer, got {episodes_per_round!r}")
        if not period_seconds >= 0:
            raise ValueError(f"evaluator period_seconds must be >= 0, got {period_seconds!r}")
        self._episodes_per_round = episodes_per_round
        self._period = float(period_seconds)
        self._stop = threading.Event()
        self._settings, self._seed = settings, seed
        networks = make_networks(settings)
        # Periodic blocking refreshes only: the period is never reached by the step count.
        self._variables = AsyncVariableClient(learner.get_variables.remote, update_period=2**62)
        actor = Actor(networks, self._variables, seed=seed, deterministic=True, update_period=1)
        self._counter = make_child_counter(counter_service, "evaluator", settings.counter_time_delta)
        self._logger = make_node_logger("evaluator", settings.run_dir, time_delta=0.0)
        self._make_loop = lambda environment: EnvironmentLoop(
            environment, actor, self._counter, self._logger, label="evaluator",
            should_stop=self._stop.is_set, on_episode_end=self._record)
        self.returns: list[tuple[int, float]] = []  # (learner variable version, episode return)

    def _record(self, row: dict[str, Any]) -> None:
        self.returns.append((self._variables.version, float(row["episode_return"])))

    def run(self) -> list[tuple[int, float]]:
        """Evaluates until `stop()`; returns every (variable version, return) pair."""
        try:
            # Built on this thread: a pixel environment's OpenGL context is bound to its creating thread.
            environment = make_environment(self._settings.environment, is_eval=True, seed=self._seed)
            loop = self._make_loop(environment)
            while not self._stop.is_set():
                started = time.monotonic()
                self._variables.update(wait=True)
                loop.run(num_episodes=self._episodes_per_round)
                self._stop.wait(max(0.0, self._period - (time.monotonic() - started)))
        finally:
            self._counter.sync()
            self._logger.close()
        return self.returns

    def stop(self) -> None:
        self._stop.set()

    def ping(self) -> int:
        return len(self.returns)

    def latest(self) -> tuple[int, int, float] | None:
        """`(episodes evaluated so far, learner step of the weights, return)` of the newest episode."""
        return (len(self.returns), *self.returns[-1]) if self.returns else None


def make_evaluator_node(settings: NodeSettings, seed: int, learner: Any, counter_service: Any,
                        **kwargs: Any) -> Any:
    cls = ray.remote(num_cpus=0, max_concurrency=3, max_restarts=0)(EvaluatorNode)
    return cls.options(runtime_env={"env_vars": dict(ACTING_NODE_ENV)}).remote(
        settings, seed, learner, counter_service, **kwargs)
