"""What every node of the distributed program is built from, and the helpers they share.

`NodeSettings` is the picklable bundle the driver hands to each node; environments and networks are
built inside the nodes from it, so no JAX object ever crosses a process boundary — only numpy.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dmpo.config import DMPOConfig

EnvironmentFactory = Callable[..., Any]
"""`factory(is_eval: bool) -> dm_env.Environment`, optionally also taking a `seed=` keyword."""

NetworkFactory = Callable[[Any], Any]
"""`network_factory(env_spec) -> DMPONetworks` (actors, evaluator and learner must share it)."""

# Acting nodes run one small network per step: one XLA thread each keeps N of them from fighting
# over the cores the learner needs.
ACTING_NODE_ENV = {
    "JAX_PLATFORMS": "cpu",
    "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
    "OMP_NUM_THREADS": "1",
    "MUJOCO_GL": "egl",
}


@dataclasses.dataclass(frozen=True)
class NodeSettings:
    """Everything a node needs besides the handles of the other nodes."""

    config: DMPOConfig
    environment: str | EnvironmentFactory
    env_spec: Any
    run_dir: str
    seed: int
    network_factory: NetworkFactory | None = None
    variable_update_period: int = 1000
    counter_time_delta: float = 1.0
    log_time_delta: float = 10.0

    @property
    def checkpoint_dir(self) -> Path:
        return Path(self.run_dir) / "checkpoints"


def make_environment(source: str | EnvironmentFactory, *, is_eval: bool, seed: int) -> Any:
    """An environment from a task name (`dmpo.envs.make`) or a factory; `seed` is passed if accepted."""
    if isinstance(source, str):
        from dmpo.envs import make

        return make(source, seed=seed)
    if _accepts_seed(source):
        return source(is_eval, seed=seed)
    return source(is_eval)


def _accepts_seed(factory: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return False
    return "seed" in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


def make_networks(settings: NodeSettings) -> Any:
    """The agent's networks: the custom factory if given, else the config's networks."""
    if settings.network_factory is not None:
        return settings.network_factory(settings.env_spec)
    from dmpo.networks import make_networks as default_networks

    return default_networks(settings.env_spec, settings.config.networks)


COUNT_KEYS = ("actor_episodes", "actor_steps", "evaluator_episodes", "evaluator_steps", "learner_steps",
              "learner_walltime")
"""The shared counter's keys (spec §7.5); every node's log rows carry all of them."""


class _WithAllCounts:
    """Adds the count keys a row lacks (0: nothing pushed yet), so a CSV's first row fixes every column."""

    def __init__(self, logger: Any) -> None:
        self._logger = logger

    def write(self, data: Any) -> None:
        self._logger.write({**{key: 0 for key in COUNT_KEYS}, **data})

    def close(self) -> None:
        self._logger.close()


def make_node_logger(label: str, run_dir: str | None, time_delta: float) -> Any:
    """A node's logger: CSV + TensorBoard under `run_dir` (nothing if None), no terminal output."""
    from dmpo.utils.logging import make_logger

    step_key = NODE_LOG_STEP_KEYS.get(label, "actor_steps")
    return _WithAllCounts(make_logger(label, run_dir, time_delta=time_delta, terminal=False,
                                      step_key=step_key))


NODE_LOG_STEP_KEYS = {"learner": "learner_steps", "actor": "actor_steps", "evaluator": "actor_steps"}
"""The count that orders each node log (TensorBoard's x-axis; what a resume cuts the logs back to)."""


def node_seed(base: int, role: int, index: int = 0, generation: int = 0) -> int:
    """Distinct seeds per node role, index and restart generation (a restarted actor gets a new one)."""
    return int(base) + 1_000_003 * role + 10_007 * index + 101 * generation
