"""The single-process DMPO agent: replay table, n-step adder, actor and learner in one process
(algorithm.md §3).

Two ways to interleave acting and learning:

* synchronous (the reference's): `update()` runs learner steps on the schedule of algorithm.md §3 — none
  before `min_observations`, then one every `batch_size / samples_per_insert` observations
  (fractional ratios truncated like the reference). Batches are sampled when the learner asks for
  them, so a run is reproducible from its seed; `prefetch_size` only matters in the next mode.
* overlapped (`overlap_learner=True`, ours): the learner runs on its own thread and the replay
  table's `SampleToInsertRatio` limiter holds the samples-per-insert ratio, so environment steps and
  gradient steps run at the same time. The actor then reads the parameters the learner thread
  publishes after each step. Timing decides which items a batch holds, so this mode is not
  bit-reproducible.

Acting always uses the *online* policy (algorithm.md §8.2 item 17). Every part comes from `DMPOBuilder`
(the distributed nodes build theirs from it too). If the learner thread fails, it closes the table
so an acting thread blocked in an insert wakes up, and the next `observe` raises its error.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from pathlib import Path
from typing import Any

import dm_env
import numpy as np

from dmpo.agent.builder import DMPOBuilder
from dmpo.agent.files import load_agent, save_agent
from dmpo.agent.learning import BatchSlot
from dmpo.agent.learning.critic_support import settle_auto_gym
from dmpo.agent.learning.stepping import SteppingLoop
from dmpo.agent.networks import DMPONetworks, PolicyParams
from dmpo.config import DMPOConfig
from dmpo.replay import TableClosedError
from dmpo.types import EnvironmentSpec
from dmpo.utils.seeds import agent_seeds


def learner_steps_due(num_observations: int, min_observations: int, observations_per_step: float) -> int:
    """Learner steps to run after the `num_observations`-th observation (algorithm.md §3, fractional
    quirk kept)."""
    since_start = num_observations - min_observations
    if since_start < 0:
        return 0
    if observations_per_step > 1:
        return int(since_start % int(observations_per_step) == 0)
    return int(1 / observations_per_step)


class DMPO:
    """Single-process DMPO, driven by `EnvironmentLoop` (select_actions, observe_first, observe, update).

    Args:
      environment_spec: the environment's specs (actions must be the canonical [-1, 1] box).
      config: every hyper-parameter; defaults are the reference's. A critic support of "auto-gym"
        becomes the reference's [-150, 150] (this agent is not told the task's name); "auto" must be
        resolved first (`dmpo.agent.learning.critic_support.resolve_support`) or given as numbers.
      networks: custom networks; by default built from `config.networks`.
      seed: seeds parameter init, the learner's and the actor's randomness, and replay sampling.
      logger: receives the learner's metrics after each step.
      counter: receives the learner's `steps` and `walltime`.
      overlap_learner: run the learner on its own thread (see module docstring).
      num_envs: environments acted in lockstep (`EnvironmentLoop` over N environments): one n-step adder each,
        one batched policy call per step; `observe_first`/`observe` take the environment's index.
    """

    def __init__(self, environment_spec: EnvironmentSpec, config: DMPOConfig | None = None, *,
                 networks: DMPONetworks | None = None, seed: int = 0, logger: Any = None, counter: Any = None,
                 overlap_learner: bool = False, num_envs: int = 1) -> None:
        config = config if config is not None else DMPOConfig()
        # The agent sees a spec, not a task name: "auto-gym" (the fast preset's) is the reference's support.
        config = dataclasses.replace(config, networks=settle_auto_gym(config.networks, None))
        builder = DMPOBuilder(config, environment_spec, networks=networks)
        if config.samples_per_insert is None:
            raise ValueError("config.samples_per_insert must be a number > 0 for the single-process agent: "
                             "its update schedule (or, overlapped, its rate limiter) is that ratio; None "
                             "(no ratio) is for the distributed program only")
        self.config = config
        self.seed = seed
        self.builder = builder
        self.overlap_learner = overlap_learner
        self.networks = builder.networks
        table_seed, learner_seed, actor_seed = agent_seeds(seed)

        # Synchronous: MinSize(1), update() holds the ratio (algorithm.md §2). Overlapped: the distributed
        # limiter.
        self.table = builder.make_table(builder.make_rate_limiter("ratio" if overlap_learner else "local"),
                                        seed=table_seed)
        self.adders = builder.make_adders(self.table, num_envs)
        self.adder = self.adders[0]
        self._iterator = builder.make_dataset(self.table, prefetch=overlap_learner)
        handoff = BatchSlot()
        self.learner = builder.make_learner(handoff if overlap_learner else self._iterator, seed=learner_seed,
                                            logger=logger, counter=counter)
        # The actor reads device copies (`policy_params_on_device`): no host round trip per update.
        self._published_params = self.learner.policy_params_on_device(online=True)
        source = ((lambda: self._published_params) if overlap_learner
                  else lambda: self.learner.policy_params_on_device(online=True))
        self.actor = builder.make_actor(source, seed=actor_seed, adders=self.adders)
        self.num_observations = 0
        self.learning_starts = config.min_observations
        """Observation count of the first learner step; later after a resume that found no replay."""
        self.pending_sgd_steps = 0
        """Synchronous mode: updates due by the schedule but not yet run, fewer than
        `config.learner.sgd_steps_per_call` (they run with the next call). Part of a checkpoint."""

        self._learner_lock = threading.Lock()  # held by the learner thread during a step; pause() takes it
        self._stop = threading.Event()
        self._loop = SteppingLoop(self.learner, self._iterator, handoff, lock=self._learner_lock,
                                  stop=self._stop, after_step=self._publish)
        self._learner_error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def restart_learning(self) -> None:
        """Learn again only after `min_observations` more observations (the replay table starts empty)."""
        self.learning_starts = self.num_observations + self.config.min_observations

    # -- acting -----------------------------------------------------------------------------------
    def select_action(self, observation: Any) -> np.ndarray:
        return self.actor.select_action(observation)

    def select_actions(self, observations: Any) -> np.ndarray:
        """Actions `[N, D]` for all lockstep environments' stacked observations (one policy call)."""
        return self.actor.select_actions(observations)

    def observe_first(self, timestep: dm_env.TimeStep, env: int = 0) -> None:
        self._raise_learner_error()
        self.actor.observe_first(timestep, env=env)

    def drop_episode(self, env: int) -> None:
        self.actor.drop_episode(env)

    def observe(self, action: np.ndarray, next_timestep: dm_env.TimeStep, env: int = 0) -> None:
        self._raise_learner_error()
        self.num_observations += 1
        try:
            self.actor.observe(action, next_timestep, env=env)
        except TableClosedError:
            self._raise_learner_error()  # the failed learner thread closed the table (see _learner_loop)
            raise

    def update(self, wait: bool = False) -> None:
        """Runs the learner steps due now (synchronous mode) and refreshes the actor's parameters."""
        if self.overlap_learner:
            self._ensure_learner_thread()
            self.actor.update()
            return
        self.pending_sgd_steps += learner_steps_due(self.num_observations, self.learning_starts,
                                                    self.config.observations_per_step)
        calls = self.pending_sgd_steps // self.learner.batches_per_step
        for _ in range(calls):
            self.learner.step()
        self.pending_sgd_steps -= calls * self.learner.batches_per_step
        if calls:
            self.actor.update()

    # -- overlapped learner -----------------------------------------------------------------------
    def _ensure_learner_thread(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._learner_loop, name="dmpo-learner", daemon=True)
            self._thread.start()

    def _publish(self) -> None:
        self._published_params = self.learner.policy_params_on_device(online=True)

    def _learner_loop(self) -> None:
        try:
            self._loop.run()
        except BaseException as error:  # noqa: BLE001 - handed to the acting thread
            if not self._stop.is_set():
                self._learner_error = error
                # Without samples the ratio limiter soon holds inserts back: closing the table ends
                # an acting thread's wait in insert, and observe() then raises this error.
                self.table.close()

    def _raise_learner_error(self) -> None:
        if self._learner_error is not None:
            error = self._learner_error
            raise RuntimeError(f"the learner thread failed: {type(error).__name__}: {error}") from error

    def pause(self) -> threading.Lock:
        """A lock that, while held, keeps the learner thread between steps (for consistent checkpoints)."""
        return self._learner_lock

    def close(self) -> None:
        """Stops the learner thread (if any) and releases replay waiters. Safe to call twice."""
        self._stop.set()
        self.table.close()
        if self._thread is not None:
            self._thread.join(timeout=60)
        self._iterator.close()

    def __enter__(self) -> DMPO:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- saving and loading ------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str], *, replay: bool = False) -> Path:
        """Writes the learner state, config and counts (and, with `replay`, the replay contents) to a
        new folder `path`; `DMPO.load(path)` continues from it (see `dmpo.agent.files`)."""
        return save_agent(self, path, replay=replay)

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, networks: DMPONetworks | None = None, logger: Any = None,
             counter: Any = None) -> DMPO:
        """The agent `save` wrote to `path`: same next action, and with its replay the same next update."""
        return load_agent(cls, path, networks=networks, logger=logger, counter=counter)

    # -- policies for evaluation and snapshots ---------------------------------------------------
    def policy_params(self) -> PolicyParams:
        """Online observation-network and policy parameters (numpy)."""
        return self.learner.online_policy_params()
