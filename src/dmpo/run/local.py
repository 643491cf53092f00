"""Training DMPO in one process: environment loop, evaluation, logs, checkpoints, snapshots, resume.

`train(config, run_dir)` is what `dmpo train` runs. The run directory (`dmpo.lifecycle.directory`)
receives the config, CSV/TensorBoard logs (`environment_loop`, `evaluator`, `learner`), checkpoints and
the policy snapshot. `train(..., resume=True)` continues from the newest checkpoint.

Exact resume. A checkpoint is taken at an episode end, so the n-step adder holds nothing. The
training environment is re-created from `(seed, episode index)` at the start of every segment between
checkpoints, in a fresh run and in a resumed one alike, so the environment's own randomness does not
need saving. With the synchronous learner, a run resumed from a checkpoint then repeats the
uninterrupted run exactly (tested). A Ctrl-C writes a final checkpoint in the middle of an episode;
resuming from that one continues training but starts a new episode. A checkpoint without replay
contents (`save_replay=False`) resumes with an empty table, and learning waits for
`min_observations` fresh observations again (`DMPO.restart_learning`).

Lockstep environments (`num_envs` = N > 1, `dmpo.agent.vector_loop`): every segment re-creates all
N environments, environment i from `segment_seed(seed, episode index, i)`. A segment ends at the first
episode end (of any environment) after a checkpoint boundary; the other environments' unfinished
episodes are dropped there (their transitions stay in replay) and start afresh in the next segment.
An uninterrupted run does the same at every checkpoint, so a resumed run again repeats it exactly.

`TrainConfig`'s periods mean the same here as in the distributed program: `checkpoint_every` and
`eval_every` are environment steps, checked at every episode end by one rule for both modes
(`dmpo.lifecycle.schedule`: the latest boundary due, labelled with the steps of that check),
`DMPOConfig.checkpoint=False` writes no checkpoint at all. A resume without a checkpoint yet (a run
stopped while it started) trains again from step 0 (`dmpo.lifecycle.resume`).
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from dmpo.agent.builder import environment_factory
from dmpo.agent.core import DMPO
from dmpo.agent.environment_loop import evaluate
from dmpo.agent.networks import DMPONetworks
from dmpo.agent.policies.snapshot import save_policy, save_policy_on_interrupt
from dmpo.agent.vector_loop import VectorEnvironmentLoop
from dmpo.config import ConfigError, TrainConfig
from dmpo.envs import EnvironmentFactory, make_environment_spec
from dmpo.lifecycle.callbacks import Callback, CallbackList, RunEvents, default_callbacks
from dmpo.lifecycle.checkpoints import CheckpointState, TrainingCheckpoints
from dmpo.lifecycle.directory import RunDirectory, new_run_path
from dmpo.lifecycle.interrupts import (
    CriticalCalls,
    annotate,
    critical,
    interrupt_on_signals,
    starting_up,
    training_started,
    when_abandoned,
)
from dmpo.lifecycle.lock import run_lock
from dmpo.lifecycle.resume import apply_resume, plan_resume
from dmpo.lifecycle.schedule import RunSchedule
from dmpo.lifecycle.status import RunStatus
from dmpo.lifecycle.task_setup import prepare_task, saved_config
from dmpo.lifecycle.videos import camera_render_fn, rendering_factory, video_path
from dmpo.reporting.logging import make_logger
from dmpo.reporting.progress import Progress
from dmpo.reporting.trackers import check_installed, open_tracker
from dmpo.types import EnvironmentSpec
from dmpo.utils.counting import Counter
from dmpo.utils.seeds import evaluation_seed, segment_seed


class LocalTrainer:
    """Owns one single-process training run; `run()` trains to `config.steps` environment steps."""

    def __init__(self, config: TrainConfig, run: RunDirectory, *, resume: bool = False,
                 env_factory: EnvironmentFactory | None = None, networks: DMPONetworks | None = None,
                 progress: bool = True, quiet: bool = False, callbacks: Sequence[Callback] = ()) -> None:
        self.config = config
        self.run_dir = run
        self.env_factory = env_factory or environment_factory(config)
        self.progress_enabled = progress and not quiet
        self._quiet = quiet
        self._progress: Progress | None = None
        probe = self.env_factory(config.seed)
        self.spec: EnvironmentSpec = make_environment_spec(probe)
        close = getattr(probe, "close", None)
        if close is not None:
            close()

        path = run.path
        self.counter = Counter(time_delta=0.0)
        self.actor_counter = Counter(self.counter, prefix="actor", time_delta=0.0)
        self.learner_counter = Counter(self.counter, prefix="learner", time_delta=0.0)
        self.eval_counter = Counter(self.counter, prefix="evaluator", time_delta=0.0)
        # Every count key exists from the first log row on (CSV columns are fixed by the first row).
        self.actor_counter.increment(steps=0, episodes=0)
        self.learner_counter.increment(steps=0, walltime=0.0)
        self.eval_counter.increment(steps=0, episodes=0)
        resumed = (TrainingCheckpoints(run.checkpoints_dir).latest_state() if resume else None) or {}
        if resume and not resumed:  # stopped before its first checkpoint: again from step 0
            resumed = {"env_steps": 0, "learner_steps": 0}
        self.callbacks = CallbackList(RunEvents(path, config, resumed=resume),
                                      default_callbacks(config, callbacks))
        self.tracker = open_tracker(config, run)
        sinks = (lambda label: [self.tracker.sink(label)]) if self.tracker else (lambda label: [])
        # The terminal shows `Progress`'s status line and short evaluation lines; the full rows go to
        # the CSV and TensorBoard logs (and the tracker) only.
        self.loop_logger = make_logger("environment_loop", path, time_delta=0.0,
                                       terminal=False, step_key="actor_steps",
                                       resume_from_step=resumed.get("env_steps"),
                                       extra_sinks=sinks("environment_loop"))
        self.eval_logger = make_logger("evaluator", path, time_delta=0.0, terminal=False,
                                       step_key="actor_steps", resume_from_step=resumed.get("env_steps"),
                                       extra_sinks=sinks("evaluator"))
        self.learner_logger = make_logger("learner", path, time_delta=1.0, terminal=False,
                                          step_key="learner_steps",
                                          resume_from_step=resumed.get("learner_steps"),
                                          extra_sinks=sinks("learner"))
        self.agent = DMPO(self.spec, config.agent, networks=networks, seed=config.seed,
                          logger=self.learner_logger, counter=self.learner_counter,
                          overlap_learner=config.overlap_learner, num_envs=config.num_envs)
        self.checkpoints = (TrainingCheckpoints(run.checkpoints_dir, keep=config.keep_checkpoints)
                            if config.agent.checkpoint else None)
        self.episodes = 0
        self.evaluations = 0
        self.last_eval: dict[str, Any] | None = None
        self.schedule = RunSchedule.of(config)  # when to evaluate and checkpoint (dmpo.lifecycle.schedule)
        self._checkpoint_due = False  # a boundary was taken: the segment ends and the checkpoint follows
        self._video_due = False  # a video boundary was taken: the next evaluation films one more episode
        self._wall_origin = time.monotonic()  # `wall_seconds` of evaluation rows counts from here
        if resume:
            try:
                self._restore()
                run.mark_resumed()  # status starting again, the resume recorded
            except BaseException:
                if self.tracker is not None:  # the tracker run was opened above: do not leave it open
                    self.tracker.close()
                raise
        self.status = RunStatus(run)  # dmpo.lifecycle.status

    # -- checkpoints ----------------------------------------------------------------------------
    def _state(self, mid_episode: bool) -> CheckpointState:
        counts = self.counter.get_counts()
        return CheckpointState(
            env_steps=int(counts.get("actor_steps", 0)), learner_steps=int(counts.get("learner_steps", 0)),
            counts=counts, num_observations=self.agent.num_observations,
            learning_starts=self.agent.learning_starts, episodes=self.episodes, evaluations=self.evaluations,
            num_actions=self.agent.actor.num_actions, pending_sgd_steps=self.agent.pending_sgd_steps,
            mid_episode=mid_episode, wall_seconds=self.wall_seconds(),
            counters={"root": self.counter.state_dict(),
                      **{name: c.state_dict() for name, c in self._children().items()}})

    def _children(self) -> dict[str, Counter]:
        return {"actor": self.actor_counter, "learner": self.learner_counter, "evaluator": self.eval_counter}

    def save_checkpoint(self, mid_episode: bool = False) -> Path | None:
        """Writes a checkpoint now (none when `DMPOConfig.checkpoint` is off); returns its folder."""
        if self.checkpoints is None:
            return None
        with self.agent.pause():
            state = self._state(mid_episode)
            table = self.agent.table if self.config.save_replay else None
            learner_state = self.agent.learner.save_state()
            path = self.checkpoints.save(state.env_steps, learner_state, state.to_json(), table)
        self.schedule.checkpointed(state.env_steps)
        self.callbacks.on_checkpoint({"path": str(path), "env_steps": state.env_steps,
                                      "learner_steps": state.learner_steps})
        return path

    def _restore(self) -> None:
        latest = None if self.checkpoints is None else self.checkpoints.latest()
        if latest is None:  # stopped before its first checkpoint: a fresh start (dmpo.lifecycle.resume)
            return
        learner_state, saved, replay = TrainingCheckpoints.load(latest, self.agent.learner.save_state())
        state = CheckpointState.from_json(saved, where=str(latest / "state.json"))
        if state.counters is None:
            raise ValueError(f"{latest} was written by the distributed program; resume it with actors > 0")
        self.agent.learner.restore_state(learner_state)
        self.counter.load_state_dict(state.counters["root"])
        for name, child in self._children().items():
            child.load_state_dict(state.counters[name])
        self.agent.num_observations = state.num_observations
        self.agent.learning_starts = state.learning_starts
        self.agent.pending_sgd_steps = state.pending_sgd_steps
        if replay is not None:
            self.agent.table.load(replay)
        else:
            self.agent.restart_learning()  # an empty table: wait for fresh observations first
        self.agent.actor.num_actions = state.num_actions
        self.agent.actor.update(wait=True)
        self.episodes = state.episodes
        self.evaluations = state.evaluations
        self._wall_origin = time.monotonic() - state.wall_seconds
        self.schedule = RunSchedule.of(self.config, start=state.env_steps)

    # -- evaluation and snapshots ---------------------------------------------------------------
    def evaluate(self) -> dict[str, Any]:
        """Runs `eval_episodes` episodes with the target policy's mean; logs and snapshots it."""
        with self.agent.pause():
            params = jax.device_put(self.agent.learner.policy_params())
        mean_fn = self._mean_fn
        seed = evaluation_seed(self.config.seed, self.evaluations)
        video = self._video_path()
        if video is None:
            env = self.env_factory(seed)
            result = evaluate(env, lambda obs: np.asarray(mean_fn(params, obs)), self.config.eval_episodes)
        else:  # the same episodes, filmed from an environment made able to render (`dmpo.lifecycle.videos`)
            env = rendering_factory(self.env_factory)(seed)
            result = evaluate(env, lambda obs: np.asarray(mean_fn(params, obs)), self.config.eval_episodes,
                              video_path=video, render_fn=camera_render_fn())
        close = getattr(env, "close", None)
        if close is not None:
            close()
        self.evaluations += 1
        eval_steps = int(round(result["length_mean"] * self.config.eval_episodes))
        counts = self.eval_counter.increment(episodes=self.config.eval_episodes, steps=eval_steps)
        row = {**{k: v for k, v in result.items() if np.isscalar(v)}, **self.counter.get_counts(), **counts,
               "wall_seconds": self.wall_seconds()}
        self.eval_logger.write(row)
        if video is not None and self.tracker is not None and video.is_file():
            self.tracker.log_video(video, "evaluator", self.env_steps())
        if self._progress is not None:
            self._progress.evaluation(self.env_steps(), list(result["episode_returns"]))
        self.save_snapshot()
        self.last_eval = row
        self.callbacks.on_evaluation(row, write_policy=lambda path: self._write_policy(path, params))
        self.schedule.evaluated(self.env_steps())
        return row

    def _video_path(self) -> Path | None:
        if not self._video_due:
            return None
        self._video_due = False
        return video_path(self.run_dir.path, self.env_steps())

    @functools.cached_property
    def _mean_fn(self) -> Any:
        return self.agent.builder.make_evaluation_policy()

    def save_snapshot(self) -> Path:
        with self.agent.pause():  # the overlapped learner donates its state's buffers on every step
            params = self.agent.learner.policy_params()
        return self._write_policy(self.run_dir.snapshots_dir / "policy.msgpack", params)

    def _write_policy(self, path: Path, params: Any) -> Path:
        counts = self.counter.get_counts()
        return save_policy(path, self.spec,
                           self.config.agent.networks, params,
                           metadata={"env": self.config.env, "pixels": self.config.pixels,
                                     "action_repeat": self.config.action_repeat,
                                     "actor_steps": int(counts.get("actor_steps", 0)),
                                     "learner_steps": int(counts.get("learner_steps", 0))})

    # -- the loop -------------------------------------------------------------------------------
    def wall_seconds(self) -> float:
        """Seconds since the run started, across resumes (the time after a run's last checkpoint
        before it was killed is not counted: that work is done again)."""
        return time.monotonic() - self._wall_origin

    def env_steps(self) -> int:
        return int(self.counter.get_counts().get("actor_steps", 0))

    def run(self) -> dict[str, Any]:
        config = self.config
        events = self.callbacks.run
        with Progress(config.steps, enabled=not self._quiet, live=self.progress_enabled) as progress:
            self._progress = progress
            try:
                training_started()  # a signal that came while the run started stops it here
                self.status.running()
                self.callbacks.on_train_start()
                while self.env_steps() < config.steps and not events.stop_requested:
                    self._run_segment()
                    if self._checkpoint_due:
                        self._checkpoint_due = False
                        self.save_checkpoint()
                if self.schedule.final_events(self.env_steps(),
                                              stopped_early=events.stop_requested).evaluation is not None:
                    self.evaluate()
                with critical():  # a signal now waits for the final files, then stops the run
                    self.save_snapshot()
                    if self.schedule.final_events(self.env_steps()).checkpoint is not None:
                        self.save_checkpoint()
            except KeyboardInterrupt as interrupt:  # Ctrl-C, SIGTERM, SIGHUP (dmpo.lifecycle.interrupts)
                save_policy_on_interrupt(self.save_snapshot)
                try:
                    if self.schedule.last_checkpoint != self.env_steps():  # else that one is final
                        self.save_checkpoint(mid_episode=True)
                except BaseException as error:
                    self._set_failed(error)
                    raise error from interrupt
                self.status.interrupted()
                annotate(interrupt, self.env_steps(), self.run_dir.path)
                raise
            except BaseException as error:
                self._set_failed(error)
                raise
            finally:
                self.agent.close()
                for logger in (self.loop_logger, self.eval_logger, self.learner_logger):
                    logger.close()
                if self.tracker is not None:
                    self.tracker.close()
        self.status.finished(events.stop_reason)
        summary = {"env_steps": self.env_steps(), "episodes": self.episodes, "last_eval": self.last_eval,
                   "counts": self.counter.get_counts(), "run_dir": str(self.run_dir.path),
                   "stop_reason": events.stop_reason}
        self.callbacks.on_train_end(summary)
        return summary

    def _set_failed(self, error: BaseException) -> None:
        with contextlib.suppress(OSError):  # a full disk must not hide the error that stopped the run
            self.status.failed(f"{type(error).__name__}: {error}")

    def _segment_done(self) -> bool:
        return (self.env_steps() >= self.config.steps or self._checkpoint_due
                or self.callbacks.run.stop_requested)

    def _run_segment(self) -> None:
        envs = [self.env_factory(segment_seed(self.config.seed, self.episodes, i))
                for i in range(self.config.num_envs)]
        # An interrupt waits for the end of the agent call it arrives in (dmpo.lifecycle.interrupts.critical).
        loop = VectorEnvironmentLoop(envs, CriticalCalls(self.agent), self.actor_counter, self.loop_logger,
                                     should_stop=self._segment_done, on_episode_end=self._on_episode_end)
        try:
            loop.run()
        finally:
            for env in envs:
                close = getattr(env, "close", None)
                if close is not None:
                    close()

    def _on_episode_end(self, row: dict[str, Any]) -> None:
        self.episodes += 1
        counts = self.counter.get_counts()
        self._progress.update(env_steps=int(counts.get("actor_steps", 0)), episodes=self.episodes,
                              last_return=float(np.sum(row["episode_return"])),
                              learner_steps=int(counts.get("learner_steps", 0)))
        self.callbacks.on_episode_end(row)
        due = self.schedule.check(self.env_steps())  # the run's check point: an episode end
        self._video_due = self._video_due or due.video is not None
        if due.evaluation is not None:
            self.evaluate()
        self._checkpoint_due = self._checkpoint_due or due.checkpoint is not None


