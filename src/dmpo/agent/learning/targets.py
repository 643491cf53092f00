"""Target-network updates, done at the start of every learner step (algorithm.md §6.1).

Periodic (reference): at `steps % P_π == 0` the policy is copied; at `steps % P_Q == 0` the critic
*and* the observation network are copied. `steps` counts completed updates, so step 0 syncs
everything and the independently initialised targets become the online networks.

Polyak (option, `target_update_rate = τ`): every step all three targets move to
`(1 − τ)·target + τ·online`, using the online parameters before this step's gradient; step 0 is a
hard copy so that averaging starts from equal networks.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from dmpo.agent.networks import Params
from dmpo.config import LearnerConfig


def _select(condition: jax.Array, online: Any, target: Any) -> Any:
    return jax.tree_util.tree_map(lambda o, t: jnp.where(condition, o, t), online, target)


def periodic_targets(target: Params, online: Params, steps: jax.Array, policy_period: int,
                     critic_period: int) -> Params:
    """Hard copies on their periods; the observation network follows the critic's."""
    copy_policy = steps % policy_period == 0
    copy_critic = steps % critic_period == 0
    return Params(
        observation=_select(copy_critic, online.observation, target.observation),
        policy=_select(copy_policy, online.policy, target.policy),
        critic=_select(copy_critic, online.critic, target.critic),
    )


def polyak_targets(target: Params, online: Params, steps: jax.Array, rate: float) -> Params:
    """`(1 − τ)·target + τ·online` for every leaf, or a hard copy at step 0."""
    def average(o: jax.Array, t: jax.Array) -> jax.Array:
        return jnp.where(steps == 0, o, ((1.0 - rate) * t + rate * o).astype(t.dtype))

    return jax.tree_util.tree_map(average, online, target)


def update_targets(target: Params, online: Params, steps: jax.Array, config: LearnerConfig) -> Params:
    """The target parameters to use for the step numbered `steps` (0-based)."""
    if config.target_update_rate is not None:
        return polyak_targets(target, online, steps, config.target_update_rate)
    return periodic_targets(target, online, steps, config.target_policy_update_period,
                            config.target_critic_update_period)
