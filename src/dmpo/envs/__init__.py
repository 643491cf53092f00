"""Environments for DMPO: names → dm_env environments in the pipeline of algorithm.md §0.

    env = make("dmc:cartpole-swingup", seed=0)              # dict of float32 state vectors
    env = make("gym:Pendulum-v1", seed=0)                   # float32 array observations
    env = make("dmc:cheetah-run", pixels=True)              # uint8 [84, 84, 9], action repeat 2
    env = make("my_pkg.envs:make_env", seed=0)              # make_env(seed) -> gymnasium.Env or dm_env

Every environment from `make` acts in `[-1, 1]^D` (float32) and emits float32 rewards and
discounts; a LAST step with discount 0 is a termination and one with discount 1 a truncation.
Modules: `registry` (make), `control_suite`, `gym_adapter`, `entry_points` (the user's own
environments: `module:callable`, `gym:module:Id`), `checks` (per-step checks, `dmpo check-env`),
`pixels`, `wrappers`, `observations` (flattening), `interface` (the task's own action bounds, action
repeat and frame stack, read off a pipeline environment), `rendering` (frames from behind the
wrappers), `fakes` (test environments).
(`control_suite`/`gym_adapter` are not called `dm_control`/`gymnasium` so as not to read like the
libraries they wrap.)
"""

from dmpo.envs.errors import EnvError
from dmpo.envs.fakes import FakeEnvironment, ReachTarget
from dmpo.envs.interface import make_environment_spec
from dmpo.envs.observations import flatten_observation, flatten_observation_spec
from dmpo.envs.registry import DEFAULT_TASK, EnvironmentFactory, TaskFactory, available_tasks, make

__all__ = [
    "DEFAULT_TASK",
    "EnvError",
    "EnvironmentFactory",
    "FakeEnvironment",
    "ReachTarget",
    "TaskFactory",
    "available_tasks",
    "flatten_observation",
    "flatten_observation_spec",
    "make",
    "make_environment_spec",
]
