"""The single-process DMPO agent: replay table, n-step adder, actor and learner in one process (spec §3).

Two ways to interleave acting and learning:

* synchronous (the reference's): `update()` runs learner steps on the schedule of spec §3 — none
  before `min_observations`, then one every `batch_size / samples_per_insert` observations
  (fractional ratios truncated like the reference). Batches are sampled when the learner asks for
  them, so a run is reproducible from its seed; `prefetch_size` only matters in the next mode.
* overlapped (`overlap_learner=True`, ours): the learner runs on its own thread and the replay
  table's `SampleToInsertRatio` limiter holds the samples-per-insert ratio, so environment steps and
  gradient steps run at the same time. The actor then reads the parameters the learner thread
  publishes after each step. Timing decides which items a batch holds, so this mode is not
  bit-reproducible.

Acting always uses the *online* policy (spec §8.2 item 17).
"""

from __future__ import annotations

import threading
from typing import Any

import dm_env
import numpy as np

from dmpo.acting import Actor
from dmpo.config import DMPOConfig
from dmpo.learning import BatchSlot, Learner
from dmpo.networks import DMPONetworks, PolicyParams, make_networks
from dmpo.replay import (
    FrameStackTable,
    MinSize,
    NStepTransitionAdder,
    PrefetchingIterator,
    SampleToInsertRatio,
    Table,
    transition_signature,
)
from dmpo.types import EnvironmentSpec


def learner_steps_due(num_observations: int, min_observations: int, observations_per_step: float) -> int:
    """Learner steps to run after the `num_observations`-th observation (spec §3, fractional quirk kept)."""
    since_start = num_observations - min_observations
    if since_start < 0:
        return 0
    if observations_per_step > 1:
        return int(since_start % int(observations_per_step) == 0)
    return int(1 / observations_per_step)


def pixel_stack_size(environment_spec: EnvironmentSpec) -> int | None:
    """Frames per observation if the observation is an RGB frame stack (uint8 [H, W, 3·S]), else None."""
    spec = environment_spec.observations
    if isinstance(spec, dict) or np.dtype(spec.dtype) != np.uint8 or len(spec.shape) != 3:
        return None
    return spec.shape[-1] // 3 if spec.shape[-1] % 3 == 0 else None


def make_table(environment_spec: EnvironmentSpec, max_size: int, rate_limiter: Any, *, seed: int) -> Table:
    """The replay table for these specs: frame-deduplicating for stacked pixels, plain otherwise."""
    signature = transition_signature(environment_spec)
    frames = pixel_stack_size(environment_spec)
    if frames is None:
        return Table(signature, max_size, rate_limiter, seed=seed)
    return FrameStackTable(signature, max_size, rate_limiter, num_stacked=frames, seed=seed)


def derive_seeds(seed: int, count: int) -> list[int]:
    """Independent child seeds for the table, learner and actor from one user seed."""
    return [int(s) for s in np.random.SeedSequence(seed).generate_state(count)]


class _OnDemandSampler:
    """An iterator that samples a batch only when the learner asks (keeps synchronous runs reproducible)."""

    def __init__(self, table: Table, batch_size: int) -> None:
        self._table = table
        self._batch_size = batch_size

    def __iter__(self) -> _OnDemandSampler:
        return self

    def __next__(self) -> Any:
        return self._table.sample(self._batch_size)

    def close(self) -> None:
        pass


