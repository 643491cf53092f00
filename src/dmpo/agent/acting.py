"""Acting: the jitted policies and the actors of training and evaluation (algorithm.md §3, §7.2).

The behaviour policy samples from the Gaussian; the evaluation policy takes its mean. Actions are
*not* clipped here: the environment wrapper clips them and the replay keeps the raw sample, which the
MPO action penalty needs to see (algorithm.md §8.2 item 12).

Randomness is `fold_in(key, step)`: an actor's stream depends only on its seed and how many actions
it has taken, so a resumed run draws the same actions as an uninterrupted one.

`BatchedActor` is the behaviour actor of training in both modes: it acts for N environments stepped
in lockstep with one jitted policy call per step, and keeps one random stream and one n-step adder
per environment. Environment 0's stream is `PRNGKey(seed)` (`env_keys`), and each row draws noise
of the shape a single-observation call draws, so N = 1 is bit-identical to acting one environment at
a time. `EvaluationActor` acts with the mean for the distributed evaluator.
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

ParamsSource = Callable[[], PolicyParams]


def stack_observations(observations: Sequence[Any]) -> Any:
    """N (possibly nested) observations -> one nest of `[N, ...]` arrays (the batched policy's input)."""
    return tree.map_structure(lambda *xs: np.stack(xs), *observations)


def make_mean_fn(networks: DMPONetworks) -> Callable[[PolicyParams, Any], jax.Array]:
    """Jitted `mean_fn(params, observation) -> action [D]`: the evaluation policy for one unbatched
    observation (a batch dimension is added and removed inside the jitted function)."""

    def mean_fn(params: PolicyParams, observation: Any) -> jax.Array:
        batched = jax.tree_util.tree_map(lambda x: jnp.asarray(x)[None], observation)
        mean, _ = networks.apply_policy(params, batched)
        return mean[0]

    return jax.jit(mean_fn)


def env_keys(seed: int, num_envs: int) -> np.ndarray:
    """Per-environment PRNG keys `[num_envs, 2]`: environment 0 gets `PRNGKey(seed)` (the stream of a
    single-environment actor), environment i > 0 gets `PRNGKey(SeedSequence([seed, i]))`, so no two
    environments share a stream and adding environments never changes the earlier ones' streams
    (`dmpo.utils.seeds.lockstep_env_seeds`)."""
    return np.stack([np.asarray(jax.random.PRNGKey(s)) for s in lockstep_env_seeds(seed, num_envs)])


def make_batched_sample_fn(networks: DMPONetworks) -> Callable[[PolicyParams, Any, Any, Any], jax.Array]:
    """Jitted `sample_fn(params, keys[N], steps[N], observations[N, ...]) -> actions[N, D]`: one policy
    call for the batch; environment i's noise is drawn from `fold_in(keys[i], steps[i])` with the
    shape a single-observation call draws (`[1, D]`), so each row equals the sample of a one-row batch."""

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
    environment i's experience (None: act only). `params_source()` is read on every `update()`
    (single-process: the learner's live online parameters, so acting has no lag) or, with
    `update_period`, every that many calls (distributed: the variable client).

    `num_actions` is the lockstep step count, i.e. every environment's position in its random
    stream (part of a checkpoint). `select_action(observation)` acts for one environment
    (`DMPO.select_action`, with N = 1).
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


class EvaluationActor(_FollowsParams):
    """Acts with the policy's mean (`make_mean_fn`), read from `params_source` like `BatchedActor`'s
    parameters; it writes nothing and draws no randomness."""

    def __init__(self, networks: DMPONetworks, params_source: ParamsSource, *,
                 update_period: int = 1) -> None:
        self._follow(params_source, update_period)
        self._mean_fn = make_mean_fn(networks)

    def select_action(self, observation: Any) -> np.ndarray:
        return np.asarray(self._mean_fn(self._params, observation))
