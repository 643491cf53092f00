"""The distributional critic: `(embedding, action) → logits [B, A]` (algorithm.md §4.1, §4.2, §4.4).

The action is clipped to the action spec's bounds before it is used, so the critic never
extrapolates on out-of-bound sampled actions; it is cast to the embedding's dtype and concatenated
with the (optionally projected) embedding.
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from dmpo.agent.networks.heads import CategoricalValueHead
from dmpo.agent.networks.mlp import LAYER_NORM_EPSILON, Initializer, batch_concat, default_mlp_init


class EmbeddingProjection(nn.Module):
    """`Dense(size) → LayerNorm → tanh`: the DrQ-v2 critic's own layer on the shared embedding."""

    size: int
    kernel_init: Initializer = default_mlp_init

    @nn.compact
    def __call__(self, embedding: jax.Array) -> jax.Array:
        x = nn.Dense(self.size, kernel_init=self.kernel_init)(batch_concat(embedding))
        return jnp.tanh(nn.LayerNorm(epsilon=LAYER_NORM_EPSILON)(x))


class Critic(nn.Module):
    """`head(torso(concat(projection(embedding), clip(action))))`.

    Attributes:
      torso: the MLP after the concatenation (a `LayerNormMLP` for state and IMPALA networks, a plain
        ReLU `MLP` for DrQ-v2).
      head: the categorical value head.
      action_minimum, action_maximum: per-dimension bounds `[D]` of the action spec.
      projection: optional module applied to the embedding before the concatenation (DrQ-v2).
    """

    torso: nn.Module
    head: CategoricalValueHead
    action_minimum: Sequence[float]
    action_maximum: Sequence[float]
    projection: nn.Module | None = None

    def __call__(self, embedding: jax.Array, action: jax.Array) -> jax.Array:
        """Logits `[B, A]` for embeddings `[B, ...]` and actions `[B, D]`."""
        return self._logits(self._features(embedding), action)

    def sampled_logits(self, embedding: jax.Array, actions: jax.Array) -> jax.Array:
        """Logits `[N, B, A]` for N actions per state, `actions` `[N, B, D]`.

        Equal to calling the critic on the embedding repeated N times, but the embedding's own
        layers (the DrQ-v2 projection) run once per state instead of once per sample.
        """
        features = self._features(embedding)
        if jnp.ndim(actions) != 3:
            raise ValueError(f"actions must be [N, B, D], got shape {jnp.shape(actions)}")
        num_samples, batch = actions.shape[:2]
        tiled = jnp.broadcast_to(features, (num_samples, *features.shape))
        logits = self._logits(jnp.reshape(tiled, (num_samples * batch, -1)),
                              jnp.reshape(actions, (num_samples * batch, -1)))
        return jnp.reshape(logits, (num_samples, batch, -1))

    def _features(self, embedding: jax.Array) -> jax.Array:
        if self.projection is not None:
            embedding = self.projection(embedding)
        return batch_concat(embedding)

    def _logits(self, features: jax.Array, action: jax.Array) -> jax.Array:
        action_dim = len(self.action_minimum)
        if jnp.shape(action) != (features.shape[0], action_dim):
            raise ValueError(f"action must have shape [B, D] = {(features.shape[0], action_dim)}, "
                             f"got {jnp.shape(action)}")
        low = jnp.asarray(self.action_minimum, dtype=action.dtype)
        high = jnp.asarray(self.action_maximum, dtype=action.dtype)
        action = jnp.clip(action, low, high).astype(features.dtype)
        return self.head(self.torso(jnp.concatenate([features, action], axis=-1)))
