"""The learner object: pulls batches, runs the jitted update, counts and logs (algorithm.md §6.5, §6.6)."""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from dmpo.agent.learning.state import TrainingState, init_training_state
from dmpo.agent.learning.support_monitor import SupportMonitor
from dmpo.agent.learning.update import make_multi_update_fn, make_update_fn
from dmpo.agent.networks import DMPONetworks, PolicyParams
from dmpo.config import LearnerConfig
from dmpo.reporting.logging import will_write
from dmpo.types import EnvironmentSpec, Transition


class CounterLike(Protocol):
    def increment(self, **counts: float) -> dict[str, Any]: ...

    def get_counts(self) -> dict[str, Any]: ...


class LoggerLike(Protocol):
    """A sink for rows. It may also have `will_write() -> bool` (the loggers of `dmpo.reporting.logging`
    do): False means a row written now would be dropped, so the learner skips fetching its metrics."""

    def write(self, data: dict[str, Any]) -> None: ...


class BatchSlot(Iterator[Any]):
    """A hand-over iterator: a run loop `put`s the batches it fetched (`Learner.batches_per_step` of
    them), `Learner.step()` takes them in order.

    Lets a run loop wait for data *outside* a lock that it holds around `step()` (waiting inside it
    deadlocks with whoever needs that lock to produce the data: an acting thread taking a checkpoint,
    an actor waiting for its first parameters)."""

    def __init__(self) -> None:
        self._batches: list[Any] = []

    def put(self, batch: Any) -> None:
        self._batches.append(batch)

    def __next__(self) -> Any:
        if not self._batches:
            raise RuntimeError("the learner asked for a batch that its run loop did not put in the slot")
        return self._batches.pop(0)


