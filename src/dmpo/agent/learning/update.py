"""One pure learner step: `update(state, batch) -> (state, metrics)` (algorithm.md §6.1–§6.5).

Order within a step:
  1. split the state's key into (next key, action-sampling key, augmentation key);
  2. augment the batch's pixels if configured;
  2b. merge the batch's observations into the running observation statistics, if the observation
      network keeps them (algorithm.md §4.1; the targets below copy the statistics of the step before);
  3. clamp the raw duals at −18 (TF reference: at the start of each loss call, so the projection acts
     on the previous dual update and the loss never sees an out-of-range dual; the JAX reference
     clamps after the dual update instead — the two differ only in whether the stored duals may sit
     one Adam step below the floor between steps);
  4. update the targets (`dmpo.agent.learning.targets`);
  5. bootstrap at `o'` with target networks only: `e' = obsnet'(o')`, `(μ', σ') = policy'(e')`,
     N actions `a' ~ N(μ', σ')` reused for the critic target and the E-step, target-critic logits of
     every `(e', a'_n)`, their equal-weight mixture, and `Q[n, b]` = mean of each categorical;
  6. critic loss at `(o, a)` — gradients reach the observation network and the critic only;
  7. MPO loss with the online policy at `e'` — gradients reach the policy and the duals only;
  8. per-group global-norm clipping (critic, policy; duals unclipped) inside the optimizers, Adam;
  9. `steps += 1`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from dmpo.agent.distributions import gaussian_sample
from dmpo.agent.learning.state import TrainingState, critic_group, make_optimizers
from dmpo.agent.learning.targets import update_targets
from dmpo.agent.losses import (
    MPODuals,
    categorical_td_loss,
    clamp_duals,
    mixture_log_probs,
    mpo_loss,
    support_edge_mass,
)
from dmpo.agent.networks import DMPONetworks, Params
from dmpo.agent.networks.normalization import update_statistics, with_statistics
from dmpo.config import LearnerConfig
from dmpo.types import Transition

DUAL_MINIMUM = -18.0

Metrics = dict[str, jax.Array]
UpdateFn = Callable[[TrainingState, Transition], tuple[TrainingState, Metrics]]

sg = jax.lax.stop_gradient


class Bootstrap(NamedTuple):
    """Target-network quantities at the next observations (all stop-gradient)."""

    embedding: jax.Array
    """`e'`, target observation network at `o'`, `[B, E]`."""
    target_mean: jax.Array
    """`μ'`, `[B, D]`."""
    target_stddev: jax.Array
    """`σ'`, `[B, D]`."""
    actions: jax.Array
    """`a' ~ N(μ', σ')`, `[N, B, D]`."""
    target_probs: jax.Array
    """Mixture of the N target-critic categoricals, `[B, A]`."""
    q_values: jax.Array
    """Mean of each target-critic categorical, `[N, B]`."""


class StepKeys(NamedTuple):
    next: jax.Array
    sample: jax.Array
    augment: jax.Array


def step_keys(key: jax.Array) -> StepKeys:
    """How one step splits the state's key; exposed so tests can redo a step's sampling."""
    return StepKeys(*jax.random.split(key, 3))


def check_batch(batch: Transition, action_dim: int) -> None:
    """Trace-time shape checks naming the offending field."""
    if not isinstance(batch, Transition):
        raise TypeError(f"batch must be a dmpo.types.Transition, got {type(batch).__name__}")
    reward_shape = jnp.shape(batch.reward)
    if len(reward_shape) != 1:
        raise ValueError(f"batch.reward must be [B], got shape {reward_shape}")
    size = reward_shape[0]
    expected = {"discount": (size,), "action": (size, action_dim)}
    for name, shape in expected.items():
        if jnp.shape(getattr(batch, name)) != shape:
            raise ValueError(f"batch.{name} must have shape {shape}, got {jnp.shape(getattr(batch, name))}")
    for name in ("observation", "next_observation"):
        for leaf in jax.tree_util.tree_leaves(getattr(batch, name)):
            if jnp.ndim(leaf) < 1 or jnp.shape(leaf)[0] != size:
                raise ValueError(f"batch.{name} leaves must have batch size {size} first, "
                                 f"got {jnp.shape(leaf)}")


def bootstrap(networks: DMPONetworks, target_params: Params, next_observation: Any, key: jax.Array,
              num_samples: int) -> Bootstrap:
    """Step 5 of the module docstring."""
    embedding = sg(networks.observation.apply(target_params.observation, next_observation))
    target_mean, target_stddev = networks.policy.apply(target_params.policy, embedding)
    actions = gaussian_sample(key, target_mean, target_stddev, num_samples)  # [N, B, D]
    logits = networks.critic.apply(target_params.critic, embedding, actions,
                                   method="sampled_logits")  # [N, B, A]
    target_probs = jnp.exp(mixture_log_probs(logits, axis=0))  # [B, A]
    q_values = jax.nn.softmax(logits, axis=-1) @ networks.support  # [N, B]
    return Bootstrap(*(sg(x) for x in (embedding, target_mean, target_stddev, actions, target_probs,
                                       q_values)))


def critic_loss(networks: DMPONetworks, params: Params, batch: Transition, target_probs: jax.Array,
                discount: float) -> jax.Array:
    """Categorical TD loss at `(o, a)`; reads only `params.observation` and `params.critic`."""
    embedding = networks.observation.apply(params.observation, batch.observation)
    logits = networks.critic.apply(params.critic, embedding, batch.action)
    discount_t = jnp.asarray(discount, batch.discount.dtype) * batch.discount
    return categorical_td_loss(logits, batch.reward, discount_t, target_probs, networks.support)


def policy_loss(networks: DMPONetworks, config: LearnerConfig, params: Params, duals: MPODuals,
                boot: Bootstrap) -> tuple[jax.Array, Metrics]:
    """MPO loss of the online policy at the target embedding `e'`; reads only `params.policy`."""
    online_mean, online_stddev = networks.policy.apply(params.policy, boot.embedding)
    return mpo_loss(config.mpo, duals, online_mean, online_stddev, boot.target_mean, boot.target_stddev,
                    boot.actions, boot.q_values)


def compute_losses(networks: DMPONetworks, config: LearnerConfig, params: Params, target_params: Params,
                   duals: MPODuals, batch: Transition, key: jax.Array
                   ) -> tuple[jax.Array, jax.Array, Metrics, Bootstrap]:
    """`(critic_loss, policy_loss, mpo_stats, bootstrap)` for already-updated targets and clamped duals.

    The update differentiates exactly these functions; this entry point lets tests take gradients of
    each loss with respect to every parameter group.
    """
    boot = bootstrap(networks, target_params, batch.next_observation, key, config.num_samples)
    loss_q = critic_loss(networks, params, batch, boot.target_probs, config.discount)
    loss_pi, stats = policy_loss(networks, config, params, duals, boot)
    return loss_q, loss_pi, stats, boot


def _make_augment(config: LearnerConfig) -> Callable[[jax.Array, Transition], Transition] | None:
    if config.augmentation == "none":
        return None
    from dmpo.agent.augmentation import augment_transition  # pixel-only dependency; it checks the mode

    mode = config.augmentation  # LearnerConfig validated it on construction
    return lambda key, batch: augment_transition(key, batch, mode)


def make_update_fn(networks: DMPONetworks, config: LearnerConfig, *, jit: bool = True,
                   donate: bool = False) -> UpdateFn:
    """Builds `update(state, batch) -> (state, metrics)`; jitted unless `jit=False`.

    With `donate=True` the input state's buffers are donated to the output (the caller must not use
    the old state afterwards); the `Learner` does this, tests that reuse states do not.
    """
    if not isinstance(config, LearnerConfig):
        raise TypeError(f"config must be a LearnerConfig, got {type(config).__name__}")
    optimizers = make_optimizers(config)
    augment = _make_augment(config)

    def update(state: TrainingState, batch: Transition) -> tuple[TrainingState, Metrics]:
        check_batch(batch, networks.action_dim)
        keys = step_keys(state.key)
        if augment is not None:
            batch = augment(keys.augment, batch)
        duals = clamp_duals(state.duals, DUAL_MINIMUM)
        target_params = update_targets(state.target_params, state.params, state.steps, config)
        params = state.params._replace(
            observation=update_statistics(state.params.observation, batch.observation))
        boot = bootstrap(networks, target_params, batch.next_observation, keys.sample, config.num_samples)

        def critic_objective(group: tuple[Any, Any]) -> jax.Array:
            observation, critic = group
            observation = with_statistics(observation, params.observation)
            return critic_loss(networks, params._replace(observation=observation, critic=critic), batch,
                               boot.target_probs, config.discount)

        def policy_objective(policy: Any, duals: MPODuals) -> tuple[jax.Array, Metrics]:
            return policy_loss(networks, config, params._replace(policy=policy), duals, boot)

        loss_q, critic_grads = jax.value_and_grad(critic_objective)(critic_group(params))
        (loss_pi, stats), (policy_grads, dual_grads) = jax.value_and_grad(
            policy_objective, argnums=(0, 1), has_aux=True)(params.policy, duals)

        updates, critic_opt_state = optimizers.critic.update(critic_grads, state.critic_opt_state)
        observation, critic = optax.apply_updates(critic_group(params), updates)
        observation = with_statistics(observation, params.observation)
        updates, policy_opt_state = optimizers.policy.update(policy_grads, state.policy_opt_state)
        policy = optax.apply_updates(params.policy, updates)
        updates, dual_opt_state = optimizers.dual.update(dual_grads, state.dual_opt_state)
        new_duals = optax.apply_updates(duals, updates)

        new_state = TrainingState(
            params=Params(observation=observation, policy=policy, critic=critic),
            target_params=target_params,
            duals=new_duals,
            critic_opt_state=critic_opt_state,
            policy_opt_state=policy_opt_state,
            dual_opt_state=dual_opt_state,
            steps=state.steps + 1,
            key=keys.next,
        )
        edge_mass, outside_mass = support_edge_mass(
            batch.reward, jnp.asarray(config.discount, batch.discount.dtype) * batch.discount,
            boot.target_probs, networks.support)
        metrics = {
            "critic_loss": loss_q,
            "critic/edge_mass": edge_mass,
            "critic/outside_mass": outside_mass,
            "policy_loss": loss_pi,
            **stats,
            "opt/critic_grad_norm": optax.global_norm(critic_grads),
            "opt/policy_grad_norm": optax.global_norm(policy_grads),
            "opt/dual_grad_norm": optax.global_norm(dual_grads),
        }
        return new_state, metrics

    if not jit:
        return update
    return jax.jit(update, donate_argnums=(0,) if donate else ())


def make_multi_update_fn(networks: DMPONetworks, config: LearnerConfig, *, jit: bool = True,
                         donate: bool = False) -> UpdateFn:
    """Builds `update_many(state, batches) -> (state, metrics)`: `lax.scan` of the single update over
    the leading axis of `batches` (a `Transition` of `[K, B, ...]` arrays).

    The result is bit-identical to K calls of `make_update_fn`'s update (the scan body is that very
    function, and the step counter and key advance inside it, so target syncs land on the same
    updates); `metrics` are the last update's. `donate` as in `make_update_fn`.
    """
    single = make_update_fn(networks, config, jit=False)

    def update_many(state: TrainingState, batches: Transition) -> tuple[TrainingState, Metrics]:
        state, metrics = jax.lax.scan(single, state, batches)
        return state, jax.tree_util.tree_map(lambda values: values[-1], metrics)

    if not jit:
        return update_many
    return jax.jit(update_many, donate_argnums=(0,) if donate else ())
