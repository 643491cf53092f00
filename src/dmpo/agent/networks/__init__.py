"""Flax networks of the DMPO agent: observation torso, Gaussian policy, categorical critic (algorithm.md §4).

Pixel torsos live in `dmpo.agent.networks.torsos` and are imported only when pixel networks are built.
"""

from dmpo.agent.networks.critic import Critic, EmbeddingProjection
from dmpo.agent.networks.factories import (
    DMPONetworks,
    Params,
    Policy,
    PolicyParams,
    dummy_observation,
    init_params,
    make_control_networks,
    make_networks,
    make_pixel_networks,
    pixel_network_config,
)
from dmpo.agent.networks.heads import CategoricalValueHead, GaussianPolicyHead, make_support, support_atoms
from dmpo.agent.networks.mlp import MLP, BatchFlatten, LayerNormMLP, batch_concat

__all__ = [
    "MLP",
    "BatchFlatten",
    "CategoricalValueHead",
    "Critic",
    "DMPONetworks",
    "EmbeddingProjection",
    "GaussianPolicyHead",
    "LayerNormMLP",
    "Params",
    "Policy",
    "PolicyParams",
    "batch_concat",
    "dummy_observation",
    "init_params",
    "make_control_networks",
    "make_networks",
    "make_pixel_networks",
    "make_support",
    "pixel_network_config",
    "support_atoms",
]
