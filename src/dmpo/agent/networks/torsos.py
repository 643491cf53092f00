"""Convolutional observation networks for pixel observations (algorithm.md §4.3, §4.4).

Both take a batch of images `[B, H, W, C]` (stacked frames flattened into channels, `C = 3·F`) as
`uint8` in `[0, 255]` or as floats already in `[0, 1]`, and return a flat embedding `[B, E]`.
Converting inside the network lets replay and actors keep the 4× smaller `uint8` images.
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

# Sonnet's default initialiser draws from a normal with stddev 1/sqrt(fan_in) truncated at two
# stddevs (true stddev ≈ 0.88/sqrt(fan_in)); JAX's truncated variance scaling divides that 0.88
# back out, so the same distribution needs scale 0.88².
_TRUNCATION_STDDEV = 0.87962566103423978
sonnet_default_init = nn.initializers.variance_scaling(_TRUNCATION_STDDEV**2, "fan_in", "truncated_normal")


def to_unit_interval(images: jax.Array) -> jax.Array:
    """`uint8` images → float32 in `[0, 1]`; floating images are taken to be in `[0, 1]` already."""
    if jnp.ndim(images) != 4:
        raise ValueError(f"images must be [B, H, W, C], got shape {jnp.shape(images)}")
    dtype = jnp.result_type(images)
    if dtype == jnp.uint8:
        return jnp.asarray(images, jnp.float32) / 255.0
    if jnp.issubdtype(dtype, jnp.floating):
        return jnp.asarray(images)
    raise ValueError(f"images must be uint8 or floating point, got dtype {dtype}")


class ResidualBlock(nn.Module):
    """Pre-activation residual block: `x + conv(relu(conv(relu(x))))`, channels preserved."""

    kernel_init: nn.initializers.Initializer = sonnet_default_init

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        channels = x.shape[-1]
        y = nn.Conv(channels, (3, 3), padding="SAME", kernel_init=self.kernel_init)(nn.relu(x))
        y = nn.Conv(channels, (3, 3), padding="SAME", kernel_init=self.kernel_init)(nn.relu(y))
        return x + y


class ImpalaTorso(nn.Module):
    """IMPALA ResNet (algorithm.md §4.3).

    Per stage: 3×3 conv (stride 1, SAME) → 3×3 max-pool (stride 2, SAME) → `num_blocks` residual
    blocks; then ReLU → flatten → `Dense(output_size)` without activation. For 84×84 inputs the
    spatial size goes 84 → 42 → 21 → 11.
    """

    channels: Sequence[int] = (16, 32, 32)
    num_blocks: int = 2
    output_size: int = 256
    kernel_init: nn.initializers.Initializer = sonnet_default_init

    @nn.compact
    def __call__(self, images: jax.Array) -> jax.Array:
        x = to_unit_interval(images)
        for channels in self.channels:
            x = nn.Conv(channels, (3, 3), padding="SAME", kernel_init=self.kernel_init)(x)
            # Keywords: jax2onnx (dmpo.agent.policies.export) swaps in a max_pool that takes window_shape by
            # name only.
            x = nn.max_pool(x, window_shape=(3, 3), strides=(2, 2), padding="SAME")
            for _ in range(self.num_blocks):
                x = ResidualBlock(kernel_init=self.kernel_init)(x)
        x = nn.relu(x).reshape(x.shape[0], -1)
        return nn.Dense(self.output_size, kernel_init=self.kernel_init)(x)


class DrQTorso(nn.Module):
    """DrQ-v2 encoder (algorithm.md §4.4): `images − 0.5`, 3×3 SAME convs with ReLU, flattened.

    Orthogonal initialisation with gain √2 (ReLU) and zero biases. For 84×84 inputs the first,
    stride-2 conv halves the size to 42×42, so the embedding has 42·42·32 = 56448 features.
    """

    channels: int = 32
    strides: Sequence[int] = (2, 1, 1, 1)

    @nn.compact
    def __call__(self, images: jax.Array) -> jax.Array:
        x = to_unit_interval(images) - 0.5
        init = nn.initializers.orthogonal(scale=np.sqrt(2.0))
        for stride in self.strides:
            x = nn.Conv(self.channels, (3, 3), strides=(stride, stride), padding="SAME", kernel_init=init,
                        bias_init=nn.initializers.zeros)(x)
            x = nn.relu(x)
        return x.reshape(x.shape[0], -1)