class Learner:
    """Owns a `TrainingState` and advances it one batch at a time.

    Args:
      networks: the agent's networks.
      env_spec: used to initialise parameters.
      config: learner hyper-parameters.
      iterator: yields `Transition` batches (numpy or JAX arrays, `[B, ...]`).
      seed: seeds parameter initialisation and the step RNG.
      logger: receives `metrics | counts` (Python floats) after each step, if given. The metrics are
        fetched from the device only when the logger will write the row (see `LoggerLike`).
      counter: receives `steps=K, walltime=<seconds since the previous step>` after each step.

    Each `step()` runs K = `config.sgd_steps_per_call` updates on K batches in one jitted call; the
    metrics are the last update's, and every count is of updates (K per call).
    """

    def __init__(
        self,
        networks: DMPONetworks,
        env_spec: EnvironmentSpec,
        config: LearnerConfig,
        iterator: Iterator[Transition],
        *,
        seed: int = 0,
        logger: LoggerLike | None = None,
        counter: CounterLike | None = None,
    ) -> None:
        if not isinstance(seed, (int, np.integer)):
            raise TypeError(f"seed must be an integer, got {seed!r}")
        self.config = config
        self._networks = networks
        self._iterator = iterator
        self._logger = logger
        self._counter = counter
        # One jitted call: run eagerly, initialisation compiles each of its ~60 primitive ops on its own
        # (≈ 3 s of every start-up on CPU, unseen by the persistent compilation cache). Same values.
        init = jax.jit(functools.partial(init_training_state, networks, env_spec, config))
        self._state = init(jax.random.PRNGKey(int(seed)))
        self._sgd_steps = int(config.sgd_steps_per_call)
        if self._sgd_steps == 1:
            self._update = make_update_fn(networks, config, donate=True)
        else:
            self._update = make_multi_update_fn(networks, config, donate=True)
        self._last_step_time: float | None = None
        self._in_flight: Any = None  # the previous call's metrics, ready when that update is done
        self._local_steps = 0
        self.metric_fetches = 0
        support = np.asarray(networks.support)
        self.support_monitor = SupportMonitor(support[0], support[-1])
        """Warns once when returns leave the critic's support (`dmpo.agent.learning.support_monitor`)."""
        """How many steps fetched their metrics from the device (one transfer each)."""

    @property
    def state(self) -> TrainingState:
        """The current device state. The update donates its input, so on accelerators the arrays of a
        state read here are invalid after the next `step()`; use `save_state()` for a lasting copy."""
        return self._state

    @state.setter
    def state(self, state: TrainingState) -> None:
        self._state = jax.device_put(state)

    @property
    def batches_per_step(self) -> int:
        """Batches one `step()` takes from the iterator: `config.sgd_steps_per_call`."""
        return self._sgd_steps

    def step(self) -> dict[str, Any]:
        """`batches_per_step` updates on the next batches; returns the (device) metrics of the last
        update merged with the counts."""
        if self._sgd_steps == 1:
            batches = next(self._iterator)
        else:  # stacked on the host when they are numpy: one transfer for the K batches
            batches = stack_batches([next(self._iterator) for _ in range(self._sgd_steps)])
        batches = jax.device_put(batches)
        if self._in_flight is not None:
            # At most one call in flight: the host work between steps (sampling, acting) overlaps the
            # device's update, but dispatch cannot run ahead without bound when no metrics are fetched.
            jax.block_until_ready(self._in_flight)
        self._state, metrics = self._update(self._state, batches)
        self._in_flight = metrics
        now = time.monotonic()
        elapsed = 0.0 if self._last_step_time is None else now - self._last_step_time
        self._last_step_time = now
        self._local_steps += self._sgd_steps
        if self._counter is not None:
            counts = self._counter.increment(steps=self._sgd_steps, walltime=elapsed)
        else:
            counts = {"steps": self._local_steps}
        result = {**metrics, **counts}
        if self._logger is not None and will_write(self._logger):
            # One transfer for every metric: a per-metric fetch re-acquires the GIL once per value,
            # which an acting thread running beside this one can delay by a switch interval each time.
            # Only for rows the logger keeps: the fetch waits for the update, ending the overlap of
            # host work with device work that asynchronous dispatch gives.
            host = jax.device_get(result)
            self.metric_fetches += 1
            row = {key: _to_python(value) for key, value in host.items()}
            self.support_monitor.observe(row)
            self._logger.write(row)
        return result

    def run(self, num_steps: int) -> None:
        """`num_steps` calls of `step()`: `num_steps · batches_per_step` updates."""
        if not isinstance(num_steps, (int, np.integer)) or num_steps < 0:
            raise ValueError(f"num_steps must be a non-negative integer, got {num_steps!r}")
        for _ in range(int(num_steps)):
            self.step()

    def policy_params(self) -> PolicyParams:
        """Target observation-network and target policy variables (numpy), what actors use (§6.6)."""
        target = self._state.target_params
        return _host_copy(PolicyParams(target.observation, target.policy))

    def online_policy_params(self) -> PolicyParams:
        """Online observation-network and policy variables (numpy): the single-process actor's."""
        online = self._state.params
        return _host_copy(PolicyParams(online.observation, online.policy))

    def policy_params_on_device(self, online: bool = False) -> PolicyParams:
        """A device copy of the target (default) or online policy variables, made without a host
        transfer or a wait for the update in flight. Its buffers are its own, so it stays valid after
        later (donating) steps: a publisher can hand it out and copy to the host only if needed."""
        params = self._state.params if online else self._state.target_params
        return _device_copy(PolicyParams(params.observation, params.policy))

    def save_state(self) -> TrainingState:
        """A host copy (fresh numpy arrays, never views of device buffers) of the whole training state."""
        return _host_copy(self._state)

    def restore_state(self, state: TrainingState) -> None:
        """Replaces the training state (e.g. with one read from a checkpoint)."""
        reference = jax.tree_util.tree_structure(self._state)
        if jax.tree_util.tree_structure(state) != reference:
            raise ValueError("state does not have the structure of this learner's TrainingState")
        for (path, new), old in zip(jax.tree_util.tree_flatten_with_path(state)[0],
                                    jax.tree_util.tree_leaves(self._state), strict=True):
            if np.shape(new) != np.shape(old) or np.asarray(new).dtype != old.dtype:
                raise ValueError(f"state leaf {jax.tree_util.keystr(path)} has shape {np.shape(new)} "
                                 f"{np.asarray(new).dtype}, expected {np.shape(old)} {old.dtype}")
        self.state = state


@jax.jit
def _device_copy(tree: Any) -> Any:
    # A jitted copy gets fresh output buffers (no output of a jit aliases an undonated input).
    return jax.tree_util.tree_map(jnp.copy, tree)


def stack_batches(batches: list[Any]) -> Any:
    """`[K, B, ...]` leaves from K batches: numpy on the host, `jnp.stack` for device arrays."""
    def stack(*leaves: Any) -> Any:
        if any(isinstance(leaf, jax.Array) for leaf in leaves):
            return jnp.stack(leaves)
        return np.stack(leaves)

    return jax.tree_util.tree_map(stack, *batches)


def _host_copy(tree: Any) -> Any:
    """Fresh numpy arrays: never views of device buffers, which the next (donating) update may reuse."""
    return jax.tree_util.tree_map(lambda x: np.array(x, copy=True), jax.device_get(tree))


def _to_python(value: Any) -> Any:
    array = np.asarray(value)
    return array.item() if array.size == 1 else array
