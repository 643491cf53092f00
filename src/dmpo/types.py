"""Core record types shared by every part of dmpo.

Shape letters used throughout the package:
  B  batch size                     N  number of sampled actions per state
  D  action dimensions              A  number of atoms of the categorical critic
  T  episode length                 n  n-step horizon

Observations may be a single array or a (nested) dict of arrays; every record below is a
pytree, so `jax.tree_util` / `dm-tree` map over it.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from dm_env import specs

NestedArray = Any  # an array or a nest (dict / tuple) of arrays
NestedSpec = Any  # a dm_env spec or a nest of specs


class Transition(NamedTuple):
    """One n-step replay item (algorithm.md §1).

    `reward` is the discounted n-step reward sum and `discount` is γ^(k-1)·Π d — one γ fewer than
    the number of steps; the learner multiplies by γ once more.
    """

    observation: NestedArray
    action: NestedArray
    reward: NestedArray
    discount: NestedArray
    next_observation: NestedArray


class EnvironmentSpec(NamedTuple):
    """The four specs an agent needs from an environment, and what lies between it and the task.

    `task` (a `dmpo.envs.interface.TaskInterface`, or None) records the task's own action bounds, the
    action repeat and the frame stack of a pipeline environment: the agent never uses it, but a policy
    snapshot does, so that a policy shipped without dmpo acts in the task's own action space."""

    observations: NestedSpec
    actions: specs.BoundedArray
    rewards: specs.Array
    discounts: specs.BoundedArray
    task: Any = None
