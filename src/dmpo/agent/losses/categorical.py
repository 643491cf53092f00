"""Categorical (C51-style) critic pieces: L2 projection, cross-entropy, mixtures, TD loss.

Shape letters (see `dmpo.types`): `B` batch, `N` sampled actions, `A` atoms. `A_p` is the number of
atoms of a source distribution, `A_q` that of the fixed target support. Time-step suffixes follow
the transition: `_tm1` belongs to `(o, a)`, `_t` to the bootstrap state `o'`.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np


def _check_support(z_q: jax.Array) -> None:
    """Rank and length always; strict monotonicity only when the values are known at trace time."""
    if jnp.ndim(z_q) != 1 or jnp.shape(z_q)[0] < 2:
        raise ValueError(f"z_q must be a 1-D support with at least 2 atoms, got shape {jnp.shape(z_q)}")
    try:
        values = np.asarray(z_q)
    except jax.errors.TracerArrayConversionError:
        return
    if not np.all(np.diff(values) > 0):
        raise ValueError(f"z_q must be strictly increasing, got {values}")


def categorical_l2_project(z_p: jax.Array, probs: jax.Array, z_q: jax.Array) -> jax.Array:
    """Projects the distribution `(z_p, probs)` onto the support `z_q` (algorithm.md §6.3).

    Args:
      z_p: source atom locations `[..., A_p]`; may differ per row (e.g. `r + γ d z`) and is
        broadcast against `probs`.
      probs: source probabilities `[..., A_p]`.
      z_q: strictly increasing target support `[A_q]`, not necessarily evenly spaced.

    Returns:
      Target probabilities `[..., A_q]`. Source atoms are first clipped to `[z_q[0], z_q[-1]]`;
      each one then splits its mass linearly between its two neighbouring target atoms, so the
      total mass is conserved.
    """
    _check_support(z_q)
    if jnp.ndim(probs) < 1 or jnp.ndim(z_p) < 1:
        raise ValueError(f"z_p and probs need an atom axis, got shapes {jnp.shape(z_p)} and "
                         f"{jnp.shape(probs)}")
    if jnp.shape(z_p)[-1] != jnp.shape(probs)[-1]:
        raise ValueError(f"z_p must have as many atoms as probs ({jnp.shape(probs)[-1]}), "
                         f"got shape {jnp.shape(z_p)}")
    try:
        batch_shape = jnp.broadcast_shapes(jnp.shape(z_p)[:-1], jnp.shape(probs)[:-1])
    except ValueError as error:
        raise ValueError(f"z_p {jnp.shape(z_p)} must broadcast against probs {jnp.shape(probs)}") from error
    z_p = jnp.broadcast_to(z_p, (*batch_shape, jnp.shape(z_p)[-1]))
    probs = jnp.broadcast_to(probs, (*batch_shape, jnp.shape(probs)[-1]))
    z_q = jnp.asarray(z_q, dtype=jnp.result_type(z_p))

    y = jnp.clip(z_p, z_q[0], z_q[-1])[..., None, :]  # [..., 1, A_p]
    gaps = z_q[1:] - z_q[:-1]  # [A_q - 1]
    # Distance to the next atom above / below each target atom; the edge atoms reuse their only
    # gap, which is harmless because clipped atoms sit exactly on the edge (weight 1 either way).
    gap_above = jnp.concatenate([gaps, gaps[-1:]])[:, None]  # [A_q, 1]
    gap_below = jnp.concatenate([gaps[:1], gaps])[:, None]
    atoms = z_q[:, None]
    gap = jnp.where(y >= atoms, gap_above, gap_below)  # [..., A_q, A_p]
    weights = jnp.clip(1.0 - jnp.abs(y - atoms) / gap, 0.0, 1.0)
    return jnp.sum(weights * probs[..., None, :], axis=-1)


def categorical_cross_entropy(target_probs: jax.Array, logits: jax.Array) -> jax.Array:
    """`−Σ_a q_a log softmax(logits)_a` over the last axis: `[...]`."""
    if jnp.shape(target_probs) != jnp.shape(logits) or jnp.ndim(logits) < 1:
        raise ValueError(f"target_probs must have the shape of logits {jnp.shape(logits)} (with an atom "
                         f"axis), got {jnp.shape(target_probs)}")
    return -jnp.sum(target_probs * jax.nn.log_softmax(logits, axis=-1), axis=-1)


def mixture_log_probs(logits: jax.Array, axis: int = 0) -> jax.Array:
    """Log-probabilities of the equal-weight mixture of the categoricals along `axis` (algorithm.md §8.1).

    `log((1/N) Σ_n softmax(logits_n))`, computed stably as `logsumexp_n log_softmax − log N`. This is
    a true normalised log-probability; averaging raw logits instead would give a different
    (geometric-mean) distribution.
    """
    ndim = jnp.ndim(logits)
    if ndim < 2:
        raise ValueError(f"logits must have a mixture axis and an atom axis, got shape {jnp.shape(logits)}")
    if not -ndim <= axis < ndim or axis % ndim == ndim - 1:
        raise ValueError(f"axis must name a non-atom axis of logits with shape {jnp.shape(logits)}, "
                         f"got {axis}")
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    num = jnp.shape(logits)[axis]
    return jax.nn.logsumexp(log_probs, axis=axis) - jnp.asarray(math.log(num), dtype=log_probs.dtype)


def categorical_td_loss(
    logits_tm1: jax.Array,
    reward_t: jax.Array,
    discount_t: jax.Array,
    target_probs_t: jax.Array,
    support: jax.Array,
) -> jax.Array:
    """Distributional TD loss of the critic (algorithm.md §6.2–6.3), averaged over the batch.

    Args:
      logits_tm1: online critic logits at `(o, a)`, `[B, A]`.
      reward_t: n-step rewards `[B]`.
      discount_t: full bootstrap discounts `[B]`, already `γ·d`.
      target_probs_t: bootstrap distribution at `o'` on `support`, `[B, A]`.
      support: the critic's atoms `[A]`.

    Returns:
      Scalar mean over `B` of the cross-entropy between the projected (stop-gradient) target
      `Proj_support(r + γ d z, target_probs_t)` and `softmax(logits_tm1)`.
    """
    if jnp.ndim(logits_tm1) != 2:
        raise ValueError(f"logits_tm1 must be [B, A], got shape {jnp.shape(logits_tm1)}")
    batch, num_atoms = jnp.shape(logits_tm1)
    for name, value, shape in (("reward_t", reward_t, (batch,)), ("discount_t", discount_t, (batch,)),
                               ("target_probs_t", target_probs_t, (batch, num_atoms)),
                               ("support", support, (num_atoms,))):
        if jnp.shape(value) != shape:
            raise ValueError(f"{name} must have shape {shape}, got {jnp.shape(value)}")
    atoms_t = reward_t[:, None] + discount_t[:, None] * support[None, :]
    target = jax.lax.stop_gradient(categorical_l2_project(atoms_t, target_probs_t, support))
    return jnp.mean(categorical_cross_entropy(target, logits_tm1))


def support_edge_mass(reward_t: jax.Array, discount_t: jax.Array, target_probs_t: jax.Array,
                      support: jax.Array) -> tuple[jax.Array, jax.Array]:
    """How much of the critic's TD target the support's edges catch, both averaged over the batch.

    Returns:
      `(edge_mass, outside_mass)`: the share of the projected target `Proj_support(r + γ d z)` that
      lies on the two edge atoms `support[0]` and `support[-1]`, and the share of the unprojected
      target's mass at locations strictly outside `[support[0], support[-1]]` (the projection clips
      that mass onto the edges, so `outside_mass <= edge_mass`). Returns that sit exactly on a bound
      (e.g. zero rewards with vmin = 0) count in the first and not in the second.
    """
    atoms_t = reward_t[:, None] + discount_t[:, None] * support[None, :]
    projected = categorical_l2_project(atoms_t, target_probs_t, support)
    edge = projected[:, 0] + projected[:, -1]
    outside = jnp.sum(jnp.where((atoms_t < support[0]) | (atoms_t > support[-1]), target_probs_t, 0.0),
                      axis=-1)
    return jnp.mean(edge), jnp.mean(outside)
