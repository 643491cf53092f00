"""The environment loop (episode rows, counts, call order, stopping, lockstep environments) and evaluation
with video."""

from __future__ import annotations

import dm_env
import imageio.v3 as iio
import numpy as np
import pytest
from dm_env import specs

from dmpo.agent.environment_loop import EnvironmentLoop, evaluate
from dmpo.reporting.logging import NoOpLogger
from dmpo.utils.counting import Counter

EPISODE_KEYS = {"episode_length", "episode_return", "steps_per_second", "env_reset_duration_sec",
                "select_action_duration_sec", "env_step_duration_sec", "episode_duration"}


class FakeEnv(dm_env.Environment):
    """Episodes of `lengths[i]` steps (cycling); reward after step t (1-based) of episode e is e + t/4."""

    def __init__(self, lengths=(3,), frame_shape=(8, 12, 3)) -> None:
        self.lengths = list(lengths)
        self.frame_shape = frame_shape
        self.episode = -1
        self.t = 0
        self.actions: list[np.ndarray] = []
        self.seeded: int | None = None

    def seed(self, seed: int) -> None:
        self.seeded = seed

    def _obs(self) -> np.ndarray:
        return np.array([self.episode, self.t], np.float32)

    def reset(self) -> dm_env.TimeStep:
        self.episode += 1
        self.t = 0
        return dm_env.restart(self._obs())

    def step(self, action) -> dm_env.TimeStep:
        self.actions.append(np.asarray(action))
        self.t += 1
        reward = np.float32(self.episode + self.t / 4)
        if self.t >= self.lengths[self.episode % len(self.lengths)]:
            return dm_env.truncation(reward, self._obs())
        return dm_env.transition(reward, self._obs())

    def render(self) -> np.ndarray:
        return np.full(self.frame_shape, 10 * self.t % 256, np.uint8)

    def observation_spec(self):
        return specs.Array((2,), np.float32)

    def action_spec(self):
        return specs.BoundedArray((1,), np.float32, -1.0, 1.0)


def expected_return(episode: int, length: int) -> float:
    return sum(episode + t / 4 for t in range(1, length + 1))


