"""Observations normalised by running statistics (`--agent.networks.normalize-observations`).

Expected values come from numpy over every row the learner saw, not from the code under test.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
from dm_env import specs

from dmpo.agent.learning.state import init_training_state
from dmpo.agent.learning.update import make_update_fn
from dmpo.agent.networks import init_params, make_networks
from dmpo.agent.networks.normalization import STATISTICS, NormalizedFlatten, update_statistics
from dmpo.config import LearnerConfig, NetworkConfig
from dmpo.types import EnvironmentSpec, Transition

OBSERVATIONS = {"position": specs.Array((2, 2), np.float32), "velocity": specs.Array((3,), np.float32)}
SPEC = EnvironmentSpec(observations=OBSERVATIONS,
                       actions=specs.BoundedArray((2,), np.float32, -1.0, 1.0),
                       rewards=specs.Array((), np.float32),
                       discounts=specs.BoundedArray((), np.float32, 0.0, 1.0))
NETWORKS = NetworkConfig(policy_layer_sizes=(8,), critic_layer_sizes=(8,), num_atoms=5,
                         normalize_observations=True)


def observation_batch(rng, size):
    """Features far from mean 0 / variance 1, each on its own scale."""
    return {"position": rng.normal(4.0, 3.0, (size, 2, 2)).astype(np.float32),
            "velocity": rng.normal(-50.0, 0.2, (size, 3)).astype(np.float32)}


def rows(observation):
    """The agent's flattening, by hand: sorted keys, each entry raveled."""
    return np.concatenate([observation["position"].reshape(len(observation["position"]), -1),
                           observation["velocity"]], axis=1).astype(np.float64)


def transitions(rng, size):
    observation = observation_batch(rng, size)
    return Transition(observation=observation, action=rng.uniform(-1, 1, (size, 2)).astype(np.float32),
                      reward=rng.normal(size=size).astype(np.float32), discount=np.ones(size, np.float32),
                      next_observation=observation_batch(rng, size))


def test_merged_statistics_are_those_of_every_row_whatever_the_batch_sizes():
    rng = np.random.default_rng(0)
    variables = NormalizedFlatten().init(jax.random.PRNGKey(0), observation_batch(rng, 1))
    batches = [observation_batch(rng, size) for size in (7, 1, 32, 3)]
    for batch in batches:
        variables = update_statistics(variables, batch)
    seen = np.concatenate([rows(batch) for batch in batches])
    statistics = variables[STATISTICS]
    assert float(statistics["count"]) == 43
    np.testing.assert_allclose(statistics["mean"], seen.mean(axis=0), rtol=1e-5)
    np.testing.assert_allclose(statistics["variance"], seen.var(axis=0), rtol=1e-4)


def test_the_network_centres_scales_and_clips_each_feature():
    rng = np.random.default_rng(1)
    module = NormalizedFlatten()
    observation = observation_batch(rng, 5)
    observation["velocity"][0, 0] = 1e6  # far outside: clipped to +10
    variables = module.init(jax.random.PRNGKey(0), observation)
    # Before any merge (count 0): mean 0, variance 1, so the features pass through up to the clip.
    np.testing.assert_allclose(module.apply(variables, observation), np.clip(rows(observation), -10, 10),
                               rtol=1e-6)
    mean, variance = rng.normal(size=7), rng.uniform(0.5, 4.0, size=7)
    variables = {STATISTICS: {"mean": mean.astype(np.float32), "variance": variance.astype(np.float32),
                              "count": np.float32(100)}}
    expected = np.clip((rows(observation) - mean) / np.sqrt(variance + 1e-8), -10, 10)
    np.testing.assert_allclose(module.apply(variables, observation), expected, rtol=1e-5, atol=1e-5)
    assert np.asarray(module.apply(variables, observation))[0, 4] == 10.0


def test_the_reference_state_network_keeps_no_statistics():
    """The default's variables are unchanged, so its checkpoints and snapshots keep their layout."""
    networks = make_networks(SPEC, dataclasses.replace(NETWORKS, normalize_observations=False))
    assert init_params(networks, SPEC, jax.random.PRNGKey(0)).observation == {}


def test_each_learner_step_merges_its_batch_and_no_optimizer_moves_the_statistics():
    rng = np.random.default_rng(2)
    # A large learning rate: a gradient reaching the statistics would move them far from numpy's.
    config = LearnerConfig(critic_learning_rate=1.0, policy_learning_rate=1.0, target_policy_update_period=3,
                           target_critic_update_period=3)
    networks = make_networks(SPEC, NETWORKS)
    state = init_training_state(networks, SPEC, config, jax.random.PRNGKey(0))
    opt_paths = [jax.tree_util.keystr(path) for path, _ in
                 jax.tree_util.tree_flatten_with_path(state.critic_opt_state)[0]]
    assert opt_paths and not any(STATISTICS in path for path in opt_paths)
    update = make_update_fn(networks, config)
    batches = [transitions(rng, 16) for _ in range(4)]
    counts_before = []
    for batch in batches:
        counts_before.append(float(state.params.observation[STATISTICS]["count"]))
        state, _ = update(state, batch)
    seen = np.concatenate([rows(batch.observation) for batch in batches])
    statistics = state.params.observation[STATISTICS]
    assert float(statistics["count"]) == 64
    np.testing.assert_allclose(statistics["mean"], seen.mean(axis=0), rtol=1e-5)
    np.testing.assert_allclose(statistics["variance"], seen.var(axis=0), rtol=1e-4)
    # The fourth update (steps == 3) copied the online networks of before it into the targets: the
    # statistics of the first three batches travel with them.
    assert counts_before == [0, 16, 32, 48]
    target = state.target_params.observation[STATISTICS]
    assert float(target["count"]) == 48
    np.testing.assert_allclose(target["mean"], seen[:48].mean(axis=0), rtol=1e-5)


def test_normalised_inputs_reach_policy_and_critic():
    """Two observations that differ only by a shift of every feature by its running mean give the
    networks the same input once the statistics hold that mean, and different inputs before."""
    rng = np.random.default_rng(3)
    networks = make_networks(SPEC, NETWORKS)
    params = init_params(networks, SPEC, jax.random.PRNGKey(1))
    observation = observation_batch(rng, 4)
    shift = {"position": np.full((4, 2, 2), 7.0, np.float32), "velocity": np.full((4, 3), -3.0, np.float32)}
    shifted = jax.tree_util.tree_map(np.add, observation, shift)
    before = networks.apply_policy(params, shifted)[0]
    assert not np.allclose(before, networks.apply_policy(params, observation)[0])
    statistics = params.observation[STATISTICS]
    moved = {**statistics, "mean": statistics["mean"] + rows(shift)[0].astype(np.float32)}
    params = params._replace(observation={STATISTICS: moved})
    np.testing.assert_allclose(networks.apply_policy(params, shifted)[0],
                               networks.apply_policy(params._replace(observation={STATISTICS: statistics}),
                                                     observation)[0], rtol=1e-5, atol=1e-6)
    action = rng.uniform(-1, 1, (4, 2)).astype(np.float32)
    np.testing.assert_allclose(networks.apply_critic(params, shifted, action),
                               networks.apply_critic(params._replace(observation={STATISTICS: statistics}),
                                                     observation, action), rtol=1e-5, atol=1e-6)
