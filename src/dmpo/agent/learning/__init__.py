"""The DMPO learner: training state, the pure jitted update, target updates, the Learner object."""

from dmpo.agent.learning.learner import BatchSlot, Learner
from dmpo.agent.learning.state import Optimizers, TrainingState, init_training_state, make_optimizers
from dmpo.agent.learning.targets import periodic_targets, polyak_targets, update_targets
from dmpo.agent.learning.update import (
    Bootstrap,
    bootstrap,
    compute_losses,
    critic_loss,
    make_multi_update_fn,
    make_update_fn,
    policy_loss,
    step_keys,
)

__all__ = [
    "BatchSlot",
    "Bootstrap",
    "Learner",
    "Optimizers",
    "TrainingState",
    "bootstrap",
    "compute_losses",
    "critic_loss",
    "init_training_state",
    "make_multi_update_fn",
    "make_optimizers",
    "make_update_fn",
    "periodic_targets",
    "policy_loss",
    "polyak_targets",
    "step_keys",
    "update_targets",
]
