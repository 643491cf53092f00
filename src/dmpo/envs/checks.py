"""Saying at once what DMPO cannot learn from an environment.

* `CheckedEnvironment` (innermost in the pipeline of every `gym:` and entry-point task): every
  observation must match its spec's shape and dtype kind, and every reward and observation must be
  finite. A failure is an `EnvError` naming the step (`episode E, step S` of the raw environment) and
  the entry, raised before the value reaches the agent; otherwise a NaN poisons the networks and
  surfaces later as a NaN action. The cost is one `np.isfinite` per leaf per step (numpy, env side).
* `check_agent_can_feed(spec, networks)`: the observation torso can take these observations (image
  observations need a pixel torso).
* `build_environment(factory, seed, name)`: `factory(seed)`, a factory's own error as one line.
* `check_environment(factory, steps)`: what `dmpo check-env` runs and prints.

Episodes are numbered from 1. A `CheckedEnvironment` counts its own episodes; the one-process trainer,
which makes a new training environment at every checkpoint, tells it the run's number of its next
episode (`number_episodes_from`), so that an error names the run's episode, the one the
`environment_loop` log counts.
"""

from __future__ import annotations

from typing import Any

import dm_env
import numpy as np
import tree
from dm_env import specs

from dmpo.envs.errors import EnvError
from dmpo.envs.wrappers import EnvironmentWrapper


def _leaf_name(path: tuple[Any, ...]) -> str:
    return "observation" + "".join(f"[{key!r}]" for key in path)


def _check_observation_spec(spec: Any) -> None:
    for path, leaf in tree.flatten_with_path(spec):
        if not isinstance(leaf, specs.Array):
            raise EnvError(f"{_leaf_name(path)} spec is a {type(leaf).__name__}; DMPO feeds numeric "
                           "arrays (dm_env specs.Array; gymnasium Box or Dict of Box)")
        if not (np.issubdtype(leaf.dtype, np.number) or leaf.dtype == np.bool_):
            raise EnvError(f"{_leaf_name(path)} has dtype {leaf.dtype}; DMPO feeds numeric arrays only")


class CheckedEnvironment(EnvironmentWrapper):
    """Checks shapes, dtype kinds and finiteness of every timestep (module docstring)."""

    def __init__(self, environment: dm_env.Environment, name: str = "environment") -> None:
        super().__init__(environment)
        self._name = name
        self._spec = environment.observation_spec()
        _check_observation_spec(self._spec)
        self._episode, self._step = -1, 0
        self.first_episode = 1  # the number its first episode is called by

    def _check(self, timestep: dm_env.TimeStep, where: str) -> dm_env.TimeStep:
        try:
            tree.assert_same_structure(self._spec, timestep.observation)
        except (ValueError, TypeError) as error:
            raise EnvError(f"{self._name}: {where}: the observation does not match the observation "
                           f"spec's structure: {error}") from None
        for (path, spec), value in zip(tree.flatten_with_path(self._spec),
                                       tree.flatten(timestep.observation), strict=True):
            value = np.asarray(value)
            if value.shape != tuple(spec.shape):
                raise EnvError(f"{self._name}: {where}: {_leaf_name(path)} has shape {value.shape}, "
                               f"its spec says {tuple(spec.shape)}")
            if np.issubdtype(spec.dtype, np.floating) != np.issubdtype(value.dtype, np.floating):
                raise EnvError(f"{self._name}: {where}: {_leaf_name(path)} has dtype {value.dtype}, "
                               f"its spec says {spec.dtype}")
            if np.issubdtype(value.dtype, np.floating) and not np.isfinite(value).all():
                raise EnvError(f"{self._name}: {where}: {_leaf_name(path)} is not finite (NaN or "
                               f"inf): {value}")
        if timestep.reward is not None and not np.isfinite(timestep.reward).all():
            raise EnvError(f"{self._name}: {where}: the reward is not finite: {timestep.reward}")
        return timestep

    def reset(self) -> dm_env.TimeStep:
        self._episode, self._step = self._episode + 1, 0
        return self._check(self._environment.reset(), f"reset of episode {self._number}")

    def step(self, action) -> dm_env.TimeStep:
        timestep = self._environment.step(action)
        if timestep.first():
            self._episode, self._step = self._episode + 1, 0
            return self._check(timestep, f"reset of episode {self._number}")
        self._step += 1
        return self._check(timestep, f"episode {self._number}, step {self._step}")

    @property
    def _number(self) -> int:
        return self.first_episode + self._episode


def number_episodes_from(environment: Any, first: int) -> None:
    """Has the checks of a pipeline environment call its next episode `first` (a no-op for an
    environment without them)."""
    from dmpo.envs.wrappers import EnvironmentWrapper

    while isinstance(environment, EnvironmentWrapper):
        if isinstance(environment, CheckedEnvironment):
            environment.first_episode = first - max(environment._episode, -1) - 1
            return
        environment = environment.environment


