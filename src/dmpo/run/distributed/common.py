"""What every node of the distributed program is built from, and the helpers they share.

`NodeSettings` is the picklable bundle the driver hands to each node: the `DMPOBuilder` (config,
environment spec, network factory) every node makes its parts with, and the `EnvironmentFactory`
the acting nodes call with their own seeds. Environments and networks are built inside the nodes,
so no JAX object ever crosses a process boundary — only numpy.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import ray

from dmpo.agent.builder import DMPOBuilder
from dmpo.envs.registry import EnvironmentFactory

# Acting nodes run one small network per step: one XLA thread each keeps N of them from fighting
# over the cores the learner needs.
ACTING_NODE_ENV = {
    "JAX_PLATFORMS": "cpu",
    "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
    "OMP_NUM_THREADS": "1",
    "MUJOCO_GL": "egl",
}

# Options every node (a Ray actor) is made with. Ray records each call to an actor as a task event in
# its GCS, up to `RAY_task_events_max_num_task_in_gcs` of them, for its dashboard and state API; the
# nodes make many small calls a second (inserts, samples, counts), so over an hour the GCS process grew
# by hundreds of MiB (docs/results/reliability.md). dmpo reads none of them (Ray Serve turns them off
# for its long-lived actors too).
NODE_OPTIONS = {"enable_task_events": False}


@dataclasses.dataclass(frozen=True)
class NodeSettings:
    """Everything a node needs besides the handles of the other nodes."""

    builder: DMPOBuilder
    env_factory: EnvironmentFactory
    run_dir: str
    seed: int
    variable_update_period: int = 1000
    num_envs: int = 1
    """Environments each actor node steps in lockstep (`TrainConfig.num_envs`)."""
    counter_time_delta: float = 1.0
    log_time_delta: float = 10.0
    wall_origin: float | None = None
    """`time.time()` at which the run's wall clock reads 0 (the driver's start less the wall seconds of
    the checkpoint it resumed from): evaluation rows' and checkpoints' `wall_seconds` count from it."""

    def wall_seconds(self) -> float:
        """The run's wall-clock seconds so far, as the single-process trainer counts them."""
        return 0.0 if self.wall_origin is None else time.time() - self.wall_origin

    @property
    def config(self) -> Any:
        return self.builder.config

    @property
    def checkpoint_dir(self) -> Path:
        return Path(self.run_dir) / "checkpoints"


COUNT_KEYS = ("actor_episodes", "actor_steps", "evaluator_episodes", "evaluator_steps", "learner_steps",
              "learner_walltime")
"""The shared counter's keys (algorithm.md §7.5); every node's log rows carry all of them."""


class _WithAllCounts:
    """Adds the count keys a row lacks (0: nothing pushed yet), so a CSV's first row fixes every column."""

    def __init__(self, logger: Any) -> None:
        self._logger = logger

    def write(self, data: Any) -> None:
        self._logger.write({**{key: 0 for key in COUNT_KEYS}, **data})

    def will_write(self) -> bool:
        # Without it `utils.logging.will_write` assumes True and the learner fetches every step's metrics.
        from dmpo.reporting.logging import will_write

        return will_write(self._logger)

    def close(self) -> None:
        self._logger.close()


def make_node_logger(label: str, run_dir: str | None, time_delta: float) -> Any:
    """A node's logger: CSV + TensorBoard under `run_dir` (nothing if None), no terminal output."""
    from dmpo.reporting.logging import make_logger

    step_key = NODE_LOG_STEP_KEYS.get(label, "actor_steps")
    return _WithAllCounts(make_logger(label, run_dir, time_delta=time_delta, terminal=False,
                                      step_key=step_key))


NODE_LOG_STEP_KEYS = {"learner": "learner_steps", "environment_loop": "actor_steps",
                      "evaluator": "actor_steps"}
"""The count that orders each node log (TensorBoard's x-axis; what a resume cuts the logs back to)."""


# -- calls to nodes that may already be gone (stopping after a failure) ---------------------------

def first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else ""


def call_quietly(handle: Any, method: str, *args: Any) -> None:
    if handle is None:
        return
    try:
        getattr(handle, method).remote(*args)
    except Exception:  # the node is already gone
        pass


def get_quietly(ref: Any, timeout: float) -> Any:
    if ref is None:
        return None
    try:
        return ray.get(ref, timeout=timeout)
    except Exception:
        return None


def kill(handle: Any) -> None:
    if handle is None:
        return
    try:
        ray.kill(handle, no_restart=True)
    except Exception:
        pass