def train(config: TrainConfig, run_dir: str | Path | None = None, *, resume: bool = False,
          env_factory: EnvironmentFactory | None = None, networks: DMPONetworks | None = None,
          progress: bool = True, quiet: bool = False, callbacks: Sequence[Callback] = ()) -> dict[str, Any]:
    """Trains in this process, or on Ray when `config.actors > 0` (`dmpo.distributed.run_distributed`,
    on a private local cluster); returns a summary (env steps, episodes, last evaluation, counts, run
    dir, stop reason). `callbacks` (`dmpo.lifecycle.callbacks`) run at episode ends (single process only),
    evaluations, checkpoints and the end; distributed, in this (the driver's) process.

    `env_factory(seed)` may return a gymnasium.Env or a dm_env.Environment: it goes through the task
    pipeline (`dmpo.lifecycle.task_setup`), and its name is recorded as `config.env`."""
    if resume and not config.agent.checkpoint:
        raise ConfigError("cannot resume: DMPOConfig.checkpoint is False, so this run writes no checkpoints")
    check_installed(config.track)
    if config.actors:
        return _train_distributed(config, run_dir, resume=resume, env_factory=env_factory,
                                  networks=networks, progress=progress and not quiet, callbacks=callbacks)
    if resume and run_dir is None:
        raise ValueError("resume=True needs the run directory to resume")
    saved = saved_config(run_dir) if resume else None
    # The task is built and checked (and an 'auto' support resolved) before a run exists.
    config, factory = prepare_task(config.resolved(), env_factory, saved=saved, quiet=quiet)
    if resume:
        with run_lock(run_dir):  # the rules read the checkpoints: no other process may write them now
            apply_resume(plan_resume(run_dir, config))  # refuses what `dmpo train --resume` refuses
        run = RunDirectory.open(run_dir)
    else:
        run = RunDirectory.create(run_dir or new_run_path(), config, seed=config.seed)
    # One process per run directory (dmpo.lifecycle.lock); SIGTERM/SIGHUP act as Ctrl-C, and a signal
    # that comes while JAX starts waits for the first step (dmpo.lifecycle.interrupts).
    abandoned = functools.partial(run.set_status, "interrupted", reason="exited at once on a third Ctrl-C")
    with run_lock(run.path), interrupt_on_signals(), starting_up(), when_abandoned(abandoned):
        try:
            trainer = LocalTrainer(config, run, resume=resume, env_factory=factory, networks=networks,
                                   progress=progress, quiet=quiet, callbacks=callbacks)
        except KeyboardInterrupt:  # before the first step: nothing new to save
            run.set_status("interrupted")
            raise
        except BaseException as error:  # e.g. a tracker that cannot start: the run says why
            with contextlib.suppress(OSError):
                run.set_status("failed", reason=f"{type(error).__name__}: {error}".splitlines()[0])
            raise
        start = time.monotonic()
        summary = trainer.run()
    summary["wall_seconds"] = time.monotonic() - start
    return summary


def _train_distributed(config: TrainConfig, run_dir: str | Path | None, *, resume: bool,
                       env_factory: EnvironmentFactory | None, networks: DMPONetworks | None, progress: bool,
                       callbacks: Sequence[Callback]) -> dict[str, Any]:
    if networks is not None:
        raise ConfigError("train(networks=...) is single-process only; with actors > 0 pass a "
                          "network_factory to dmpo.distributed.run_distributed")
    from dmpo.distributed import run_distributed

    if resume and run_dir is None:
        raise ValueError("resume=True needs the run directory to resume")
    result = run_distributed(config, run_dir if run_dir is not None else new_run_path(), resume=resume,
                             env_factory=env_factory, progress=progress, callbacks=callbacks)
    return {"env_steps": int(result.counts.get("actor_steps", 0)), "counts": result.counts,
            "last_eval": result.last_evaluation, "run_dir": result.run_dir, "stop_reason": result.stop_reason,
            "wall_seconds": result.wall_seconds}


__all__ = ["LocalTrainer", "environment_factory", "segment_seed", "train"]
