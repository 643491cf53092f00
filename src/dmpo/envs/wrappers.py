"""Generic dm_env wrappers of the DMPO environment pipeline (algorithm.md §0).

`make` applies them innermost first as: canonical action spec → action repeat → float32 cast.

* `CanonicalActionWrapper`: the agent acts in `[-1, 1]^D` (float32); incoming actions are clipped to
  that box and mapped affinely onto the true bounds. The MPO action penalty (algorithm.md §6.4) assumes this.
* `ActionRepeatWrapper`: one agent step = up to `num_repeats` inner steps with the same action; the
  reward is `r_1 + d_1 r_2 + d_1 d_2 r_3 + ...` (each inner reward weighted by the product of the
  inner discounts before it), the discount is `d_1 d_2 ...`, and the loop stops early at LAST.
* `SinglePrecisionWrapper`: every float64 spec and value becomes float32 (other dtypes untouched).
"""

from __future__ import annotations

from typing import Any

import dm_env
import numpy as np
import tree
from dm_env import specs

from dmpo.envs.errors import EnvError, check_positive_int
from dmpo.envs.interface import canonical_to_task
from dmpo.types import NestedArray, NestedSpec


class EnvironmentWrapper(dm_env.Environment):
    """Forwards everything to the wrapped environment; subclasses override what they change.

    Public attributes that the wrapper does not define are looked up on the wrapped environment, so
    e.g. `make("dmc:walker-walk").physics` reaches the dm_control physics through every wrapper.
    """

    def __init__(self, environment: dm_env.Environment):
        self._environment = environment

    @property
    def environment(self) -> dm_env.Environment:
        """The directly wrapped environment."""
        return self._environment

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # never forward private names (keeps copy/pickle probing sane)
            raise AttributeError(name)
        return getattr(self._environment, name)

    def reset(self) -> dm_env.TimeStep:
        return self._environment.reset()

    def step(self, action) -> dm_env.TimeStep:
        return self._environment.step(action)

    def observation_spec(self) -> NestedSpec:
        return self._environment.observation_spec()

    def action_spec(self) -> NestedSpec:
        return self._environment.action_spec()

    def reward_spec(self) -> NestedSpec:
        return self._environment.reward_spec()

    def discount_spec(self) -> NestedSpec:
        return self._environment.discount_spec()

    def close(self) -> None:
        self._environment.close()


class CanonicalActionWrapper(EnvironmentWrapper):
    """Exposes a float32 `[-1, 1]^D` action spec and maps actions onto the true bounds.

    The inner action spec must be a rank-1 `BoundedArray` with finite bounds and a float dtype.
    A canonical action `a` (after clipping to `[-1, 1]`) becomes
    `low·(1 − a)/2 + high·(1 + a)/2`, which is exactly `low` at −1 and exactly `high` at +1, and is
    passed on in the inner spec's dtype.
    """

    def __init__(self, environment: dm_env.Environment):
        super().__init__(environment)
        inner = environment.action_spec()
        if not isinstance(inner, specs.BoundedArray):
            raise EnvError(
                f"DMPO needs a bounded continuous action spec (dm_env BoundedArray), got {inner!r}"
            )
        if len(inner.shape) != 1:
            raise EnvError(f"DMPO needs a rank-1 action spec of shape [D], got shape {inner.shape}")
        if not np.issubdtype(inner.dtype, np.floating):
            raise EnvError(f"DMPO needs a float action dtype, got {inner.dtype}")
        low = np.broadcast_to(np.asarray(inner.minimum, np.float64), inner.shape)
        high = np.broadcast_to(np.asarray(inner.maximum, np.float64), inner.shape)
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            raise EnvError(f"DMPO needs finite action bounds, got minimum={low} maximum={high}")
        if np.any(low > high):
            raise EnvError(f"action minimum must not exceed maximum, got minimum={low} maximum={high}")
        self._low, self._high, self._inner_dtype = low, high, inner.dtype
        self._spec = specs.BoundedArray(
            shape=inner.shape, dtype=np.float32, minimum=-1.0, maximum=1.0, name=inner.name or "action"
        )

    def action_spec(self) -> specs.BoundedArray:
        return self._spec

    @property
    def task_bounds(self) -> tuple[np.ndarray, np.ndarray, np.dtype]:
        """`(minimum, maximum, dtype)` of the task's own action spec (float64 bounds, shape [D])."""
        return self._low.copy(), self._high.copy(), np.dtype(self._inner_dtype)

    def to_inner(self, action) -> np.ndarray:
        """Validates a canonical action, clips it to `[-1, 1]` and maps it onto the true bounds."""
        action = np.asarray(action, dtype=np.float64)
        if action.shape != self._spec.shape:
            raise EnvError(f"action must have shape {self._spec.shape}, got shape {action.shape}")
        if np.isnan(action).any():
            raise EnvError(f"action contains NaN: {action}")
        return canonical_to_task(action, self._low, self._high, self._inner_dtype)

    def step(self, action) -> dm_env.TimeStep:
        return self._environment.step(self.to_inner(action))


