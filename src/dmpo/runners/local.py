"""Training DMPO in one process: environment loop, evaluation, logs, checkpoints, snapshots, resume.

`train(config, run_dir)` is what `dmpo train` runs. The run directory (`dmpo.runs`) receives the
config, CSV/TensorBoard logs (`environment_loop`, `evaluator`, `learner`), checkpoints and the policy
snapshot. `train(..., resume=True)` continues from the newest checkpoint.

Exact resume. A checkpoint is taken at an episode end, so the n-step adder holds nothing. The
training environment is re-created from `(seed, episode index)` at the start of every segment between
checkpoints, in a fresh run and in a resumed one alike, so the environment's own randomness does not
need saving. With the synchronous learner, a run resumed from a checkpoint then repeats the
uninterrupted run exactly (tested). A Ctrl-C writes a final checkpoint in the middle of an episode;
resuming from that one continues training but starts a new episode. A checkpoint without replay
contents (`save_replay=False`) resumes with an empty table, and learning waits for
`min_observations` fresh observations again (`DMPO.restart_learning`).

Lockstep environments (`num_envs` = N > 1, `dmpo.runners.vector_loop`): every segment re-creates all
N environments, environment i from `segment_seed(seed, episode index, i)`. A segment ends at the first
episode end (of any environment) after a checkpoint boundary; the other environments' unfinished
episodes are dropped there (their transitions stay in replay) and start afresh in the next segment.
An uninterrupted run does the same at every checkpoint, so a resumed run again repeats it exactly.

`TrainConfig`'s periods mean the same here as in the distributed program: `checkpoint_every` and
`eval_every` are environment steps (one checkpoint or evaluation per crossed boundary, at the next
episode end), `DMPOConfig.checkpoint=False` writes no checkpoint at all.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np

from dmpo.agent import DMPO
from dmpo.builder import CheckpointState, environment_factory, next_boundary
from dmpo.config import ConfigError, TrainConfig
from dmpo.envs import EnvironmentFactory
from dmpo.networks import DMPONetworks
from dmpo.runners.checkpoints import TrainingCheckpoints
from dmpo.runners.environment_loop import evaluate
from dmpo.runners.vector_loop import VectorEnvironmentLoop
from dmpo.runs import RunDirectory, new_run_path
from dmpo.snapshot import save_policy
from dmpo.types import EnvironmentSpec, make_environment_spec
from dmpo.utils.counting import Counter
from dmpo.utils.logging import make_logger
from dmpo.utils.progress import Progress

_EVAL_SEED_OFFSET = 1_000_003  # evaluation episodes never share seeds with training episodes


def segment_seed(seed: int, episode_index: int, env_index: int = 0) -> int:
    """Environment seed for the segment that starts at `episode_index` (see module docstring);
    lockstep environment `env_index` > 0 (`num_envs`) gets `SeedSequence([seed, episode_index,
    env_index])`'s, environment 0 the single-environment seed."""
    entropy = [seed, episode_index] if env_index == 0 else [seed, episode_index, env_index]
    return int(np.random.SeedSequence(entropy).generate_state(1)[0])


