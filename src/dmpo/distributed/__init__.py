"""Distributed DMPO on Ray, for Python users: `run_distributed` and the names it takes and returns.

    from dmpo.distributed import ProgramOptions, run_distributed
    result = run_distributed(TrainConfig(env="dmc:walker-walk", actors=4), "runs/walker")

`run_distributed` is the `Run` (`dmpo.run.run`) of a `TrainConfig` with `actors > 0`, trained by the
Ray executor (`dmpo.run.distributed`: the program and its nodes), returning the program's
`DistributedResult`. `dmpo train --actors N` runs the same `Run`. Importing this package imports Ray
(the `distributed` extra).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dmpo.agent.builder import NetworkFactory
from dmpo.config import TrainConfig
from dmpo.envs.registry import EnvironmentFactory
from dmpo.lifecycle.callbacks import Callback
from dmpo.run.distributed.cluster import ClusterInfo, ray_cluster, start_local_cluster
from dmpo.run.distributed.options import DistributedResult, NodeFailure, ProgramOptions
from dmpo.run.distributed.placement import PlacementError
from dmpo.run.distributed.program import DistributedProgram
from dmpo.run.executor import RunSuspended
from dmpo.run.run import ClusterSettings, Run

__all__ = [
    "ClusterInfo",
    "DistributedProgram",
    "DistributedResult",
    "NodeFailure",
    "PlacementError",
    "ProgramOptions",
    "RunSuspended",
    "ray_cluster",
    "run_distributed",
    "start_local_cluster",
]


def run_distributed(
    config: TrainConfig,
    run_dir: str | Path,
    *,
    env_factory: EnvironmentFactory | None = None,
    network_factory: NetworkFactory | None = None,
    options: ProgramOptions | None = None,
    ray_address: str | None = None,
    num_cpus: int | None = None,
    progress: bool = True,
    resume: bool = False,
    on_poll: Callable[[Any], None] | None = None,
    callbacks: Sequence[Callback] = (),
    keep_ray_logs: bool = False,
) -> DistributedResult:
    """Trains DMPO with `config.actors` acting nodes on Ray for `config.steps` environment steps.

    Args:
      config: the run (module docstring: every field means what it means in one process).
      run_dir: the run directory (config, logs, checkpoints); created if needed.
      env_factory: `factory(seed) -> dm_env.Environment` for every acting node (default: the
        config's task); each node calls it with its own seed.
      network_factory: `factory(env_spec) -> DMPONetworks` for every node (default: the config's).
      options: layout settings and optional wall-clock periods.
      ray_address: join this cluster; None starts a private local cluster (localhost only) and stops
        it at the end. If Ray is already initialised in this process, that cluster is used.
      num_cpus: CPUs of the private local cluster (None: all).
      progress: show the progress line on the driver.
      resume: continue the run in `run_dir` from its latest checkpoint.
      on_poll: called with the program after every monitoring pass (tools and tests).
      callbacks: `dmpo.callbacks.Callback`s, called in this process (evaluations, checkpoints, end).
      keep_ray_logs: keep a private cluster's session files (Ray's logs) after the run; by default its
        `dmpo-ray-*` folder is removed when the cluster stops.

    Returns:
      A `DistributedResult`. Raises `PlacementError` before any node starts when the cluster cannot
      hold them all; `NodeFailure` when the learner, replay or counter node dies (after stopping
      everything); an actor's or the evaluator's own exception (e.g. `EnvError`) when it failed the
      same way twice in a row; re-raises KeyboardInterrupt after writing a final checkpoint.
    """
    cluster = ClusterSettings(address=ray_address, num_cpus=num_cpus, options=options,
                              keep_ray_logs=keep_ray_logs, on_poll=on_poll)
    summary = Run(config, run_dir, resume=resume, env_factory=env_factory, network_factory=network_factory,
                  callbacks=callbacks, progress=progress, cluster=cluster).train()
    return summary["result"]