class RecordingAgent:
    """The loop's agent (`dmpo.agent.environment_loop.Agent`), recording its calls; acts with each
    observation's step count / 10."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def select_actions(self, observations):
        self.calls.append(("select", len(observations)))
        return (observations[:, 1:2] / 10).astype(np.float32)

    def observe_first(self, timestep, env=0):
        assert timestep.first()
        self.calls.append(("first", env))

    def observe(self, action, next_timestep, env=0):
        self.calls.append(("observe", env))

    def drop_episode(self, env):
        self.calls.append(("drop", env))

    def update(self, wait: bool = False):
        self.calls.append(("update",))


class ListLogger:
    def __init__(self) -> None:
        self.rows: list[dict] = []

    def write(self, data):
        self.rows.append(dict(data))

    def close(self):
        pass


def test_episode_row_keys_return_and_counts():
    env, logger = FakeEnv(lengths=(4,)), ListLogger()
    assert EnvironmentLoop(env, RecordingAgent(), Counter(), logger).run(num_episodes=1) == 4
    [row] = logger.rows
    assert EPISODE_KEYS | {"episodes", "steps"} == set(row)  # one environment: no env_index
    assert row["episode_length"] == 4
    assert row["episode_return"] == pytest.approx(expected_return(0, 4))
    assert isinstance(row["episode_return"], float)
    assert row["episodes"] == 1 and row["steps"] == 4
    assert row["steps_per_second"] > 0 and row["episode_duration"] >= row["env_step_duration_sec"]
    np.testing.assert_allclose(env.actions, [[0.0], [0.1], [0.2], [0.3]])  # the agent's actions


def test_call_order_one_update_per_env_step():
    agent = RecordingAgent()
    EnvironmentLoop(FakeEnv(lengths=(2,)), agent, logger=NoOpLogger()).run(num_episodes=1)
    assert agent.calls == [("first", 0)] + [("select", 1), ("observe", 0), ("update",)] * 2
    agent = RecordingAgent()
    loop = EnvironmentLoop(FakeEnv(lengths=(2,)), agent, logger=NoOpLogger(), should_update=False)
    loop.run(num_episodes=1)
    assert ("update",) not in agent.calls


def test_run_num_steps_finishes_the_last_episode():
    env, agent, logger = FakeEnv(lengths=(4,)), RecordingAgent(), ListLogger()
    steps = EnvironmentLoop(env, agent, logger=logger).run(num_steps=10)
    assert steps == 12  # 3 whole episodes of 4 steps: the third crosses 10 and is finished
    assert [row["episode_length"] for row in logger.rows] == [4, 4, 4]
    assert [row["steps"] for row in logger.rows] == [4, 8, 12]
    assert agent.calls.count(("update",)) == 12
    assert agent.calls.count(("first", 0)) == 3 and not any(call[0] == "drop" for call in agent.calls)


def test_run_num_episodes_counts_on_a_child_counter_and_logs_each():
    root = Counter()
    env, logger = FakeEnv(lengths=(1, 2, 3)), ListLogger()
    loop = EnvironmentLoop(env, RecordingAgent(), Counter(root, "actor", time_delta=0.0), logger)
    assert loop.run(num_episodes=3) == 6
    assert root.get_counts() == {"actor_episodes": 3, "actor_steps": 6}
    assert [row["actor_steps"] for row in logger.rows] == [1, 3, 6]
    assert [row["episode_return"] for row in logger.rows] == pytest.approx(
        [expected_return(e, n) for e, n in enumerate((1, 2, 3))])
    assert loop.run(num_episodes=1) == 1  # a second run counts its own episodes, on the same counter
    assert root.get_counts() == {"actor_episodes": 4, "actor_steps": 7}


def test_stop_hooks_and_episode_callback():
    seen: list[int] = []
    loop = EnvironmentLoop(FakeEnv(lengths=(2,)), RecordingAgent(), logger=NoOpLogger(),
                           should_stop=lambda: len(seen) >= 2,
                           on_episode_end=lambda row: seen.append(row["episodes"]))
    assert loop.run() == 4
    assert seen == [1, 2]

    def stop_after_first(row):
        loop2.request_stop()

    loop2 = EnvironmentLoop(FakeEnv(lengths=(2,)), RecordingAgent(), logger=NoOpLogger(),
                            on_episode_end=stop_after_first)
    assert loop2.run(num_episodes=5) == 2


def test_nested_rewards_are_summed_per_leaf():
    class DictRewardEnv(FakeEnv):
        def step(self, action):
            ts = super().step(action)
            return ts._replace(reward={"a": ts.reward, "b": np.array([1.0, 2.0], np.float32)})

    logger = ListLogger()
    EnvironmentLoop(DictRewardEnv(lengths=(3,)), RecordingAgent(), logger=logger).run(num_episodes=1)
    [row] = logger.rows
    assert row["episode_return"]["a"] == pytest.approx(expected_return(0, 3))
    np.testing.assert_allclose(row["episode_return"]["b"], [3.0, 6.0])


def test_run_rejects_bad_arguments():
    loop = EnvironmentLoop(FakeEnv(), RecordingAgent(), logger=NoOpLogger())
    with pytest.raises(ValueError, match="at most one"):
        loop.run(num_episodes=1, num_steps=1)
    with pytest.raises(ValueError, match="num_steps"):
        loop.run(num_steps=-1)
    with pytest.raises(ValueError, match="num_episodes"):
        loop.run(num_episodes=1.0)
    assert loop.run(num_episodes=0) == 0
    with pytest.raises(ValueError, match="at least one environment"):
        EnvironmentLoop([], RecordingAgent())


def test_lockstep_environments_end_apart_and_a_stop_drops_the_unfinished_episodes():
    envs = [FakeEnv(lengths=(2,)), FakeEnv(lengths=(3,))]
    agent, logger = RecordingAgent(), ListLogger()
    steps = EnvironmentLoop(envs, agent, Counter(), logger).run(num_episodes=3)
    # Lockstep steps 1..4: environment 0 ends at 2 and 4, environment 1 at 3; the third episode end
    # (step 4) stops the run with environment 1 one step into its second episode.
    assert steps == 2 * 4
    assert [(row["env_index"], row["episode_length"], row["steps"]) for row in logger.rows] == [
        (0, 2, 4), (1, 3, 6), (0, 2, 8)]
    assert [row["episode_return"] for row in logger.rows] == pytest.approx(
        [expected_return(0, 2), expected_return(0, 3), expected_return(1, 2)])
    step = [("select", 2), ("observe", 0), ("update",), ("observe", 1), ("update",)]
    assert agent.calls == ([("first", 0), ("first", 1)] + step * 2 + [("first", 0)] + step
                           + [("first", 1)] + step + [("drop", 1)])
    np.testing.assert_allclose(envs[1].actions, [[0.0], [0.1], [0.2], [0.0]])  # row 1 of each batch


# ------------------------------------------------------------------------------------------- evaluation


def test_evaluate_statistics_and_seed():
    env = FakeEnv(lengths=(1, 2, 3))
    stats = evaluate(env, lambda obs: np.zeros(1, np.float32), 3, seed=5)
    returns = [expected_return(e, n) for e, n in enumerate((1, 2, 3))]
    assert env.seeded == 5
    assert stats["episode_returns"] == pytest.approx(returns)
    assert stats["episode_lengths"] == [1, 2, 3]
    assert stats["return_mean"] == pytest.approx(np.mean(returns))
    assert stats["return_std"] == pytest.approx(np.std(returns))
    assert (stats["return_min"], stats["return_max"]) == pytest.approx((min(returns), max(returns)))
    assert stats["length_mean"] == pytest.approx(2.0)


@pytest.mark.parametrize("suffix", [".mp4", ".gif"])
def test_evaluate_writes_a_readable_video(tmp_path, suffix):
    env = FakeEnv(lengths=(4, 5, 6), frame_shape=(16, 24, 3))
    path = tmp_path / "videos" / f"eval{suffix}"
    evaluate(env, lambda obs: np.zeros(1, np.float32), 3, video_path=path, video_episodes=2)
    frames = iio.imread(path) if suffix == ".gif" else iio.imread(path, plugin="FFMPEG")
    assert frames.shape[0] == (4 + 1) + (5 + 1)  # a frame after reset and after each step, 2 episodes
    assert frames.shape[1:3] == (16, 24)
    assert abs(int(frames[2].mean()) - 20) <= 3  # third frame rendered at t=2 (lossy codecs)
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no partial file left


def test_evaluate_with_render_fn_and_bad_frames(tmp_path):
    frames_seen = []

    def render_fn(environment):
        frames_seen.append(environment.t)
        return np.zeros((8, 8, 3), np.uint8)

    evaluate(FakeEnv(lengths=(2,)), lambda obs: 0.0, 1, video_path=tmp_path / "v.gif", render_fn=render_fn)
    assert frames_seen == [0, 1, 2]
    path = tmp_path / "bad.mp4"
    with pytest.raises(ValueError, match=r"uint8 frames of shape \[H, W, 3\]"):
        evaluate(FakeEnv(), lambda obs: 0.0, 1, video_path=path, render_fn=lambda env: np.zeros((8, 8)))
    assert not path.exists() and not list(tmp_path.glob(".bad*"))


def test_evaluate_rejects_bad_arguments(tmp_path):
    policy = lambda obs: 0.0  # noqa: E731
    with pytest.raises(ValueError, match="num_episodes"):
        evaluate(FakeEnv(), policy, 0)
    with pytest.raises(ValueError, match=r"\.mp4 or \.gif"):
        evaluate(FakeEnv(), policy, 1, video_path=tmp_path / "v.avi")

    class NoSeed(FakeEnv):
        seed = None

    with pytest.raises(TypeError, match="seed"):
        evaluate(NoSeed(), policy, 1, seed=1)
