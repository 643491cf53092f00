"""Diagonal Gaussian helpers used by the policy and the MPO loss (algorithm.md §4.1, §6.4).

A diagonal Gaussian is given by two arrays `mean` and `stddev` of equal shape `[..., D]`; the last
axis is the event (action) axis. These pure functions replace a distributions library: the loss
only needs sampling, log-densities, per-dimension KLs and entropies. The KLs are written to keep
their float32 relative accuracy at the tiny values the MPO trust regions are set on (ε_σ = 1e-6).
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
    """Per-dimension `KL(p ‖ q)` of two diagonal Gaussians, shape `[..., D]` (not summed).

    Written as the sum of its two non-negative parts, `gaussian_mean_kl + gaussian_stddev_kl`, each
    free of cancellation, so that the KL keeps its float32 relative accuracy down to the tiny values
    the MPO trust regions are set on (ε_σ = 1e-6). The textbook `½(r² + z² − 1) − log r` rounds the
    mean term to multiples of ~1e-7 and cancels two terms of order |r − 1| in the scale term.
    """
    _check_same_shape(("mean_p", "stddev_p", "mean_q", "stddev_q"), mean_p, stddev_p, mean_q, stddev_q)
    return _mean_kl(mean_p, mean_q, stddev_q) + _stddev_kl(stddev_p, stddev_q)


def gaussian_mean_kl(mean_p: jax.Array, mean_q: jax.Array, stddev_q: jax.Array) -> jax.Array:
    """Mean part of the per-dimension KL, `½((μp − μq) / σq)²`: `KL(N(μp, σq) ‖ N(μq, σq))`."""
    _check_same_shape(("mean_p", "mean_q", "stddev_q"), mean_p, mean_q, stddev_q)
    return _mean_kl(mean_p, mean_q, stddev_q)


def gaussian_stddev_kl(stddev_p: jax.Array, stddev_q: jax.Array) -> jax.Array:
    """Scale part of the per-dimension KL, `½(e^{2δ} − 1) − δ` with `δ = log(σp / σq)`.

    It is `KL(N(μ, σp) ‖ N(μ, σq))` for any common mean μ, and ≈ δ² for small δ.
    """
    _check_same_shape(("stddev_p", "stddev_q"), stddev_p, stddev_q)
    return _stddev_kl(stddev_p, stddev_q)


def _mean_kl(mean_p: jax.Array, mean_q: jax.Array, stddev_q: jax.Array) -> jax.Array:
    return 0.5 * jnp.square((mean_p - mean_q) / stddev_q)


def _stddev_kl(stddev_p: jax.Array, stddev_q: jax.Array) -> jax.Array:
    return scale_kl_from_log_ratio(log_stddev_ratio(stddev_p, stddev_q))


# σp/σq within [1/2, 3/2]: σp − σq is then exact in floating point (Sterbenz), so log1p of the
# relative difference gives δ to a few ulps *relative*; `log σp − log σq` would only give it to a
# few ulps of log σ, i.e. ~1e-7 absolute, which is 1e-3 relative at |δ| = 1e-4 (KL ≈ 1e-8).
_LOG1P_BAND = 0.5


def log_stddev_ratio(stddev_p: jax.Array, stddev_q: jax.Array) -> jax.Array:
    """`δ = log(σp / σq)`, to a few ulps relative even when σp and σq are almost equal."""
    relative_diff = (stddev_p - stddev_q) / stddev_q
    near = jnp.abs(relative_diff) <= _LOG1P_BAND
    # Zero the untaken input so that neither branch can produce an inf/NaN gradient.
    close = jnp.log1p(jnp.where(near, relative_diff, 0.0))
    far = jnp.log(jnp.where(near, 1.0, stddev_p)) - jnp.log(jnp.where(near, 1.0, stddev_q))
    return jnp.where(near, close, far)


# Below this |δ| a power series is used: there `½ expm1(2δ) − δ` cancels a term of size |δ| down
# to one of size δ², losing ~ulp/|δ| relative (measured 2e-4–8e-3 in float32 at |δ| ≤ 1e-4, 5e-6
# at |δ| = 0.05). Above it the direct form is within ~ulp/0.5 (measured ≤ 4e-7 in float32).
_SERIES_BELOW = 0.5


def _series_coeffs(dtype: jnp.dtype) -> tuple[float, ...]:
    """`c_k = 2^{k−1} / k!` of `½(e^{2δ} − 1) − δ = δ² Σ_{k≥2} c_k δ^{k−2}`, as many as `dtype` needs.

    Stops once the first omitted term, relative to δ² at |δ| = `_SERIES_BELOW`, is below an
    eighth of an ulp: 10 terms for float32, 17 for float64.
    """
    tolerance = float(jnp.finfo(dtype).eps) / 8
    coeffs, k = [], 2
    while True:
        coeff = 2.0 ** (k - 1) / math.factorial(k)
        if coeff * _SERIES_BELOW ** (k - 2) < tolerance:
            return tuple(coeffs)
        coeffs.append(coeff)
        k += 1


@jax.custom_jvp
def scale_kl_from_log_ratio(log_ratio: jax.Array) -> jax.Array:
    """`½ expm1(2δ) − δ` for `δ = log(σp / σq)`, to a few ulps relative for every δ (float arrays)."""
    log_ratio = jnp.asarray(log_ratio)
    series = jnp.zeros_like(log_ratio)
    for coeff in reversed(_series_coeffs(log_ratio.dtype)):  # Horner
        series = series * log_ratio + coeff
    series = series * jnp.square(log_ratio)
    direct = 0.5 * jnp.expm1(2.0 * log_ratio) - log_ratio
    return jnp.where(jnp.abs(log_ratio) < _SERIES_BELOW, series, direct)


@scale_kl_from_log_ratio.defjvp
def _scale_kl_jvp(primals, tangents):
    # d/dδ [½(e^{2δ} − 1) − δ] = e^{2δ} − 1 = expm1(2δ): exact without cancellation, and the
    # untaken series branch above (inf for huge δ) is never differentiated.
    (log_ratio,), (tangent,) = primals, tangents
    return scale_kl_from_log_ratio(log_ratio), jnp.expm1(2.0 * log_ratio) * tangent


def gaussian_entropy(stddev: jax.Array) -> jax.Array:
    """Differential entropy summed over the event axis: `[...]`."""
    _check_same_shape(("stddev",), stddev)
    return jnp.sum(0.5 + _HALF_LOG_TWO_PI + jnp.log(stddev), axis=-1)
