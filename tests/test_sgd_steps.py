"""Fewer host round trips per update: K updates per jitted call (`sgd_steps_per_call`), metrics
fetched only for rows the logger writes, device copies of the parameters for acting."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
from dm_env import specs

from dmpo.agent.core import DMPO, learner_steps_due
from dmpo.agent.environment_loop import EnvironmentLoop
from dmpo.agent.learning import Learner, init_training_state, make_multi_update_fn, make_update_fn
from dmpo.agent.learning.learner import stack_batches
from dmpo.agent.networks import make_networks
from dmpo.config import ConfigError, DMPOConfig, LearnerConfig, NetworkConfig
from dmpo.envs import FakeEnvironment, make_environment_spec
from dmpo.reporting.logging import Dispatcher, NoOpLogger, TimeFilter
from dmpo.types import EnvironmentSpec, Transition
from dmpo.utils.counting import Counter

B, D, OBS = 8, 2, 3
SPEC = EnvironmentSpec(
    observations=specs.Array((OBS,), np.float32),
    actions=specs.BoundedArray((D,), np.float32, -1.0, 1.0),
    rewards=specs.Array((), np.float32),
    discounts=specs.BoundedArray((), np.float32, 0.0, 1.0),
)
NETWORKS = make_networks(SPEC, NetworkConfig(policy_layer_sizes=(16,), critic_layer_sizes=(16, 16),
                                             num_atoms=5, vmin=-2.0, vmax=2.0))
# Periods 3 and 2: target syncs land inside every scanned call of K = 4 (steps 2, 3, 4, 6, ...).
CONFIG = LearnerConfig(num_samples=3, critic_learning_rate=3e-3, target_policy_update_period=3,
                       target_critic_update_period=2)


def batch(seed: int) -> Transition:
    rng = np.random.default_rng(seed)
    return Transition(
        observation=rng.normal(size=(B, OBS)).astype(np.float32),
        action=rng.uniform(-1, 1, size=(B, D)).astype(np.float32),
        reward=rng.uniform(-2, 2, size=B).astype(np.float32),
        discount=rng.choice([0.0, 1.0], size=B).astype(np.float32),
        next_observation=rng.normal(size=(B, OBS)).astype(np.float32),
    )


def batches(count: int, offset: int = 0):
    return iter([batch(offset + i) for i in range(count)])


def assert_states_identical(got, want):
    got_leaves = jax.tree_util.tree_flatten_with_path(got)[0]
    want_leaves = jax.tree_util.tree_leaves(want)
    assert len(got_leaves) == len(want_leaves)
    for (path, x), y in zip(got_leaves, want_leaves, strict=True):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype, jax.tree_util.keystr(path)
        assert np.array_equal(x, y), f"{jax.tree_util.keystr(path)} differs"


class ListLogger:
    def __init__(self):
        self.rows = []

    def write(self, data):
        self.rows.append(dict(data))


# ------------------------------------------------------------------------------ scanned updates


@pytest.mark.parametrize("config", [CONFIG, LearnerConfig(num_samples=3, target_update_rate=0.1)],
                         ids=["periodic", "polyak"])
def test_scanned_update_is_bit_identical_to_single_updates(config):
    """Every leaf (params, targets, duals, optimizer states, steps, key) and every metric, exactly."""
    state = init_training_state(NETWORKS, SPEC, config, jax.random.PRNGKey(7))
    single = make_update_fn(NETWORKS, config)
    many = make_multi_update_fn(NETWORKS, config)
    reference = state
    for i in range(7):
        reference, last_metrics = single(reference, batch(i))
    # Two scanned calls (K = 3, then K = 4) from the same start: syncs at 0, 2, 3, 4, 6 fall inside.
    scanned, _ = many(state, stack_batches([batch(i) for i in range(3)]))
    scanned, metrics = many(scanned, stack_batches([batch(i) for i in range(3, 7)]))
    assert int(scanned.steps) == 7
    assert_states_identical(scanned, reference)
    assert metrics.keys() == last_metrics.keys()
    for key in metrics:
        assert np.array_equal(np.asarray(metrics[key]), np.asarray(last_metrics[key])), key


def test_learner_with_k_steps_per_call_matches_k_single_calls():
    k, calls = 4, 3
    single_log, many_log = ListLogger(), ListLogger()
    single = Learner(NETWORKS, SPEC, CONFIG, batches(k * calls), seed=1, logger=single_log,
                     counter=Counter(time_delta=0.0))
    config = dataclasses.replace(CONFIG, sgd_steps_per_call=k)
    many_counter = Counter(time_delta=0.0)
    many = Learner(NETWORKS, SPEC, config, batches(k * calls), seed=1, logger=many_log, counter=many_counter)
    assert many.batches_per_step == k
    single.run(k * calls)
    many.run(calls)
    assert_states_identical(many.save_state(), single.save_state())
    assert many_counter.get_counts()["steps"] == k * calls  # counts are of updates
    assert [row["steps"] for row in many_log.rows] == [k, 2 * k, 3 * k]
    for got, want in zip(many_log.rows, single_log.rows[k - 1::k], strict=True):  # the last update's
        for key in ("critic_loss", "policy_loss", "dual_temperature", "opt/critic_grad_norm"):
            assert got[key] == want[key], key
    with pytest.raises(StopIteration):
        many.step()


def test_sgd_steps_per_call_is_validated():
    for bad in (0, -1, 2.0):
        with pytest.raises(ConfigError, match="LearnerConfig.sgd_steps_per_call"):
            LearnerConfig(sgd_steps_per_call=bad)
    assert LearnerConfig().sgd_steps_per_call == 1


# ------------------------------------------------------------------------------ metric fetches


class CountingDeviceGet:
    def __init__(self, real):
        self.real, self.calls = real, 0

    def __call__(self, tree):
        self.calls += 1
        return self.real(tree)


def test_metrics_are_fetched_only_for_rows_the_logger_writes(monkeypatch):
    """Steps 0.5 s apart behind a 1 s time filter: every other row is written, and only those rows'
    metrics are fetched; the rows written hold the values of an unfiltered run's same steps."""
    reference_log = ListLogger()
    Learner(NETWORKS, SPEC, CONFIG, batches(8), seed=2, logger=reference_log,
            counter=Counter(time_delta=0.0)).run(8)

    now = [0.0]
    sink = ListLogger()
    learner = Learner(NETWORKS, SPEC, CONFIG, batches(8), seed=2,
                      logger=TimeFilter(sink, time_delta=1.0, clock=lambda: now[0]),
                      counter=Counter(time_delta=0.0))
    counting = CountingDeviceGet(jax.device_get)
    monkeypatch.setattr(jax, "device_get", counting)
    for step in range(8):
        now[0] = 0.5 * step
        learner.step()
    monkeypatch.undo()
    assert [row["steps"] for row in sink.rows] == [1, 3, 5, 7]  # at t = 0, 1, 2, 3
    assert counting.calls == learner.metric_fetches == 4
    assert int(learner.state.steps) == 8
    for row in sink.rows:
        want = reference_log.rows[row["steps"] - 1]
        assert row.keys() == want.keys()
        for key in row:
            if key != "walltime":
                assert row[key] == want[key], (row["steps"], key)


