"""The 'auto' critic support of gymnasium tasks whose rewards are bounded by their definition.

The bounds in `GYM_REWARD_BOUNDS` are checked against gymnasium's own reward function (its environment
stepped from the states where the reward is smallest and largest), not against our table's arithmetic.
"""

from __future__ import annotations

import dataclasses

import gymnasium
import numpy as np
import pytest

from dmpo.config import DMPOConfig, NetworkConfig, TrainConfig
from dmpo.envs import TaskFactory, make
from dmpo.learning.critic_support import GYM_REWARD_BOUNDS, resolve_support


def auto_config(env: str, **fields) -> TrainConfig:
    networks = NetworkConfig(policy_layer_sizes=(8,), critic_layer_sizes=(8,), num_atoms=5, vmin="auto",
                             vmax="auto")
    return TrainConfig(env=env, steps=100, eval_every=0,
                       agent=DMPOConfig(min_replay_size=50, networks=networks), **fields)


def pendulum_reward(theta: float, theta_dot: float, torque: float) -> float:
    env = gymnasium.make("Pendulum-v1").unwrapped
    env.reset(seed=0)
    env.state = np.array([theta, theta_dot])
    return float(env.step(np.array([torque], np.float32))[1])


def test_pendulum_bounds_are_gymnasiums_extreme_rewards():
    low, high = GYM_REWARD_BOUNDS["Pendulum-v1"]
    # Upside down, at the fastest speed, with full torque: the largest cost.
    assert pendulum_reward(np.pi, 8.0, 2.0) == pytest.approx(low, rel=1e-6)
    assert pendulum_reward(0.0, 0.0, 0.0) == high == 0.0  # upright and still
    rng = np.random.default_rng(0)
    for theta, speed, torque in zip(rng.uniform(-np.pi, np.pi, 50), rng.uniform(-8, 8, 50),
                                    rng.uniform(-2, 2, 50), strict=True):
        assert low <= pendulum_reward(theta, speed, torque) <= high


def test_pendulum_support_ends_at_the_largest_return():
    # Before, the observed rule put vmax far above 0 (about [-2033, 1626] at discount 0.99).
    config, line = resolve_support(auto_config("gym:Pendulum-v1"), TaskFactory("gym:Pendulum-v1"),
                                   make("gym:Pendulum-v1", seed=0))
    cost = np.pi**2 + 0.1 * 64 + 0.001 * 4  # gymnasium's largest cost per step
    assert config.agent.networks.vmax == 0.0
    assert config.agent.networks.vmin == pytest.approx(-cost / (1 - 0.99))
    assert "declared" in line


def test_action_repeat_sums_the_bounds():
    base = auto_config("gym:Pendulum-v1", action_repeat=3)
    base = dataclasses.replace(base, agent=dataclasses.replace(
        base.agent, learner=dataclasses.replace(base.agent.learner, discount=0.9)))
    config, _ = resolve_support(base, None, make("gym:Pendulum-v1", seed=0, action_repeat=3))
    low = GYM_REWARD_BOUNDS["Pendulum-v1"][0]
    assert config.agent.networks.vmin == pytest.approx(3 * low / (1 - 0.9))
    assert config.agent.networks.vmax == 0.0


def test_mountain_car_support_holds_the_goal_bonus():
    # -0.1 per step at full throttle, +100 at the goal: returns in [-0.1/(1-γ), 100/(1-γ)] at γ = 0.99.
    config, _ = resolve_support(auto_config("gym:MountainCarContinuous-v0"), None,
                                   make("gym:MountainCarContinuous-v0", seed=0))
    assert (config.agent.networks.vmin, config.agent.networks.vmax) == (pytest.approx(-10.0),
                                                                          pytest.approx(10_000.0))