def build_environment(factory: Any, seed: int, name: str) -> Any:
    """`factory(seed)`; an error the factory raises becomes an EnvError of one line naming the task and
    the error's type and first line (dmpo's own EnvError passes as it is)."""
    try:
        return factory(seed)
    except EnvError:
        raise
    except Exception as error:  # noqa: BLE001 - the user's factory: one line naming what it raised
        lines = str(error).strip().splitlines() or [""]
        raise EnvError(f"{name}: the environment factory raised {type(error).__name__}: {lines[0]}") from None


def is_image(spec: specs.Array) -> bool:
    """An image observation: uint8 of rank 3 (`[H, W, C]`)."""
    return np.dtype(spec.dtype) == np.uint8 and len(spec.shape) == 3


def check_agent_can_feed(observation_spec: Any, observation_network: str) -> None:
    """EnvError if the `flatten` torso is asked to take image observations (it would flatten pixels
    into a dense layer; pixel tasks want a convolutional torso)."""
    if observation_network != "flatten":
        return
    for path, leaf in tree.flatten_with_path(observation_spec):
        if is_image(leaf):
            raise EnvError(f"{_leaf_name(path)} is an image ({leaf.dtype} {list(leaf.shape)}); the "
                           "default 'flatten' torso takes state vectors: pass "
                           "--agent.networks.observation-network impala (or drq)")


def describe_spec(spec: Any) -> str:
    """One line per leaf: name, shape, dtype and bounds if any."""
    lines = []
    for path, leaf in tree.flatten_with_path(spec):
        bounds = ""
        if isinstance(leaf, specs.BoundedArray):
            low, high = np.unique(leaf.minimum), np.unique(leaf.maximum)
            bounds = f" in [{low[0] if low.size == 1 else low}, {high[0] if high.size == 1 else high}]"
        name = "".join(f"[{key!r}]" for key in path) or leaf.name or "array"
        lines.append(f"  {name}: {np.dtype(leaf.dtype).name} {list(leaf.shape)}{bounds}")
    return "\n".join(lines)


def _task_action_lines(task: Any) -> list[str]:
    """The task's own action bounds and action repeat (what a policy's actions are mapped onto)."""
    if task is None:  # no canonical action wrapper: the agent acts in the task's own bounds
        return []
    low, high = np.unique(task.action_minimum), np.unique(task.action_maximum)
    bounds = (f"[{low[0]}, {high[0]}]" if low.size == 1 and high.size == 1
              else f"[{list(task.action_minimum)}, {list(task.action_maximum)}]")
    return ["actions (the task's own: an action a in [-1, 1] is sent as low + (a + 1)(high - low) / 2):",
            f"  {task.action_dtype} [{len(task.action_minimum)}] in {bounds}",
            f"action repeat: {task.action_repeat} task step(s) per agent step"]


def _task_steps(steps: int, task: Any) -> str:
    repeat = task.action_repeat if task is not None else 1
    return f" ({steps * repeat} task steps)" if repeat > 1 else ""


def check_environment(factory: Any, *, steps: int = 100, seed: int = 0,
                      observation_network: str = "flatten", name: str = "environment") -> str:
    """Builds `factory(seed)`, takes `steps` uniformly random actions through the whole pipeline and
    returns a report of the specs the agent will see and of the task's own action bounds; raises
    EnvError on the first problem (`name`: the task, for the message of a factory that raises)."""
    from dmpo.envs.interface import task_interface

    environment = build_environment(factory, seed, name)
    task = task_interface(environment)
    try:
        obs_spec, action_spec = environment.observation_spec(), environment.action_spec()
        check_agent_can_feed(obs_spec, observation_network)
        rng = np.random.default_rng(seed)
        timestep = environment.reset()
        episodes, rewards = 0, []
        for _ in range(steps):
            action = rng.uniform(-1.0, 1.0, action_spec.shape).astype(action_spec.dtype)
            timestep = environment.step(action)
            if timestep.reward is not None:
                rewards.append(float(np.asarray(timestep.reward)))
            if timestep.last():
                episodes += 1
                timestep = environment.reset()
        reward_line = (f"rewards seen: min {min(rewards):.4g}, max {max(rewards):.4g}, mean "
                       f"{np.mean(rewards):.4g}" if rewards else "no rewards seen")
        return "\n".join([
            "observations:", describe_spec(obs_spec),
            "actions (canonical, the agent's):", describe_spec(action_spec),
            *_task_action_lines(task),
            f"reward: {describe_spec(environment.reward_spec()).strip().partition(': ')[2]}",
            f"discount: {describe_spec(environment.discount_spec()).strip().partition(': ')[2]}",
            f"{steps} random steps{_task_steps(steps, task)}: {episodes} episode(s) ended; {reward_line}",
        ])
    finally:
        environment.close()
