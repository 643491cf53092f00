"""The single-process agent: learner-step schedule, a fast learning run, exact resume."""

from __future__ import annotations

import dataclasses
import json

import jax
import numpy as np
import pytest

from dmpo.agent.core import DMPO, learner_steps_due
from dmpo.agent.environment_loop import EnvironmentLoop
from dmpo.config import DMPOConfig, LearnerConfig, NetworkConfig, TrainConfig
from dmpo.envs import FakeEnvironment, ReachTarget, make_environment_spec
from dmpo.reporting.logging import NoOpLogger
from dmpo.run.run import train
from dmpo.utils.counting import Counter
from old_formats import previous_agent_folder, previous_run_folder, rewrite_json

TINY_NETWORKS = NetworkConfig(policy_layer_sizes=(16,), critic_layer_sizes=(16,), vmin=-10.0, vmax=10.0,
                              num_atoms=11)


def tiny_config(**overrides) -> DMPOConfig:
    base = dict(batch_size=10, samples_per_insert=2.0, min_replay_size=10, max_replay_size=1000, n_step=2,
                learner=LearnerConfig(num_samples=3), networks=TINY_NETWORKS)
    base.update(overrides)
    return DMPOConfig(**base)


def reference_schedule(num_observations: int, min_observations: int, ops: float) -> int:
    """algorithm.md §3 restated independently: whole learner steps due after observation
    `num_observations`."""
    if num_observations < min_observations:
        return 0
    if ops > 1:
        period = int(ops)  # the reference truncates fractional ratios
        return 1 if (num_observations - min_observations) % period == 0 else 0
    return int(1 / ops)


@pytest.mark.parametrize("ops", [8.0, 5.0, 2.5, 1.0, 0.4, 0.5, 0.3])
def test_learner_step_schedule_matches_spec(ops):
    for n in range(0, 200):
        assert learner_steps_due(n, 50, ops) == reference_schedule(n, 50, ops), (n, ops)


def test_fractional_ratios_truncate_like_the_reference():
    due = [learner_steps_due(n, 0, 2.5) for n in range(10)]
    assert due == [1, 0, 1, 0, 1, 0, 1, 0, 1, 0]  # 2.5 -> every 2 observations
    assert {learner_steps_due(n, 0, 0.4) for n in range(10)} == {2}  # 1/0.4 = 2.5 -> 2 per observation


@pytest.mark.parametrize(
    "batch_size, spi, expected_at",
    [
        (10, 2.0, [10, 15, 20]),  # Acme's own test: ops 5, first step at min_observations = 10
        (5, 2.0, [10, 12, 14, 16, 18, 20]),  # ops 2.5 truncated to 2
    ],
)
def test_agent_runs_learner_steps_on_schedule(batch_size, spi, expected_at):
    env = FakeEnvironment(observation_shape=(1,), action_dim=1, episode_length=10, seed=1)
    counter = Counter(time_delta=0.0)
    config = tiny_config(batch_size=batch_size, samples_per_insert=spi, min_replay_size=10)
    agent = DMPO(make_environment_spec(env), config, seed=0, counter=counter)
    steps_at = []

    class Recorder:  # the agent, with its update() calls recorded
        def __getattr__(self, name):
            return getattr(agent, name)

        def update(self, wait=False):
            before = counter.get_counts().get("steps", 0)
            agent.update()
            after = counter.get_counts().get("steps", 0)
            steps_at.extend([agent.num_observations] * (after - before))

    EnvironmentLoop(env, Recorder(), logger=NoOpLogger()).run(num_episodes=2)
    assert steps_at == expected_at


def test_two_learner_steps_per_observation_when_ratio_below_one():
    env = FakeEnvironment(observation_shape=(1,), action_dim=1, episode_length=5, seed=1)
    counter = Counter(time_delta=0.0)
    config = tiny_config(batch_size=4, samples_per_insert=10.0, min_replay_size=4)  # ops 0.4
    agent = DMPO(make_environment_spec(env), config, seed=0, counter=counter)
    EnvironmentLoop(env, agent, logger=NoOpLogger()).run(num_episodes=2)
    assert counter.get_counts()["steps"] == 2 * (10 - 4 + 1)