class ActionRepeatWrapper(EnvironmentWrapper):
    """Repeats each action `num_repeats` times; see the module docstring for reward/discount."""

    def __init__(self, environment: dm_env.Environment, num_repeats: int):
        super().__init__(environment)
        self._num_repeats = check_positive_int(num_repeats, "action_repeat")

    @property
    def num_repeats(self) -> int:
        """Inner steps per action."""
        return self._num_repeats

    def step(self, action) -> dm_env.TimeStep:
        timestep = self._environment.step(action)
        if timestep.first():  # the inner env started a new episode: nothing to accumulate
            return timestep
        reward, discount = timestep.reward, timestep.discount
        for _ in range(self._num_repeats - 1):
            if timestep.last():
                break
            timestep = self._environment.step(action)
            reward = reward + discount * timestep.reward
            discount = discount * timestep.discount
        return timestep._replace(reward=reward, discount=discount)

    def reward_spec(self) -> NestedSpec:
        """A declared reward range `[lo, hi]` per inner step becomes the range of the repeated sum:
        the first reward has weight 1, each later one a discount product in [0, 1] (or 0 after an
        early LAST), so `[lo + (R−1)·min(lo, 0), hi + (R−1)·max(hi, 0)]`."""
        spec = self._environment.reward_spec()
        if not isinstance(spec, specs.BoundedArray):
            return spec
        extra = self._num_repeats - 1
        low = np.asarray(spec.minimum, np.float64)
        high = np.asarray(spec.maximum, np.float64)
        return spec.replace(minimum=low + extra * np.minimum(low, 0.0),
                            maximum=high + extra * np.maximum(high, 0.0))


def _to_float32_spec(spec: specs.Array) -> specs.Array:
    return spec.replace(dtype=np.float32) if spec.dtype == np.float64 else spec


def _to_float32_value(value):
    if value is None:
        return None
    array = np.asarray(value)
    if array.dtype != np.float64:
        return value
    return array.astype(np.float32)[()]  # `[()]`: a 0-d result becomes a numpy scalar


class SinglePrecisionWrapper(EnvironmentWrapper):
    """Casts float64 specs and values (observations, rewards, discounts) to float32."""

    def _cast(self, timestep: dm_env.TimeStep) -> dm_env.TimeStep:
        return timestep._replace(
            observation=tree.map_structure(_to_float32_value, timestep.observation),
            reward=_to_float32_value(timestep.reward),
            discount=_to_float32_value(timestep.discount),
        )

    def reset(self) -> dm_env.TimeStep:
        return self._cast(self._environment.reset())

    def step(self, action: NestedArray) -> dm_env.TimeStep:
        return self._cast(self._environment.step(action))

    def observation_spec(self) -> NestedSpec:
        return tree.map_structure(_to_float32_spec, self._environment.observation_spec())

    def reward_spec(self) -> NestedSpec:
        return tree.map_structure(_to_float32_spec, self._environment.reward_spec())

    def discount_spec(self) -> NestedSpec:
        return tree.map_structure(_to_float32_spec, self._environment.discount_spec())
