"""The lockstep loop over N environments that one actor drives with one policy call per step.

Per step: stack the N current observations → `agent.select_actions` (one batched call) → step every
environment → for each environment i in order: `agent.observe(action_i, timestep_i, env=i)` and
`agent.update()` (so a learning schedule that counts environment steps sees each of them, exactly as
in `EnvironmentLoop`). Environments end their episodes independently: one that reaches LAST logs its
episode row (the keys of `EnvironmentLoop`), calls `on_episode_end`, and is reset while the others
go on. `steps` is counted on every step (N at a time), so the count is always the environment steps
taken; `episodes` at each episode end.

Stopping: `should_stop` and `request_stop` are looked at after the episode ends of a step (and
before the first step); `num_steps` ends the run at the first episode end once that many steps were
taken. The environments that are in the middle of an episode then drop it (`agent.drop_episode`):
the transitions their adders already wrote stay in replay. With one environment every stop falls on
an episode end, so nothing is ever dropped and the loop acts, observes, counts and logs like
`EnvironmentLoop` (a training run is tested bit for bit against a stored one).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import dm_env
import numpy as np

from dmpo.agent.acting import stack_observations
from dmpo.agent.environment_loop import _add_reward, _check_count, _plain_return
from dmpo.reporting.logging import Logger, make_logger
from dmpo.utils.counting import Counter
from dmpo.utils.seeds import lockstep_env_seeds  # noqa: F401 - re-exported

__all__ = ["BatchedAgent", "VectorEnvironmentLoop", "lockstep_env_seeds"]



class BatchedAgent(Protocol):
    """What the loop drives (`dmpo.agent.acting.BatchedActor` or the `DMPO` agent)."""

    def select_actions(self, observations: Any) -> np.ndarray: ...

    def observe_first(self, timestep: dm_env.TimeStep, env: int = 0) -> None: ...

    def observe(self, action: np.ndarray, next_timestep: dm_env.TimeStep, env: int = 0) -> None: ...

    def drop_episode(self, env: int) -> None: ...

    def update(self, wait: bool = False) -> None: ...


class _Episode:
    """Running totals of one environment's current episode."""

    def __init__(self, reset_duration: float) -> None:
        self.start = time.perf_counter() - reset_duration
        self.reset_duration = reset_duration
        self.length = 0
        self.total_reward: Any = None


class VectorEnvironmentLoop:
    """Steps `environments` in lockstep for `agent` (module docstring).

    Args:
      environments: N ≥ 1 dm_env environments of one task.
      agent: see `BatchedAgent`.
      counter, logger, label, should_update, should_stop, on_episode_end: as in `EnvironmentLoop`.

    Each episode row also carries `env_index`. Its `select_action_duration_sec` is the episode's share
    of the batched policy calls (1/N of each) and `env_step_duration_sec` its own environment's time.
    """

    def __init__(self, environments: Sequence[dm_env.Environment], agent: BatchedAgent,
                 counter: Counter | None = None, logger: Logger | None = None, *,
                 label: str = "environment_loop", should_update: bool = True,
                 should_stop: Callable[[], bool] | None = None,
                 on_episode_end: Callable[[dict[str, Any]], None] | None = None) -> None:
        if not environments:
            raise ValueError("VectorEnvironmentLoop needs at least one environment")
        self._environments = list(environments)
        self._agent = agent
        self._counter = counter if counter is not None else Counter()
        self._logger = logger if logger is not None else make_logger(label, None)
        self._should_update = should_update
        self._should_stop = should_stop
        self._on_episode_end = on_episode_end
        self._stop_event = threading.Event()
        self.select_seconds = 0.0
        """Time spent in the batched policy calls so far (benchmarks read it)."""
        self.step_seconds = 0.0
        """Time spent in `environment.step` so far, all environments together."""

    def request_stop(self) -> None:
        """Asks `run()` to return at the next episode end (safe to call from another thread)."""
        self._stop_event.set()

    def _reset(self, index: int) -> tuple[dm_env.TimeStep, _Episode]:
        t0 = time.perf_counter()
        timestep = self._environments[index].reset()
        episode = _Episode(time.perf_counter() - t0)
        self._agent.observe_first(timestep, env=index)
        return timestep, episode

    def run(self, num_steps: int | None = None) -> int:
        """Runs until a stop (module docstring); returns the environment steps taken, all environments."""
        _check_count("num_steps", num_steps)
        n = len(self._environments)
        steps = 0
        if self._done(steps, num_steps):
            return steps
        started = [self._reset(i) for i in range(n)]
        timesteps = [timestep for timestep, _ in started]
        episodes = [episode for _, episode in started]
        select_share = np.zeros(n)
        step_time = np.zeros(n)
        while True:
            t0 = time.perf_counter()
            actions = self._agent.select_actions(stack_observations([ts.observation for ts in timesteps]))
            select = time.perf_counter() - t0
            self.select_seconds += select
            select_share += select / n
            for i, environment in enumerate(self._environments):
                t1 = time.perf_counter()
                timesteps[i] = environment.step(actions[i])
                elapsed = time.perf_counter() - t1
                step_time[i] += elapsed
                self.step_seconds += elapsed
            ended = []
            for i in range(n):
                self._agent.observe(actions[i], timesteps[i], env=i)
                if self._should_update:
                    self._agent.update()
                episodes[i].length += 1
                episodes[i].total_reward = _add_reward(episodes[i].total_reward, timesteps[i].reward)
                if timesteps[i].last():
                    ended.append(i)
            steps += n
            self._counter.increment(steps=n)
            for i in ended:
                self._finish(i, episodes[i], select_share[i], step_time[i])
                select_share[i] = step_time[i] = 0.0
            if ended and self._done(steps, num_steps):
                break
            for i in ended:
                timesteps[i], episodes[i] = self._reset(i)
        for i in range(n):
            if not timesteps[i].last():
                self._agent.drop_episode(i)
        return steps

    def _finish(self, index: int, episode: _Episode, select_duration: float, step_duration: float) -> None:
        counts = self._counter.increment(episodes=1)
        duration = time.perf_counter() - episode.start
        row: dict[str, Any] = {
            "episode_length": episode.length,
            "episode_return": _plain_return(episode.total_reward),
            "steps_per_second": episode.length / duration if duration > 0 else float("nan"),
            "env_reset_duration_sec": episode.reset_duration,
            "select_action_duration_sec": select_duration,
            "env_step_duration_sec": step_duration,
            "episode_duration": duration,
        }
        if len(self._environments) > 1:
            row["env_index"] = index
        row.update(counts)
        self._logger.write(row)
        if self._on_episode_end is not None:
            self._on_episode_end(row)

    def _done(self, steps: int, num_steps: int | None) -> bool:
        if num_steps is not None and steps >= num_steps:
            return True
        if self._stop_event.is_set():
            return True
        return self._should_stop is not None and bool(self._should_stop())
