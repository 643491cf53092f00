"""Small deterministic environments for tests: `FakeEnvironment` and the learnable `ReachTarget`.

Both follow dm_env semantics exactly like the real pipeline's output (float32 values and specs,
LAST with discount 0 for a termination and 1 for a truncation, and `step` after LAST — or before
any reset — starting a new episode and returning its FIRST step).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import dm_env
import numpy as np
from dm_env import specs

from dmpo.envs.errors import EnvError, check_positive_int


def _shape(value, name: str) -> tuple[int, ...]:
    shape = tuple(value.shape if isinstance(value, specs.Array) else value)
    if not all(isinstance(size, (int, np.integer)) and size >= 0 for size in shape):
        raise EnvError(f"{name} must be a tuple of non-negative integers, got {value!r}")
    return tuple(int(size) for size in shape)


def _reward_spec() -> specs.Array:
    return specs.Array((), np.float32, name="reward")


def _discount_spec() -> specs.BoundedArray:
    return specs.BoundedArray((), np.float32, 0.0, 1.0, name="discount")


class FakeEnvironment(dm_env.Environment):
    """Episodes of fixed length with pseudo-random float32 observations and rewards.

    Every value comes from one `numpy.random.default_rng(seed)` stream, so two instances with the
    same arguments emit identical sequences whatever the actions (actions are only checked for
    shape and finiteness, and the last one is kept in `last_action`). Observations are standard
    normal, rewards uniform in [0, 1). Step `episode_length` ends the episode: LAST with discount 0
    if `terminate` else 1 (a truncation); every other step is MID with discount 1.

    Args:
      observation_shape: shape of an array observation, or a mapping name → shape (or name →
        dm_env spec, whose shape is used) for a dict observation. Values are always float32.
      action_dim: D, the action spec is float32 `[D]` within `action_bounds`.
      episode_length: steps per episode (≥ 1).
      terminate: end episodes by termination (discount 0) instead of truncation (discount 1).
      action_bounds: (minimum, maximum) of every action dimension.
      seed: seed of the value stream.
    """

    def __init__(self, observation_shape: Sequence[int] | Mapping[str, Sequence[int]] = (3,),
                 action_dim: int = 1, episode_length: int = 10, terminate: bool = False,
                 action_bounds: tuple[float, float] = (-1.0, 1.0), seed: int = 0):
        if isinstance(observation_shape, Mapping):
            self._observation_shapes = {
                str(key): _shape(shape, f"observation_shape[{key!r}]")
                for key, shape in observation_shape.items()
            }
        else:
            self._observation_shapes = _shape(observation_shape, "observation_shape")
        self._action_dim = check_positive_int(action_dim, "action_dim")
        self._episode_length = check_positive_int(episode_length, "episode_length")
        low, high = (float(bound) for bound in action_bounds)
        if not low < high:
            raise EnvError(
                f"action_bounds must be (minimum, maximum) with minimum < maximum, got {action_bounds!r}"
            )
        self._action_spec = specs.BoundedArray((self._action_dim,), np.float32, low, high, name="action")
        self._terminate = bool(terminate)
        self._rng = np.random.default_rng(seed)
        self._step = 0
        self._needs_reset = True
        self.last_action: np.ndarray | None = None

    def _observation(self):
        draw = lambda shape: self._rng.standard_normal(shape).astype(np.float32)
        if isinstance(self._observation_shapes, dict):
            return {key: draw(shape) for key, shape in self._observation_shapes.items()}
        return draw(self._observation_shapes)

    def reset(self) -> dm_env.TimeStep:
        self._step = 0
        self._needs_reset = False
        return dm_env.restart(self._observation())

    def step(self, action) -> dm_env.TimeStep:
        if self._needs_reset:
            return self.reset()
        action = np.asarray(action, dtype=np.float32)
        if action.shape != self._action_spec.shape or not np.all(np.isfinite(action)):
            raise EnvError(f"action must be finite with shape {self._action_spec.shape}, got {action!r}")
        self.last_action = action
        self._step += 1
        reward = np.float32(self._rng.uniform())
        observation = self._observation()
        if self._step < self._episode_length:
            return dm_env.TimeStep(dm_env.StepType.MID, reward, np.float32(1.0), observation)
        self._needs_reset = True
        discount = np.float32(0.0 if self._terminate else 1.0)
        return dm_env.TimeStep(dm_env.StepType.LAST, reward, discount, observation)

    def observation_spec(self):
        if isinstance(self._observation_shapes, dict):
            return {key: specs.Array(shape, np.float32, name=key)
                    for key, shape in self._observation_shapes.items()}
        return specs.Array(self._observation_shapes, np.float32, name="observation")

    def action_spec(self) -> specs.BoundedArray:
        return self._action_spec

    def reward_spec(self) -> specs.Array:
        return _reward_spec()

    def discount_spec(self) -> specs.BoundedArray:
        return _discount_spec()


class ReachTarget(dm_env.Environment):
    """Move a point in `[-1, 1]^D` to a fixed target; a tiny task with a known optimal return.

    The position starts at `start` (every coordinate) and the observation is the float32
    position `[D]`. An action `a ∈ [-1, 1]^D` (clipped to that box) moves the point by
    `max_step · a` (then clipped to `[-1, 1]^D`), and the reward after the move is
    `1 − mean_i |x_i − target_i|`. Episodes end after `episode_length` steps by truncation
    (LAST with discount 1); there is no termination.

    Coordinates are independent and the best move shrinks every distance by `max_step` per step,
    so with `g = |target − start|` the optimal return is
    `Σ_{t=1..T} (1 − max(0, g − t · max_step))`, given by `optimal_return()`. For the defaults
    (start 0, target 0.5, max_step 0.25, T = 20) that is 20 − 0.25 = 19.75, while keeping the point
    still earns 20 · 0.5 = 10.
    """

    def __init__(self, dim: int = 1, start: float = 0.0, target: float = 0.5, max_step: float = 0.25,
                 episode_length: int = 20):
        self._dim = check_positive_int(dim, "dim")
        self._episode_length = check_positive_int(episode_length, "episode_length")
        for name, value in (("start", start), ("target", target)):
            if not -1.0 <= value <= 1.0:
                raise EnvError(f"{name} must lie in [-1, 1], got {value!r}")
        if not max_step > 0:
            raise EnvError(f"max_step must be positive, got {max_step!r}")
        self._start, self._target, self._max_step = float(start), float(target), float(max_step)
        self._position = np.full(self._dim, self._start, np.float32)
        self._step = 0
        self._needs_reset = True

    def optimal_return(self) -> float:
        """The largest achievable undiscounted episode return (closed form, see the class docstring)."""
        gap = abs(self._target - self._start)
        steps = range(1, self._episode_length + 1)
        return float(sum(1.0 - max(0.0, gap - t * self._max_step) for t in steps))

    def reset(self) -> dm_env.TimeStep:
        self._position = np.full(self._dim, self._start, np.float32)
        self._step = 0
        self._needs_reset = False
        return dm_env.restart(self._position.copy())

    def step(self, action) -> dm_env.TimeStep:
        if self._needs_reset:
            return self.reset()
        action = np.asarray(action, dtype=np.float32)
        if action.shape != (self._dim,) or np.any(np.isnan(action)):
            raise EnvError(f"action must have shape ({self._dim},) without NaN, got {action!r}")
        move = self._max_step * np.clip(action, -1.0, 1.0)
        self._position = np.clip(self._position + move, -1.0, 1.0).astype(np.float32)
        reward = np.float32(1.0 - np.mean(np.abs(self._position - self._target)))
        self._step += 1
        if self._step < self._episode_length:
            return dm_env.transition(reward, self._position.copy(), discount=np.float32(1.0))
        self._needs_reset = True
        return dm_env.truncation(reward, self._position.copy(), discount=np.float32(1.0))

    def observation_spec(self) -> specs.Array:
        return specs.Array((self._dim,), np.float32, name="position")

    def action_spec(self) -> specs.BoundedArray:
        return specs.BoundedArray((self._dim,), np.float32, -1.0, 1.0, name="action")

    def reward_spec(self) -> specs.Array:
        return _reward_spec()

    def discount_spec(self) -> specs.BoundedArray:
        return _discount_spec()
