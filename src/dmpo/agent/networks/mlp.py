"""Multi-layer perceptrons and the flattening observation network (algorithm.md §4.1).

Inputs may be a single array or a nest of arrays; `batch_concat` turns any nest into one `[B, F]`
matrix so the layers below never see structure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

Initializer = Callable[..., jax.Array]
Activation = Callable[[jax.Array], jax.Array]

LAYER_NORM_EPSILON = 1e-5

# Uniform variance scaling with scale 0.333 over fan_out: U(±sqrt(3 · 0.333 / fan_out)), i.e.
# U(±sqrt(0.999 / fan_out)) — the reference layer-norm MLP's default weights.
default_mlp_init: Initializer = nn.initializers.variance_scaling(0.333, "fan_out", "uniform")


def batch_concat(inputs: Any) -> jax.Array:
    """Flattens every leaf to `[B, -1]` and concatenates them along the feature axis.

    Leaves are taken in `jax.tree_util` order, so dict observations are concatenated in sorted-key
    order. A leaf without a batch axis is an error: the batch size must be explicit.
    """
    leaves = jax.tree_util.tree_leaves(inputs)
    if not leaves:
        raise ValueError("batch_concat needs at least one array leaf, got an empty nest")
    # np.shape, not jnp.shape: shapes are static here, and jax2onnx (dmpo.agent.policies.export)
    # turns jnp.shape
    # into a traced array while it converts, which a Python `!=` cannot branch on.
    batch = np.shape(leaves[0])[0] if np.ndim(leaves[0]) > 0 else None
    for leaf in leaves:
        if np.ndim(leaf) == 0 or np.shape(leaf)[0] != batch:
            raise ValueError("every input leaf must share the leading batch axis "
                             f"B={batch}, got shapes {[np.shape(x) for x in leaves]}")
    return jnp.concatenate([jnp.reshape(leaf, (batch, -1)) for leaf in leaves], axis=-1)


class BatchFlatten(nn.Module):
    """The control-suite observation network: `batch_concat`, no parameters.

    Being a module keeps the parameter trees of every observation network alike (its variables are
    simply an empty dict).
    """

    @nn.compact
    def __call__(self, observation: Any) -> jax.Array:
        return batch_concat(observation)


class LayerNormMLP(nn.Module):
    """`Dense(sizes[0]) → LayerNorm → tanh`, then a plain MLP over `sizes[1:]`.

    `activation` is applied between the later layers and after the last one iff `activate_final`;
    with a single size the output is the (bounded) tanh output. `normalize_every` puts a LayerNorm
    before each later activation too (`NetworkConfig.layer_norm="every"`, as SimBa and BRO do).
    `residual` pairs the later layers into `ResidualBlocks` instead (`NetworkConfig.residual`).
    """

    layer_sizes: Sequence[int]
    activation: Activation = nn.elu
    activate_final: bool = False
    kernel_init: Initializer = default_mlp_init
    normalize_every: bool = False
    residual: bool = False

    @nn.compact
    def __call__(self, inputs: Any) -> jax.Array:
        if not self.layer_sizes:
            raise ValueError("LayerNormMLP.layer_sizes must name at least one layer")
        x = nn.Dense(self.layer_sizes[0], kernel_init=self.kernel_init)(batch_concat(inputs))
        x = jnp.tanh(nn.LayerNorm(epsilon=LAYER_NORM_EPSILON)(x))
        if self.residual:
            return ResidualBlocks(tuple(self.layer_sizes[1:]), activation=self.activation,
                                  activate_final=self.activate_final, kernel_init=self.kernel_init)(x)
        return MLP(tuple(self.layer_sizes[1:]), activation=self.activation,
                   activate_final=self.activate_final, kernel_init=self.kernel_init,
                   normalize=self.normalize_every)(x)


class MLP(nn.Module):
    """Plain stack of dense layers with `activation` between them (and after the last iff
    `activate_final`), each activation preceded by a LayerNorm iff `normalize`. An empty
    `layer_sizes` is the identity."""

    layer_sizes: Sequence[int]
    activation: Activation = nn.elu
    activate_final: bool = False
    kernel_init: Initializer = default_mlp_init
    normalize: bool = False

    @nn.compact
    def __call__(self, inputs: Any) -> jax.Array:
        x = batch_concat(inputs)
        for index, size in enumerate(self.layer_sizes):
            x = nn.Dense(size, kernel_init=self.kernel_init)(x)
            if index < len(self.layer_sizes) - 1 or self.activate_final:
                if self.normalize:
                    x = nn.LayerNorm(epsilon=LAYER_NORM_EPSILON)(x)
                x = self.activation(x)
        return x


class ResidualBlocks(nn.Module):
    """Residual blocks of two layers each, as BRO builds SAC's networks: each block adds
    `LayerNorm(Dense(activation(LayerNorm(Dense(x)))))` to its input `x`, so every layer keeps the
    width of the input (`layer_sizes` is an even number of sizes, all equal to it) and the same
    sizes cost the same FLOPs as the plain MLP. `activation` follows the last block iff
    `activate_final`."""

    layer_sizes: Sequence[int]
    activation: Activation = nn.elu
    activate_final: bool = False
    kernel_init: Initializer = default_mlp_init

    @nn.compact
    def __call__(self, inputs: jax.Array) -> jax.Array:
        width = inputs.shape[-1]
        if len(self.layer_sizes) % 2 or any(size != width for size in self.layer_sizes):
            raise ValueError("ResidualBlocks.layer_sizes must be an even number of sizes equal to the "
                             f"input's width {width}, got {tuple(self.layer_sizes)}")
        x = inputs
        for _ in range(len(self.layer_sizes) // 2):
            y = nn.Dense(width, kernel_init=self.kernel_init)(x)
            y = self.activation(nn.LayerNorm(epsilon=LAYER_NORM_EPSILON)(y))
            y = nn.Dense(width, kernel_init=self.kernel_init)(y)
            x = x + nn.LayerNorm(epsilon=LAYER_NORM_EPSILON)(y)
        return self.activation(x) if self.activate_final else x
