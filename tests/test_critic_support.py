"""The 'auto' critic support of gymnasium tasks whose rewards are bounded by their definition.

The bounds in `GYM_REWARD_BOUNDS` are checked against gymnasium's own reward function (its environment
stepped from the states where the reward is smallest and largest), not against our table's arithmetic.
"""

from __future__ import annotations

import dataclasses

import gymnasium
import numpy as np
import pytest

from dmpo.agent.learning.critic_support import GYM_REWARD_BOUNDS, resolve_support
from dmpo.config import DMPOConfig, NetworkConfig, TrainConfig
from dmpo.envs import TaskFactory, make


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


# -- "auto-gym", the support of `--preset fast` (dmpo train's default) ----------------------------------

def fast_config(env: str, **networks) -> TrainConfig:
    base = TrainConfig(env=env, steps=100, eval_every=0)
    small = dataclasses.replace(base.agent.networks, policy_layer_sizes=(8,), critic_layer_sizes=(8,),
                                num_atoms=5, **networks)
    agent = dataclasses.replace(base.agent, min_replay_size=50, networks=small)
    return dataclasses.replace(base, agent=agent)


def test_the_default_preset_fits_the_support_to_gym_tasks_only():
    assert (TrainConfig().agent.networks.vmin, TrainConfig().agent.networks.vmax) == ("auto-gym", "auto-gym")
    # A gym: task: "auto", here Pendulum's declared cost, at most π² + 0.1·8² + 0.001·2² per step.
    config, line = resolve_support(fast_config("gym:Pendulum-v1"), TaskFactory("gym:Pendulum-v1"),
                                   make("gym:Pendulum-v1", seed=0))
    cost = np.pi**2 + 6.4 + 0.004
    assert (config.agent.networks.vmin, config.agent.networks.vmax) == (pytest.approx(-cost / 0.01), 0.0)
    assert line.startswith("critic support auto: [")
    # A dm_control task: the reference's [-150, 150] where "auto" would give [0, 100], said by no line.
    config, line = resolve_support(fast_config("dmc:cartpole-swingup"), None,
                                   make("dmc:cartpole-swingup", seed=0))
    assert (config.agent.networks.vmin, config.agent.networks.vmax, line) == (-150.0, 150.0, None)
    # The user's own environment: no probe (the factory None would fail; its rewards -3, 5, 1 would give
    # "auto" [-500, 1300]).
    own = "tests.envs_for_tests:make_known_rewards"
    config, line = resolve_support(fast_config(own), None, make(own, seed=0))
    assert (config.agent.networks.vmin, config.agent.networks.vmax, line) == (-150.0, 150.0, None)


def test_a_bound_given_beside_auto_gym_is_kept():
    config, _ = resolve_support(fast_config("gym:Pendulum-v1", vmin=-10.0), None,
                                make("gym:Pendulum-v1", seed=0))
    assert (config.agent.networks.vmin, config.agent.networks.vmax) == (-10.0, 0.0)
    config, _ = resolve_support(fast_config("dmc:cartpole-swingup", vmax=30.0), None,
                                make("dmc:cartpole-swingup", seed=0))
    assert (config.agent.networks.vmin, config.agent.networks.vmax) == (-150.0, 30.0)


def test_a_run_saved_before_auto_gym_resumes_with_its_own_support():
    # A gym run of the fast preset from before "auto-gym" recorded [-150, 150]; resuming it with today's
    # defaults must neither count that as a changed field nor re-derive the support.
    from dmpo.lifecycle.resume import config_differences

    given = fast_config("gym:Hopper-v5")
    saved = dataclasses.replace(given, agent=dataclasses.replace(given.agent, networks=dataclasses.replace(
        given.agent.networks, vmin=-150.0, vmax=150.0)))
    assert config_differences(saved, given) == {}
    assert config_differences(saved, fast_config("gym:Hopper-v5", vmin=-20.0)) == {
        "agent.networks.vmin": (-150.0, -20.0)}


def test_auto_gym_is_a_validated_value_that_networks_refuse_unresolved():
    from dmpo.agent.networks import make_support
    from dmpo.config import ConfigError

    assert NetworkConfig(vmin="auto-gym", vmax=3.0).vmin == "auto-gym"
    with pytest.raises(ConfigError, match="'auto' or 'auto-gym'"):
        NetworkConfig(vmax="auto_gym")
    with pytest.raises(ValueError, match="must be resolved"):
        make_support(NetworkConfig(vmin="auto-gym", vmax="auto-gym"))


def test_the_step_by_step_agent_takes_the_fast_preset_with_the_references_support():
    # dmpo.DMPO sees only a spec, not a task name (docs/python-api.md builds it with the fast preset).
    from dmpo import DMPO, make_environment_spec

    config = fast_config("dmc:cartpole-swingup").agent
    agent = DMPO(make_environment_spec(make("dmc:cartpole-swingup", seed=0)), config, seed=0)
    assert (agent.config.networks.vmin, agent.config.networks.vmax) == (-150.0, 150.0)
    np.testing.assert_allclose(np.asarray(agent.networks.support), [-150.0, -75.0, 0.0, 75.0, 150.0])
