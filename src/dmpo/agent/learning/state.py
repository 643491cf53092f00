"""The learner's whole mutable state as one pytree, and the optimizers that update it (algorithm.md §5)."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from dmpo.agent.losses import MPODuals, init_duals
from dmpo.agent.networks import DMPONetworks, Params, init_params
from dmpo.agent.networks.normalization import trainable
from dmpo.config import LearnerConfig
from dmpo.types import EnvironmentSpec

ADAM_EPSILON = 1e-8  # added to the square root of the bias-corrected second moment (algorithm.md §5)


class TrainingState(NamedTuple):
    """Everything one learner step reads and writes.

    `critic_opt_state` covers the observation network and the critic (they share the critic loss);
    `steps` counts completed updates (int32 scalar); `key` is a raw uint32 PRNG key.
    """

    params: Params
    target_params: Params
    duals: MPODuals
    critic_opt_state: Any
    policy_opt_state: Any
    dual_opt_state: Any
    steps: jax.Array
    key: jax.Array


class Optimizers(NamedTuple):
    """One optax transformation per parameter group (algorithm.md §6.5)."""

    critic: optax.GradientTransformation
    policy: optax.GradientTransformation
    dual: optax.GradientTransformation


def _adam(learning_rate: float) -> optax.GradientTransformation:
    return optax.adam(learning_rate, b1=0.9, b2=0.999, eps=ADAM_EPSILON)


def make_optimizers(config: LearnerConfig) -> Optimizers:
    """Adam per group; critic and policy gradients are clipped to a global norm first if `clipping`.

    The dual optimizer is never clipped.
    """

    def clipped(learning_rate: float) -> optax.GradientTransformation:
        if not config.clipping:
            return _adam(learning_rate)
        return optax.chain(optax.clip_by_global_norm(config.max_gradient_norm), _adam(learning_rate))

    return Optimizers(
        critic=clipped(config.critic_learning_rate),
        policy=clipped(config.policy_learning_rate),
        dual=_adam(config.dual_learning_rate),
    )


def critic_group(params: Params) -> tuple[Any, Any]:
    """The variables the critic loss trains: (observation network, critic). Running observation
    statistics (`dmpo.agent.networks.normalization`) are left out: the learner merges them, no optimizer."""
    return trainable(params.observation), params.critic


def init_training_state(
    networks: DMPONetworks, env_spec: EnvironmentSpec, config: LearnerConfig, key: jax.Array
) -> TrainingState:
    """A fresh state. Online and target networks are initialised from independent keys, as in the
    reference; the first update's target sync makes them equal (algorithm.md §3, §6.1). Pure: vmap-able."""
    online_key, target_key, state_key = jax.random.split(key, 3)
    params = init_params(networks, env_spec, online_key)
    target_params = init_params(networks, env_spec, target_key)
    duals = init_duals(config.mpo, networks.action_dim, jnp.float32)
    optimizers = make_optimizers(config)
    return TrainingState(
        params=params,
        target_params=target_params,
        duals=duals,
        critic_opt_state=optimizers.critic.init(critic_group(params)),
        policy_opt_state=optimizers.policy.init(params.policy),
        dual_opt_state=optimizers.dual.init(duals),
        steps=jnp.zeros((), jnp.int32),
        key=state_key,
    )
