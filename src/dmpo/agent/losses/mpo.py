"""MPO policy loss with decoupled KL constraints and the MO-MPO action penalty (algorithm.md §6.4).

Shape letters (see `dmpo.types`): `N` actions sampled per state, `B` states, `D` action dims.

The loss is one scalar whose gradient is routed by stop-gradients so that a single `jax.grad`
over (policy parameters, duals) updates each part correctly:
  * the policy (through `online_mean`, `online_stddev`) only sees the weighted log-likelihoods
    `L_μ`, `L_σ` and the KL penalty `L_KL` (with the α's held fixed);
  * the temperatures `η`, `η_pen` only see their dual function `L_η`;
  * the KL multipliers `α_μ`, `α_σ` only see `L_α` (with the KLs held fixed).
Q-values, sampled actions and the target policy never receive gradients.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from dmpo.agent.distributions import gaussian_log_prob, gaussian_mean_kl, gaussian_stddev_kl
from dmpo.config import MPOLossConfig

_DUAL_FLOOR = 1e-8
_KL_Q_EPS = 1e-8

sg = jax.lax.stop_gradient


class MPODuals(NamedTuple):
    """Raw (unconstrained) dual variables; `constrained` maps them to positive values.

    Despite the `log_` names (kept from the reference) the map is softplus, not exp (algorithm.md §8.2.13).
    """

    log_temperature: jax.Array
    """η̃, shape [1]."""
    log_alpha_mean: jax.Array
    """α̃_μ, shape [D] with per-dimension constraints, else [1]."""
    log_alpha_stddev: jax.Array
    """α̃_σ, shape [D] with per-dimension constraints, else [1]."""
    log_penalty_temperature: jax.Array | None
    """η̃_pen, shape [1]; None when action penalization is off."""


def init_duals(config: MPOLossConfig, action_dim: int, dtype: jnp.dtype = jnp.float32) -> MPODuals:
    """Initial raw duals for `config` and `action_dim` actions (algorithm.md §6.4)."""
    if not isinstance(config, MPOLossConfig):
        raise TypeError(f"config must be an MPOLossConfig, got {type(config).__name__}")
    if not isinstance(action_dim, int) or action_dim < 1:
        raise ValueError(f"action_dim must be a positive integer, got {action_dim!r}")
    alpha_shape = (action_dim,) if config.per_dim_constraining else (1,)
    penalty = (jnp.full((1,), config.init_log_temperature, dtype) if config.action_penalization else None)
    return MPODuals(
        log_temperature=jnp.full((1,), config.init_log_temperature, dtype),
        log_alpha_mean=jnp.full(alpha_shape, config.init_log_alpha_mean, dtype),
        log_alpha_stddev=jnp.full(alpha_shape, config.init_log_alpha_stddev, dtype),
        log_penalty_temperature=penalty,
    )


def clamp_duals(duals: MPODuals, minimum: float = -18.0) -> MPODuals:
    """Projects every raw dual onto `[minimum, ∞)` (applied after each dual update)."""
    return jax.tree_util.tree_map(lambda x: jnp.maximum(x, minimum), duals)


def constrained(raw: jax.Array) -> jax.Array:
    """The positive dual value `softplus(raw) + 1e-8`."""
    return jax.nn.softplus(raw) + _DUAL_FLOOR


def _check_inputs(config: MPOLossConfig, duals: MPODuals, shapes: dict[str, tuple[int, ...]]) -> None:
    """Trace-time shape checks; each error names the offending argument and the expected shape."""
    if not isinstance(config, MPOLossConfig):
        raise TypeError(f"config must be an MPOLossConfig, got {type(config).__name__}")
    if len(shapes["online_mean"]) != 2:
        raise ValueError(f"online_mean must be [B, D], got shape {shapes['online_mean']}")
    batch, action_dim = shapes["online_mean"]
    expected = {"online_stddev": (batch, action_dim), "target_mean": (batch, action_dim),
                "target_stddev": (batch, action_dim)}
    if len(shapes["actions"]) != 3:
        raise ValueError(f"actions must be [N, B, D] = [N, {batch}, {action_dim}], "
                         f"got shape {shapes['actions']}")
    num_samples = shapes["actions"][0]
    expected["actions"] = (num_samples, batch, action_dim)
    expected["q_values"] = (num_samples, batch)
    for name, shape in expected.items():
        if shapes[name] != shape:
            raise ValueError(f"{name} must have shape {shape} ([B, D] from online_mean, N from actions), "
                             f"got {shapes[name]}")
    alpha_shape = (action_dim,) if config.per_dim_constraining else (1,)
    dual_shapes = {"duals.log_temperature": ((1,), duals.log_temperature),
                   "duals.log_alpha_mean": (alpha_shape, duals.log_alpha_mean),
                   "duals.log_alpha_stddev": (alpha_shape, duals.log_alpha_stddev)}
    if config.action_penalization:
        dual_shapes["duals.log_penalty_temperature"] = ((1,), duals.log_penalty_temperature)
    elif duals.log_penalty_temperature is not None:
        raise ValueError("duals.log_penalty_temperature must be None when action_penalization is off")
    for name, (shape, value) in dual_shapes.items():
        if value is None or jnp.shape(value) != shape:
            got = None if value is None else jnp.shape(value)
            raise ValueError(f"{name} must have shape {shape}, got {got}")


def _nonparametric_weights(
    objective: jax.Array, raw_temperature: jax.Array, epsilon: float, min_temperature: float = 0.0
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """E-step for one objective `[N, B]` (already stop-gradient).

    Returns the weights `sg(softmax_N(objective / max(η, min_temperature)))` `[N, B]`, the temperature
    dual loss `η (ε + mean_B logsumexp_N(objective / η) − log N)` (a scalar; its gradient reaches only
    η̃; the floor does not bound the dual, only the weights) and the diagnostic `KL(weights ‖ uniform)`
    averaged over states.
    """
    temperature = constrained(raw_temperature)[0]
    tempered = objective / temperature
    floored = tempered if min_temperature <= 0.0 else objective / jnp.maximum(temperature, min_temperature)
    weights = sg(jax.nn.softmax(floored, axis=0))
    num_samples = objective.shape[0]
    log_num = jnp.asarray(math.log(num_samples), dtype=objective.dtype)
    log_normaliser = jax.nn.logsumexp(tempered, axis=0)  # [B]
    loss = temperature * (epsilon + jnp.mean(log_normaliser) - log_num)
    kl = jnp.mean(jnp.sum(weights * jnp.log(num_samples * weights + _KL_Q_EPS), axis=0))
    return weights, loss, kl


def _batch_mean_kl(kl: jax.Array, per_dim: bool) -> jax.Array:
    """`[B, D]` KLs → `[D]` batch means (per-dim) or `[1]` batch mean of the summed KL (joint)."""
    if per_dim:
        return jnp.mean(kl, axis=0)
    return jnp.mean(jnp.sum(kl, axis=-1, keepdims=True), axis=0)


def mpo_loss(
    config: MPOLossConfig,
    duals: MPODuals,
    online_mean: jax.Array,
    online_stddev: jax.Array,
    target_mean: jax.Array,
    target_stddev: jax.Array,
    actions: jax.Array,
    q_values: jax.Array,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """The MPO loss `L_μ + L_σ + L_KL + L_α + L_η` and its diagnostics (algorithm.md §6.4).

    Args:
      config: loss hyper-parameters.
      duals: raw duals, shapes as made by `init_duals(config, D)`.
      online_mean, online_stddev: online policy π at the states, `[B, D]`.
      target_mean, target_stddev: target policy π' at the same states, `[B, D]`.
      actions: actions sampled from π', `[N, B, D]`.
      q_values: target-critic values of those actions, `[N, B]`.

    Returns:
      `(loss, stats)`: a scalar and a dict of scalar diagnostics named as in algorithm.md §6.4.
    """
    shapes = {name: jnp.shape(value) for name, value in (
        ("online_mean", online_mean), ("online_stddev", online_stddev), ("target_mean", target_mean),
        ("target_stddev", target_stddev), ("actions", actions), ("q_values", q_values))}
    _check_inputs(config, duals, shapes)
    q_values, actions = sg(q_values), sg(actions)
    target_mean, target_stddev = sg(target_mean), sg(target_stddev)

    # E-step: non-parametric improved policy as per-state weights over the sampled actions.
    weights, loss_temperature, kl_q = _nonparametric_weights(q_values, duals.log_temperature, config.epsilon,
                                                             config.min_temperature)
    stats = {"kl_q_rel": kl_q / config.epsilon}
    if config.action_penalization:
        # Zero inside the box [-1, 1]^D, minus the Euclidean distance to it outside.
        cost = -jnp.linalg.norm(actions - jnp.clip(actions, -1.0, 1.0), axis=-1)
        penalty_weights, loss_penalty, kl_penalty = _nonparametric_weights(
            cost, duals.log_penalty_temperature, config.epsilon_penalty)
        weights = weights + penalty_weights
        loss_temperature = loss_temperature + loss_penalty
        stats["penalty_kl_q_rel"] = kl_penalty / config.epsilon_penalty

    # M-step with decoupled mean / stddev: π_μ = N(μ, σ'), π_σ = N(μ', σ).
    loss_mean = -jnp.mean(jnp.sum(weights * gaussian_log_prob(online_mean, target_stddev, actions), axis=0))
    loss_stddev = -jnp.mean(jnp.sum(weights * gaussian_log_prob(target_mean, online_stddev, actions), axis=0))

    # Trust regions, KL(target ‖ online) per dimension. Each decoupled KL is exactly one part of the
    # Gaussian KL, computed without cancellation: ε_σ = 1e-6 is below float32's rounding of the
    # textbook formula (dmpo.agent.distributions.gaussian_kl).
    per_dim = config.per_dim_constraining
    kl_mean = _batch_mean_kl(gaussian_mean_kl(target_mean, online_mean, target_stddev), per_dim)
    kl_stddev = _batch_mean_kl(gaussian_stddev_kl(target_stddev, online_stddev), per_dim)
    alpha_mean = constrained(duals.log_alpha_mean)
    alpha_stddev = constrained(duals.log_alpha_stddev)
    loss_kl = jnp.sum(sg(alpha_mean) * kl_mean) + jnp.sum(sg(alpha_stddev) * kl_stddev)
    loss_alpha = (jnp.sum(alpha_mean * (config.epsilon_mean - sg(kl_mean)))
                  + jnp.sum(alpha_stddev * (config.epsilon_stddev - sg(kl_stddev))))

    loss = loss_mean + loss_stddev + loss_kl + loss_alpha + loss_temperature

    stats.update({
        "dual_alpha_mean": jnp.mean(alpha_mean),
        "dual_alpha_stddev": jnp.mean(alpha_stddev),
        "dual_temperature": jnp.mean(constrained(duals.log_temperature)),
        "loss_policy": loss,
        "loss_alpha": loss_alpha,
        "loss_temperature": loss_temperature,
        "kl_mean_rel": jnp.mean(kl_mean) / config.epsilon_mean,
        "kl_stddev_rel": jnp.mean(kl_stddev) / config.epsilon_stddev,
        "q_min": jnp.mean(jnp.min(q_values, axis=0)),
        "q_max": jnp.mean(jnp.max(q_values, axis=0)),
        "pi_stddev_min": jnp.mean(jnp.min(online_stddev, axis=-1)),
        "pi_stddev_max": jnp.mean(jnp.max(online_stddev, axis=-1)),
        "pi_stddev_cond": jnp.mean(jnp.max(online_stddev, axis=-1) / jnp.min(online_stddev, axis=-1)),
    })
    if per_dim:
        stats.update({
            "kl_mean_rel_min": jnp.min(kl_mean) / config.epsilon_mean,
            "kl_mean_rel_max": jnp.max(kl_mean) / config.epsilon_mean,
            "kl_stddev_rel_min": jnp.min(kl_stddev) / config.epsilon_stddev,
            "kl_stddev_rel_max": jnp.max(kl_stddev) / config.epsilon_stddev,
        })
    return loss, jax.tree_util.tree_map(sg, stats)