def test_acting_uses_online_policy_and_stores_raw_samples():
    env = FakeEnvironment(observation_shape=(2,), action_dim=2, episode_length=6, seed=3)
    agent = DMPO(make_environment_spec(env), tiny_config(min_replay_size=10), seed=0)
    EnvironmentLoop(env, agent, logger=NoOpLogger()).run(num_episodes=1)
    assert agent.table.stats().size == 6 + 2 - 1  # T + n - 1 items for T >= n
    online = agent.learner.online_policy_params()
    restored = agent.actor._params  # the actor acts with the learner's online parameters
    for a, b in zip(jax.tree_util.tree_leaves(online), jax.tree_util.tree_leaves(restored), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_same_seed_gives_identical_learning():
    def run(seed):
        env = FakeEnvironment(observation_shape=(2,), action_dim=1, episode_length=10, seed=5)
        counter = Counter(time_delta=0.0)
        agent = DMPO(make_environment_spec(env), tiny_config(), seed=seed, counter=counter)
        EnvironmentLoop(env, agent, logger=NoOpLogger()).run(num_episodes=3)
        return jax.tree_util.tree_leaves(agent.learner.save_state())

    first, second, other = run(0), run(0), run(1)
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)
    assert any(not np.array_equal(a, b) for a, b in zip(first, other, strict=True))


def reach_config(steps: int) -> TrainConfig:
    agent = DMPOConfig(
        batch_size=64, samples_per_insert=64.0, min_replay_size=200, max_replay_size=20_000, n_step=3,
        learner=LearnerConfig(num_samples=8, policy_learning_rate=1e-3, critic_learning_rate=1e-3,
                              target_policy_update_period=25, target_critic_update_period=25),
        networks=NetworkConfig(policy_layer_sizes=(32, 32), critic_layer_sizes=(32, 32), vmin=-5.0, vmax=25.0,
                               num_atoms=31, init_scale=0.5),
    )
    return TrainConfig(env="test:reach", steps=steps, seed=0, eval_every=steps, eval_episodes=1,
                       checkpoint_every=0, agent=agent)


def test_agent_learns_reach_target(tmp_path):
    env_factory = lambda seed: ReachTarget()  # noqa: E731
    summary = train(reach_config(3000), tmp_path / "run", env_factory=env_factory, progress=False, quiet=True)
    optimum, standing_still = ReachTarget().optimal_return(), 10.0
    final = summary["last_eval"]["return_mean"]
    # A random-init policy scores about standing still; the trained mean policy must get most of the way.
    assert final > standing_still + 0.6 * (optimum - standing_still), summary["last_eval"]


@pytest.mark.parametrize("sgd_steps_per_call", [1, 4])
def test_resume_after_kill_continues_exactly(tmp_path, sgd_steps_per_call):
    """With 4 updates per call, a checkpoint can hold due updates not run yet (pending_sgd_steps); with
    one, the killed run's folder is in the previous dmpo's formats."""
    env_factory = lambda seed: FakeEnvironment(observation_shape=(2,), action_dim=1,  # noqa: E731
                                               episode_length=10, seed=seed % 1000)
    learner = LearnerConfig(num_samples=3, sgd_steps_per_call=sgd_steps_per_call)
    config = dataclasses.replace(reach_config(300), checkpoint_every=150, keep_checkpoints=5,
                                 agent=tiny_config(min_replay_size=20, max_replay_size=500, learner=learner))
    # Uninterrupted run.
    train(config, tmp_path / "full", env_factory=env_factory, progress=False, quiet=True)
    # A run "killed" after its first checkpoint: copy the full run and drop everything after step 150.
    import shutil

    from dmpo.lifecycle.checkpoints import TrainingCheckpoints

    shutil.copytree(tmp_path / "full", tmp_path / "killed")
    killed = TrainingCheckpoints(tmp_path / "killed" / "checkpoints")
    for step in killed.steps():
        if step > 150:
            shutil.rmtree(killed.directory / f"step_{step:012d}")
    assert killed.steps() == [150]
    if sgd_steps_per_call > 1:  # the case this parameter is here for
        assert json.loads((killed.paths()[0] / "state.json").read_text())["pending_sgd_steps"] > 0
    else:  # a run folder of the previous dmpo (files without the common header) resumes exactly too
        previous_run_folder(tmp_path / "killed")
    train(config, tmp_path / "killed", resume=True, env_factory=env_factory, progress=False, quiet=True)

    full = TrainingCheckpoints(tmp_path / "full" / "checkpoints")
    resumed = TrainingCheckpoints(tmp_path / "killed" / "checkpoints")
    assert full.steps()[-1] == resumed.steps()[-1] == 300
    template = DMPO(make_environment_spec(env_factory(0)), config.agent, seed=0).learner.save_state()
    state_full, meta_full, _ = TrainingCheckpoints.load(full.latest(), template)
    state_resumed, meta_resumed, _ = TrainingCheckpoints.load(resumed.latest(), template)
    def counts(meta):  # wall-clock time is the one count that legitimately differs
        return {k: v for k, v in meta["counts"].items() if "walltime" not in k}

    assert counts(meta_full) == counts(meta_resumed)
    assert meta_full["num_actions"] == meta_resumed["num_actions"]
    for a, b in zip(jax.tree_util.tree_leaves(state_full), jax.tree_util.tree_leaves(state_resumed),
                    strict=True):
        np.testing.assert_array_equal(a, b)


