"""What a mode does for the `Run` (`dmpo.run.run`), which decides when.

Two executors implement it: `dmpo.run.local.LocalExecutor` (one process) and
`dmpo.run.distributed.executor.RayExecutor` (Ray nodes). Each is built with the opened `Run`, from which it
reads the final config, the prepared task, the run folder, the checkpoint to continue from, the
callbacks and `run.check(env_steps)`, the check of the schedule at its check points.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol

from dmpo.lifecycle.schedule import Due

__all__ = ["ClusterSettings", "Executor", "RunSuspended"]


class RunSuspended(RuntimeError):
    """The executor cannot go on now, but a resume can later: a distributed node was lost and no
    machine of the cluster could hold its replacement in time. The `Run` ends `interrupted` at its
    newest checkpoint (nothing after it was lost that a recovery would not also redo)."""


class Executor(Protocol):
    """The calls the `Run` makes, in this order: `start`, `train`, then `evaluate` (the final
    evaluation, when the final events hold one) and `finish`, or `interrupted` on a signal; `close`
    always; `summary` after a run that ended."""

    def start(self) -> None:
        """Builds the agent or the nodes and restores the checkpoint to continue from."""

    def train(self) -> None:
        """Trains until the step budget or a callback's stop; at each check point it acts on
        `run.check(env_steps)` (an evaluation, filmed when the check says so; a checkpoint)."""

    def env_steps(self) -> int:
        """Environment steps so far, the whole run's."""

    def evaluate(self, film: bool) -> dict[str, Any] | None:
        """One evaluation of the current policy, labelled with the current env steps (`film`: filmed)."""

    def finish(self, final: Due) -> tuple[str, str | None]:
        """The rest of the final events (the snapshot, the final checkpoint when `final.checkpoint`);
        returns the run's status and reason."""

    def interrupted(self) -> None:
        """What a signal's stop writes: the snapshot and a checkpoint of this moment."""

    def close(self, failed: bool = False) -> None:
        """Releases everything the executor holds (idempotent)."""

    def summary(self) -> dict[str, Any]:
        """env steps, episodes, last evaluation, counts (and the mode's own fields)."""


@dataclasses.dataclass(frozen=True)
class ClusterSettings:
    """Ray settings of a distributed run (`dmpo train --actors N`'s cluster flags).

    Attributes:
      address: join this Ray cluster; None starts a private local one (localhost only).
      num_cpus: CPUs of the private local cluster (None: all).
      options: a `dmpo.distributed.ProgramOptions` (node layout, periods, stop timeout).
      keep_ray_logs: keep the private cluster's session files after the run.
      on_poll: called with the program after every monitoring pass (tools and tests).
    """

    address: str | None = None
    num_cpus: int | None = None
    options: Any = None
    keep_ray_logs: bool = False
    on_poll: Callable[[Any], None] | None = None
