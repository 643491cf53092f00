"""Every seed of a run, derived from `TrainConfig.seed` in one place, for both modes.

One process: the training environments are re-created at every segment between checkpoints from
`segment_seed(seed, episode index, environment index)` (exact resume, `dmpo.run.local`). Both modes:
evaluation k of a run (filmed or not) runs on an environment seeded `evaluation_seed(seed, k)`, so
evaluation episodes never share seeds with training episodes and are the same in both modes.
Distributed: each node gets `node_seed(seed, role, index, generation)`, distinct
per role, index and restart generation (a replaced actor acts differently from the one it replaces);
a node stepping N lockstep environments seeds environment i with `lockstep_env_seeds(node seed, N)[i]`.

Inside the agent: `agent_seeds(seed)` seeds its replay table, learner and actor; the actor's random
stream for lockstep environment i starts from `lockstep_env_seeds(actor seed, N)[i]`; the probe that
observes rewards for an "auto" critic support runs its own environment from `reward_probe_seed(seed)`.
No other module derives a seed: each takes its seed from a function here, so every stream of a run is
listed on this page and a change to one shows up in `tests/test_seeds.py`'s recorded values.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["ROLE_ACTOR", "ROLE_EVALUATOR", "ROLE_LEARNER", "ROLE_REPLAY", "AgentSeeds", "agent_seeds",
           "evaluation_seed", "lockstep_env_seeds", "node_seed", "reward_probe_seed",
           "segment_seed"]

EVALUATION_SEED_OFFSET = 1_000_003
REWARD_PROBE_SEED_OFFSET = 7_919_993
ROLE_ACTOR, ROLE_EVALUATOR, ROLE_LEARNER, ROLE_REPLAY = 1, 2, 3, 4


def segment_seed(seed: int, episode_index: int, env_index: int = 0) -> int:
    """Environment seed for the segment that starts at `episode_index`; lockstep environment
    `env_index` > 0 gets `SeedSequence([seed, episode_index, env_index])`'s, environment 0 the
    single-environment seed."""
    entropy = [seed, episode_index] if env_index == 0 else [seed, episode_index, env_index]
    return int(np.random.SeedSequence(entropy).generate_state(1)[0])


def evaluation_seed(seed: int, round_index: int) -> int:
    """The environment seed of the run's evaluation round `round_index` (both modes)."""
    return segment_seed(seed + EVALUATION_SEED_OFFSET, round_index)


def node_seed(base: int, role: int, index: int = 0, generation: int = 0) -> int:
    """Distinct seeds per node role, index and restart generation."""
    return int(base) + 1_000_003 * role + 10_007 * index + 101 * generation


def lockstep_env_seeds(seed: int, num_envs: int) -> list[int]:
    """Seeds of `num_envs` lockstep environments from one seed: environment 0 keeps `seed` (so one
    environment is built exactly as a single one), environment i > 0 gets `SeedSequence([seed, i])`'s.

    Seeds both the environments a distributed actor steps (from its node seed) and the actor's
    per-environment sampling streams (from the agent's actor seed, `dmpo.agent.acting.env_keys`)."""
    return [seed] + [int(np.random.SeedSequence([seed, i]).generate_state(1)[0]) for i in range(1, num_envs)]


class AgentSeeds(NamedTuple):
    """The seeds of one agent's parts (`dmpo.agent.core.DMPO`)."""

    table: int
    """The replay table's sampler."""
    learner: int
    """The learner's parameter initialisation and update randomness."""
    actor: int
    """The behaviour actor's sampling stream (per environment: `lockstep_env_seeds(actor, N)`)."""


def agent_seeds(seed: int) -> AgentSeeds:
    """The table, learner and actor seeds of an agent built with `seed`: the three words of
    `SeedSequence(seed).generate_state(3)`, so they are independent of each other."""
    table, learner, actor = (int(s) for s in np.random.SeedSequence(seed).generate_state(3))
    return AgentSeeds(table, learner, actor)


def reward_probe_seed(seed: int) -> int:
    """The environment seed of the random-policy probe that observes rewards for an "auto" critic
    support (`dmpo.agent.learning.critic_support`); apart from every training and evaluation seed."""
    return seed + REWARD_PROBE_SEED_OFFSET