def test_overlapped_learner_holds_the_ratio_and_stops_cleanly(tmp_path):
    env_factory = lambda seed: FakeEnvironment(observation_shape=(2,), action_dim=1,  # noqa: E731
                                               episode_length=10, seed=seed % 1000)
    config = dataclasses.replace(reach_config(400), checkpoint_every=200, overlap_learner=True, eval_every=0,
                                 agent=tiny_config(min_replay_size=20, max_replay_size=500, batch_size=8,
                                                   samples_per_insert=4.0))
    summary = train(config, tmp_path / "run", env_factory=env_factory, progress=False, quiet=True)
    assert summary["env_steps"] == 400
    from dmpo.lifecycle.checkpoints import TrainingCheckpoints

    checkpoints = TrainingCheckpoints(tmp_path / "run" / "checkpoints")
    # Taken while the learner thread was running; the final save at step 400 holds more learner steps
    # than the periodic one there, so it is a second folder (step_400-1) rather than a replacement.
    assert checkpoints.steps() in ([200, 400], [400, 400])
    learner_steps = summary["counts"]["learner_steps"]
    # The rate limiter lets the learner sample ~spi per inserted item, within its error buffer.
    items = 400 + 40 * (2 - 1)  # T + n - 1 items per 10-step episode, n = 2
    assert learner_steps * 8 <= 4.0 * items + max(0.1 * 4.0 * 20, 2 * 4.0) + 8
    assert learner_steps >= 1
    import threading

    assert not any(t.name == "dmpo-learner" for t in threading.enumerate())


def test_a_failed_overlapped_learner_stops_acting_and_raises_its_error():
    """Regression: the learner thread's error used to be stored while the acting thread
    blocked forever in Table.insert once the ratio limiter stopped inserts."""
    import threading

    env = FakeEnvironment(observation_shape=(2,), action_dim=1, episode_length=500, seed=1)
    config = tiny_config(batch_size=4, samples_per_insert=4.0, min_replay_size=8)
    agent = DMPO(make_environment_spec(env), config, seed=0, overlap_learner=True)
    calls = []

    def failing_step():  # fails once the acting thread waits in an insert (the limiter holds it back)
        import time

        calls.append(1)
        deadline = time.monotonic() + 20
        while agent.table.stats().waiting_inserts == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        raise ValueError("learner exploded")

    agent.learner.step = failing_step
    errors: list[BaseException] = []

    def act():
        try:
            EnvironmentLoop(env, agent, logger=NoOpLogger()).run(num_episodes=3)
        except BaseException as error:  # noqa: BLE001 - inspected below
            errors.append(error)

    acting = threading.Thread(target=act, daemon=True)
    acting.start()
    acting.join(timeout=30)
    try:
        assert not acting.is_alive(), "the acting thread hangs after the learner failed"
    finally:
        agent.close()
    assert calls and len(errors) == 1 and isinstance(errors[0], RuntimeError)
    assert isinstance(errors[0].__cause__, ValueError) and "learner exploded" in str(errors[0])


