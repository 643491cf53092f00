"""Losses: the categorical critic loss and the MPO policy loss."""

from dmpo.agent.losses.categorical import (
    categorical_cross_entropy,
    categorical_l2_project,
    categorical_td_loss,
    mixture_log_probs,
    support_edge_mass,
)
from dmpo.agent.losses.mpo import MPODuals, clamp_duals, constrained, init_duals, mpo_loss

__all__ = [
    "MPODuals",
    "categorical_cross_entropy",
    "categorical_l2_project",
    "categorical_td_loss",
    "clamp_duals",
    "constrained",
    "init_duals",
    "mixture_log_probs",
    "mpo_loss",
    "support_edge_mass",
]