class DMPO:
    """Single-process DMPO, driven by an environment loop (observe_first, select_action, observe, update).

    Args:
      environment_spec: the environment's specs (actions must be the canonical [-1, 1] box).
      config: every hyper-parameter; defaults are the reference's.
      networks: custom networks; by default built from `config.networks`.
      seed: seeds parameter init, the learner's and the actor's randomness, and replay sampling.
      logger: receives the learner's metrics after each step.
      counter: receives the learner's `steps` and `walltime`.
      overlap_learner: run the learner on its own thread (see module docstring).
    """

    def __init__(self, environment_spec: EnvironmentSpec, config: DMPOConfig | None = None, *,
                 networks: DMPONetworks | None = None, seed: int = 0, logger: Any = None, counter: Any = None,
                 overlap_learner: bool = False) -> None:
        config = config or DMPOConfig()
        if not isinstance(config, DMPOConfig):
            raise TypeError(f"config must be a DMPOConfig, got {type(config).__name__}")
        if overlap_learner and config.samples_per_insert is None:
            raise ValueError("config.samples_per_insert must be set when overlap_learner=True "
                             "(the table's rate limiter holds that ratio)")
        self.config = config
        self.overlap_learner = overlap_learner
        self.networks = networks or make_networks(environment_spec, config.networks)
        table_seed, learner_seed, actor_seed = derive_seeds(seed, 3)

        self.table = make_table(environment_spec, config.max_replay_size, self._make_rate_limiter(),
                                seed=table_seed)
        self.adder = NStepTransitionAdder(self.table, config.n_step, config.learner.discount)
        self._handoff = BatchSlot()
        if overlap_learner:
            self._iterator: Any = PrefetchingIterator(self.table, config.batch_size, config.prefetch_size)
        else:
            self._iterator = _OnDemandSampler(self.table, config.batch_size)
        learner_batches = self._handoff if overlap_learner else self._iterator
        self.learner = Learner(self.networks, environment_spec, config.learner, learner_batches,
                               seed=learner_seed, logger=logger, counter=counter)
        # The actor reads device copies (`policy_params_on_device`): no host round trip per update.
        self._published_params = self.learner.policy_params_on_device(online=True)
        source = ((lambda: self._published_params) if overlap_learner
                  else lambda: self.learner.policy_params_on_device(online=True))
        self.actor = Actor(self.networks, source, seed=actor_seed, adder=self.adder)
        self.num_observations = 0
        self.pending_sgd_steps = 0
        """Synchronous mode: updates due by the schedule but not yet run, fewer than
        `config.learner.sgd_steps_per_call` (they run with the next call). Part of a checkpoint."""

        self._learner_lock = threading.Lock()  # held by the learner thread during a step; pause() takes it
        self._stop = threading.Event()
        self._learner_error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def _make_rate_limiter(self) -> Any:
        config = self.config
        if not self.overlap_learner:
            return MinSize(1)  # spec §2: the single-process table never throttles; update() holds the ratio
        # The distributed agent's guarded window (spec §8.2 item 25), from the first learner step on.
        spi = float(config.samples_per_insert)
        return SampleToInsertRatio.from_agent_defaults(spi, config.min_observations)

    # -- acting -----------------------------------------------------------------------------------
    def select_action(self, observation: Any) -> np.ndarray:
        return self.actor.select_action(observation)

    def observe_first(self, timestep: dm_env.TimeStep) -> None:
        self._raise_learner_error()
        self.actor.observe_first(timestep)

    def observe(self, action: np.ndarray, next_timestep: dm_env.TimeStep) -> None:
        self._raise_learner_error()
        self.num_observations += 1
        self.actor.observe(action, next_timestep)

    def update(self, wait: bool = False) -> None:
        """Runs the learner steps due now (synchronous mode) and refreshes the actor's parameters."""
        if self.overlap_learner:
            self._ensure_learner_thread()
            self.actor.update()
            return
        self.pending_sgd_steps += learner_steps_due(self.num_observations, self.config.min_observations,
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

    def _learner_loop(self) -> None:
        # The batch is fetched *outside* the pause lock: waiting for data (the rate limiter) while
        # holding it would deadlock with a checkpoint taken by the acting thread, the only inserter.
        try:
            while not self._stop.is_set():
                for _ in range(self.learner.batches_per_step):
                    self._handoff.put(next(self._iterator))
                with self._learner_lock:
                    if self._stop.is_set():
                        break
                    self.learner.step()
                    self._published_params = self.learner.policy_params_on_device(online=True)
        except BaseException as error:  # noqa: BLE001 - handed to the acting thread
            if not self._stop.is_set():
                self._learner_error = error

    def _raise_learner_error(self) -> None:
        if self._learner_error is not None:
            raise RuntimeError("the learner thread failed") from self._learner_error

    def pause(self) -> threading.Lock:
        """A lock that, while held, keeps the learner thread between steps (for consistent checkpoints)."""
        return self._learner_lock

    def close(self) -> None:
        """Stops the learner thread (if any) and releases replay waiters. Safe to call twice."""
        self._stop.set()
        self.table.close()
        if self._thread is not None:
            self._thread.join(timeout=60)
        close = getattr(self._iterator, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> DMPO:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- policies for evaluation and snapshots ---------------------------------------------------
    def policy_params(self) -> PolicyParams:
        """Online observation-network and policy parameters (numpy)."""
        return self.learner.online_policy_params()
