"""Acting: jitted policy functions and the actor that feeds the n-step adder (spec §3, §7.2).

The behaviour policy samples from the Gaussian; the evaluation policy takes its mean. Both run the
observation network and the policy on one observation (a batch dimension is added and removed
inside the jitted function). Actions are *not* clipped here: the environment wrapper clips them and
the replay keeps the raw sample, which the MPO action penalty needs to see (spec §8.2 item 12).

Randomness is `fold_in(key, step)`: an actor's stream depends only on its seed and how many actions
it has taken, so a resumed run draws the same actions as an uninterrupted one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dm_env
import jax
import jax.numpy as jnp
import numpy as np

from dmpo.networks import DMPONetworks, PolicyParams

PolicyFn = Callable[[PolicyParams, jax.Array, Any, Any], jax.Array]
ParamsSource = Callable[[], PolicyParams]


def make_policy_fns(networks: DMPONetworks) -> tuple[PolicyFn, Callable[[PolicyParams, Any], jax.Array]]:
    """Jitted `(sample_fn(params, key, step, obs), mean_fn(params, obs))` for one unbatched observation.

    `sample_fn` draws with `fold_in(key, step)` inside the jitted call (one dispatch per action)."""

    def add_batch(observation: Any) -> Any:
        return jax.tree_util.tree_map(lambda x: jnp.asarray(x)[None], observation)

    def sample_fn(params: PolicyParams, key: jax.Array, step: Any, observation: Any) -> jax.Array:
        mean, stddev = networks.apply_policy(params, add_batch(observation))
        noise = jax.random.normal(jax.random.fold_in(key, step), mean.shape, mean.dtype)
        return (mean + stddev * noise)[0]

    def mean_fn(params: PolicyParams, observation: Any) -> jax.Array:
        mean, _ = networks.apply_policy(params, add_batch(observation))
        return mean[0]

    return jax.jit(sample_fn), jax.jit(mean_fn)


class Actor:
    """Selects actions with a policy read from `params_source` and writes experience to `adder`.

    `params_source()` is called on every `update()` (single-process: the learner's live online
    parameters, so acting has no lag) or, with `update_period`, every that many calls (distributed
    variable-client behaviour). `adder=None` makes an evaluation actor that only acts.
    """

    def __init__(self, networks: DMPONetworks, params_source: ParamsSource, *, seed: int, adder: Any = None,
                 deterministic: bool = False, update_period: int = 1) -> None:
        if update_period < 1:
            raise ValueError(f"update_period must be a positive integer, got {update_period!r}")
        self._sample_fn, self._mean_fn = make_policy_fns(networks)
        self._params_source = params_source
        self._source_value = params_source()
        self._params = jax.device_put(self._source_value)
        self._key = jax.random.PRNGKey(seed)
        self._adder = adder
        self._deterministic = deterministic
        self._update_period = update_period
        self._calls_since_update = 0
        self.num_actions = 0

    def select_action(self, observation: Any) -> np.ndarray:
        if self._deterministic:
            action = self._mean_fn(self._params, observation)
        else:
            action = self._sample_fn(self._params, self._key, np.uint32(self.num_actions), observation)
        self.num_actions += 1
        return np.asarray(action)

    def observe_first(self, timestep: dm_env.TimeStep) -> None:
        if self._adder is not None:
            self._adder.add_first(timestep)

    def observe(self, action: np.ndarray, next_timestep: dm_env.TimeStep) -> None:
        if self._adder is not None:
            self._adder.add(action, next_timestep)

    def update(self, wait: bool = False) -> None:
        self._calls_since_update += 1
        if wait or self._calls_since_update >= self._update_period:
            self._calls_since_update = 0
            value = self._params_source()
            if value is not self._source_value:  # copy to the device only when the source changed
                self._source_value = value
                self._params = jax.device_put(value)
