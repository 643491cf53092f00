"""A tiny gymnasium task whose action bounds are neither `[-1, 1]` nor symmetric: `[-3, 1] x [-0.5, 2]`.

Steer a point towards a target (30 steps, then truncated). Used as `--env lopsided_env:make` from
the tests folder (the module the tests import is then the one the entry point loads).
"""

from __future__ import annotations

import gymnasium
import numpy as np
from gymnasium import spaces

LOW = np.array([-3.0, -0.5], np.float32)
HIGH = np.array([1.0, 2.0], np.float32)


class LopsidedTask(gymnasium.Env):
    def __init__(self) -> None:
        self.observation_space = spaces.Box(-10.0, 10.0, (4,), np.float32)
        self.action_space = spaces.Box(LOW, HIGH, (2,), np.float32)
        self._position, self._target, self._steps = np.zeros(2), np.zeros(2), 0

    def _observe(self) -> np.ndarray:
        return np.concatenate([self._position, self._target]).astype(np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._position = self.np_random.uniform(-2.0, 2.0, 2)
        self._target = self.np_random.uniform(-1.0, 1.0, 2)
        self._steps = 0
        return self._observe(), {}

    def step(self, action):
        self._position = np.clip(self._position + 0.2 * np.asarray(action, np.float64), -10.0, 10.0)
        self._steps += 1
        reward = -float(np.linalg.norm(self._position - self._target))
        return self._observe(), reward, False, self._steps >= 30, {}


def make(seed: int | None) -> LopsidedTask:
    del seed  # the adapter seeds reset(seed=...)
    return LopsidedTask()
