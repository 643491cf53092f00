"""The `Run`: one training run's life, in either mode, from its folder to its summary.

This module is the only place the sequence is written; the two modes are executors beneath it
(`dmpo.run.executor.Executor`: `dmpo.run.local.LocalExecutor` in this process,
`dmpo.run.distributed.executor.RayExecutor` on Ray) and decide nothing about *when*:

1. `Run(...)` checks the request; nothing is touched yet.
2. `open()`: on resume, takes the run's lock and applies the resume rules once
   (`dmpo.lifecycle.resume`); prepares the task (builds and checks it, resolves an `auto` critic
   support: `dmpo.lifecycle.task_setup`); creates the run folder (a new run) or records the resume.
3. `train()`: with the lock held for the whole run and SIGINT, SIGTERM and SIGHUP taken as one stop
   path (`dmpo.lifecycle.interrupts`), the executor starts (status `starting`, then `running`,
   `on_train_start`) and trains. At each of its check points it asks `check(env_steps)` what is due
   (`dmpo.lifecycle.schedule`: evaluations, checkpoints and the video rule, one for both modes).
4. The final events (`RunSchedule.final_events`): the final evaluation (filmed when a video boundary
   is pending), the snapshot and the final checkpoint, under `critical()` so that a signal waits
   for them.
5. The status, only through `RunStatus` (finished, interrupted or failed, with the reason), the
   summary and `on_train_end`.

A signal ends the run `interrupted` after the executor wrote what a stop writes (a checkpoint), and the
interrupt names the env steps of the newest checkpoint (where a resume continues). A signal taken
only once the final events are written (it came during them) ends the run with `finish`'s status,
`finished`. A resume of a run whose checkpoint holds its budget but that did not finish
(`ResumePlan.only_final_events`) trains nothing: it writes the final events that are missing (the
final evaluation unless the evaluator log has a row of these steps) and finishes. An error ends it
`failed` with the error's first line. Every evaluation environment is seeded by the run's
seed and the evaluation's index (`dmpo.utils.seeds.evaluation_seed`) in both modes.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dmpo.config import ConfigError, TrainConfig
from dmpo.lifecycle.callbacks import Callback, CallbackList, RunEvents, default_callbacks
from dmpo.lifecycle.checkpoints import newest_steps, read_state
from dmpo.lifecycle.directory import RunDirectory, check_run_path, new_run_path
from dmpo.lifecycle.interrupts import (
    annotate,
    critical,
    interrupt_on_signals,
    starting_up,
    training_started,
    when_abandoned,
)
from dmpo.lifecycle.lock import run_lock
from dmpo.lifecycle.resume import NoRunError, ResumePlan, apply_resume, plan_resume
from dmpo.lifecycle.schedule import Due, RunSchedule
from dmpo.lifecycle.status import RunStatus
from dmpo.lifecycle.task_setup import prepare_task
from dmpo.reporting.trackers import check_installed
from dmpo.run.executor import ClusterSettings, Executor, RunSuspended

__all__ = ["ClusterSettings", "Run", "train"]


class Run:
    """One training run (module docstring).

    Args:
      config: the run; `config.actors > 0` trains on Ray.
      run_dir: the run folder (default: a new `runs/<timestamp>`); required with `resume`.
      resume: continue `run_dir` from its newest checkpoint, with `config`'s resumable fields.
      env_factory: `factory(seed)` returning a gymnasium.Env or a dm_env.Environment (default: the
        config's task); its name is recorded as `config.env`.
      networks: the agent's networks (one process only).
      network_factory: `factory(env_spec) -> DMPONetworks` for every Ray node (distributed only).
      callbacks: `dmpo.callbacks.Callback`s; distributed, they run in this (the driver's) process.
      progress: the live progress line on a terminal; `quiet`: nothing on the terminal.
      cluster: Ray settings of a distributed run (address, CPUs, node layout, stop timeout).
    """

    def __init__(self, config: TrainConfig, run_dir: str | Path | None = None, *, resume: bool = False,
                 env_factory: Callable[[int], Any] | None = None, networks: Any = None,
                 network_factory: Callable[[Any], Any] | None = None, callbacks: Sequence[Callback] = (),
                 progress: bool = True, quiet: bool = False, cluster: ClusterSettings | None = None) -> None:
        if not isinstance(config, TrainConfig):
            raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
        if resume and not config.agent.checkpoint:
            raise ConfigError("cannot resume: DMPOConfig.checkpoint is False, so this run writes no "
                              "checkpoints")
        if resume and run_dir is None:
            raise ValueError("resume=True needs the run directory to resume")
        if env_factory is not None and not callable(env_factory):
            raise TypeError(f"env_factory must be callable(seed) -> environment, got {env_factory!r}")
        if networks is not None and config.actors:
            raise ConfigError("train(networks=...) is single-process only; with actors > 0 pass a "
                              "network_factory to dmpo.run.distributed.run_distributed")
        if network_factory is not None and not config.actors:
            raise ConfigError("network_factory builds the networks of Ray nodes; it needs actors > 0 "
                              "(one process: pass networks=...)")
        self.config = config
        self.distributed = bool(config.actors)
        self.resume = resume
        self._run_dir = None if run_dir is None else Path(run_dir)
        self._env_factory = env_factory
        self._networks = networks
        self._network_factory = network_factory
        self._user_callbacks = tuple(callbacks)
        self.progress = progress and not quiet
        self.quiet = quiet
        self.cluster = cluster or ClusterSettings()
        self.plan: ResumePlan | None = None
        self.folder: RunDirectory | None = None
        self.env_factory: Any = None  # the prepared task's factory, once open
        self.checkpoint: Path | None = None  # the checkpoint a resumed run continues from
        self.schedule: RunSchedule | None = None
        self.callbacks: CallbackList | None = None
        self.status: RunStatus | None = None
        self._lock = contextlib.ExitStack()

    # ---------------------------------------------------------------------------------------- open

    @property
    def path(self) -> Path:
        assert self.folder is not None, "open() first"
        return self.folder.path

    def open(self) -> ResumePlan | None:
        """Step 2 of the module docstring; returns the resume plan (None: a new run). A plan with
        `nothing_to_do` changes nothing: `train()` then returns at once."""
        check_installed(self.config.track)  # a missing tracker package: before anything starts
        if self.resume:
            assert self._run_dir is not None
            if not self._run_dir.is_dir():
                raise NoRunError(f"cannot resume {self._run_dir}: no such run directory")
            check_run_path(self._run_dir)
            self._lock.enter_context(run_lock(self._run_dir))  # before the checkpoints are read
            try:
                return self._open_resumed(self._run_dir)
            except BaseException:
                self.close()
                raise
        config, self.env_factory = prepare_task(self.config.resolved(), self._env_factory,
                                                distributed=self.distributed, quiet=self.quiet)
        path = self._run_dir if self._run_dir is not None else new_run_path()
        check_run_path(path)
        self.folder = RunDirectory.create(path, config, seed=config.seed)
        self._lock.enter_context(run_lock(self.folder.path))
        self.config = config
        self._set_up(start=0)
        return None

    def _open_resumed(self, run_dir: Path) -> ResumePlan:
        from dmpo.lifecycle.task_setup import make_factory, saved_config

        named, _ = make_factory(self.config, self._env_factory)  # an own factory's name is the env's
        self.plan = plan = plan_resume(run_dir, named)  # refuses what cannot resume, by name
        if plan.nothing_to_do:
            self.config = plan.config
            return plan
        config, self.env_factory = prepare_task(plan.config, self._env_factory, distributed=self.distributed,
                                                saved=saved_config(run_dir), quiet=self.quiet)
        apply_resume(plan)  # the allowed changes, recorded in config.json and run.json
        self.folder = RunDirectory.open(run_dir)
        self.folder.mark_resumed()  # status starting again, the resume recorded
        self.config, self.checkpoint = config, plan.checkpoint
        self._set_up(start=plan.reached)
        if plan.only_final_events and self._evaluated_at(plan.reached):  # its final evaluation was written
            assert self.schedule is not None
            self.schedule.evaluated(plan.reached)
            self.schedule.checkpointed(plan.reached)
        return plan

    def _evaluated_at(self, env_steps: int) -> bool:
        """The evaluator log holds a row labelled `env_steps` (both modes label rows `actor_steps`)."""
        assert self.folder is not None
        log = self.folder.logs_dir / "evaluator" / "logs.csv"
        if not log.is_file():
            return False
        with open(log, newline="", encoding="utf-8") as handle:
            return any(_number(row.get("actor_steps")) == env_steps for row in csv.DictReader(handle))

    def _set_up(self, start: int) -> None:
        assert self.folder is not None
        self.schedule = RunSchedule.of(self.config, start=start)
        self.callbacks = CallbackList(RunEvents(self.folder.path, self.config, resumed=self.resume),
                                      default_callbacks(self.config, self._user_callbacks))
        self.status = RunStatus(self.folder)

    def continue_from(self, checkpoint: Path | None, reached: int, lost: dict[str, Any]) -> dict[str, Any]:
        """Within the run, after its executor lost state (a distributed node that cannot be replaced
        alone) at `reached` env steps: the run goes on from `checkpoint` (None: from step 0), as a
        resume of it would, its schedule counted from there. Returns the entry run.json's "recoveries"
        gets: `lost` with the time, the checkpoint and the env steps redone."""
        start = read_state(checkpoint).env_steps if checkpoint is not None else 0
        self.checkpoint, self.resume = checkpoint, True
        self.schedule = RunSchedule.of(self.config, start=start)
        return self.folder.record_recovery({**lost, "checkpoint": checkpoint.name if checkpoint else None,
                                            "env_steps_redone": max(reached - start, 0)})

    def close(self) -> None:
        """Releases the run's lock (`train()` does at its end)."""
        self._lock.close()

    # ---------------------------------------------------------------------------------- the checks

    def check(self, env_steps: int) -> Due:
        """One check point of the run (an episode end): what is due at `env_steps` (the schedule)."""
        assert self.schedule is not None
        return self.schedule.check(env_steps)

    @property
    def stop_requested(self) -> bool:
        """A callback asked the run to stop (e.g. `--stop-at-return`)."""
        return self.callbacks is not None and self.callbacks.run.stop_requested

    def snapshot_metadata(self, **counts: int) -> dict[str, Any]:
        """What every policy snapshot of this run records besides the parameters."""
        config = self.config
        return {"env": config.env, "pixels": config.pixels, "action_repeat": config.action_repeat,
                **{key: int(value) for key, value in counts.items()}}

    # ----------------------------------------------------------------------------------- the run

    def train(self) -> dict[str, Any]:
        """Steps 3-5 of the module docstring; returns the summary (env steps, episodes, last
        evaluation, counts, run folder, stop reason, wall seconds)."""
        try:
            if self.folder is None and self.plan is None:
                self.open()
            if self.plan is not None and self.plan.nothing_to_do:
                return {"env_steps": self.plan.reached, "run_dir": str(self.plan.run_dir), "last_eval": None,
                        "stop_reason": None, "nothing_to_do": True}
            assert self.folder is not None and self.status is not None
            if not self.quiet:  # where to look, and how to continue, before the first step
                print(f"run directory {self.path} (continue it with: dmpo train --resume {self.path})",
                      flush=True)
            abandoned = functools.partial(self._end, "interrupted", "exited at once on a third Ctrl-C")
            with interrupt_on_signals(), starting_up(), when_abandoned(abandoned):
                started = time.monotonic()
                summary = self._train()
            summary.setdefault("wall_seconds", time.monotonic() - started)
            return summary
        finally:
            self.close()

    def _executor(self) -> Executor:
        if self.distributed:
            from dmpo.run.distributed.executor import RayExecutor

            return RayExecutor(self, network_factory=self._network_factory)
        from dmpo.run.local import LocalExecutor

        return LocalExecutor(self, networks=self._networks)

    def _train(self) -> dict[str, Any]:
        assert self.status is not None and self.callbacks is not None and self.schedule is not None
        executor: Executor | None = None
        try:
            executor = self._executor()
            executor.start()
        except KeyboardInterrupt as interrupt:  # before the first step: nothing new to save
            self._end("interrupted")
            annotate(interrupt, self.schedule_start, self.path)
            if executor is not None:
                executor.close()
            raise
        except BaseException as error:  # e.g. a tracker or a cluster that cannot start: the run says why
            self._end("failed", _first_line(error))
            if executor is not None:
                executor.close()
            raise
        ended: tuple[str, str | None] | None = None  # what `finish` returned
        try:
            training_started()  # a signal that came while the run started stops it here
            self.status.running()
            self.callbacks.on_train_start()
            executor.train()
            final = self.schedule.final_events(executor.env_steps(), stopped_early=self.stop_requested)
            if final.evaluation is not None:  # Ray: the round is asked for now and runs while the nodes stop
                executor.evaluate(film=final.video is not None)
            with critical():  # a signal now waits for the final files, then stops the run
                ended = executor.finish(final)
            status, reason = ended
        except KeyboardInterrupt as interrupt:  # Ctrl-C, SIGTERM, SIGHUP
            if ended is not None and ended[0] == "finished":  # it came during the final events, written
                self._end(*ended)
                annotate(interrupt, self._resumable_steps(executor.env_steps()), self.path, ended="finished")
                executor.close()
                raise
            try:
                executor.interrupted()  # what a stop writes: a checkpoint of this moment
            except BaseException as error:
                self._end("failed", _first_line(error))
                executor.close()
                raise error from interrupt
            self._end("interrupted")
            annotate(interrupt, self._resumable_steps(executor.env_steps()), self.path)
            executor.close()
            raise
        except RunSuspended as suspended:  # its newest checkpoint is where a resume continues
            self._end("interrupted", str(suspended))
            suspended.env_steps = self._resumable_steps(0)  # type: ignore[attr-defined]
            executor.close()
            raise
        except BaseException as error:
            self._end("failed", _first_line(error))
            executor.close(failed=True)
            raise
        self._end(status, reason or self.callbacks.run.stop_reason)
        try:
            executor.close()  # e.g. a private Ray cluster shuts down
        except KeyboardInterrupt as interrupt:  # the run has ended already: said with its status
            annotate(interrupt, self._resumable_steps(executor.env_steps()), self.path, ended=status,
                     closing=True)
            raise
        summary = {**executor.summary(), "run_dir": str(self.path),
                   "stop_reason": self.callbacks.run.stop_reason}
        if status == "finished":
            self.callbacks.on_train_end(summary)
        return summary

    def _resumable_steps(self, env_steps: int) -> int:
        """The env steps a resume continues from: those of the newest checkpoint, which the stop has
        just written (or, when its write was abandoned, the previous one); `env_steps` without any.
        Distributed, the shared count read after the stop may differ from what the learner saved."""
        saved = newest_steps(self.folder.checkpoints_dir) if self.folder is not None else None
        return env_steps if saved is None else saved

    @property
    def schedule_start(self) -> int:
        return self.plan.reached if self.plan is not None else 0

    def _end(self, status: str, reason: str | None = None) -> None:
        assert self.status is not None
        if self.status.ended:
            return
        with contextlib.suppress(OSError):  # a full disk must not hide the error that stopped the run
            self.status.end(status, reason)


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None


def _first_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}".splitlines()[0]


def train(config: TrainConfig, run_dir: str | Path | None = None, *, resume: bool = False,
          env_factory: Callable[[int], Any] | None = None, networks: Any = None, progress: bool = True,
          quiet: bool = False, callbacks: Sequence[Callback] = ()) -> dict[str, Any]:
    """Trains DMPO: in this process, or on a private local Ray cluster when `config.actors > 0`.

    Args:
      config: the run (`dmpo.TrainConfig`).
      run_dir: the run folder (default: a new `runs/<timestamp>`); the folder to continue with `resume`.
      resume: continue `run_dir` from its newest checkpoint; `config`'s resumable fields (steps,
        periods, actors...) may differ from the saved config, any other difference is refused.
      env_factory: `factory(seed)` returning a gymnasium.Env or a dm_env.Environment (default: the
        config's task); it goes through the task pipeline, and its name is recorded as `config.env`.
      networks: the agent's networks (`dmpo.agent.networks.DMPONetworks`; one process only).
      progress: the live progress line on a terminal.
      quiet: nothing on the terminal.
      callbacks: `dmpo.callbacks.Callback`s, called at episode ends (one process only), evaluations,
        checkpoints and the end; distributed, in this (the driver's) process.

    Returns:
      A summary: `env_steps`, `episodes`, `last_eval` (the last evaluation's row), `counts`, `run_dir`,
      `stop_reason` (a callback's stop) and `wall_seconds`.
    """
    return Run(config, run_dir, resume=resume, env_factory=env_factory, networks=networks,
               callbacks=callbacks, progress=progress, quiet=quiet).train()
