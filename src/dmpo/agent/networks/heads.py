"""Output heads: the diagonal Gaussian policy head and the categorical value head (algorithm.md §4.1)."""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from dmpo.agent.networks.mlp import Initializer
from dmpo.config import NetworkConfig

# Near-zero weights (truncated normal, variance 1e-4 / fan_in) make the initial policy mean ≈ 0 and
# the initial standard deviation ≈ init_scale.
near_zero_init: Initializer = nn.initializers.variance_scaling(1e-4, "fan_in", "truncated_normal")


def truncated_normal_fan_in(key: jax.Array, shape: tuple[int, ...],
                            dtype: jnp.dtype = jnp.float32) -> jax.Array:
    """Truncated normal (±2 std) with std `1/sqrt(fan_in)`: the TF value head's default init.

    The JAX reference initialises the value head near zero (a uniform initial distribution); we follow
    the TF reference, whose initial value distribution is not uniform (algorithm.md §4.1, §8.2.20).
    """
    return nn.initializers.truncated_normal(stddev=1.0 / math.sqrt(shape[0]))(key, shape, dtype)


class GaussianPolicyHead(nn.Module):
    """Diagonal Gaussian policy head returning `(mean, stddev)`, each `[B, D]`.

    `stddev = softplus(Dense(h)) · init_scale / ln 2 + min_scale`, so it starts near `init_scale`;
    with `fixed_scale` it is the constant `init_scale`. With `tanh_mean` the mean is squashed, after
    the standard deviation is computed.
    """

    action_dim: int
    init_scale: float = 0.3
    min_scale: float = 1e-6
    tanh_mean: bool = False
    fixed_scale: bool = False
    kernel_init: Initializer = near_zero_init

    @nn.compact
    def __call__(self, inputs: jax.Array) -> tuple[jax.Array, jax.Array]:
        mean = nn.Dense(self.action_dim, kernel_init=self.kernel_init, name="mean")(inputs)
        if self.fixed_scale:
            stddev = jnp.full_like(mean, self.init_scale)
        else:
            raw = nn.Dense(self.action_dim, kernel_init=self.kernel_init, name="stddev")(inputs)
            stddev = jax.nn.softplus(raw) * (self.init_scale / math.log(2.0)) + self.min_scale
        if self.tanh_mean:
            mean = jnp.tanh(mean)
        return mean, stddev


def support_atoms(vmin: float, vmax: float, num_atoms: int) -> jax.Array:
    """Evenly spaced atoms `linspace(vmin, vmax, A)`, float32 `[A]` (spacing `(vmax − vmin)/(A − 1)`)."""
    if not vmin < vmax or num_atoms < 2:
        raise ValueError(f"a support needs vmin < vmax and num_atoms >= 2, got vmin={vmin}, vmax={vmax}, "
                         f"num_atoms={num_atoms}")
    return jnp.linspace(vmin, vmax, num_atoms, dtype=jnp.float32)


def make_support(config: NetworkConfig) -> jax.Array:
    """The critic's fixed atoms for `config` (vmin, vmax, num_atoms)."""
    if not config.support_resolved:
        raise ValueError(f"NetworkConfig.vmin/vmax {config.vmin!r}/{config.vmax!r} must be resolved from "
                         "the environment before networks are built: "
                         "dmpo.agent.learning.critic_support.resolve_support (training does this)")
    return support_atoms(config.vmin, config.vmax, config.num_atoms)


class CategoricalValueHead(nn.Module):
    """One dense layer to the `A` logits `[B, A]` of a categorical distribution over `self.support`.

    The support is fixed (not a parameter); `DMPONetworks.support` carries it for the losses.
    """

    vmin: float
    vmax: float
    num_atoms: int
    kernel_init: Initializer = truncated_normal_fan_in

    @nn.compact
    def __call__(self, inputs: jax.Array) -> jax.Array:
        return nn.Dense(self.num_atoms, kernel_init=self.kernel_init)(inputs)

    @property
    def support(self) -> jax.Array:
        return support_atoms(self.vmin, self.vmax, self.num_atoms)
