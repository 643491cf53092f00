"""Policy snapshots: save → load → act without the learner; damaged files give clear errors."""

from __future__ import annotations

import warnings

import jax
import numpy as np
import pytest

import dmpo
from dmpo.agent.networks import PolicyParams, init_params, make_networks
from dmpo.agent.policies.snapshot import SnapshotError, load_policy, save_policy
from dmpo.config import NetworkConfig
from dmpo.envs import FakeEnvironment, make_environment_spec
from old_formats import previous_snapshot, rewrite_snapshot

CONFIG = NetworkConfig(policy_layer_sizes=(8, 8), critic_layer_sizes=(8,), num_atoms=5, init_scale=0.4)


@pytest.fixture(params=["array", "dict"])
def env_spec(request):
    shape = (3,) if request.param == "array" else {"position": (2,), "velocity": (1,)}
    return make_environment_spec(FakeEnvironment(observation_shape=shape, action_dim=2))


def random_params(env_spec, seed=0):
    networks = make_networks(env_spec, CONFIG)
    params = init_params(networks, env_spec, jax.random.PRNGKey(seed))
    # Perturb every leaf so that a loader that fell back to a fresh init would be caught.
    leaves, tree = jax.tree_util.tree_flatten(PolicyParams(params.observation, params.policy))
    keys = jax.random.split(jax.random.PRNGKey(seed + 1), len(leaves))
    leaves = [leaf + 0.1 * jax.random.normal(k, leaf.shape) for leaf, k in zip(leaves, keys, strict=True)]
    return networks, jax.tree_util.tree_unflatten(tree, leaves)


def reference_policy(networks, params, observation, key=None, step=0):
    """The policy for one observation, computed here: the Gaussian head's mean, or (with `key`) a sample
    `mean + stddev * normal(fold_in(key, step))` drawn with the shape of a one-row batch."""
    batched = jax.tree_util.tree_map(lambda x: np.asarray(x)[None], observation)
    mean, stddev = networks.apply_policy(params, batched)
    if key is None:
        return np.asarray(mean[0])
    noise = jax.random.normal(jax.random.fold_in(key, step), mean.shape, mean.dtype)
    return np.asarray((mean + stddev * noise)[0])


def test_loaded_policy_acts_like_the_saved_parameters(env_spec, tmp_path):
    networks, params = random_params(env_spec)
    path = save_policy(tmp_path / "policy.msgpack", env_spec, CONFIG, params, metadata={"env": "fake"})
    policy = dmpo.load_policy(path)
    env = FakeEnvironment(observation_shape=jax.tree_util.tree_map(lambda s: s.shape, env_spec.observations,
                                                                   is_leaf=lambda s: hasattr(s, "shape")),
                          action_dim=2, seed=4)
    timestep = env.reset()
    for _ in range(5):
        expected = reference_policy(networks, params, timestep.observation)
        action = policy(timestep.observation)
        np.testing.assert_allclose(action, expected, rtol=1e-6, atol=1e-6)
        timestep = env.step(action)
    assert policy.metadata == {"env": "fake"}
    assert policy.network_config == CONFIG
    stochastic = load_policy(path, deterministic=False, seed=3)
    first = stochastic(timestep.observation)
    assert first.shape == (2,) and not np.allclose(first, policy(timestep.observation))
    np.testing.assert_allclose(first, reference_policy(networks, params, timestep.observation,
                                                        jax.random.PRNGKey(3), 0), rtol=1e-6)


def test_run_directory_is_accepted(env_spec, tmp_path):
    _, params = random_params(env_spec)
    save_policy(tmp_path / "run" / "snapshots" / "policy.msgpack", env_spec, CONFIG, params)
    assert load_policy(tmp_path / "run").environment_spec.actions.shape == (2,)


def test_damaged_or_foreign_files_are_rejected(env_spec, tmp_path):
    _, params = random_params(env_spec)
    path = save_policy(tmp_path / "policy.msgpack", env_spec, CONFIG, params)
    blob = path.read_bytes()
    truncated = tmp_path / "truncated.msgpack"
    truncated.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(SnapshotError, match="truncated.msgpack"):
        load_policy(truncated)
    foreign = tmp_path / "foreign.msgpack"
    foreign.write_bytes(b"\x81\xa3abc\x01")  # a valid msgpack map, but not a snapshot
    with pytest.raises(SnapshotError, match="not a dmpo.policy file"):
        load_policy(foreign)
    with pytest.raises(SnapshotError, match="no policy snapshot"):
        load_policy(tmp_path / "missing.msgpack")


def test_a_previous_snapshot_loads_and_a_newer_one_is_refused(tmp_path):
    spec = make_environment_spec(FakeEnvironment(observation_shape=(3,), action_dim=2))
    _, params = random_params(spec)
    path = save_policy(tmp_path / "policy.msgpack", spec, CONFIG, params)
    old = rewrite_snapshot(path, previous_snapshot, tmp_path / "old.msgpack")
    observation = np.full(3, 0.3, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # version 2 recorded the task: no warning
        np.testing.assert_array_equal(load_policy(old)(observation), load_policy(path)(observation))
    newer = rewrite_snapshot(path, lambda payload: payload.update(format_version=4),
                             tmp_path / "newer.msgpack")
    with pytest.raises(SnapshotError, match=r"newer.msgpack has format version 4, .*"
                                            r"dmpo.policy format version 3 at most") as refused:
        load_policy(newer)
    assert "\n" not in str(refused.value)
