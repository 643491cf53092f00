"""Loading DeepMind Control Suite tasks ("dmc:<domain>-<task>") as dm_env environments.

Names join the suite's domain and task with the first '-': every `suite.ALL_TASKS` pair
(e.g. `ball_in_cup-catch`, `finger-turn_easy`, `point_mass-easy`) contains no other '-'.

Observations are returned as a plain `dict` (not the suite's `OrderedDict`) keyed by the suite's
names, and **scalar entries (shape `()`, e.g. walker's `height`) are reshaped to `(1,)`** so that
every entry is at least rank 1 and `flatten_observation` concatenates uniform vectors. Values keep
the suite's float64 here; `make` casts them to float32 later in the pipeline.

`dm_control` is imported lazily (on the first load), because its OpenGL backend is fixed at that
import from `MUJOCO_GL`; `dmpo.envs.pixels` sets that variable first when pixels are requested.
"""

from __future__ import annotations

import dm_env
import numpy as np
from dm_env import specs

from dmpo.envs.errors import EnvError
from dmpo.envs.wrappers import EnvironmentWrapper


def _suite():
    from dm_control import suite  # lazy: see the module docstring

    return suite


def task_names() -> tuple[str, ...]:
    """All suite tasks as "<domain>-<task>" strings, sorted."""
    return tuple(sorted(f"{domain}-{task}" for domain, task in _suite().ALL_TASKS))


def parse_task_name(name: str) -> tuple[str, str]:
    """Splits "<domain>-<task>" on the first '-' and checks the pair exists in the suite."""
    domain, sep, task = name.partition("-")
    if not sep or (domain, task) not in _suite().ALL_TASKS:
        from dmpo.utils.spelling import closest

        near = closest(name, task_names())
        if near:  # the likely typo, rather than all of the suite's tasks
            raise EnvError(f"unknown dm_control task {name!r}; did you mean "
                           f"{' or '.join('dmc:' + task for task in near)}? (dmpo.envs.available_tasks() "
                           "lists them all)")
        raise EnvError(
            f"unknown dm_control task {name!r}; expected 'dmc:<domain>-<task>' with one of: "
            + ", ".join(task_names())
        )
    return domain, task


def _vector_spec(spec: specs.Array) -> specs.Array:
    return spec.replace(shape=(1,)) if spec.shape == () else spec


class DictObservationWrapper(EnvironmentWrapper):
    """Plain-dict observations with scalar entries reshaped to `(1,)`."""

    def observation_spec(self) -> dict[str, specs.Array]:
        return {key: _vector_spec(spec) for key, spec in self._environment.observation_spec().items()}

    def _convert(self, timestep: dm_env.TimeStep) -> dm_env.TimeStep:
        observation = {}
        for key, value in timestep.observation.items():
            value = np.asarray(value)
            observation[key] = value.reshape(1) if value.ndim == 0 else value
        return timestep._replace(observation=observation)

    def reset(self) -> dm_env.TimeStep:
        return self._convert(self._environment.reset())

    def step(self, action) -> dm_env.TimeStep:
        return self._convert(self._environment.step(action))


def load(name: str, seed: int | None = None) -> dm_env.Environment:
    """Loads "<domain>-<task>" with `task_kwargs={'random': seed}` (same seed ⇒ same episodes).

    Returns the raw suite environment (suite `OrderedDict` observations, float64): the pixel
    wrapper needs it that way; `wrap_states` applies the dict-observation conversion.
    """
    domain, task = parse_task_name(name)
    return _suite().load(domain, task, task_kwargs={"random": seed})


def wrap_states(environment: dm_env.Environment) -> dm_env.Environment:
    """The state-observation conversion of this module (plain dict, scalars → `(1,)`)."""
    return DictObservationWrapper(environment)
