"""The Ray executor: a `Run` (`dmpo.run.run`) trained by a `DistributedProgram` on a Ray cluster.

It starts (or joins) the cluster, starts the program, polls it about once a second while a progress
line shows the shared counts and the evaluator's latest return, and always stops the program and the
cluster it started. The `Run` decides the sequence (`dmpo.run.executor.Executor`): the acting nodes
check the run's schedule at their episode ends (through the counter service); at the end the `Run`'s
final events are asked of the program (`settle`, then the final round), which then stops the nodes.

A lost learner, replay node or counter is recovered inside the run, up to
`ProgramOptions.max_node_restarts` times: every node of the program is killed, and a new program
continues from the newest checkpoint (learner state, replay contents when saved, counts) as a resume
would, its node logs rewound there; one line says which node, from which checkpoint, and how many env
steps are redone. A node's own exception (not a lost process) is not recovered: it would come again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import Any

from dmpo.lifecycle.checkpoints import TrainingCheckpoints, newest_steps, read_state
from dmpo.lifecycle.interrupts import abortable, as_signalled, interrupt_on_signals
from dmpo.lifecycle.schedule import Due
from dmpo.reporting.progress import Progress
from dmpo.reporting.trackers import without_secrets
from dmpo.run.distributed.acting_nodes import warn
from dmpo.run.distributed.cluster import ray_cluster
from dmpo.run.distributed.common import get_quietly
from dmpo.run.distributed.health import wait_for_fate
from dmpo.run.distributed.node_errors import describe, is_transient
from dmpo.run.distributed.options import DistributedResult, NodeFailure, ProgramOptions
from dmpo.run.distributed.placement import PlacementError
from dmpo.run.distributed.program import DistributedProgram
from dmpo.run.executor import RunSuspended

__all__ = ["RayExecutor"]


class RayExecutor:
    """Trains a `Run` on Ray (module docstring)."""

    def __init__(self, run: Any, *, network_factory: Any = None) -> None:
        self.run = run
        self._network_factory = network_factory
        self._stack = contextlib.ExitStack()
        self.program: DistributedProgram | None = None
        self.result: DistributedResult | None = None
        self._final_steps: int | None = None
        self._bar: Progress | None = None
        self._shown = _Shown()
        self._program_started = False  # program.start() was entered: its nodes (some, maybe) exist
        self.recoveries: list[dict[str, Any]] = []  # run.json's entry of each lost learner, replay, counter

    def start(self) -> None:
        run, cluster = self.run, self.run.cluster
        # Built and checked before the cluster starts: the task, the checkpoint, the options.
        self.program = DistributedProgram(run, options=cluster.options, network_factory=self._network_factory)
        # Starting Ray's servers and the nodes may take a minute on a loaded machine: a signal cuts it
        # short (a cluster cut in half is shut down, nodes created are stopped by `close`), so that a stop
        # keeps to --stop-timeout from the signal, whatever the moment.
        with abortable(), _named_signals():
            with without_secrets():  # Ray's processes inherit the environment they are started from
                self._stack.enter_context(ray_cluster(cluster.address, num_cpus=cluster.num_cpus,
                                                      keep_files=cluster.keep_ray_logs))
            self._stack.enter_context(interrupt_on_signals())  # Ray installs its own handler
            self._program_started = True
            self.program.start()
        # As in one process: the live line only with `progress`, evaluation lines always.
        self._bar = self._stack.enter_context(Progress(run.config.steps, enabled=not run.quiet,
                                                       live=run.progress))

    def train(self) -> None:
        on_poll = self.run.cluster.on_poll
        assert self.program is not None
        with _named_signals():
            while True:
                try:
                    while not self.program.poll():
                        self._show()
                        if on_poll is not None:
                            on_poll(self.program)
                        time.sleep(self.program.options.poll_seconds)
                    break
                except NodeFailure as failure:
                    lost: NodeFailure | None = failure
                    while lost is not None:  # a node lost again while the new program starts
                        lost = self._recover(lost)
        self._show()
        self._final_steps = self.program.settle()

    def _recover(self, failure: NodeFailure) -> NodeFailure | None:
        """A new program from the newest checkpoint in place of one that lost a node it cannot run
        without (module docstring); re-raises `failure` when that is not to be recovered, and returns
        the failure of a new program that lost a node while it started."""
        program = self.program
        assert program is not None
        limit = program.options.max_node_restarts
        lost = failure.node in ("learner", "replay", "counter") and failure.error is not None and (
            is_transient(failure.error) or isinstance(failure.error, TimeoutError))
        if not lost or len(self.recoveries) >= limit:
            raise failure
        reached = program.env_steps_now(timeout=2.0)
        host = get_quietly(program.hosts[failure.node], 0.5) if failure.node in program.hosts else None
        program.abandon()
        wait_for_fate(host, failure.error)  # a replacement must not go to a machine being lost
        checkpoint = TrainingCheckpoints(self.run.path / "checkpoints").latest()
        self.recoveries.append(self.run.continue_from(checkpoint, reached, {
            "node": failure.node, "error": describe(failure.error)}))
        origin = f"checkpoint {checkpoint.name}" if checkpoint is not None else "step 0 (no checkpoint yet)"
        warn(f"the {failure.node} node was lost ({describe(failure.error)}); the run goes on from {origin}, "
             f"{self.recoveries[-1]['env_steps_redone']} env steps to redo (recovery {len(self.recoveries)} "
             f"of at most {limit})")
        self._program_started = False  # its nodes are gone: nothing for a stop to stop until a start
        self._shown = _Shown()
        with abortable():
            try:
                self._start_again(program.options, failure.node)
            except NodeFailure as again:
                return again
            except Exception as error:
                if not is_transient(error):
                    raise
                return NodeFailure(f"the program could not start again: {describe(error)}", node="learner",
                                   error=error)
        return None

    def _start_again(self, options: ProgramOptions, node: str) -> None:
        """A new program, started once the cluster can hold it (a lost machine's replacement may still
        be joining), up to `options.node_restart_deadline_seconds`; past that, `RunSuspended`."""
        seconds = options.node_restart_deadline_seconds
        deadline, said = time.monotonic() + seconds, False
        # Built once (the task probed, the checkpoint read); its start checks the cluster first.
        self.program = DistributedProgram(self.run, options=options, network_factory=self._network_factory)
        while True:
            try:
                self._program_started = True
                self.program.start()
                return
            except PlacementError as short:
                self._program_started = False
                if time.monotonic() >= deadline:
                    raise RunSuspended(f"the {node} node could not be replaced within {seconds:g} s "
                                       "(node_restart_deadline_seconds), the run stopped at its newest "
                                       f"checkpoint: {short}") from None
                if not said:
                    warn(f"waiting up to {seconds:g} s for the cluster to hold the {node}'s replacement: "
                         f"{short}")
                    said = True
                time.sleep(options.poll_seconds)

    def env_steps(self) -> int:
        if self._final_steps is not None:
            return self._final_steps
        if self.result is not None:
            # A stopped run continues from its newest checkpoint: the actors' own count went on while the
            # learner wrote its final one (and a boundary they passed meanwhile may have been saved too).
            folder = self.run.path / "checkpoints"
            if self.result.status != "finished" and folder.is_dir():
                paths = TrainingCheckpoints(folder).paths()
                if paths:
                    return read_state(paths[-1]).env_steps
            return int(self.result.counts.get("actor_steps", 0))
        if not self._program_started:  # before a program starts, or between two (a recovery): the steps
            return newest_steps(self.run.path / "checkpoints") or 0  # the run continues from
        return int(self.program.counts.get("actor_steps", 0)) if self.program is not None else 0

    def evaluate(self, film: bool) -> None:
        """The final round, labelled with the final env steps; it runs while the nodes stop."""
        assert self.program is not None
        self.program.request_final_evaluation(self.env_steps(), film=film)

    def finish(self, final: Due) -> tuple[str, str | None]:
        del final  # the learner writes the final checkpoint when it stops, unless it holds these steps
        result = self._stop("finished")
        return result.status, result.stop_reason if result.status != "finished" else None

    def interrupted(self) -> None:
        if self.result is None and self._program_started:
            self._stop("interrupted")

    def close(self, failed: bool = False) -> None:
        try:
            if self.result is None and self._program_started:
                self._stop("failed" if failed else "interrupted")
        finally:
            self._stack.close()

    def summary(self) -> dict[str, Any]:
        result = self.result
        if result is None:
            return {"env_steps": 0, "last_eval": None, "counts": {}}
        last = result.last_evaluation or (result.evaluation_rows[-1] if result.evaluation_rows else None)
        return {"env_steps": int(result.counts.get("actor_steps", 0)), "last_eval": last,
                "counts": result.counts, "wall_seconds": result.wall_seconds, "result": result,
                "recoveries": list(self.recoveries)}

    def _stop(self, status: str) -> DistributedResult:
        assert self.program is not None
        self.result = self.program.stop(status)
        if self._bar is not None:  # the final evaluation round runs while the program stops
            _show_rounds(self.program, self._bar, self._shown)
        return self.result

    def _show(self) -> None:
        """Updates the status line from the shared counts and prints finished evaluation rounds."""
        program, bar = self.program, self._bar
        assert program is not None and bar is not None
        counts = program.counts
        _show_rounds(program, bar, self._shown)
        returns, program.episode_returns[:] = list(program.episode_returns), []
        for value in returns[:-1]:  # each episode's return, as one process records them
            bar.update(last_return=value)
        bar.update(env_steps=int(counts.get("actor_steps", 0)), episodes=int(counts.get("actor_episodes", 0)),
                   last_return=returns[-1] if returns else None,
                   learner_steps=int(counts.get("learner_steps", 0)))


@contextlib.contextmanager
def _named_signals() -> Any:
    """A SIGTERM that lands inside `ray.get` comes out as a bare KeyboardInterrupt: named again."""
    try:
        yield
    except KeyboardInterrupt as error:
        named = as_signalled(error)
        if named is error:
            raise
        raise named from None


@dataclasses.dataclass
class _Shown:
    """How many evaluation rows the driver has printed."""

    rows: int = 0


def _show_rounds(program: DistributedProgram, bar: Any, shown: _Shown) -> None:
    """Prints each evaluation row that reached the driver as one line: the steps and the score its row in
    logs/evaluator/logs.csv holds (a round lost with its node has no row, and no line)."""
    rows = program.evaluation_rows
    for row in rows[shown.rows:]:
        steps = row.get("actor_steps")
        bar.evaluation_score(None if steps is None else int(steps), float(row["return_mean"]),
                             float(row.get("return_std", 0.0)), max(program.config.eval_episodes, 1))
    shown.rows = len(rows)
