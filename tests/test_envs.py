"""Tests of dmpo.envs on state observations: names, specs, the action/repeat/float32 pipeline,
dm_env step semantics (termination vs truncation), seeding, flattening and the test environments.
Pixel observations are in test_envs_pixels.py."""

from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")

import dm_env  # noqa: E402
import gymnasium  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from dm_env import specs  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from dmpo.envs import (  # noqa: E402
    DEFAULT_TASK,
    EnvError,
    FakeEnvironment,
    ReachTarget,
    available_tasks,
    control_suite,
    flatten_observation,
    flatten_observation_spec,
    make,
    make_environment_spec,  # noqa: E402
)
from dmpo.envs.wrappers import ActionRepeatWrapper, CanonicalActionWrapper  # noqa: E402

# ---------------------------------------------------------------------------------------------
# Tiny gymnasium environments registered for the tests (removed again after the module).


class Recorder(gymnasium.Wrapper):
    """Keeps every action the wrapped gymnasium env received."""

    def __init__(self, env):
        super().__init__(env)
        self.actions = []

    def step(self, action):
        self.actions.append(np.array(action, copy=True))
        return self.env.step(action)


class Countdown(gymnasium.Env):
    """Terminates after `length` steps; observation = steps taken; reward = action sum."""

    def __init__(self, length=3, action_space=None):
        self.length = length
        self.action_space = action_space or gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (1,), np.float64)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1), {}

    def step(self, action):
        self.t += 1
        return np.full(1, float(self.t)), float(np.sum(action)), self.t >= self.length, False, {}


_TEST_IDS = {
    "RecordingPendulum-v0": lambda: Recorder(gymnasium.make("Pendulum-v1")),
    "RecordingSkewed-v0": lambda: Recorder(Countdown(
        length=100, action_space=gymnasium.spaces.Box(np.array([-0.4, 1.0]), np.array([1.3, 5.0]), (2,),
                                                      np.float64))),
    "Countdown-v0": lambda: Countdown(length=3),
    "DiscreteActions-v0": lambda: Countdown(action_space=gymnasium.spaces.Discrete(3)),
    "UnboundedActions-v0": lambda: Countdown(
        action_space=gymnasium.spaces.Box(-np.inf, np.inf, (2,), np.float32)),
    "IntegerActions-v0": lambda: Countdown(action_space=gymnasium.spaces.Box(-3, 3, (2,), np.int64)),
}


@pytest.fixture(scope="module", autouse=True)
def _registered_test_envs():
    for env_id, factory in _TEST_IDS.items():
        gymnasium.register(id=env_id, entry_point=factory, disable_env_checker=True)
    yield
    for env_id in _TEST_IDS:
        del gymnasium.registry[env_id]


def _inner_gym(env):
    """The gymnasium env under a `make("gym:...")` pipeline (attributes forward through wrappers)."""
    return env.gym_env


def _recorder(env) -> Recorder:
    gym_env = _inner_gym(env)
    while not isinstance(gym_env, Recorder):
        gym_env = gym_env.env
    return gym_env


# ---------------------------------------------------------------------------------------------
# Specs.


def test_dmc_state_specs_are_float32_with_a_canonical_action_spec():
    env = make("dmc:walker-walk", seed=0)
    obs_spec = env.observation_spec()
    assert type(obs_spec) is dict and set(obs_spec) == {"orientations", "height", "velocity"}
    assert all(spec.dtype == np.float32 for spec in obs_spec.values())
    assert obs_spec["height"].shape == (1,)  # a scalar entry becomes (1,)
    action_spec = env.action_spec()
    assert isinstance(action_spec, specs.BoundedArray)
    assert action_spec.shape == (6,) and action_spec.dtype == np.float32
    np.testing.assert_array_equal(action_spec.minimum, -1.0)
    np.testing.assert_array_equal(action_spec.maximum, 1.0)
    assert env.reward_spec() == specs.Array((), np.float32, name="reward")
    discount_spec = env.discount_spec()
    assert isinstance(discount_spec, specs.BoundedArray) and discount_spec.dtype == np.float32
    assert (discount_spec.minimum, discount_spec.maximum) == (0.0, 1.0)

    timestep = env.reset()
    assert timestep.first() and timestep.reward is None and timestep.discount is None
    assert type(timestep.observation) is dict
    for key, spec in obs_spec.items():
        spec.validate(timestep.observation[key])  # shape and dtype
    timestep = env.step(np.zeros(6, np.float32))
    env.reward_spec().validate(timestep.reward)
    discount_spec.validate(timestep.discount)
    assert make_environment_spec(env).actions == action_spec


