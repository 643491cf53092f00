"""What lies between the agent and the task: the action map, the action repeat and the frame stack.

The agent acts in the canonical box `[-1, 1]^D`; `CanonicalActionWrapper` clips an action to that box
and maps it affinely onto the task's bounds. A policy used outside the pipeline (a loaded snapshot, an
exported graph) must apply the same map, and a user driving the task by hand must repeat each action
and stack frames as training did. `task_interface(environment)` reads all of it off a pipeline
environment (`dmpo.envs.make`); `TaskInterface.to_task` is the map itself, for one action `[D]` or a
batch `[..., D]`, exactly as the wrapper computes it.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import numpy as np

from dmpo.types import EnvironmentSpec

__all__ = ["TaskInterface", "canonical_to_task", "make_environment_spec", "task_interface"]


def canonical_to_task(action: Any, low: np.ndarray, high: np.ndarray, dtype: Any) -> np.ndarray:
    """Clips canonical actions `[..., D]` to `[-1, 1]`, maps them onto `[low, high]` and casts to `dtype`.

    `low·(1 − a)/2 + high·(1 + a)/2` is exactly `low` at −1 and exactly `high` at +1 (halving is exact
    in binary); the final clip keeps a rounded result inside the bounds."""
    low, high = np.asarray(low, np.float64), np.asarray(high, np.float64)
    unit = np.clip(np.asarray(action, np.float64), -1.0, 1.0)
    mapped = (0.5 * low) * (1.0 - unit) + (0.5 * high) * (1.0 + unit)
    return np.clip(mapped, low, high).astype(dtype)


@dataclasses.dataclass(frozen=True)
class TaskInterface:
    """The task's own action bounds and dtype, and the steps between agent and task.

    Attributes:
      action_minimum, action_maximum: the task's bounds, one entry per action dimension.
      action_dtype: the dtype the task receives (numpy name, e.g. 'float32').
      action_repeat: task steps per agent action (1: none).
      frame_stack: frames stacked along the channel axis of a pixel observation (1: none).
      render: a pixel task's render settings (`dmpo.envs.pixels.PixelObservationWrapper.render_settings`
        with the frame stack, the action repeat and when frames are rendered); None for state tasks.
    """

    action_minimum: tuple[float, ...]
    action_maximum: tuple[float, ...]
    action_dtype: str = "float32"
    action_repeat: int = 1
    frame_stack: int = 1
    render: dict[str, Any] | None = dataclasses.field(default=None, hash=False)

    @classmethod
    def canonical(cls, action_spec: Any, *, action_repeat: int = 1, frame_stack: int = 1) -> TaskInterface:
        """The identity map: the task's bounds are the canonical spec's own (an environment built
        without the pipeline, or an old snapshot that did not record the task's bounds)."""
        low = np.broadcast_to(np.asarray(action_spec.minimum, np.float64), action_spec.shape)
        high = np.broadcast_to(np.asarray(action_spec.maximum, np.float64), action_spec.shape)
        return cls(tuple(low.tolist()), tuple(high.tolist()), np.dtype(action_spec.dtype).name,
                   int(action_repeat or 1), int(frame_stack or 1))

    @property
    def minimum(self) -> np.ndarray:
        return np.asarray(self.action_minimum, np.float64)

    @property
    def maximum(self) -> np.ndarray:
        return np.asarray(self.action_maximum, np.float64)

    def to_task(self, canonical_action: Any) -> np.ndarray:
        """Canonical actions `[..., D]` as the task receives them (the wrapper's clip, map and cast)."""
        return canonical_to_task(canonical_action, self.minimum, self.maximum, np.dtype(self.action_dtype))

    def to_dict(self) -> dict[str, Any]:
        record = {"action_minimum": list(self.action_minimum), "action_maximum": list(self.action_maximum),
                  "action_dtype": self.action_dtype, "action_repeat": self.action_repeat,
                  "frame_stack": self.frame_stack}
        return record if self.render is None else {**record, "render": self.render}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TaskInterface:
        return cls(tuple(float(x) for x in data["action_minimum"]),
                   tuple(float(x) for x in data["action_maximum"]), str(data["action_dtype"]),
                   int(data["action_repeat"]), int(data["frame_stack"]), data.get("render"))


def task_interface(environment: Any) -> TaskInterface | None:
    """The interface of a pipeline environment, read off its wrappers; None when it has no canonical
    action wrapper (an environment the agent acts in directly: its bounds are the task's)."""
    from dmpo.envs.wrappers import ActionRepeatWrapper, CanonicalActionWrapper, EnvironmentWrapper

    # Only a pixel task has a frame stack, and building one imported dmpo.envs.pixels (and mujoco):
    # a state task does not pay for that import here.
    pixels = sys.modules.get("dmpo.envs.pixels")
    frame_stack_type = pixels.FrameStackWrapper if pixels is not None else ()

    pixel_type = pixels.PixelObservationWrapper if pixels is not None else ()

    bounds, repeat, frames, render = None, 1, 1, None
    while isinstance(environment, EnvironmentWrapper):
        if isinstance(environment, CanonicalActionWrapper) and bounds is None:
            bounds = environment.task_bounds
        elif isinstance(environment, ActionRepeatWrapper):
            repeat *= environment.num_repeats
        elif isinstance(environment, frame_stack_type):
            frames *= environment.num_frames
        elif isinstance(environment, pixel_type) and render is None:
            render = dict(environment.render_settings)
        environment = environment.environment
    if bounds is None:
        return None
    if render is not None:
        render.update(frame_stack=frames, action_repeat=repeat,
                      when="once per agent step, after its action_repeat task steps, and once at a reset "
                           "(whose frame fills every slot of the stack)")
    low, high, dtype = bounds
    return TaskInterface(tuple(low.tolist()), tuple(high.tolist()), np.dtype(dtype).name, repeat, frames,
                         render)


def make_environment_spec(environment: Any) -> EnvironmentSpec:
    """The spec the agent is built for: observation, action, reward and discount specs of a dm_env
    environment, and its task interface (`task_interface`: the task's own bounds, for snapshots)."""
    return EnvironmentSpec(
        observations=environment.observation_spec(),
        actions=environment.action_spec(),
        rewards=environment.reward_spec(),
        discounts=environment.discount_spec(),
        task=task_interface(environment),
    )
