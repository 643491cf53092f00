"""Acting: jitted policy functions and the actor that feeds the n-step adder (algorithm.md §3, §7.2).

The behaviour policy samples from the Gaussian; the evaluation policy takes its mean. Both run the
observation network and the policy on one observation (a batch dimension is added and removed
inside the jitted function). Actions are *not* clipped here: the environment wrapper clips them and
the replay keeps the raw sample, which the MPO action penalty needs to see (algorithm.md §8.2 item 12).

Randomness is `fold_in(key, step)`: an actor's stream depends only on its seed and how many actions
it has taken, so a resumed run draws the same actions as an uninterrupted one.

`BatchedActor` is the behaviour actor of training in both modes: it acts for N environments stepped
in lockstep with one jitted policy call per step, and keeps one random stream and one n-step adder
per environment. Environment 0's stream is the one a single-environment actor of the same seed
draws (`env_keys`), so N = 1 is bit-identical to acting one environment at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import dm_env
import jax
import jax.numpy as jnp
import numpy as np
import tree

from dmpo.agent.networks import DMPONetworks, PolicyParams
from dmpo.config import MAX_NUM_ENVS
from dmpo.utils.seeds import lockstep_env_seeds

PolicyFn = Callable[[PolicyParams, jax.Array, Any, Any], jax.Array]
ParamsSource = Callable[[], PolicyParams]



def stack_observations(observations: Sequence[Any]) -> Any:
    """N (possibly nested) observations -> one nest of `[N, ...]` arrays (the batched policy's input)."""
    return tree.map_structure(lambda *xs: np.stack(xs), *observations)

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


def env_keys(seed: int, num_envs: int) -> np.ndarray:
    """Per-environment PRNG keys `[num_envs, 2]`: environment 0 gets `PRNGKey(seed)` (the stream of a
    single-environment actor), environment i > 0 gets `PRNGKey(SeedSequence([seed, i]))`, so no two
    environments share a stream and adding environments never changes the earlier ones' streams
    (`dmpo.utils.seeds.lockstep_env_seeds`)."""
    return np.stack([np.asarray(jax.random.PRNGKey(s)) for s in lockstep_env_seeds(seed, num_envs)])


def make_batched_sample_fn(networks: DMPONetworks) -> Callable[[PolicyParams, Any, Any, Any], jax.Array]:
    """Jitted `sample_fn(params, keys[N], steps[N], observations[N, ...]) -> actions[N, D]`: one policy
    call for the batch; environment i's noise is drawn from `fold_in(keys[i], steps[i])` with the
    shape a single-observation call draws (`[1, D]`), so each row equals `make_policy_fns`' sample."""

    def sample_fn(params: PolicyParams, keys: jax.Array, steps: Any, observations: Any) -> jax.Array:
        mean, stddev = networks.apply_policy(params, observations)

        def noise(key: jax.Array, step: Any) -> jax.Array:
            return jax.random.normal(jax.random.fold_in(key, step), (1, *mean.shape[1:]), mean.dtype)[0]

        return mean + stddev * jax.vmap(noise)(keys, steps)

    return jax.jit(sample_fn)


class _FollowsParams:
    """What both actors share: acting parameters read from `params_source` on `update()` (every call,
    or every `update_period` calls) and copied to the device only when the source changed."""

    def _follow(self, params_source: ParamsSource, update_period: int) -> None:
        if update_period < 1:
            raise ValueError(f"update_period must be a positive integer, got {update_period!r}")
        self._params_source = params_source
        self._source_value = params_source()
        self._params = jax.device_put(self._source_value)
        self._update_period = update_period
        self._calls_since_update = 0

    def update(self, wait: bool = False) -> None:
        self._calls_since_update += 1
        if wait or self._calls_since_update >= self._update_period:
            self._calls_since_update = 0
            value = self._params_source()
            if value is not self._source_value:  # copy to the device only when the source changed
                self._source_value = value
                self._params = jax.device_put(value)


class BatchedActor(_FollowsParams):
    """The behaviour actor for N lockstep environments (module docstring); `adders[i]` receives
    environment i's experience (None: act only). Parameters are refreshed like `Actor`'s.

    `num_actions` is the lockstep step count, i.e. every environment's position in its random
    stream (part of a checkpoint). With one environment, the single-environment methods
    (`select_action`, `observe_first(timestep)`, `observe(action, timestep)`) make it a drop-in for
    `Actor` in an `EnvironmentLoop`.
    """

    def __init__(self, networks: DMPONetworks, params_source: ParamsSource, *, seed: int,
                 adders: Sequence[Any], update_period: int = 1) -> None:
        self._follow(params_source, update_period)
        if not 1 <= len(adders) <= MAX_NUM_ENVS:
            raise ValueError(f"a BatchedActor needs 1 to {MAX_NUM_ENVS} adders (one per environment), "
                             f"got {len(adders)}")
        self._sample_fn = make_batched_sample_fn(networks)
        self._keys = jax.device_put(env_keys(seed, len(adders)))
        self._adders = list(adders)
        self.num_actions = 0

    @property
    def num_envs(self) -> int:
        return len(self._adders)

    def select_actions(self, observations: Any) -> np.ndarray:
        """Actions `[N, D]` for the stacked observations `[N, ...]` of all environments."""
        steps = np.full((self.num_envs,), self.num_actions, np.uint32)
        actions = self._sample_fn(self._params, self._keys, steps, observations)
        self.num_actions += 1
        return np.asarray(actions)

    def select_action(self, observation: Any) -> np.ndarray:
        return self.select_actions(stack_observations([observation]))[0]

    def observe_first(self, timestep: dm_env.TimeStep, env: int = 0) -> None:
        if self._adders[env] is not None:
            self._adders[env].add_first(timestep)

    def observe(self, action: np.ndarray, next_timestep: dm_env.TimeStep, env: int = 0) -> None:
        if self._adders[env] is not None:
            self._adders[env].add(action, next_timestep)

    def drop_episode(self, env: int) -> None:
        """Forgets environment `env`'s unfinished episode (its emitted transitions stay in replay)."""
        if self._adders[env] is not None:
            self._adders[env].reset()



class Actor(_FollowsParams):
    """Selects actions with a policy read from `params_source` and writes experience to `adder`.

    `params_source()` is called on every `update()` (single-process: the learner's live online
    parameters, so acting has no lag) or, with `update_period`, every that many calls (distributed
    variable-client behaviour). `adder=None` makes an evaluation actor that only acts.
    """

    def __init__(self, networks: DMPONetworks, params_source: ParamsSource, *, seed: int, adder: Any = None,
                 deterministic: bool = False, update_period: int = 1) -> None:
        self._follow(params_source, update_period)
        self._sample_fn, self._mean_fn = make_policy_fns(networks)
        self._key = jax.random.PRNGKey(seed)
        self._adder = adder
        self._deterministic = deterministic
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

