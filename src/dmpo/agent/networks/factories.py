"""Builds the three DMPO networks (observation, policy, critic) from an environment spec (algorithm.md §4).

`DMPONetworks` bundles Flax modules and constants; parameters live apart in `Params`, so the same
networks serve online and target parameters, learner and actors.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from dmpo.agent.networks.critic import Critic, EmbeddingProjection
from dmpo.agent.networks.heads import CategoricalValueHead, GaussianPolicyHead, make_support
from dmpo.agent.networks.mlp import MLP, Activation, BatchFlatten, Initializer, LayerNormMLP, default_mlp_init
from dmpo.agent.networks.normalization import NormalizedFlatten
from dmpo.config import NetworkConfig
from dmpo.types import EnvironmentSpec

Variables = Any  # a Flax variables dict, e.g. {"params": {...}} (empty for BatchFlatten)

# algorithm.md §4.4: the DrQ-v2 critic projects the shared embedding to 50 features first.
DRQ_EMBEDDING_SIZE = 50


class Params(NamedTuple):
    """Variables of the three networks (online or target)."""

    observation: Variables
    policy: Variables
    critic: Variables


class PolicyParams(NamedTuple):
    """What an actor needs: observation-network and policy variables."""

    observation: Variables
    policy: Variables


class Policy(nn.Module):
    """`GaussianPolicyHead(torso(embedding))` → `(mean, stddev)`, each `[B, D]`."""

    torso: nn.Module
    head: GaussianPolicyHead

    @nn.compact
    def __call__(self, embedding: jax.Array) -> tuple[jax.Array, jax.Array]:
        return self.head(self.torso(embedding))


class DMPONetworks(NamedTuple):
    """Modules and constants of one DMPO agent.

    Attributes:
      observation: `observation → embedding [B, E]`.
      policy: `embedding → (mean, stddev)`, each `[B, D]`.
      critic: `(embedding, action) → logits [B, A]`.
      support: the critic's atoms `[A]`.
      action_minimum, action_maximum: action-spec bounds, float32 `[D]`.
    """

    observation: nn.Module
    policy: nn.Module
    critic: nn.Module
    support: jax.Array
    action_minimum: np.ndarray
    action_maximum: np.ndarray

    @property
    def action_dim(self) -> int:
        return int(self.action_minimum.shape[0])

    def apply_policy(self, params: Params | PolicyParams, observation: Any) -> tuple[jax.Array, jax.Array]:
        """`(mean, stddev)` of the policy at a batch of observations."""
        embedding = self.observation.apply(params.observation, observation)
        return self.policy.apply(params.policy, embedding)

    def apply_critic(self, params: Params, observation: Any, action: jax.Array) -> jax.Array:
        """Critic logits `[B, A]` at a batch of observations and actions."""
        embedding = self.observation.apply(params.observation, observation)
        return self.critic.apply(params.critic, embedding, action)


def _action_bounds(env_spec: EnvironmentSpec) -> tuple[np.ndarray, np.ndarray]:
    spec = env_spec.actions
    shape = tuple(spec.shape)
    if len(shape) != 1 or shape[0] < 1:
        raise ValueError(f"env_spec.actions must be a bounded vector spec of shape [D], got shape {shape}")
    if not hasattr(spec, "minimum") or not hasattr(spec, "maximum"):
        raise ValueError("env_spec.actions must be a BoundedArray (the critic clips actions to its bounds)")
    low = np.broadcast_to(np.asarray(spec.minimum, np.float32), shape).copy()
    high = np.broadcast_to(np.asarray(spec.maximum, np.float32), shape).copy()
    if not np.all(low <= high):
        raise ValueError(f"env_spec.actions minimum must be <= maximum, got {low} and {high}")
    return low, high


def _policy(
    action_dim: int,
    config: NetworkConfig,
    activation: Activation = nn.elu,
    kernel_init: Initializer = default_mlp_init,
    head_init: Initializer | None = None,
) -> Policy:
    head_kwargs = {} if head_init is None else {"kernel_init": head_init}
    return Policy(
        torso=LayerNormMLP(config.policy_layer_sizes, activation=activation, activate_final=True,
                           kernel_init=kernel_init, normalize_every=config.layer_norm == "every",
                           residual=config.residual),
        head=GaussianPolicyHead(action_dim, init_scale=config.init_scale, min_scale=config.min_scale,
                                tanh_mean=config.tanh_mean, fixed_scale=config.fixed_scale, **head_kwargs),
    )


def _critic(
    bounds: tuple[np.ndarray, np.ndarray],
    config: NetworkConfig,
    torso: nn.Module | None = None,
    projection: nn.Module | None = None,
    head_init: Initializer | None = None,
) -> Critic:
    head_kwargs = {} if head_init is None else {"kernel_init": head_init}
    return Critic(
        torso=torso or LayerNormMLP(config.critic_layer_sizes, activate_final=True,
                                    normalize_every=config.layer_norm == "every", residual=config.residual),
        head=CategoricalValueHead(config.vmin, config.vmax, config.num_atoms, **head_kwargs),
        action_minimum=tuple(float(x) for x in bounds[0]),
        action_maximum=tuple(float(x) for x in bounds[1]),
        projection=projection,
    )


def _bundle(observation: nn.Module, policy: nn.Module, critic: nn.Module, config: NetworkConfig,
            bounds: tuple[np.ndarray, np.ndarray]) -> DMPONetworks:
    return DMPONetworks(observation=observation, policy=policy, critic=critic, support=make_support(config),
                        action_minimum=bounds[0], action_maximum=bounds[1])


def make_control_networks(env_spec: EnvironmentSpec, config: NetworkConfig) -> DMPONetworks:
    """State-based networks (algorithm.md §4.2): flatten (normalised if `normalize_observations`) →
    LayerNormMLP policy / critic with their heads."""
    bounds = _action_bounds(env_spec)
    observation = NormalizedFlatten() if config.normalize_observations else BatchFlatten()
    return _bundle(observation, _policy(len(bounds[0]), config), _critic(bounds, config), config, bounds)


def make_pixel_networks(env_spec: EnvironmentSpec, config: NetworkConfig) -> DMPONetworks:
    """Pixel networks: an IMPALA torso (algorithm.md §4.3) or a DrQ-v2 torso (algorithm.md §4.4).

    Layer sizes, init_scale and support come from `config`; `pixel_network_config` gives the
    reference's. With `drq` the critic adds `Dense(50) → LayerNorm → tanh` on the embedding, uses a plain
    ReLU MLP, and every dense layer (policy, critic, heads) is orthogonally initialised.
    """
    from dmpo.agent.networks import torsos  # imported lazily: only pixel agents need the conv torsos

    bounds = _action_bounds(env_spec)
    action_dim = len(bounds[0])
    if config.observation_network == "impala":
        return _bundle(torsos.ImpalaTorso(), _policy(action_dim, config), _critic(bounds, config), config,
                       bounds)
    if config.observation_network == "drq":
        orthogonal = nn.initializers.orthogonal()
        policy = _policy(action_dim, config, activation=nn.relu, kernel_init=orthogonal, head_init=orthogonal)
        critic = _critic(
            bounds, config,
            torso=MLP(config.critic_layer_sizes, activation=nn.relu, activate_final=True,
                      kernel_init=orthogonal, normalize=config.layer_norm == "every"),
            projection=EmbeddingProjection(DRQ_EMBEDDING_SIZE, kernel_init=orthogonal),
            head_init=orthogonal,
        )
        return _bundle(torsos.DrQTorso(), policy, critic, config, bounds)
    raise ValueError(f"NetworkConfig.observation_network must be 'impala' or 'drq' for pixel networks, "
                     f"got {config.observation_network!r}")


def make_networks(env_spec: EnvironmentSpec, config: NetworkConfig) -> DMPONetworks:
    """Dispatches on `config.observation_network` ('flatten' → states, 'impala'/'drq' → pixels)."""
    if config.observation_network == "flatten":
        return make_control_networks(env_spec, config)
    return make_pixel_networks(env_spec, config)


_PIXEL_DEFAULTS: dict[str, dict[str, Any]] = {
    # algorithm.md §4.3: control-suite MLP sizes behind the IMPALA torso, initial policy scale 1.
    "impala": dict(init_scale=1.0),
    # algorithm.md §4.4: policy LayerNormMLP (50, 1024, 1024); critic MLP (1024, 1024) after its Dense(50).
    "drq": dict(policy_layer_sizes=(50, 1024, 1024), critic_layer_sizes=(1024, 1024), init_scale=1.0),
}


def pixel_network_config(kind: str, **overrides: Any) -> NetworkConfig:
    """The reference's network settings for pixel agents `kind` ('impala' or 'drq'), plus `overrides`."""
    if kind not in _PIXEL_DEFAULTS:
        raise ValueError(f"kind must be one of {sorted(_PIXEL_DEFAULTS)}, got {kind!r}")
    settings = {**_PIXEL_DEFAULTS[kind], "observation_network": kind, **overrides}
    return dataclasses.replace(NetworkConfig(), **settings)


def dummy_observation(env_spec: EnvironmentSpec, batch_size: int = 1) -> Any:
    """Zeros shaped like the observation spec with a leading batch axis."""
    return jax.tree_util.tree_map(lambda spec: jnp.zeros((batch_size, *spec.shape), spec.dtype),
                                  env_spec.observations)


def init_params(networks: DMPONetworks, env_spec: EnvironmentSpec, key: jax.Array) -> Params:
    """Fresh variables for the three networks from one key (pure: works under jit and vmap)."""
    observation_key, policy_key, critic_key = jax.random.split(key, 3)
    observation = dummy_observation(env_spec)
    observation_vars = networks.observation.init(observation_key, observation)
    embedding = networks.observation.apply(observation_vars, observation)
    action = jnp.zeros((1, networks.action_dim), embedding.dtype)
    return Params(
        observation=observation_vars,
        policy=networks.policy.init(policy_key, embedding),
        critic=networks.critic.init(critic_key, embedding, action),
    )