def test_checkpoint_period_shorter_than_an_episode_writes_once_per_boundary(tmp_path, monkeypatch):
    """Regression: `next_checkpoint += every` wrote the same checkpoint once per period."""
    from dmpo.lifecycle.checkpoints import TrainingCheckpoints

    written = []
    save = TrainingCheckpoints.save

    def counting_save(self, step, *args, **kwargs):
        written.append(step)
        return save(self, step, *args, **kwargs)

    monkeypatch.setattr(TrainingCheckpoints, "save", counting_save)
    env_factory = lambda seed: FakeEnvironment(observation_shape=(2,), action_dim=1,  # noqa: E731
                                               episode_length=10, seed=seed % 1000)
    config = dataclasses.replace(reach_config(30), checkpoint_every=3, eval_every=0,
                                 agent=tiny_config(min_replay_size=10, max_replay_size=500))
    train(config, tmp_path / "run", env_factory=env_factory, progress=False, quiet=True)
    assert written == [10, 20, 30]  # episode ends; the end-of-run save is not written again


def test_resume_without_replay_waits_for_fresh_observations(tmp_path):
    env_factory = lambda seed: FakeEnvironment(observation_shape=(2,), action_dim=1,  # noqa: E731
                                               episode_length=10, seed=seed % 1000)
    agent_config = tiny_config(min_replay_size=30, max_replay_size=500)  # min_observations 30
    config = dataclasses.replace(reach_config(40), checkpoint_every=40, eval_every=0, save_replay=False,
                                 agent=agent_config)
    first = train(config, tmp_path / "run", env_factory=env_factory, progress=False, quiet=True)
    learned_before = first["counts"]["learner_steps"]
    assert learned_before > 0
    # 20 more steps: fewer than min_observations fresh ones, so no learner step may run.
    resumed = train(dataclasses.replace(config, steps=60), tmp_path / "run", resume=True,
                    env_factory=env_factory, progress=False, quiet=True)
    assert resumed["counts"]["learner_steps"] == learned_before
    # That run's end checkpoint has no replay either: 30 fresh observations from step 60 on, then
    # learning restarts on the normal schedule with the step at exactly 30 fresh ones.
    final = train(dataclasses.replace(config, steps=90), tmp_path / "run", resume=True,
                  env_factory=env_factory, progress=False, quiet=True)
    assert final["counts"]["learner_steps"] == learned_before + 1


def test_save_and_load_continue_with_the_same_actions_and_updates(tmp_path):
    """`DMPO.load(agent.save(path))` acts and learns exactly as the saved agent goes on to, also from a
    folder in the previous dmpo's formats; an agent.json of a newer dmpo is refused."""
    def env():
        return FakeEnvironment(observation_shape=(2,), action_dim=1, episode_length=10, seed=5)

    def next_episode(agent):  # the actions and the learner state after one more episode
        actions = []
        loop = EnvironmentLoop(env(), agent, logger=NoOpLogger())
        select = agent.select_actions
        agent.select_actions = lambda obs: actions.append(select(obs)[0]) or actions[-1][None]
        loop.run(num_episodes=1)
        return actions, jax.tree_util.tree_leaves(agent.learner.save_state())

    agent = DMPO(make_environment_spec(env()), tiny_config(), seed=4)
    EnvironmentLoop(env(), agent, logger=NoOpLogger()).run(num_episodes=3)
    saved_steps = int(agent.learner.save_state().steps)
    assert saved_steps > 0
    agent.save(tmp_path / "with-replay", replay=True)
    agent.save(tmp_path / "no-replay")
    with pytest.raises(FileExistsError, match="never replaces"):
        agent.save(tmp_path / "no-replay")
    expected_actions, expected_state = next_episode(agent)

    previous_agent_folder(tmp_path / "with-replay")  # as the previous dmpo wrote it: it still loads exactly
    loaded = DMPO.load(tmp_path / "with-replay")
    assert loaded.config == agent.config and loaded.num_observations == 30
    actions, state = next_episode(loaded)
    np.testing.assert_array_equal(np.stack(actions), np.stack(expected_actions))
    assert int(loaded.learner.save_state().steps) > saved_steps  # it learned during that episode
    for a, b in zip(state, expected_state, strict=True):
        np.testing.assert_array_equal(a, b)

    without = DMPO.load(tmp_path / "no-replay")
    assert without.table.stats().size == 0 and without.learning_starts == 30 + without.config.min_observations
    first = without.select_action(env().reset().observation)
    np.testing.assert_array_equal(first, expected_actions[0])  # the same policy and action count
    rewrite_json(tmp_path / "no-replay" / "agent.json", lambda data: data.update(format_version=4))
    with pytest.raises(ValueError, match=r"agent.json has format version 4, .*dmpo.agent format version 3"):
        DMPO.load(tmp_path / "no-replay")