def test_the_learner_node_logger_fetches_only_the_rows_it_writes(tmp_path, monkeypatch):
    """The logger the distributed learner node builds (10 s rows) fetched all 20 steps' metrics when
    its count-filling wrapper hid `will_write`; it must fetch one, as the local logger does."""
    from dmpo.run.distributed.common import make_node_logger

    logger = make_node_logger("learner", str(tmp_path), time_delta=10.0)
    learner = Learner(NETWORKS, SPEC, CONFIG, batches(20), seed=2, logger=logger,
                      counter=Counter(time_delta=0.0))
    counting = CountingDeviceGet(jax.device_get)
    monkeypatch.setattr(jax, "device_get", counting)
    learner.run(20)
    monkeypatch.undo()
    logger.close()
    assert counting.calls == learner.metric_fetches == 1


def test_the_local_trainer_fetches_only_the_rows_its_learner_log_holds(tmp_path):
    import csv

    from dmpo.config import TrainConfig
    from dmpo.run.local import LocalExecutor
    from dmpo.run.run import Run

    agent = DMPOConfig(batch_size=8, min_replay_size=16, max_replay_size=500, samples_per_insert=8.0,
                       n_step=2,
                       learner=LearnerConfig(num_samples=2),
                       networks=NetworkConfig(policy_layer_sizes=(8,), critic_layer_sizes=(8,), num_atoms=5))
    config = TrainConfig(env="test:fake", steps=200, eval_every=0, checkpoint_every=0, agent=agent)
    trainers = []
    run = Run(config, tmp_path / "run", progress=False, quiet=True,
              env_factory=lambda seed: FakeEnvironment(observation_shape=(3,), action_dim=1,
                                                       episode_length=20, seed=seed % 1000))
    run._executor = lambda: trainers.append(LocalExecutor(run)) or trainers[-1]  # to read its agent after
    summary = run.train()
    trainer = trainers[0]
    with open(tmp_path / "run" / "logs" / "learner" / "logs.csv") as handle:
        rows = list(csv.DictReader(handle))
    steps = summary["counts"]["learner_steps"]
    assert steps >= 150  # (200 - 16) observations, one update per observation
    assert trainer.agent.learner.metric_fetches == len(rows) < steps / 4