class LocalTrainer:
    """Owns one single-process training run; `run()` trains to `config.steps` environment steps."""

    def __init__(self, config: TrainConfig, run: RunDirectory, *, resume: bool = False,
                 env_factory: EnvironmentFactory | None = None, networks: DMPONetworks | None = None,
                 progress: bool = True, quiet: bool = False) -> None:
        self.config = config
        self.run_dir = run
        self.env_factory = env_factory or environment_factory(config)
        self.progress_enabled = progress and not quiet
        self._quiet = quiet
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
        self.loop_logger = make_logger("environment_loop", path, time_delta=0.0,
                                       terminal=not progress and not quiet, step_key="actor_steps",
                                       resume_from_step=resumed.get("env_steps"))
        self.eval_logger = make_logger("evaluator", path, time_delta=0.0, terminal=not quiet,
                                       step_key="actor_steps", resume_from_step=resumed.get("env_steps"))
        self.learner_logger = make_logger("learner", path, time_delta=1.0, terminal=False,
                                          step_key="learner_steps",
                                          resume_from_step=resumed.get("learner_steps"))
        self.agent = DMPO(self.spec, config.agent, networks=networks, seed=config.seed,
                          logger=self.learner_logger, counter=self.learner_counter,
                          overlap_learner=config.overlap_learner, num_envs=config.num_envs)
        self.checkpoints = (TrainingCheckpoints(run.checkpoints_dir, keep=config.keep_checkpoints)
                            if config.agent.checkpoint else None)
        self._last_checkpoint_step: int | None = None
        self.episodes = 0
        self.evaluations = 0
        self.last_eval: dict[str, Any] | None = None
        self._last_eval_step = -1
        self.next_checkpoint = (config.checkpoint_every or None) if self.checkpoints is not None else None
        self.next_eval = config.eval_every or None
        if resume:
            self._restore()

    # -- checkpoints ----------------------------------------------------------------------------
    def _state(self, mid_episode: bool) -> CheckpointState:
        counts = self.counter.get_counts()
        return CheckpointState(
            env_steps=int(counts.get("actor_steps", 0)), learner_steps=int(counts.get("learner_steps", 0)),
            counts=counts, num_observations=self.agent.num_observations,
            learning_starts=self.agent.learning_starts, episodes=self.episodes, evaluations=self.evaluations,
            num_actions=self.agent.actor.num_actions, pending_sgd_steps=self.agent.pending_sgd_steps,
            mid_episode=mid_episode,
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
        self._last_checkpoint_step = state.env_steps
        return path

    def _restore(self) -> None:
        latest = None if self.checkpoints is None else self.checkpoints.latest()
        if latest is None:
            raise FileNotFoundError(f"cannot resume: no checkpoint in {self.run_dir.checkpoints_dir}")
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
        self._last_checkpoint_step = state.env_steps
        if self.config.checkpoint_every:
            self.next_checkpoint = next_boundary(state.env_steps, self.config.checkpoint_every)
        if self.config.eval_every:
            self.next_eval = next_boundary(state.env_steps, self.config.eval_every)
        self.run_dir.mark_resumed()

    # -- evaluation and snapshots ---------------------------------------------------------------
    def evaluate(self) -> dict[str, Any]:
        """Runs `eval_episodes` episodes with the target policy's mean; logs and snapshots it."""
        with self.agent.pause():
            params = jax.device_put(self.agent.learner.policy_params())
        mean_fn = self._mean_fn
        env = self.env_factory(segment_seed(self.config.seed + _EVAL_SEED_OFFSET, self.evaluations))
        result = evaluate(env, lambda obs: np.asarray(mean_fn(params, obs)), self.config.eval_episodes)
        self.evaluations += 1
        eval_steps = int(round(result["length_mean"] * self.config.eval_episodes))
        counts = self.eval_counter.increment(episodes=self.config.eval_episodes, steps=eval_steps)
        row = {**{k: v for k, v in result.items() if np.isscalar(v)}, **self.counter.get_counts(), **counts}
        self.eval_logger.write(row)
        self.save_snapshot()
        self.last_eval = row
        self._last_eval_step = self.env_steps()
        self._last_checkpoint_step = None  # the evaluation counts changed since the last checkpoint
        return row

    @functools.cached_property
    def _mean_fn(self) -> Any:
        return self.agent.builder.make_evaluation_policy()

    def save_snapshot(self) -> Path:
        counts = self.counter.get_counts()
        with self.agent.pause():  # the overlapped learner donates its state's buffers on every step
            params = self.agent.learner.policy_params()
        return save_policy(self.run_dir.snapshots_dir / "policy.msgpack", self.spec,
                           self.config.agent.networks, params,
                           metadata={"env": self.config.env, "pixels": self.config.pixels,
                                     "action_repeat": self.config.action_repeat,
                                     "actor_steps": int(counts.get("actor_steps", 0)),
                                     "learner_steps": int(counts.get("learner_steps", 0))})

    # -- the loop -------------------------------------------------------------------------------
    def env_steps(self) -> int:
        return int(self.counter.get_counts().get("actor_steps", 0))

    def run(self) -> dict[str, Any]:
        config = self.config
        with Progress(config.steps, enabled=self.progress_enabled) as progress:
            self._progress = progress
            try:
                while self.env_steps() < config.steps:
                    self._run_segment()
                    if self.next_checkpoint is not None and self.env_steps() >= self.next_checkpoint:
                        self.save_checkpoint()
                        self.next_checkpoint = next_boundary(self.env_steps(), config.checkpoint_every)
                if config.eval_every and self._last_eval_step != self.env_steps():
                    self.evaluate()
                self.save_snapshot()
                if self._last_checkpoint_step != self.env_steps():
                    self.save_checkpoint()
            except KeyboardInterrupt:
                self.save_checkpoint(mid_episode=True)
                self.run_dir.set_status("interrupted")
                raise
            except BaseException:
                self.run_dir.set_status("failed")
                raise
            finally:
                self.agent.close()
                for logger in (self.loop_logger, self.eval_logger, self.learner_logger):
                    logger.close()
        self.run_dir.set_status("finished")
        return {"env_steps": self.env_steps(), "episodes": self.episodes, "last_eval": self.last_eval,
                "counts": self.counter.get_counts(), "run_dir": str(self.run_dir.path)}

    def _segment_done(self) -> bool:
        steps = self.env_steps()
        checkpoint_due = self.next_checkpoint is not None and steps >= self.next_checkpoint
        return steps >= self.config.steps or checkpoint_due

    def _run_segment(self) -> None:
        envs = [self.env_factory(segment_seed(self.config.seed, self.episodes, i))
                for i in range(self.config.num_envs)]
        loop = VectorEnvironmentLoop(envs, self.agent, self.actor_counter, self.loop_logger,
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
        if self.next_eval is not None and self.env_steps() >= self.next_eval:
            self.evaluate()
            self.next_eval = next_boundary(self.env_steps(), self.config.eval_every)


def train(config: TrainConfig, run_dir: str | Path | None = None, *, resume: bool = False,
          env_factory: EnvironmentFactory | None = None, networks: DMPONetworks | None = None,
          progress: bool = True, quiet: bool = False) -> dict[str, Any]:
    """Trains in this process; returns a summary (env steps, episodes, last evaluation, counts, run dir)."""
    if config.actors:
        raise ConfigError("TrainConfig.actors must be 0 for single-process training; use dmpo.distributed")
    if resume and not config.agent.checkpoint:
        raise ConfigError("cannot resume: DMPOConfig.checkpoint is False, so this run writes no checkpoints")
    config = config.resolved()
    factory = env_factory or environment_factory(config)
    close = getattr(factory(config.seed), "close", None)  # an unknown task fails here, before a run exists
    if close is not None:
        close()
    if resume:
        if run_dir is None:
            raise ValueError("resume=True needs the run directory to resume")
        run = RunDirectory.open(run_dir)
    else:
        run = RunDirectory.create(run_dir or new_run_path(), config, seed=config.seed)
    trainer = LocalTrainer(config, run, resume=resume, env_factory=factory, networks=networks,
                           progress=progress, quiet=quiet)
    start = time.monotonic()
    summary = trainer.run()
    summary["wall_seconds"] = time.monotonic() - start
    return summary


__all__ = ["LocalTrainer", "environment_factory", "segment_seed", "train"]