def test_gym_specs_are_float32():
    env = make("gym:Pendulum-v1", seed=0)
    assert env.observation_spec() == specs.Array((3,), np.float32, name="observation")
    assert env.action_spec().dtype == np.float32 and env.action_spec().shape == (1,)
    timestep = env.step(np.zeros(1))  # a step before reset starts the episode
    assert timestep.first() and timestep.observation.dtype == np.float32
    timestep = env.step(np.zeros(1))
    env.reward_spec().validate(timestep.reward)
    env.discount_spec().validate(timestep.discount)


def test_every_suite_task_name_parses_and_underscored_names_load():
    from dm_control import suite

    names = available_tasks()
    assert DEFAULT_TASK in names and "dmc:ball_in_cup-catch" in names
    for domain, task in suite.BENCHMARKING + suite.ALL_TASKS:
        assert f"dmc:{domain}-{task}" in names
        assert control_suite.parse_task_name(f"{domain}-{task}") == (domain, task)
    env = make("dmc:ball_in_cup-catch", seed=0)
    assert env.action_spec().shape == (2,)
    assert env.reset().first()


# ---------------------------------------------------------------------------------------------
# Canonical actions.


def test_canonical_action_hits_true_bounds_and_clips_on_pendulum():
    env = make("gym:RecordingPendulum-v0", seed=0)
    env.reset()
    for action in ([-1.0], [1.0], [0.0], [0.5], [3.0], [-7.0]):
        env.step(np.asarray(action, np.float32))
    received = np.concatenate(_recorder(env).actions)
    np.testing.assert_allclose(received, [-2.0, 2.0, 0.0, 1.0, 2.0, -2.0], rtol=0, atol=1e-6)
    assert received[0] == -2.0 and received[1] == 2.0  # the bounds exactly


def test_canonical_action_maps_asymmetric_bounds_affinely():
    env = make("gym:RecordingSkewed-v0", seed=0)
    env.reset()
    low, high = np.array([-0.4, 1.0]), np.array([1.3, 5.0])
    canonical = np.array([[-1, -1], [1, 1], [0, 0], [-0.5, 0.25], [2, -2]], np.float32)
    for action in canonical:
        env.step(action)
    received = np.stack(_recorder(env).actions)
    np.testing.assert_array_equal(received[0], low)
    np.testing.assert_array_equal(received[1], high)
    expected = low + (np.clip(canonical, -1, 1) + 1) / 2 * (high - low)  # the affine map, clipped input
    np.testing.assert_allclose(received, expected, rtol=1e-6, atol=1e-7)
    assert received.dtype == np.float64  # passed on in the inner space's dtype


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(-5, 5), min_size=3, max_size=3))
def test_canonical_mapping_is_monotone_and_inside_bounds(values):
    env = FakeEnvironment(action_dim=3, action_bounds=(-3.0, 0.5))
    wrapper = CanonicalActionWrapper(env)
    inner = wrapper.to_inner(np.asarray(values))
    assert np.all(inner >= -3.0) and np.all(inner <= 0.5)
    shifted = wrapper.to_inner(np.minimum(np.asarray(values) + 0.1, 5.0))
    assert np.all(shifted >= inner)


def test_canonical_action_rejects_wrong_shape_and_nan():
    env = make("dmc:cartpole-swingup", seed=0)
    env.reset()
    with pytest.raises(EnvError, match=r"shape \(1,\)"):
        env.step(np.zeros(2, np.float32))
    with pytest.raises(EnvError, match=r"shape \(1,\)"):
        env.step(np.float32(0.0))
    with pytest.raises(EnvError, match="NaN"):
        env.step(np.array([np.nan], np.float32))


# ---------------------------------------------------------------------------------------------
# Episode ends: termination (discount 0) vs truncation (discount 1).


def test_gym_time_limit_is_a_truncation_with_discount_one():
    env = make("gym:Pendulum-v1", seed=0)
    env.reset()
    for t in range(1, 201):
        timestep = env.step(np.zeros(1, np.float32))
        if t < 200:
            assert timestep.mid() and timestep.discount == 1.0
    assert timestep.last() and timestep.discount == 1.0 and timestep.discount.dtype == np.float32
    assert env.step(np.zeros(1, np.float32)).first()  # a step after LAST starts a new episode


