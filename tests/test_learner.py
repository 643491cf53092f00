"""The Learner object: batches in, counts and logs out, target params for actors, state round trip,
and a toy problem whose critic loss it drives down."""

from __future__ import annotations

import itertools

import jax
import numpy as np
import pytest
from dm_env import specs

from dmpo.agent.learning import Learner
from dmpo.agent.networks import make_networks
from dmpo.config import LearnerConfig, NetworkConfig
from dmpo.types import EnvironmentSpec, Transition
from dmpo.utils.counting import Counter

B, D, OBS = 8, 2, 3
SPEC = EnvironmentSpec(
    observations=specs.Array((OBS,), np.float32),
    actions=specs.BoundedArray((D,), np.float32, -1.0, 1.0),
    rewards=specs.Array((), np.float32),
    discounts=specs.BoundedArray((), np.float32, 0.0, 1.0),
)
NET_CONFIG = NetworkConfig(policy_layer_sizes=(16,), critic_layer_sizes=(16, 16), num_atoms=5, vmin=-2.0,
                           vmax=2.0)
NETWORKS = make_networks(SPEC, NET_CONFIG)
CONFIG = LearnerConfig(num_samples=3, critic_learning_rate=3e-3, target_policy_update_period=5,
                       target_critic_update_period=5)


def toy_batch() -> Transition:
    """Terminal transitions (discount 0) whose rewards sit on atoms: the critic's target is one-hot, so
    the cross-entropy can be driven to ≈ 0 from ≈ log(5)."""
    rng = np.random.default_rng(0)
    return Transition(
        observation=rng.normal(size=(B, OBS)).astype(np.float32),
        action=rng.uniform(-1, 1, size=(B, D)).astype(np.float32),
        reward=np.array([-2, -1, 0, 1, 2, 1, 0, -1], np.float32),
        discount=np.zeros(B, np.float32),
        next_observation=rng.normal(size=(B, OBS)).astype(np.float32),
    )


class ListLogger:
    def __init__(self):
        self.rows = []

    def write(self, data):
        self.rows.append(dict(data))


def tree_leaves(tree):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(tree)]


@pytest.fixture(scope="module")
def trained():
    """One learner (one compilation) shared by the tests below, run on a fixed batch."""
    logger, counter = ListLogger(), Counter()
    learner = Learner(NETWORKS, SPEC, CONFIG, itertools.repeat(toy_batch()), seed=3, logger=logger,
                      counter=counter)
    learner.run(300)
    return learner, logger, counter


def test_learner_drives_a_toy_critic_loss_down(trained):
    _, logger, _ = trained
    losses = [row["critic_loss"] for row in logger.rows]
    assert np.mean(losses[:5]) > 1.0
    assert np.mean(losses[-5:]) < 0.1 * np.mean(losses[:5])


def test_learner_counts_and_logs(trained):
    learner, logger, counter = trained
    assert len(logger.rows) == 300
    assert counter.get_counts()["steps"] == 300
    assert int(learner.state.steps) == 300
    first, last = logger.rows[0], logger.rows[-1]
    assert first["walltime"] == 0.0 and last["walltime"] > 0.0  # increments, seconds since the previous step
    assert last["steps"] == 300
    for key in ("critic_loss", "policy_loss", "kl_q_rel", "dual_temperature", "opt/critic_grad_norm"):
        assert isinstance(last[key], float) and np.isfinite(last[key])


def test_policy_params_are_target_copies_on_the_host(trained):
    learner, _, _ = trained
    target = learner.policy_params()
    online = learner.online_policy_params()
    for got, want in ((target.observation, learner.state.target_params.observation),
                      (target.policy, learner.state.target_params.policy),
                      (online.policy, learner.state.params.policy)):
        for x, y in zip(tree_leaves(got), tree_leaves(want), strict=True):
            np.testing.assert_array_equal(x, y)
    assert all(isinstance(x, np.ndarray) for x in jax.tree_util.tree_leaves(target))
    # 300 steps with period 5: the target policy is the online policy of step 295, not the current one.
    pairs = zip(tree_leaves(target.policy), tree_leaves(online.policy), strict=True)
    assert not all(np.array_equal(x, y) for x, y in pairs)


def test_save_and_restore_state_continue_bit_for_bit(trained):
    learner, _, _ = trained
    saved = learner.save_state()
    learner.run(2)
    after_two = learner.save_state()
    learner.restore_state(saved)
    for x, y in zip(tree_leaves(learner.state), tree_leaves(saved), strict=True):
        np.testing.assert_array_equal(x, y)
    learner.run(2)
    for x, y in zip(tree_leaves(learner.state), tree_leaves(after_two), strict=True):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(saved.params.critic["params"]["head"]["Dense_0"]["kernel"],
                              after_two.params.critic["params"]["head"]["Dense_0"]["kernel"])


def test_restore_state_rejects_other_shapes(trained):
    learner, _, _ = trained
    saved = learner.save_state()
    bad = saved._replace(steps=np.zeros((2,), np.int32))
    with pytest.raises(ValueError, match="steps"):
        learner.restore_state(bad)
    with pytest.raises(ValueError, match="structure"):
        learner.restore_state(saved._replace(params=saved.params._replace(observation={"x": np.zeros(1)})))


def test_run_rejects_negative_steps(trained):
    learner, _, _ = trained
    with pytest.raises(ValueError, match="num_steps"):
        learner.run(-1)


def test_learner_without_counter_or_logger_counts_its_own_steps():
    learner = Learner(NETWORKS, SPEC, CONFIG, iter([toy_batch(), toy_batch()]))
    result = learner.step()
    assert result["steps"] == 1 and np.isfinite(float(result["critic_loss"]))
    learner.step()
    with pytest.raises(StopIteration):
        learner.step()
