"""Vectorized acting: N lockstep environments, one batched policy call, one adder each.

What is pinned down: one environment trains bit-identically to the stored run made before the
change; each lockstep environment's transitions equal those of a separate single-environment run
with that environment's seed and random stream, although the environments end their episodes at
different steps; `num_envs` is validated; `dmpo train --num-envs 8` trains, checkpoints and resumes
exactly. (`--actors 2 --num-envs 4`: tests/test_cli.py.)
"""

from __future__ import annotations

import json
import shutil

import jax
import numpy as np
import pytest

from acting_reference import REFERENCE_FILE, cpu_model, fake_factory, learner_values, reference_run
from dmpo.agent.acting import BatchedActor
from dmpo.agent.environment_loop import EnvironmentLoop
from dmpo.agent.networks import PolicyParams, init_params, make_networks
from dmpo.config import ConfigError, DMPOConfig, LearnerConfig, NetworkConfig, TrainConfig
from dmpo.envs import FakeEnvironment, make_environment_spec
from dmpo.lifecycle.checkpoints import TrainingCheckpoints
from dmpo.replay import NStepTransitionAdder
from dmpo.reporting.logging import NoOpLogger
from dmpo.utils.counting import Counter


def test_one_environment_trains_bit_identically_to_the_stored_reference(tmp_path):
    stored = json.loads(REFERENCE_FILE.read_text())
    digest = reference_run(tmp_path / "run")
    values = learner_values(tmp_path / "run")
    # What no CPU changes: the counts, the episodes, the replay's counters.
    for key in ("counts", "env_steps", "episodes", "num_actions", "replay_counters"):
        assert {digest[key] == d[key] for d in stored["digests"].values()} == {True}, key
    cpu = cpu_model()
    if cpu in stored["digests"]:  # a CPU model with a recorded run: bit for bit
        assert digest["learner_sha256"] == stored["digests"][cpu]["learner_sha256"], (
            f"N = 1 no longer reproduces the run stored at {stored['made_at_commit']} on {cpu}: "
            f"first values now {digest['first_values']}, stored {stored['digests'][cpu]['first_values']}")
        assert digest == stored["digests"][cpu]
        return
    # Another CPU model: every learner leaf near the stored run's. The stored values come from one
    # CPU family; another rounds the same computation differently, and after this run the Adam moments
    # of small weights differ by up to about 1e-5 (an AMD EPYC against the stored Xeon's), while
    # another trajectory is 1e-3 away.
    assert values.keys() == stored["values"].keys()
    for name, want in stored["values"].items():
        np.testing.assert_allclose(np.asarray(values[name], np.float64), np.asarray(want, np.float64),
                                   rtol=1e-3, atol=2e-5, err_msg=name)


class ListWriter:
    def __init__(self) -> None:
        self.items: list = []

    def insert(self, item) -> None:
        self.items.append(item)


LENGTHS = (3, 5, 4)  # episodes of different lengths: the environments end at different steps
N_STEP = 3


def fake(index: int) -> FakeEnvironment:
    return FakeEnvironment(observation_shape={"a": (2,), "b": (1,)}, action_dim=2,
                           episode_length=LENGTHS[index], terminate=index != 1, seed=100 + index)


def act_alone(environment, actor, num_episodes: int) -> None:
    """The reference: whole episodes of one environment, one action at a time (no lockstep loop)."""
    for _ in range(num_episodes):
        timestep = environment.reset()
        actor.observe_first(timestep)
        while not timestep.last():
            action = actor.select_action(timestep.observation)
            timestep = environment.step(action)
            actor.observe(action, timestep)


def stream_seed(seed: int, index: int) -> int:
    """Restated from `acting.env_keys`: environment 0 keeps the seed, i > 0 SeedSequence([seed, i])."""
    return seed if index == 0 else int(np.random.SeedSequence([seed, index]).generate_state(1)[0])