def test_gym_termination_has_discount_zero_and_rewards_pass_through():
    env = make("gym:Countdown-v0", seed=0)
    env.reset()
    steps = [env.step(np.array([0.5, -1.0], np.float32)) for _ in range(3)]
    assert [ts.step_type for ts in steps] == [dm_env.StepType.MID, dm_env.StepType.MID, dm_env.StepType.LAST]
    assert [float(ts.discount) for ts in steps] == [1.0, 1.0, 0.0]
    assert [float(ts.reward) for ts in steps] == [-0.5] * 3
    np.testing.assert_array_equal(steps[-1].observation, np.array([3.0], np.float32))
    first = env.step(np.zeros(2, np.float32))
    assert first.first() and first.reward is None and first.discount is None


def test_dm_control_time_limit_is_a_truncation_with_discount_one():
    env = make("dmc:cartpole-swingup", seed=0, action_repeat=4)  # 1000 control steps = 250 agent steps
    env.reset()
    for t in range(1, 251):
        timestep = env.step(np.ones(1, np.float32))
        assert timestep.last() == (t == 250)
    assert timestep.discount == 1.0 and timestep.discount.dtype == np.float32


# ---------------------------------------------------------------------------------------------
# Action repeat.


class _Scripted(dm_env.Environment):
    """Emits the given rewards and discounts; LAST on the final one."""

    def __init__(self, rewards, discounts):
        self._rewards, self._discounts, self._t = rewards, discounts, None

    def reset(self):
        self._t = 0
        return dm_env.restart(np.zeros(1))

    def step(self, action):
        if self._t is None or self._t == len(self._rewards):
            return self.reset()
        self._t += 1
        step_type = dm_env.StepType.LAST if self._t == len(self._rewards) else dm_env.StepType.MID
        return dm_env.TimeStep(step_type, self._rewards[self._t - 1], self._discounts[self._t - 1],
                               np.full(1, float(self._t)))

    def observation_spec(self):
        return specs.Array((1,), np.float64)

    def action_spec(self):
        return specs.BoundedArray((1,), np.float64, -1.0, 1.0)


def test_action_repeat_weights_rewards_by_the_running_discount_and_stops_at_last():
    env = ActionRepeatWrapper(_Scripted([1.0, 2.0, 3.0, 4.0, 5.0], [0.5, 0.5, 1.0, 1.0, 0.0]), 3)
    env.reset()
    first = env.step(np.zeros(1))
    assert first.mid() and first.reward == 1.0 + 0.5 * 2.0 + 0.25 * 3.0 and first.discount == 0.25
    second = env.step(np.zeros(1))  # only two inner steps remain: stops early at LAST
    assert second.last() and second.reward == 4.0 + 5.0 and second.discount == 0.0
    assert second.observation[0] == 5.0
    assert env.step(np.zeros(1)).first()  # after LAST the inner env restarts: nothing accumulated


