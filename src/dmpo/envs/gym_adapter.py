"""A dm_env view of a Gymnasium environment ("gym:<Id>").

Step semantics (algorithm.md §0, no `done` flag ever reaches the agent):

* `reset()` → FIRST (reward and discount `None`).
* `step(a)`: `terminated` → LAST with discount 0; `truncated` and not terminated (e.g. a
  `TimeLimit`) → LAST with discount 1; otherwise MID with discount 1.
* `step` after a LAST (or before any reset) starts a new episode and returns its FIRST step, as
  dm_control environments do.

Seeding: the first reset calls `reset(seed=seed)`; later resets continue that RNG stream.
The action space is seeded with the same seed (for anything sampling it).

Spaces: the action space must be a float `Box` with finite bounds and rank 1 (DMPO acts in a
bounded continuous box). Observations: a float `Box` becomes a float32 array (integer/bool boxes,
e.g. images, keep their dtype); a `Dict` space becomes a dict (recursively). Rewards and discounts
are float32.
"""

from __future__ import annotations

import difflib

import dm_env
import gymnasium
import numpy as np
from dm_env import specs
from gymnasium import spaces

from dmpo.envs.errors import EnvError
from dmpo.types import NestedArray, NestedSpec
from dmpo.utils.install import install_hint


def check_action_space(space: gymnasium.Space) -> specs.BoundedArray:
    """The dm_env spec of a usable action space; EnvError for anything else."""
    need = "DMPO needs a bounded continuous (Box) action space"
    if isinstance(space, (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)):
        raise EnvError(f"{need}, got the discrete action space {space!r}; DMPO learns continuous "
                       "actions only (a discrete task needs a discrete-action agent such as DQN)")
    if not isinstance(space, spaces.Box):
        raise EnvError(f"{need}, got {space!r}")
    if not np.issubdtype(space.dtype, np.floating):
        raise EnvError(f"{need} with a float dtype, got dtype {space.dtype} in {space!r}")
    if not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
        raise EnvError(f"{need} with finite bounds, got low={space.low} high={space.high}")
    if len(space.shape) != 1:
        raise EnvError(f"{need} of rank 1 (shape [D]), got shape {space.shape}")
    return specs.BoundedArray(space.shape, space.dtype, space.low, space.high, name="action")


def _observation_dtype(space: spaces.Box) -> np.dtype:
    return np.dtype(np.float32) if np.issubdtype(space.dtype, np.floating) else space.dtype


def observation_spec_of(space: gymnasium.Space, name: str = "observation") -> NestedSpec:
    """dm_env spec for a Box or (nested) Dict observation space."""
    if isinstance(space, spaces.Box):
        return specs.Array(space.shape, _observation_dtype(space), name=name)
    if isinstance(space, spaces.Dict):
        return {key: observation_spec_of(sub, key) for key, sub in space.spaces.items()}
    raise EnvError(f"unsupported observation space {type(space).__name__} ({space!r}): DMPO feeds Box "
                   "observations and Dict spaces of them")


def _convert_observation(space: gymnasium.Space, value) -> NestedArray:
    if isinstance(space, spaces.Dict):
        return {key: _convert_observation(sub, value[key]) for key, sub in space.spaces.items()}
    return np.array(value, dtype=_observation_dtype(space), copy=True)  # never alias the env's buffers


class GymnasiumEnvironment(dm_env.Environment):
    """Wraps a `gymnasium.Env` (see the module docstring for semantics and seeding)."""

    def __init__(self, gym_env: gymnasium.Env, seed: int | None = None):
        self._action_spec = check_action_space(gym_env.action_space)
        self._observation_spec = observation_spec_of(gym_env.observation_space)
        self._gym_env = gym_env
        self._seed = seed
        self._seeded = False
        self._needs_reset = True
        if seed is not None:
            gym_env.action_space.seed(seed)

    @property
    def gym_env(self) -> gymnasium.Env:
        """The wrapped gymnasium environment."""
        return self._gym_env

    def reset(self) -> dm_env.TimeStep:
        if self._seeded:
            observation, _ = self._gym_env.reset()
        else:
            observation, _ = self._gym_env.reset(seed=self._seed)
            self._seeded = True
        self._needs_reset = False
        return dm_env.restart(_convert_observation(self._gym_env.observation_space, observation))

    def step(self, action) -> dm_env.TimeStep:
        if self._needs_reset:
            return self.reset()
        action = np.asarray(action, dtype=self._action_spec.dtype)
        observation, reward, terminated, truncated, _ = self._gym_env.step(action)
        observation = _convert_observation(self._gym_env.observation_space, observation)
        reward = np.float32(reward)
        if terminated:
            self._needs_reset = True
            return dm_env.TimeStep(dm_env.StepType.LAST, reward, np.float32(0.0), observation)
        if truncated:
            self._needs_reset = True
            return dm_env.TimeStep(dm_env.StepType.LAST, reward, np.float32(1.0), observation)
        return dm_env.TimeStep(dm_env.StepType.MID, reward, np.float32(1.0), observation)

    def observation_spec(self) -> NestedSpec:
        return self._observation_spec

    def action_spec(self) -> specs.BoundedArray:
        return self._action_spec

    def reward_spec(self) -> specs.Array:
        return specs.Array((), np.float32, name="reward")

    def discount_spec(self) -> specs.BoundedArray:
        return specs.BoundedArray((), np.float32, 0.0, 1.0, name="discount")

    def render(self) -> np.ndarray:
        """The current RGB frame (uint8 [H, W, 3]); needs the environment made with `render=True`."""
        if self._gym_env.render_mode != "rgb_array":
            raise EnvError(f"{self._gym_env.spec.id if self._gym_env.spec else 'this environment'} was "
                           f"made with render_mode={self._gym_env.render_mode!r}; make it with render=True "
                           "to record frames")
        try:
            frame = self._gym_env.render()
        except gymnasium.error.DependencyNotInstalled as error:
            extra = (f"; with dmpo: {install_hint('classic-control')}" if "pygame" in str(error) else "")
            raise EnvError(f"cannot render {self._gym_env.spec.id}: {error}{extra}") from None
        return np.asarray(frame, dtype=np.uint8)

    def close(self) -> None:
        self._gym_env.close()


def load(env_id: str, seed: int | None = None, render: bool = False) -> GymnasiumEnvironment:
    """`gymnasium.make(env_id)` wrapped as a dm_env (with `render_mode="rgb_array"` when `render`, so
    that `render()` returns frames); EnvError for ids not in gymnasium's registry."""
    if env_id not in gymnasium.registry:
        close = difflib.get_close_matches(env_id, list(gymnasium.registry), n=5, cutoff=0.6)
        hint = f"; close matches: {', '.join(close)}" if close else ""
        raise EnvError(
            f"unknown gymnasium id {env_id!r}: check gymnasium's registry "
            f"(gymnasium.pprint_registry()) for a continuous-control id such as 'Pendulum-v1'{hint}"
        )
    from dmpo.utils.quiet import quiet_mujoco_warnings

    quiet_mujoco_warnings()  # gymnasium's HalfCheetah model warns of a deprecated attribute on every load
    try:
        gym_env = gymnasium.make(env_id, render_mode="rgb_array") if render else gymnasium.make(env_id)
    except gymnasium.error.DependencyNotInstalled as error:
        raise EnvError(f"gym:{env_id} needs an optional dependency that is not installed: "
                       f"{str(error).splitlines()[0]}") from None
    try:
        return GymnasiumEnvironment(gym_env, seed=seed)
    except EnvError as error:
        gym_env.close()
        raise EnvError(f"gym:{env_id}: {error}") from None