@pytest.fixture(scope="module")
def policy():
    spec = make_environment_spec(fake(0))
    sizes = NetworkConfig(policy_layer_sizes=(8,), critic_layer_sizes=(8,), num_atoms=5)
    networks = make_networks(spec, sizes)
    params = init_params(networks, spec, jax.random.PRNGKey(1))
    return networks, PolicyParams(params.observation, params.policy)


def test_each_environment_writes_what_a_separate_single_environment_run_would(policy):
    networks, params = policy
    writers = [ListWriter() for _ in LENGTHS]
    actor = BatchedActor(networks, lambda: params, seed=5,
                         adders=[NStepTransitionAdder(w, N_STEP, 0.9) for w in writers])
    counter = Counter(time_delta=0.0)
    rows = []
    loop = EnvironmentLoop([fake(i) for i in range(len(LENGTHS))], actor, counter, NoOpLogger(),
                           on_episode_end=rows.append)
    steps = loop.run(num_steps=30)
    lockstep = steps // len(LENGTHS)
    assert steps == lockstep * len(LENGTHS) and counter.get_counts()["steps"] == steps
    assert actor.num_actions == lockstep
    for index, length in enumerate(LENGTHS):
        finished = [row for row in rows if row["env_index"] == index]
        assert [row["episode_length"] for row in finished] == [length] * (lockstep // length)
        # The separate run: same environment seed, the environment's own random stream, one more
        # episode than the lockstep run finished (the stop dropped that one part-way).
        writer = ListWriter()
        single = BatchedActor(networks, lambda: params, seed=stream_seed(5, index),
                              adders=[NStepTransitionAdder(writer, N_STEP, 0.9)])
        act_alone(fake(index), single, lockstep // length + 1)
        per_episode = length + N_STEP - 1 if length >= N_STEP else 2 * length - 1
        assert len(writers[index].items) >= per_episode * (lockstep // length)
        assert len(writers[index].items) <= len(writer.items)
        for got, want in zip(writers[index].items, writer.items, strict=False):
            for name in ("reward", "discount"):
                np.testing.assert_array_equal(getattr(got, name), getattr(want, name))
            for name in ("observation", "next_observation"):
                for key in ("a", "b"):
                    np.testing.assert_array_equal(getattr(got, name)[key], getattr(want, name)[key])
            # One batched matmul against N single ones: equal up to float rounding.
            np.testing.assert_allclose(got.action, want.action, rtol=1e-5, atol=1e-6)
    # Distinct streams: the environments' first actions differ although their policies are the same.
    firsts = [w.items[0].action for w in writers]
    assert not np.allclose(firsts[0], firsts[1]) and not np.allclose(firsts[1], firsts[2])


@pytest.mark.parametrize("value", [0, -1, 257, True, 2.0])
def test_num_envs_out_of_range_names_the_field(value):
    with pytest.raises(ConfigError, match=r"TrainConfig\.num_envs.*\[1, 256\]"):
        TrainConfig(num_envs=value)


TINY = DMPOConfig(batch_size=16, samples_per_insert=8.0, min_replay_size=60, max_replay_size=2000, n_step=3,
                  learner=LearnerConfig(num_samples=2),
                  networks=NetworkConfig(policy_layer_sizes=(8,), critic_layer_sizes=(8,), num_atoms=5))


def test_train_with_eight_environments_checkpoints_and_resumes_exactly(tmp_path):
    """`dmpo train --num-envs 8` (gym InvertedPendulum: episodes end early, at different steps)."""
    from dmpo.cli.main import main

    flags = ["--env", "gym:InvertedPendulum-v5", "--num-envs", "8", "--eval-every", "0", "--keep-checkpoints",
             "5", "--agent.networks.policy-layer-sizes", "8", "--agent.networks.critic-layer-sizes", "8",
             "--agent.networks.num-atoms", "5", "--agent.learner.num-samples", "2",
             "--agent.batch-size", "16",
             "--agent.min-replay-size", "60", "--agent.max-replay-size", "2000",
             "--agent.samples-per-insert", "8", "--agent.n-step", "3", "--no-progress"]
    full = tmp_path / "full"
    main(["train", "--steps", "300", "--checkpoint-every", "150", "--run-dir", str(full), *flags])
    assert json.loads((full / "config.json").read_text())["config"]["num_envs"] == 8
    checkpoints = TrainingCheckpoints(full / "checkpoints")
    first, last = checkpoints.steps()[0], checkpoints.steps()[-1]
    assert 150 <= first < 300 <= last and first % 8 == 0 and last % 8 == 0  # 8 steps at a time

    # A run "killed" after its first checkpoint, resumed: the same final state as the uninterrupted run.
    killed = tmp_path / "killed"
    shutil.copytree(full, killed)
    for path in TrainingCheckpoints(killed / "checkpoints").paths()[1:]:
        shutil.rmtree(path)
    main(["train", "--resume", str(killed), "--no-progress"])
    resumed = TrainingCheckpoints(killed / "checkpoints")
    from dmpo.agent.core import DMPO
    from dmpo.envs import make

    spec = make_environment_spec(make("gym:InvertedPendulum-v5", seed=0))
    with DMPO(spec, TINY, seed=0) as agent:  # the learner state's structure and shapes (the run's sizes)
        template = agent.learner.save_state()
    state_full, meta_full, _ = TrainingCheckpoints.load(checkpoints.latest(), template)
    state_resumed, meta_resumed, _ = TrainingCheckpoints.load(resumed.latest(), template)

    def counts(meta):
        return {k: v for k, v in meta["counts"].items() if "walltime" not in k}

    assert counts(meta_full) == counts(meta_resumed)
    assert meta_full["num_actions"] == meta_resumed["num_actions"]
    assert counts(meta_full)["actor_episodes"] > 8  # episodes ended (and restarted) independently
    for a, b in zip(jax.tree_util.tree_leaves(state_full), jax.tree_util.tree_leaves(state_resumed),
                    strict=True):
        np.testing.assert_array_equal(a, b)


def test_pixel_environments_each_feed_the_frame_deduplicating_table():
    from dmpo.agent.core import DMPO
    from dmpo.envs import make
    from dmpo.replay import FrameStackTable

    environments = [make("dmc:cartpole-swingup", seed=s, pixels=True, image_size=32, action_repeat=8)
                    for s in (0, 1, 2)]  # 125-step episodes
    config = DMPOConfig(batch_size=8, samples_per_insert=8.0, min_replay_size=100, max_replay_size=1000,
                        n_step=3, learner=LearnerConfig(num_samples=2),
                        networks=NetworkConfig(policy_layer_sizes=(16,), critic_layer_sizes=(16,),
                                               num_atoms=5, observation_network="drq", init_scale=1.0))
    counter = Counter(time_delta=0.0)
    with DMPO(make_environment_spec(environments[0]), config, seed=0, counter=counter, num_envs=3) as agent:
        assert isinstance(agent.table, FrameStackTable)
        EnvironmentLoop(environments, agent, logger=NoOpLogger()).run(num_steps=1)
        stats = agent.table.stats()
        assert stats.size == 3 * (125 + 3 - 1)  # three whole episodes, one adder each
        assert counter.get_counts()["steps"] == 3 * 125 - 100 + 1  # the schedule counts env steps
        # Each environment is its own stream of stacks: still about one stored frame per item.
        assert stats.bytes_per_item < 0.25 * 2 * 3 * (32 * 32 * 3)


def test_overlapped_learner_with_four_environments(tmp_path):
    from dmpo.run.run import train

    config = TrainConfig(env="test:fake", steps=300, seed=1, eval_every=0, checkpoint_every=0, num_envs=4,
                         overlap_learner=True, agent=TINY)
    summary = train(config, tmp_path / "run", env_factory=fake_factory, progress=False, quiet=True)
    assert summary["env_steps"] >= 300 and summary["env_steps"] % 4 == 0
    assert summary["counts"]["learner_steps"] > 0