def test_no_fetch_at_all_for_a_no_op_logger(monkeypatch):
    learner = Learner(NETWORKS, SPEC, CONFIG, batches(3), seed=2, logger=Dispatcher([NoOpLogger()]))
    counting = CountingDeviceGet(jax.device_get)
    monkeypatch.setattr(jax, "device_get", counting)
    result = learner.run(3)
    monkeypatch.undo()
    assert result is None and counting.calls == 0 and learner.metric_fetches == 0
    assert int(learner.state.steps) == 3


# ------------------------------------------------------------------------------ device copies


def test_device_copy_of_the_policy_survives_later_donating_steps():
    learner = Learner(NETWORKS, SPEC, CONFIG, batches(3), seed=4)
    learner.step()
    copy = learner.policy_params_on_device(online=True)
    host = learner.online_policy_params()
    target = learner.policy_params_on_device()
    learner.run(2)  # donates the state's buffers twice
    for got, want in zip(jax.tree_util.tree_leaves(copy), jax.tree_util.tree_leaves(host), strict=True):
        assert isinstance(got, jax.Array) and not got.is_deleted()
        np.testing.assert_array_equal(np.asarray(got), want)
    assert jax.tree_util.tree_structure(target) == jax.tree_util.tree_structure(learner.policy_params())


# ------------------------------------------------------------------------------ agent schedule


def tiny_agent_config(k: int) -> DMPOConfig:
    return DMPOConfig(batch_size=4, samples_per_insert=10.0, min_replay_size=4, max_replay_size=1000,
                      n_step=2, learner=LearnerConfig(num_samples=3, sgd_steps_per_call=k),
                      networks=NetworkConfig(policy_layer_sizes=(8,), critic_layer_sizes=(8,), num_atoms=5))


@pytest.mark.parametrize("k", [3, 4])
def test_sync_agent_runs_due_steps_in_calls_of_k_and_carries_the_rest(k):
    """ops 0.4: 2 updates due per observation from the 4th; K = 3 or 4 runs them when ≥ K are pending."""
    env = FakeEnvironment(observation_shape=(1,), action_dim=1, episode_length=5, seed=1)
    counter = Counter(time_delta=0.0)
    config = tiny_agent_config(k)
    agent = DMPO(make_environment_spec(env), config, seed=0, counter=counter)
    due_total = 0

    class Recorder:  # the agent, with each update() call checked
        def __getattr__(self, name):
            return getattr(agent, name)

        def update(self, wait=False):
            nonlocal due_total
            due_total += learner_steps_due(agent.num_observations, config.min_observations,
                                           config.observations_per_step)
            agent.update()
            done = counter.get_counts().get("steps", 0)
            assert done % k == 0 and done + agent.pending_sgd_steps == due_total
            assert 0 <= agent.pending_sgd_steps < k

    EnvironmentLoop(env, Recorder(), logger=NoOpLogger()).run(num_episodes=2)
    assert due_total == 2 * (10 - 4 + 1)
    assert int(agent.learner.state.steps) == counter.get_counts()["steps"] == due_total // k * k


def test_overlapped_agent_with_k_steps_per_call_learns_and_publishes_device_params():
    env = FakeEnvironment(observation_shape=(1,), action_dim=1, episode_length=10, seed=1)
    counter = Counter(time_delta=0.0)
    config = dataclasses.replace(tiny_agent_config(2), samples_per_insert=2.0)
    with DMPO(make_environment_spec(env), config, seed=0, counter=counter, overlap_learner=True) as agent:
        EnvironmentLoop(env, agent, logger=NoOpLogger()).run(num_episodes=6)
        with agent.pause():
            steps = int(agent.learner.state.steps)
            published = agent._published_params
            online = agent.learner.online_policy_params()
    assert steps >= 2 and steps % 2 == 0 and counter.get_counts()["steps"] == steps
    leaves = jax.tree_util.tree_leaves
    for got, want in zip(leaves(published), leaves(online), strict=True):
        assert isinstance(got, jax.Array)
        np.testing.assert_array_equal(np.asarray(got), want)
