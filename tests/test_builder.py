"""One builder for both runners: the local agent and the distributed program build the same parts."""

from __future__ import annotations

import dataclasses

import dm_env
import numpy as np
import pytest
from dm_env import specs

from dmpo.agent.builder import DMPOBuilder
from dmpo.agent.core import DMPO
from dmpo.config import ConfigError, DMPOConfig, LearnerConfig, NetworkConfig, TrainConfig
from dmpo.distributed import DistributedProgram
from dmpo.envs import FakeEnvironment, make_environment_spec
from dmpo.envs.registry import PipelineFactory
from dmpo.lifecycle.checkpoints import CheckpointState
from dmpo.lifecycle.schedule import next_boundary
from dmpo.replay import FrameStackTable, MinSize, SampleToInsertRatio, Table
from dmpo.run.run import Run

TINY = DMPOConfig(batch_size=8, min_replay_size=16, max_replay_size=200, samples_per_insert=4.0, n_step=3,
                  learner=LearnerConfig(num_samples=2, discount=0.97),
                  networks=NetworkConfig(policy_layer_sizes=(8,), critic_layer_sizes=(8,), num_atoms=5))


class PixelFake(dm_env.Environment):
    """uint8 [8, 8, 9] observations: a stack of three RGB frames, as the pixel pipeline emits."""

    def __init__(self, seed: int) -> None:
        self._rng = np.random.default_rng(seed)

    def observation_spec(self):
        return specs.BoundedArray((8, 8, 9), np.uint8, 0, 255, name="pixels")

    def action_spec(self):
        return specs.BoundedArray((1,), np.float32, -1.0, 1.0)

    def reset(self):
        return dm_env.restart(self._rng.integers(0, 255, (8, 8, 9), dtype=np.uint8))

    def step(self, action):
        return dm_env.transition(np.float32(0.0), self._rng.integers(0, 255, (8, 8, 9), dtype=np.uint8))


FACTORIES = {
    "states": lambda seed: FakeEnvironment(observation_shape=(3,), action_dim=1, seed=seed % 1000),
    "pixels": PixelFake,
}


@pytest.mark.parametrize("observations, table_class", [("states", Table), ("pixels", FrameStackTable)])
@pytest.mark.parametrize("overlap", [False, True])
def test_local_agent_and_distributed_program_build_the_same_parts(tmp_path, observations, table_class,
                                                                   overlap):
    factory = PipelineFactory(FACTORIES[observations])  # what both trainers make of a user's factory
    agent_config = TINY
    if observations == "pixels":
        agent_config = dataclasses.replace(TINY, networks=dataclasses.replace(TINY.networks,
                                                                              observation_network="drq"))
    config = TrainConfig(env="test:fake", steps=100, overlap_learner=overlap, agent=agent_config)
    agent = DMPO(make_environment_spec(factory(0)), config.agent, seed=0, overlap_learner=overlap)
    run = Run(dataclasses.replace(config, actors=2, overlap_learner=False), tmp_path / "run",
              env_factory=factory)
    run.open()
    try:
        remote = DistributedProgram(run).builder  # starts no node
    finally:
        run.close()
    assert remote.config == agent.builder.config
    remote_table = remote.make_table(remote.make_rate_limiter("ratio"), seed=0)
    assert type(agent.table) is type(remote_table) is table_class
    assert agent.table.signature == remote_table.signature == remote.signature
    assert remote_table.max_size == agent.table.max_size == TINY.max_replay_size
    # The overlapped agent holds the distributed ratio; the synchronous one's update() holds it instead.
    expected = SampleToInsertRatio.from_agent_defaults(4.0, TINY.min_replay_size) if overlap else MinSize(1)
    assert agent.table.rate_limiter == expected
    assert remote_table.rate_limiter == SampleToInsertRatio.from_agent_defaults(4.0, TINY.min_replay_size)
    local_adder, remote_adder = agent.adder, remote.make_adder(remote_table)
    assert (local_adder.n_step, local_adder.discount) == (remote_adder.n_step, remote_adder.discount)
    assert (remote_adder.n_step, float(remote_adder.discount)) == (3, pytest.approx(0.97))
    # Same learner state structure: a checkpoint of one mode loads into the other.
    remote_learner = remote.make_learner(iter(()), seed=0)
    local_leaves = [np.shape(x) for x in _leaves(agent.learner.save_state())]
    assert local_leaves == [np.shape(x) for x in _leaves(remote_learner.save_state())]
    agent.close()


