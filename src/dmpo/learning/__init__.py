"""The DMPO learner: training state, the pure jitted update, target updates, the Learner object."""

from dmpo.learning.learner import BatchSlot, Learner
from dmpo.learning.state import Optimizers, TrainingState, init_training_state, make_optimizers
from dmpo.learning.targets import periodic_targets, polyak_targets, update_targets
from dmpo.learning.update import (
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
