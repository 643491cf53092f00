"""Observations normalised by running statistics (algorithm.md §4.1).

`NormalizedFlatten` is the state observation network with a per-feature running mean and variance in a
variable collection of its own, `STATISTICS`. The learner merges each sampled batch into them before the
step's losses (`update_statistics`); gradients never reach them and no optimizer holds them
(`trainable` / `with_statistics`). Because they sit in the observation network's variables, they travel
with every copy of those variables: into the target networks at each target update, to actors with the
policy variables, into checkpoints, snapshots and exported policies.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from dmpo.agent.networks.mlp import batch_concat

STATISTICS = "observation_statistics"
"""The Flax variable collection that holds `mean`, `variance` and `count`."""

VARIANCE_EPSILON = 1e-8
"""Added to the variance before its square root, so that a constant feature maps to 0."""

NORMALIZED_CLIP = 10.0
"""Normalised features are clipped to ±this (as gymnasium's and SB3's observation normalisers do)."""


class NormalizedFlatten(nn.Module):
    """`batch_concat`, then `clip((x − mean) / sqrt(variance + 1e-8), ±10)` per feature.

    Before any statistics are merged (`count == 0`: mean 0, variance 1) it is the identity up to the clip.
    """

    @nn.compact
    def __call__(self, observation: Any) -> jax.Array:
        features = batch_concat(observation)
        size = features.shape[-1]
        mean = self.variable(STATISTICS, "mean", jnp.zeros, (size,), jnp.float32)
        variance = self.variable(STATISTICS, "variance", jnp.ones, (size,), jnp.float32)
        self.variable(STATISTICS, "count", jnp.zeros, (), jnp.float32)
        scale = jax.lax.rsqrt(jax.lax.stop_gradient(variance.value) + VARIANCE_EPSILON)
        centred = features.astype(jnp.float32) - jax.lax.stop_gradient(mean.value)
        return jnp.clip(centred * scale, -NORMALIZED_CLIP, NORMALIZED_CLIP).astype(features.dtype)


def has_statistics(variables: Any) -> bool:
    """Whether observation-network `variables` hold running statistics."""
    return isinstance(variables, dict) and STATISTICS in variables


def update_statistics(variables: Any, observation: Any) -> Any:
    """`variables` with the batch `observation [B, ...]` merged into their statistics (unchanged if none).

    Exact parallel merge of two (count, mean, M2) summaries (Chan, Golub and LeVeque), so the result
    equals the population mean and variance of every merged row, whatever the batch sizes were.
    """
    if not has_statistics(variables):
        return variables
    statistics = variables[STATISTICS]
    rows = batch_concat(observation).astype(jnp.float32)
    batch_count = jnp.asarray(rows.shape[0], jnp.float32)
    batch_mean = jnp.mean(rows, axis=0)
    batch_m2 = jnp.sum(jnp.square(rows - batch_mean), axis=0)
    count, mean = statistics["count"], statistics["mean"]
    m2 = statistics["variance"] * count
    total = count + batch_count
    delta = batch_mean - mean
    new_mean = mean + delta * (batch_count / total)
    new_m2 = m2 + batch_m2 + jnp.square(delta) * (count * batch_count / total)
    merged = {"mean": new_mean, "variance": new_m2 / total, "count": total}
    return {**variables, STATISTICS: merged}


def trainable(variables: Any) -> Any:
    """The observation-network variables an optimizer trains: all but the statistics."""
    if not has_statistics(variables):
        return variables
    return {name: value for name, value in variables.items() if name != STATISTICS}


def with_statistics(trained: Any, variables: Any) -> Any:
    """`trained` (from `trainable`) with the statistics of `variables` put back."""
    if not has_statistics(variables):
        return trained
    return {**trained, STATISTICS: variables[STATISTICS]}