def _leaves(tree):
    import jax

    return jax.tree_util.tree_leaves(tree)


def test_checkpoint_state_is_one_layout_and_rejects_foreign_files():
    state = CheckpointState(env_steps=40, learner_steps=3, counts={"actor_steps": 40}, num_observations=40,
                            learning_starts=30)
    assert CheckpointState.from_json(state.to_json()) == state
    with pytest.raises(Exception, match="learning_starts"):
        CheckpointState.from_json({"env_steps": 1, "learner_steps": 0, "counts": {}, "num_observations": 1})


def test_ratio_limiter_on_an_empty_table_holds_learning_for_min_replay_size_items():
    """What a distributed resume without replay relies on: a fresh table samples nothing before
    `min_replay_size` items (the learner node's dataset waits on it)."""
    spec = make_environment_spec(FACTORIES["states"](0))
    builder = DMPOBuilder(TINY, spec)
    table = builder.make_table(builder.make_rate_limiter("ratio"), seed=0)
    item = next(iter(_items(spec, TINY.min_replay_size)))
    from dmpo.replay import RateLimiterTimeout

    for count in range(TINY.min_replay_size - 1):
        table.insert(item)
        with pytest.raises(RateLimiterTimeout) as timeout:
            table.sample(1, timeout=0.01)
        assert timeout.value.completed == 0, count
    table.insert(item)
    assert table.sample(1, timeout=1.0).observation.shape == (1, 3)


def _items(spec, count):
    from dmpo.types import Transition

    observation = np.zeros(spec.observations.shape, np.float32)
    for _ in range(count):
        yield Transition(observation, np.zeros(1, np.float32), np.float32(0), np.float32(1), observation)


def test_run_config_fields_a_mode_cannot_honour_fail_at_start(tmp_path):
    with pytest.raises(ConfigError, match="overlap_learner"):
        TrainConfig(actors=2, overlap_learner=True)
    with pytest.raises(ConfigError, match="overlap_learner"):
        TrainConfig(overlap_learner=True, agent=dataclasses.replace(TINY, samples_per_insert=None))
    # samples_per_insert=None is "no ratio" (MinSize): the distributed learner runs it, one process cannot.
    no_ratio = dataclasses.replace(TINY, samples_per_insert=None)
    with pytest.raises(ConfigError, match="DMPOConfig.samples_per_insert.*actors = 0"):
        TrainConfig(agent=no_ratio)
    assert DMPOBuilder(no_ratio, make_environment_spec(FACTORIES["states"](0))).make_rate_limiter(
        "ratio") == MinSize(TINY.min_replay_size)
    assert TrainConfig(actors=2, agent=no_ratio).agent.samples_per_insert is None
    with pytest.raises(ValueError, match="samples_per_insert must be a number"):
        DMPO(make_environment_spec(FACTORIES["states"](0)), no_ratio)
    from dmpo.run.run import train

    no_checkpoints = TrainConfig(env="test:fake", agent=dataclasses.replace(TINY, checkpoint=False))
    with pytest.raises(ConfigError, match="checkpoint"):
        train(no_checkpoints, tmp_path / "run", resume=True, env_factory=FACTORIES["states"])
    assert [next_boundary(s, 3) for s in (0, 2, 3, 10)] == [3, 3, 6, 12]


def test_evaluation_actor_acts_with_the_mean_of_the_parameters_it_last_read():
    import jax

    from dmpo.agent.networks import PolicyParams, init_params

    spec = make_environment_spec(FACTORIES["states"](0))
    builder = DMPOBuilder(TINY, spec)

    def policy_params(seed):
        params = init_params(builder.networks, spec, jax.random.PRNGKey(seed))
        return PolicyParams(params.observation, params.policy)

    def mean(params, observation):  # the Gaussian head's mean, computed here for one observation
        return np.asarray(builder.networks.apply_policy(params, observation[None])[0][0])

    source = [policy_params(1)]
    actor = builder.make_evaluation_actor(lambda: source[0])
    observation = np.array([0.5, -1.0, 2.0], np.float32)
    first = actor.select_action(observation)
    np.testing.assert_allclose(first, mean(source[0], observation), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(actor.select_action(observation), first)  # no noise: the same action
    source[0] = policy_params(2)
    np.testing.assert_array_equal(actor.select_action(observation), first)  # not read before update()
    actor.update()
    np.testing.assert_allclose(actor.select_action(observation), mean(source[0], observation),
                               rtol=1e-6, atol=1e-6)
    assert not np.allclose(actor.select_action(observation), first)
