"""The distributed program: build the nodes on Ray, watch them, stop them (algorithm.md §7).

The Ray executor (`executor.RayExecutor`) drives it for a `Run` (`dmpo.run.run`), which opened the
run's folder, decides the sequence and writes the status; tests and tools drive it the same way,
pass by pass: `DistributedProgram(run)`, `start()`, `poll()` (one monitoring pass, about once a
second), `settle()` and `stop()`. The run is its `TrainConfig`, read as one process reads it
(docs/distributed.md): `steps`, `eval_every`, `checkpoint_every` and `video_every` in environment steps,
checked by the acting nodes at their episode ends with the shared count (the counter service holds a
copy of the run's schedule, asks the learner for the variables a due round scores and has a due
checkpoint written); `keep_checkpoints`, `save_replay`, `DMPOConfig.checkpoint` as in one process.
`ProgramOptions` holds the layout-only knobs and the optional wall-clock periods.

Artifacts, as in one process: the evaluator writes one row per round (the local trainer's columns);
each row reaches the driver once (`_on_evaluation`: the policy snapshot, the callbacks). Budget: the
actors stop themselves once the shared `actor_steps` reaches `steps`, so a run ends with fewer than
`steps + actors × longest episode` environment steps; `ProgramOptions.max_learner_steps` must be a
multiple of `sgd_steps_per_call`, so the learner stops exactly there.

Monitoring, per pass: the learner's, replay node's and counter's health (a lost one ends the program
with `NodeFailure`, which the executor recovers from); the actors' and the evaluator's `run()` calls
(a dead actor is replaced with a new seed, up to `max_actor_restarts`: `acting_nodes`); the rounds,
sent one at a time (`evaluations`); the counter totals; the replay table's counters (in the result).

Stopping fits a scheduler's grace period (SLURM waits 30 s between SIGTERM and SIGKILL): the learner
writes its final checkpoint first; meanwhile the actors stop (flushing their writers and counts) and
the evaluator runs a finished run's final round; all share one deadline (`stop_timeout_seconds`), except
that a run that finished its budget then waits for its rounds up to `final_evaluation_timeout_seconds`.
Then the replay table is closed and every node killed. A periodic checkpoint that takes long delays
the next one; it is never taken for a dead learner. Callbacks and a tracker run in the driver
(`driver_events`); a callback's stop ends the run like the step limit, without another round.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from dmpo.agent.builder import DMPOBuilder, NetworkFactory
from dmpo.envs import make_environment_spec
from dmpo.lifecycle.interrupts import stopping_since
from dmpo.run.distributed.acting_nodes import ActingNodes, warn
from dmpo.run.distributed.common import NodeSettings, call_quietly, get_quietly, kill
from dmpo.run.distributed.counter_service import RemoteCounterService
from dmpo.run.distributed.driver_events import DriverEvents
from dmpo.run.distributed.evaluations import EvaluationRounds
from dmpo.run.distributed.health import HealthChecks, NodeDown, failure_message, host_of, lost_node
from dmpo.run.distributed.learner_node import make_learner_node
from dmpo.run.distributed.node_errors import describe
from dmpo.run.distributed.options import DistributedResult, NodeFailure, ProgramOptions, check_program
from dmpo.run.distributed.placement import PendingNodes, check_placement, program_demands
from dmpo.run.distributed.program_views import ProgramViews
from dmpo.run.distributed.replay_service import ReplayServiceConfig, make_replay_service
from dmpo.run.distributed.run_files import replay_to_restore, restored_state, rewind_node_logs
from dmpo.utils.seeds import ROLE_LEARNER, ROLE_REPLAY, node_seed


class DistributedProgram(ProgramViews):
    """One distributed DMPO run on an initialised Ray cluster (see the module docstring).

    `run` is an opened `dmpo.run.run.Run` (`Run(config, ...).open()`): its final config, prepared task
    (each node calls the factory with its own seed), folder, checkpoint to continue from, schedule and
    callbacks. `network_factory` (`env_spec -> DMPONetworks`, default: the config's networks) is used by
    every node; `options` default to the run's `ClusterSettings.options`.
    """

    def __init__(self, run: Any, *, options: ProgramOptions | None = None,
                 network_factory: NetworkFactory | None = None, use_gpu: bool | None = None) -> None:
        config = run.config
        self.options = options or run.cluster.options or ProgramOptions()
        check_program(config, self.options)  # before anything of the run is touched
        self.run = run
        self.config = config
        self.env_factory = run.env_factory
        # Absolute before anything reaches a node: a node resolves a relative path against the folder its
        # `ray start` ran in, which would scatter the run's files over the cluster.
        self.run_dir = Path(run.path).absolute()
        self.seed = config.seed
        self.resume = run.resume
        self._use_gpu = use_gpu
        self.learner: Any = None
        self.replay: Any = None
        self.counter: Any = None
        self._learner_ref: Any = None
        self.evaluation_rows: list[dict[str, Any]] = []
        self._snapshot_ref: Any = None
        self.counts: dict[str, Any] = {}
        self.replay_history: list[tuple[float, Any]] = []
        self._learner_result: dict[str, Any] | None = None
        self._started_at: float | None = None
        self._settings: NodeSettings | None = None
        self._health: HealthChecks | None = None
        self._save_ref: Any = None
        self._checkpoint_wanted = False  # a boundary passed while the previous checkpoint was written
        self._last_periodic_save: str | None = None
        self._last_save_time = 0.0
        self.events = DriverEvents(self.run_dir, config, callbacks=run.callbacks,
                                   snapshot_metadata=run.snapshot_metadata,
                                   checkpointed=run.schedule.checkpointed)
        self._pending: PendingNodes | None = None
        # Checked here, before any cluster starts: the checkpoint and the environment.
        self._latest_checkpoint = None if run.checkpoint is None else Path(run.checkpoint).absolute()
        probe = self.env_factory(self.seed)
        self.builder = DMPOBuilder(config.agent, make_environment_spec(probe),
                                   network_factory=network_factory)
        probe.close()
        restored = restored_state(self._latest_checkpoint)
        self._wall_offset = restored.wall_seconds if restored is not None else 0.0
        self.rounds = EvaluationRounds(self._on_evaluation, held=lambda: self.events.stop_requested,
                                       count=restored.evaluations if restored is not None else 0,
                                       on_request=run.schedule.evaluated)
        self.nodes = ActingNodes(config, self.options, self.seed, on_evaluator=self.rounds.attach,
                                 check_critical=self._raise_if_critical_node_lost)
        self.episode_returns: list[float] = []  # training episodes' returns not yet shown (status line)
        self._due_ref: Any = None  # the counter service's `take_due` call in flight
        self.hosts: dict[str, Any] = {}  # the Ray node ids the learner and the replay node run on (refs)

    # ---------------------------------------------------------------------------------------- start

    def start(self) -> None:
        """Prepares the run directory and starts every node."""
        self._started_at = time.monotonic()
        self._last_save_time = self._started_at
        config, opts = self.config, self.options
        use_gpu = self._use_gpu if self._use_gpu is not None else ray.cluster_resources().get("GPU", 0) >= 1
        evaluator = bool(config.eval_every or opts.evaluator_period_seconds is not None)
        # Before any node starts: Ray would leave a node it cannot place waiting, silently.
        demands = program_demands(actors=config.actors, evaluator=evaluator, use_gpu=use_gpu, options=opts)
        if self.resume:  # node log rows past the checkpoint would be logged twice
            rewind_node_logs(self.run_dir, self._latest_checkpoint)
        replay_path = replay_to_restore(self._latest_checkpoint, config)
        check_placement(demands, ray.cluster_resources())
        self._settings = NodeSettings(
            builder=self.builder, env_factory=self.env_factory, run_dir=str(self.run_dir), seed=self.seed,
            variable_update_period=opts.variable_update_period, log_time_delta=opts.log_time_delta,
            num_envs=config.num_envs, wall_origin=time.time() - self._wall_offset)
        # The counters are the driver's: on a multi-node cluster, pin them to the driver's node, so that
        # losing a worker node (and the actors on it) never takes the run's counts with it.
        driver_node = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        # The acting nodes check the run's schedule (a copy: the driver's is the `Run`'s) with the shared
        # count at their episode ends; the counter service holds it (videos included: a round is filmed
        # when its check says so, as in one process).
        self.counter = RemoteCounterService.options(scheduling_strategy=driver_node).remote(
            copy.deepcopy(self.run.schedule), evaluations=self.evaluations)
        replay_config = ReplayServiceConfig(
            seed=node_seed(self.seed, ROLE_REPLAY),
            max_concurrent_inserts=config.actors * opts.max_inserts_in_flight + 1,
            max_concurrent_samples=opts.samples_in_flight + 1)
        self.replay = make_replay_service(self.builder, replay_config, restore_path=replay_path,
                                          resources=opts.replay_resources)
        self.learner = make_learner_node(
            self._settings, node_seed(self.seed, ROLE_LEARNER), self.replay, self.counter, use_gpu=use_gpu,
            keep_checkpoints=config.keep_checkpoints, save_replay=config.save_replay,
            resume=self._latest_checkpoint is not None,
            replay_restored=replay_path is not None, samples_in_flight=opts.samples_in_flight,
            publish_interval=opts.variable_publish_seconds, resources=opts.learner_resources)
        self._learner_ref = self.learner.run.remote(opts.max_learner_steps)
        ray.get(self.counter.set_learner.remote(self.learner))  # before any actor checks the schedule
        self.hosts = {"learner": self.learner.__ray_call__.remote(host_of),  # asked now, read if lost
                      "replay": self.replay.__ray_call__.remote(host_of)}
        self.nodes.start(self._settings, self.learner, self.replay, self.counter, evaluator=evaluator)
        self._pending = PendingNodes(self.nodes.placed_nodes, demands)
        self.events.start(self.run.folder)
        self._health = HealthChecks(
            {"learner": self.learner.ping.remote, "replay": self.replay.stats.remote,
             "counter": self.counter.get_counts.remote},
            startup_timeout=opts.startup_timeout_seconds, health_timeout=opts.health_timeout_seconds)

    # ----------------------------------------------------------------------------------------- poll

    def poll(self) -> bool:
        """One monitoring pass (module docstring); True once a step limit is reached."""
        if self._learner_finished():
            return True
        self._check_critical_nodes()
        self.nodes.check()
        for line in self._pending.poll() if self._pending is not None else ():
            warn(line)
        self.rounds.rows.poll()
        self.events.poll(self._save_ref)
        if self.events.stop_requested:
            return True
        self._schedule()
        return self.counts.get("actor_steps", 0) >= self.config.steps

    def _schedule(self) -> None:
        """Checkpoints and evaluation rounds at the environment-step boundaries the acting nodes found
        due (`dmpo.lifecycle.schedule`, held by the counter service), and the wall-clock periods."""
        self._take_due(timeout=0.0)
        period = self.options.checkpoint_period_seconds
        if period is not None and time.monotonic() - self._last_save_time >= period:
            self.request_checkpoint()
        elif self._checkpoint_wanted:  # a save came due while the previous one was still written
            self.request_checkpoint()

    def _take_due(self, timeout: float | None, evaluations: bool = True,
                  wait: Callable[[], float] | None = None) -> None:
        """Acts on the events the counter service collected (one `take_due` call in flight; `timeout`
        None: wait for every event due so far, when stopping, each wait at most `wait()` seconds (the
        stop's deadline; default the stop timeout); `evaluations` False: report the checkpoints written
        but queue no more rounds)."""
        if self.counter is None:
            return

        def seconds() -> float:
            return wait() if wait is not None else self.options.stop_timeout_seconds

        if timeout is None:  # the call in flight (sent earlier) and one more for what came since
            calls = [ref for ref in (self._due_ref, self.counter.take_due.remote()) if ref is not None]
            answers = [get_quietly(ref, seconds()) or ([], []) for ref in calls]
        else:
            if self._due_ref is None:
                self._due_ref = self.counter.take_due.remote()
            ready, _ = ray.wait([self._due_ref], timeout=timeout)
            if not ready:
                return
            try:
                answers = [ray.get(self._due_ref)]
            except Exception as error:
                raise self._failure("counter", error) from error
        self._due_ref = None
        events = sorted((event for answer in answers for event in answer[0]), key=lambda event: event[1])
        for _, returns in answers:
            self.episode_returns.extend(returns)
        for event, steps, refs, film in events:
            if event == "evaluation" and evaluations:
                self.rounds.request(steps, refs, film=film)
            elif event == "checkpoint":  # written already, at the boundary (counter_service)
                self._last_save_time = time.monotonic()
                try:
                    path = ray.get(refs[0], timeout=seconds())
                except Exception as error:
                    if timeout is None:  # stopping: the final checkpoint decides the run's status
                        continue
                    raise self._failure("learner", error) from error
                self.events.checkpoint_written(path)

    def request_checkpoint(self) -> None:
        """Asks the learner for a checkpoint, one at a time: while the previous one is still being
        written (a large replay table, a slow disk), this one waits for a later pass; the learner's
        health is what its health checks say, not how long a save takes. None is written at or past
        the step budget: the final checkpoint follows (`dmpo.lifecycle.schedule`)."""
        if self._save_ref is not None:
            ready, _ = ray.wait([self._save_ref], timeout=0)
            if not ready:
                self._checkpoint_wanted = True
                return
            try:
                ray.get(self._save_ref)
            except Exception as error:
                raise self._failure("learner", error) from error
        self._checkpoint_wanted = False
        self._save_ref = self.learner.save.remote(self.evaluations, before_steps=self.config.steps)
        self._last_save_time = time.monotonic()

    def _learner_finished(self) -> bool:
        ready, _ = ray.wait([self._learner_ref], timeout=0)
        if not ready:
            return False
        try:
            self._learner_result = ray.get(self._learner_ref)
        except Exception as error:
            # The learner, sampling from the replay node and counting on the counter, is usually the
            # first to notice that one of them is gone: that one is named.
            lost = lost_node({"replay": self.replay, "counter": self.counter})
            raise self._failure(lost[0] if lost else "learner", error) from error
        return True

    def _check_critical_nodes(self) -> None:
        """Non-blocking health checks (`dmpo.run.distributed.health`): answered, failed or overdue."""
        assert self._health is not None, "start() first"
        try:
            answers = self._health.poll()
        except NodeDown as down:
            raise self._failure(down.node, down.error) from down.error
        if "replay" in answers:
            self.replay_history.append((self.elapsed(), answers["replay"]))
        if "counter" in answers:
            self.counts = answers["counter"]

    def _raise_if_critical_node_lost(self) -> None:
        if lost := lost_node({"learner": self.learner, "replay": self.replay, "counter": self.counter}):
            raise self._failure(*lost) from lost[1]

    def _failure(self, node: str, error: BaseException) -> NodeFailure:
        return NodeFailure(failure_message(node, error, self.run_dir), node=node, error=error)

    def _on_evaluation(self, index: int, row: dict[str, Any]) -> None:
        """Every evaluation row reaches the driver here, once (the same dict the evaluator logged);
        `index` numbers the rows of the current evaluator node (its kept parameters are found by it)."""
        self.evaluation_rows.append(row)
        self.save_snapshot()
        self.events.on_evaluation(self.evaluator, index, row)

    def save_snapshot(self, wait: bool = False) -> None:
        """Asks the learner for the policy snapshot (one at a time); `wait` for it to be written."""
        get_quietly(self._snapshot_ref, self.options.stop_timeout_seconds)
        # The learner adds its own counts (it knows the steps of the parameters it writes).
        self._snapshot_ref = self.learner.save_snapshot.remote(self.run.snapshot_metadata())
        if wait:
            get_quietly(self._snapshot_ref, self.options.stop_timeout_seconds)
            self._snapshot_ref = None

    # ----------------------------------------------------------------------------------------- stop

    def settle(self) -> int:
        """A finished run's last check points: acts on what the last episodes found due (checkpoints
        written are reported; rounds are queued unless a callback stopped the run) and returns the
        final environment steps, for the `Run`'s final events."""
        timeout = self.options.stop_timeout_seconds
        rounds = self.evaluator is not None and not self.events.stop_requested
        self._take_due(timeout=None, evaluations=rounds, wait=lambda: timeout)
        if self.counter is not None:  # the acting nodes' checks: the video boundaries they crossed
            videos = get_quietly(self.counter.video_boundaries.remote(), timeout)
            if videos is not None:  # the final events go on from there (one crossed since: filmed)
                self.run.schedule.take_video_state(*videos)
        return self.env_steps_now(timeout)

    def request_final_evaluation(self, steps: int, film: bool) -> None:
        """Queues the final round the `Run` asked for (sent while the program stops)."""
        if self.evaluator is not None:
            self.rounds.request(steps, film=film)

    def stop(self, status: str = "finished", reason: str | None = None) -> DistributedResult:
        """Stops every node (module docstring) and returns the result; safe after a failure. The
        result's status is `status`, or "failed" when the learner's final checkpoint failed."""
        # After the deadline only what has answered counts; a signal's stop counts from the signal (a
        # scheduler's grace period does), not from the moment the start-up it cut short gave way.
        left = _seconds_left(self.options.stop_timeout_seconds, since=stopping_since())
        if self.learner is not None:  # the final checkpoint starts first: it is what a signal is for
            call_quietly(self.learner, "stop", self.evaluations)
            self._snapshot_ref = None
            self.save_snapshot()  # the final policy, as the local trainer writes it
        self.nodes.stop_actors()  # they flush their writers and push their counts
        # A finished run's rounds are all sent; otherwise the run ends after the round under way.
        self.rounds.finish(send_queued=status == "finished" and not self.events.stop_requested)
        status, reason = self._wait_for_learner(status, reason, left)  # the one that matters most
        if status != "finished":  # checkpoints the last episodes wrote are reported; no more rounds
            self._take_due(timeout=None, evaluations=False, wait=left)
        evaluations_left = left
        if status == "finished" and not self.events.stop_requested:  # its rounds get a window of their own
            evaluations_left = _seconds_left(self.options.final_evaluation_timeout_seconds)
        self.nodes.collect(left, evaluator_left=evaluations_left)
        self.rounds.rows.drain(evaluations_left())
        self.events.finish(status, self._save_ref, self._last_periodic_save)
        counts = get_quietly(self.counter.get_counts.remote(), left()) if self.counter else None
        replay_stats = get_quietly(self.replay.stats.remote(), left()) if self.replay else None
        if replay_stats is not None:  # the last snapshot: a short run may end before a pass saw one
            self.replay_history.append((self.elapsed(), replay_stats))
        frames = get_quietly(self.replay.frame_stats.remote(), left()) if self.replay else None
        call_quietly(self.replay, "close")
        self._kill_nodes()
        if reason is None:
            reason = self.events.stop_reason  # a callback's stop (e.g. --stop-at-return)
        return DistributedResult(
            status=status, counts=dict(counts or self.counts), learner=dict(self._learner_result or {}),
            actors=sorted(self.nodes.actor_results, key=lambda r: r["index"]),
            actor_restarts=self.actor_restarts, evaluator_returns=list(self.nodes.evaluator_returns),
            evaluation_rows=list(self.evaluation_rows), replay=replay_stats,
            replay_history=list(self.replay_history), replay_frames=frames, evaluations=self.evaluations,
            wall_seconds=self.elapsed(), run_dir=str(self.run_dir),
            resumed_from=(self._learner_result or {}).get("resumed_from"), stop_reason=reason,
            last_evaluation=self.events.last_evaluation)

    def abandon(self) -> None:
        """Kills every node at once, saving nothing: a recovery continues from the newest checkpoint."""
        self._kill_nodes()
        self.events.finish("failed", None, None)

    def _kill_nodes(self) -> None:
        self.nodes.kill()
        for handle in [self.learner, self.replay, self.counter]:
            kill(handle)

    def _wait_for_learner(self, status: str, reason: str | None,
                          left: Any) -> tuple[str, str | None]:
        """Waits (until the deadline) for the final snapshot and checkpoint; a failed checkpoint makes
        the run "failed", one still unwritten at the deadline is said in the reason."""
        self._last_periodic_save = get_quietly(self._save_ref, left())  # the final one waits for it
        if self._learner_result is None and self._learner_ref is not None:
            try:
                self._learner_result = ray.get(self._learner_ref, timeout=left())
            except ray.exceptions.GetTimeoutError:
                reason = reason or (f"the final checkpoint was not written within the stop timeout "
                                    f"({self.options.stop_timeout_seconds:g} s); the previous one is kept")
            except Exception as error:  # e.g. its final save hit a full disk: no final checkpoint
                if status != "failed":
                    status, reason = "failed", f"the learner's final checkpoint failed: {describe(error)}"
        get_quietly(self._snapshot_ref, left())
        self._snapshot_ref = None
        return status, reason


def _seconds_left(timeout: float, since: float | None = None) -> Callable[[], float]:
    """Seconds left until `timeout` seconds from `since` (a `time.monotonic()`; default now), 0 once past."""
    deadline = (time.monotonic() if since is None else since) + timeout
    return lambda: max(deadline - time.monotonic(), 0.0)
