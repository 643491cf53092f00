"""A user's own environments, defined outside dmpo, reached by entry point.

`make_point_mass(seed)` is a tiny gymnasium task (push a point to the origin, 20 steps); importing
this module also registers it as `PointMassTest-v0`, so `gym:tests.envs_for_tests:PointMassTest-v0`
works. The `make_*` factories below return environments DMPO cannot learn, one per error.
"""

from __future__ import annotations

import dm_env
import gymnasium
import numpy as np
from dm_env import specs
from gymnasium import spaces


class PointMass(gymnasium.Env):
    """2-D point, velocity control in [-2, 2]^2; reward −|position|; `episode_steps` (20) steps then
    truncated."""

    def __init__(self, reward_scale: float = 1.0, observation_space: spaces.Space | None = None,
                 action_space: spaces.Space | None = None, bad_step: int | None = None,
                 bad_shape: bool = False, episode_steps: int = 20) -> None:
        self.observation_space = observation_space or spaces.Box(-10.0, 10.0, (2,), np.float64)
        self.action_space = action_space or spaces.Box(-2.0, 2.0, (2,), np.float32)
        self._reward_scale, self._bad_step, self._bad_shape = reward_scale, bad_step, bad_shape
        self._episode_steps = episode_steps
        self._position = np.zeros(2)
        self._steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._position = self.np_random.uniform(-1.0, 1.0, 2)
        self._steps = 0
        return self._observe(), {}

    def _observe(self):
        if self.observation_space.dtype == np.uint8:  # an image task: a blank frame is enough here
            return np.zeros(self.observation_space.shape, np.uint8)
        return self._position.copy()

    def step(self, action):
        self._position = np.clip(self._position + 0.1 * np.asarray(action, np.float64), -10.0, 10.0)
        self._steps += 1
        reward = -float(np.linalg.norm(self._position)) * self._reward_scale
        if self._bad_step is not None and self._steps == self._bad_step:
            reward = float("nan")
        observation = np.zeros(3) if self._bad_shape else self._observe()
        return observation, reward, False, self._steps >= self._episode_steps, {}


def make_point_mass(seed: int | None) -> PointMass:
    del seed  # the adapter seeds reset(seed=...)
    return PointMass()


def make_point_mass_dm_env(seed: int | None) -> dm_env.Environment:
    """The same task as a dm_env environment (through dmpo's own gymnasium adapter)."""
    from dmpo.envs.gym_adapter import GymnasiumEnvironment

    return GymnasiumEnvironment(PointMass(), seed=seed)


def make_discrete(seed):
    return PointMass(action_space=spaces.Discrete(3))


def make_multi_discrete(seed):
    return PointMass(action_space=spaces.MultiDiscrete([3, 3]))


def make_unbounded(seed):
    return PointMass(action_space=spaces.Box(-np.inf, np.inf, (2,), np.float32))


def make_text_observations(seed):
    return PointMass(observation_space=spaces.Text(8))


def make_graph_observations(seed):
    return PointMass(observation_space=spaces.Graph(spaces.Box(-1.0, 1.0, (2,)), None))


def make_sequence_observations(seed):
    return PointMass(observation_space=spaces.Sequence(spaces.Box(-1.0, 1.0, (2,))))


def make_image_observations(seed):
    return PointMass(observation_space=spaces.Box(0, 255, (64, 64, 3), np.uint8))


def make_nan_reward(seed):
    return PointMass(bad_step=3)


def make_nan_reward_at_step_50(seed):
    return PointMass(bad_step=50, episode_steps=100)


def make_wrong_shape(seed):
    return PointMass(bad_shape=True)


def make_not_an_env(seed):
    return "not an environment"


class _BoundedRewardEnvironment(dm_env.Environment):
    """A dm_env task declaring its rewards in [0, 1] (a BoundedArray reward spec)."""

    def __init__(self, seed):
        self._rng = np.random.default_rng(seed)
        self._t = 0

    def reset(self):
        self._t = 0
        return dm_env.restart(np.zeros(2, np.float32))

    def step(self, action):
        self._t += 1
        reward = np.float32(self._rng.uniform())
        if self._t >= 10:
            return dm_env.truncation(reward, np.zeros(2, np.float32))
        return dm_env.transition(reward, np.zeros(2, np.float32))

    def observation_spec(self):
        return specs.Array((2,), np.float32, name="observation")

    def action_spec(self):
        return specs.BoundedArray((1,), np.float32, -1.0, 1.0, name="action")

    def reward_spec(self):
        return specs.BoundedArray((), np.float32, 0.0, 1.0, name="reward")


def make_bounded_reward(seed):
    return _BoundedRewardEnvironment(seed)


class _KnownRewards(_BoundedRewardEnvironment):
    """Rewards −3, 5, 1, −3, 5, 1, ... whatever the action; no declared reward range."""

    def step(self, action):
        timestep = super().step(action)
        return timestep._replace(reward=np.float32((-3.0, 5.0, 1.0)[(self._t - 1) % 3]))

    def reward_spec(self):
        return specs.Array((), np.float32, name="reward")


def make_known_rewards(seed):
    return _KnownRewards(seed)


gymnasium.register("PointMassTest-v0", entry_point=PointMass, max_episode_steps=20)


def make_raising(seed):
    raise RuntimeError("the simulator's licence server did not answer\n(a second line of the error)")
