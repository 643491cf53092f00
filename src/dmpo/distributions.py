"""Diagonal Gaussian helpers used by the policy and the MPO loss (spec §4.1, §6.4).

A diagonal Gaussian is given by two arrays `mean` and `stddev` of equal shape `[..., D]`; the last
axis is the event (action) axis. These pure functions replace a distributions library: the loss
only needs sampling, log-densities, per-dimension KLs and entropies, each a line of algebra.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

_HALF_LOG_TWO_PI = 0.5 * math.log(2.0 * math.pi)


def _check_same_shape(names: tuple[str, ...], *arrays: jax.Array) -> None:
    shapes = [jnp.shape(a) for a in arrays]
    if len(shapes[0]) < 1:
        raise ValueError(f"{names[0]} must have at least one axis (the event axis D), got shape {shapes[0]}")
    for name, shape in zip(names[1:], shapes[1:], strict=True):
        if shape != shapes[0]:
            raise ValueError(f"{name} must have the shape of {names[0]} {shapes[0]}, got {shape}")


def gaussian_sample(key: jax.Array, mean: jax.Array, stddev: jax.Array, num_samples: int) -> jax.Array:
    """Draws `num_samples` reparametrised samples: `[N, *mean.shape]`."""
    _check_same_shape(("mean", "stddev"), mean, stddev)
    if not isinstance(num_samples, int) or num_samples < 1:
        raise ValueError(f"num_samples must be a positive integer, got {num_samples!r}")
    mean = jnp.asarray(mean)
    noise = jax.random.normal(key, (num_samples, *mean.shape), dtype=mean.dtype)
    return mean + stddev * noise


def gaussian_log_prob(mean: jax.Array, stddev: jax.Array, x: jax.Array) -> jax.Array:
    """Log-density of `x` summed over the event axis.

    `x` has shape `[*S, *mean.shape]` for any (possibly empty) leading sample shape `S`; the result
    has shape `[*S, *mean.shape[:-1]]`.
    """
    _check_same_shape(("mean", "stddev"), mean, stddev)
    mean_shape, x_shape = jnp.shape(mean), jnp.shape(x)
    if x_shape[len(x_shape) - len(mean_shape):] != mean_shape:
        raise ValueError(f"x must end with the shape of mean {mean_shape}, got {x_shape}")
    z = (x - mean) / stddev
    per_dim = -0.5 * jnp.square(z) - jnp.log(stddev) - _HALF_LOG_TWO_PI
    return jnp.sum(per_dim, axis=-1)


def gaussian_kl(mean_p: jax.Array, stddev_p: jax.Array, mean_q: jax.Array, stddev_q: jax.Array) -> jax.Array:
    """Per-dimension `KL(p ‖ q)` of two diagonal Gaussians, shape `[..., D]` (not summed)."""
    _check_same_shape(("mean_p", "stddev_p", "mean_q", "stddev_q"), mean_p, stddev_p, mean_q, stddev_q)
    variance_ratio = jnp.square(stddev_p / stddev_q)
    mean_term = jnp.square((mean_p - mean_q) / stddev_q)
    return 0.5 * (variance_ratio + mean_term - 1.0) - jnp.log(stddev_p / stddev_q)


def gaussian_entropy(stddev: jax.Array) -> jax.Array:
    """Differential entropy summed over the event axis: `[...]`."""
    _check_same_shape(("stddev",), stddev)
    return jnp.sum(0.5 + _HALF_LOG_TWO_PI + jnp.log(stddev), axis=-1)