def test_action_repeat_sums_dm_control_rewards():
    from dm_control import suite

    repeated = make("dmc:cartpole-swingup", seed=5, action_repeat=3)
    raw = suite.load("cartpole", "swingup", task_kwargs={"random": 5})
    repeated.reset()
    raw.reset()
    actions = np.random.default_rng(0).uniform(-1, 1, size=(10, 1)).astype(np.float32)
    for action in actions:
        raw_steps = [raw.step(action.astype(np.float64)) for _ in range(3)]
        timestep = repeated.step(action)
        np.testing.assert_allclose(timestep.reward, sum(ts.reward for ts in raw_steps), rtol=1e-6)
        np.testing.assert_allclose(timestep.observation["position"], raw_steps[-1].observation["position"],
                                   rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# Seeding.


def _rollout(env, actions):
    observations = [flatten_observation(env.reset().observation)]
    for action in actions:
        timestep = env.step(action)
        observations.append(flatten_observation(timestep.observation))
        if timestep.last():
            observations.append(flatten_observation(env.reset().observation))
    return np.stack(observations)


def test_dm_control_same_seed_same_trajectory():
    actions = np.random.default_rng(1).uniform(-1, 1, size=(20, 6)).astype(np.float32)
    first = _rollout(make("dmc:walker-walk", seed=7), actions)
    second = _rollout(make("dmc:walker-walk", seed=7), actions)
    other = _rollout(make("dmc:walker-walk", seed=8), actions)
    np.testing.assert_array_equal(first, second)
    assert not np.array_equal(first[0], other[0])


def test_gym_same_seed_same_trajectories_and_later_resets_continue_the_stream():
    actions = np.random.default_rng(2).uniform(-1, 1, size=(205, 1)).astype(np.float32)
    first = _rollout(make("gym:Pendulum-v1", seed=3), actions)  # crosses one episode boundary
    second = _rollout(make("gym:Pendulum-v1", seed=3), actions)
    np.testing.assert_array_equal(first, second)
    assert not np.array_equal(first[0], first[201])  # the second episode starts elsewhere
    assert not np.array_equal(first[0], _rollout(make("gym:Pendulum-v1", seed=4), actions[:1])[0])


# ---------------------------------------------------------------------------------------------
# Errors.


@pytest.mark.parametrize("name", ["cartpole-swingup", "foo:bar", "dmc:", "atari:Pong"])
def test_unknown_prefix_lists_the_supported_ones(name):
    with pytest.raises(EnvError, match="dmc:<domain>-<task>.*gym:<Id>"):
        make(name)


@pytest.mark.parametrize("name", ["dmc:cartpole", "dmc:cartpole-fly"])
def test_unknown_dm_control_task_lists_the_available_ones(name):
    with pytest.raises(EnvError, match="cartpole-swingup.*walker-walk"):
        make(name)


def test_a_dm_control_task_one_typo_away_is_named():
    with pytest.raises(EnvError, match=r"did you mean dmc:cartpole-swingup\?"):
        make("dmc:cart-pole-swingup")


def test_unknown_gym_id_suggests_close_matches():
    with pytest.raises(EnvError, match="registry.*Pendulum-v1"):
        make("gym:Pendulum-v9")


@pytest.mark.parametrize("env_id, match", [
    ("DiscreteActions-v0", r"bounded continuous \(Box\).*Discrete"),
    ("UnboundedActions-v0", r"bounded continuous \(Box\).*finite"),
    ("IntegerActions-v0", r"bounded continuous \(Box\).*float"),
    ("CartPole-v1", r"bounded continuous \(Box\)"),
])
def test_unusable_gym_action_spaces_are_rejected(env_id, match):
    with pytest.raises(EnvError, match=match):
        make(f"gym:{env_id}")


@pytest.mark.parametrize("kwargs, match", [
    (dict(seed=-1), "seed"), (dict(seed=1.5), "seed"), (dict(action_repeat=0), "action_repeat"),
    (dict(action_repeat=True), "action_repeat"), (dict(pixels="yes"), "pixels"),
])
def test_bad_make_arguments_name_the_argument(kwargs, match):
    with pytest.raises(EnvError, match=match):
        make(DEFAULT_TASK, **kwargs)


def test_pixels_are_refused_for_gym():
    with pytest.raises(EnvError, match="dmc"):
        make("gym:Pendulum-v1", pixels=True)


def test_env_error_is_a_value_error():
    assert issubclass(EnvError, ValueError)


# ---------------------------------------------------------------------------------------------
# Flattening.


def test_flatten_dict_concatenates_in_sorted_key_order():
    observation = {"velocity": np.array([3.0, 4.0]), "height": np.float64(2.0), "angle": np.array([[1.0]])}
    flat = flatten_observation(observation)
    assert flat.dtype == np.float32
    np.testing.assert_array_equal(flat, [1.0, 2.0, 3.0, 4.0])  # angle, height, velocity


def test_flatten_array_ravels_and_batches_keep_leading_axes():
    np.testing.assert_array_equal(flatten_observation(np.arange(6.0).reshape(2, 3)), np.arange(6.0))
    batch = {"b": np.arange(6.0).reshape(2, 3), "a": np.array([10.0, 20.0])}
    np.testing.assert_array_equal(flatten_observation(batch, batch_dims=1),
                                  [[10.0, 0.0, 1.0, 2.0], [20.0, 3.0, 4.0, 5.0]])
    with pytest.raises(EnvError, match="batch shape"):
        flatten_observation({"a": np.zeros((2, 3)), "b": np.zeros((3, 3))}, batch_dims=1)


def test_flatten_spec_matches_a_real_observation():
    env = make("dmc:walker-walk", seed=0)
    spec = flatten_observation_spec(env.observation_spec())
    assert spec.shape == (24,) and spec.dtype == np.float32
    spec.validate(flatten_observation(env.reset().observation))


@settings(max_examples=30, deadline=None)
@given(st.dictionaries(st.text("abcxyz", min_size=1, max_size=3),
                       st.lists(st.integers(1, 3), max_size=2).map(tuple), min_size=1, max_size=4))
def test_flatten_matches_its_spec_and_keeps_each_entry_contiguous(shapes):
    observation_specs = {key: specs.Array(shape, np.float64) for key, shape in shapes.items()}
    observation = {key: np.random.default_rng(len(key)).normal(size=shape) for key, shape in shapes.items()}
    flat = flatten_observation(observation)
    assert flat.shape == flatten_observation_spec(observation_specs).shape
    offset = 0
    for key in sorted(observation):
        size = observation[key].size
        np.testing.assert_array_equal(flat[offset:offset + size], observation[key].ravel().astype(np.float32))
        offset += size


# ---------------------------------------------------------------------------------------------
# Test environments.


@pytest.mark.parametrize("terminate, discount", [(True, 0.0), (False, 1.0)])
def test_fake_environment_ends_by_termination_or_truncation(terminate, discount):
    env = FakeEnvironment(observation_shape=(2,), action_dim=2, episode_length=4, terminate=terminate)
    timesteps = [env.reset()] + [env.step(np.zeros(2, np.float32)) for _ in range(4)]
    assert [ts.step_type for ts in timesteps] == [dm_env.StepType.FIRST] + [dm_env.StepType.MID] * 3 + [
        dm_env.StepType.LAST]
    assert [float(ts.discount) for ts in timesteps[1:]] == [1.0, 1.0, 1.0, discount]
    for ts in timesteps:
        env.observation_spec().validate(ts.observation)
    for ts in timesteps[1:]:
        env.reward_spec().validate(ts.reward)
        env.discount_spec().validate(ts.discount)
    assert env.step(np.zeros(2, np.float32)).first()


def test_fake_environment_is_deterministic_varied_and_checks_actions():
    def run(seed):
        env = FakeEnvironment(observation_shape={"a": (2,), "b": ()}, episode_length=3, seed=seed)
        timesteps = [env.reset()] + [env.step(np.zeros(1, np.float32)) for _ in range(5)]
        return [(ts.observation, ts.reward) for ts in timesteps]

    first, second, other = run(0), run(0), run(1)
    for (obs1, rew1), (obs2, rew2) in zip(first, second, strict=True):
        assert obs1.keys() == {"a", "b"} and obs1["a"].dtype == np.float32 and obs1["b"].shape == ()
        np.testing.assert_array_equal(obs1["a"], obs2["a"])
        assert rew1 == rew2
    rewards = [reward for _, reward in first if reward is not None]
    assert len(rewards) == 4 and len(set(rewards)) == 4  # varied (step 4 is the next FIRST: no reward)
    assert not np.array_equal(first[0][0]["a"], other[0][0]["a"])
    env = FakeEnvironment(action_dim=2)
    env.reset()
    with pytest.raises(EnvError, match=r"shape \(2,\)"):
        env.step(np.zeros(3))
    with pytest.raises(EnvError, match="action_bounds"):
        FakeEnvironment(action_bounds=(1.0, -1.0))


def _episode_return(env, policy) -> tuple[float, dm_env.TimeStep]:
    timestep, total = env.reset(), 0.0
    while not timestep.last():
        timestep = env.step(policy(timestep.observation))
        total += float(timestep.reward)
    return total, timestep


@pytest.mark.parametrize("dim", [1, 2])
def test_reach_target_greedy_policy_attains_the_closed_form_optimum(dim):
    env = ReachTarget(dim=dim)
    greedy = lambda position: np.clip((0.5 - position) / 0.25, -1, 1).astype(np.float32)
    total, last = _episode_return(env, greedy)
    assert total == pytest.approx(env.optimal_return()) == pytest.approx(19.75)  # 20 − 0.25 (docstring)
    assert last.discount == 1.0  # a truncation
    still, _ = _episode_return(env, lambda position: np.zeros(dim, np.float32))
    assert still == pytest.approx(10.0)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-2, 2), min_size=20, max_size=20), st.floats(-1, 1), st.floats(-1, 1))
def test_reach_target_no_action_sequence_beats_the_optimum(actions, start, target):
    env = ReachTarget(start=start, target=target)
    moves = iter(actions)
    total, _ = _episode_return(env, lambda position: np.array([next(moves)], np.float32))
    assert total <= env.optimal_return() + 1e-5


def test_wrappers_forward_public_attributes():
    env = make(DEFAULT_TASK, seed=0)
    assert env.physics.model.nu == 1  # dm_control physics reached through every wrapper
    with pytest.raises(AttributeError):
        _ = env._not_there
