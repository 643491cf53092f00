"""The one-process executor: environment loop, evaluation, logs, checkpoints and snapshots of a `Run`.

The `Run` (`dmpo.run.run`) decides when; this executor does it in this process. The run folder
(`dmpo.lifecycle.directory`) receives CSV/TensorBoard logs (`environment_loop`, `evaluator`,
`learner`), checkpoints and the policy snapshot.

Exact resume. A checkpoint is taken at an episode end, so the n-step adder holds nothing. The
training environment is re-created from `(seed, episode index)` at the start of every segment between
checkpoints, in a fresh run and in a resumed one alike, so the environment's own randomness does not
need saving. With the synchronous learner, a run resumed from a checkpoint then repeats the
uninterrupted run exactly (tested). A Ctrl-C writes a final checkpoint in the middle of an episode;
resuming from that one continues training but starts a new episode. A checkpoint without replay
contents (`save_replay=False`) resumes with an empty table, and learning waits for
`min_observations` fresh observations again (`DMPO.restart_learning`).

Lockstep environments (`num_envs` = N > 1, `dmpo.agent.environment_loop`): every segment re-creates all
N environments, environment i from `segment_seed(seed, episode index, i)`. A segment ends at the first
episode end (of any environment) after a checkpoint boundary; the other environments' unfinished
episodes are dropped there (their transitions stay in replay) and start afresh in the next segment.
An uninterrupted run does the same at every checkpoint, so a resumed run again repeats it exactly.

Every episode end is a check point of the run (`Run.check`): an evaluation due there runs at once,
with the policy of that moment (filmed when the check says so); a checkpoint due there ends the
segment and is written after it.
"""

from __future__ import annotations

import contextlib
import functools
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np

from dmpo.agent.builder import environment_factory
from dmpo.agent.core import DMPO
from dmpo.agent.environment_loop import EnvironmentLoop, evaluate
from dmpo.agent.policies.snapshot import save_policy, save_policy_on_interrupt
from dmpo.envs import make_environment_spec
from dmpo.envs.checks import number_episodes_from
from dmpo.lifecycle.checkpoints import CheckpointState, TrainingCheckpoints, read_state
from dmpo.lifecycle.interrupts import CriticalCalls
from dmpo.lifecycle.schedule import Due
from dmpo.lifecycle.videos import camera_render_fn, rendering_factory, video_path
from dmpo.reporting.logging import make_logger
from dmpo.reporting.progress import Progress
from dmpo.reporting.trackers import open_tracker
from dmpo.utils.counting import Counter
from dmpo.utils.seeds import evaluation_seed, segment_seed

__all__ = ["LocalExecutor"]


class LocalExecutor:
    """Trains a `Run` in this process (module docstring); the `Run` calls it (`dmpo.run.executor`)."""

    def __init__(self, run: Any, *, networks: Any = None) -> None:
        self.run = run
        self.config = run.config
        self.folder = run.folder
        self.callbacks = run.callbacks
        self.env_factory = run.env_factory or environment_factory(run.config)
        self._networks = networks
        self._stack = contextlib.ExitStack()
        self._progress: Progress | None = None
        self.tracker: Any = None
        self.agent: Any = None
        self.episodes = 0
        self.evaluations = 0
        self.last_eval: dict[str, Any] | None = None
        self._checkpoint_due = False  # a boundary was taken: the segment ends and the checkpoint follows
        self._wall_origin = time.monotonic()  # `wall_seconds` of evaluation rows counts from here

    # -- start ----------------------------------------------------------------------------------
    def start(self) -> None:
        config, path = self.config, self.folder.path
        probe = self.env_factory(config.seed)
        self.spec = make_environment_spec(probe)
        close = getattr(probe, "close", None)
        if close is not None:
            close()
        self.counter = Counter(time_delta=0.0)
        self.actor_counter = Counter(self.counter, prefix="actor", time_delta=0.0)
        self.learner_counter = Counter(self.counter, prefix="learner", time_delta=0.0)
        self.eval_counter = Counter(self.counter, prefix="evaluator", time_delta=0.0)
        # Every count key exists from the first log row on (CSV columns are fixed by the first row).
        self.actor_counter.increment(steps=0, episodes=0)
        self.learner_counter.increment(steps=0, walltime=0.0)
        self.eval_counter.increment(steps=0, episodes=0)
        resumed = self._resumed_steps()
        self.tracker = open_tracker(config, self.folder)
        if self.tracker is not None:
            self._stack.callback(self.tracker.close)
        sinks = (lambda label: [self.tracker.sink(label)]) if self.tracker else (lambda label: [])
        # The terminal shows `Progress`'s status line and short evaluation lines; the full rows go to
        # the CSV and TensorBoard logs (and the tracker) only.
        loggers = []
        for label, key, delta in (("environment_loop", "actor_steps", 0.0), ("evaluator", "actor_steps", 0.0),
                                  ("learner", "learner_steps", 1.0)):
            loggers.append(make_logger(label, path, time_delta=delta, terminal=False, step_key=key,
                                       resume_from_step=resumed.get("learner_steps" if key == "learner_steps"
                                                                    else "env_steps"),
                                       extra_sinks=sinks(label)))
            self._stack.callback(loggers[-1].close)
        self.loop_logger, self.eval_logger, self.learner_logger = loggers
        self.agent = DMPO(self.spec, config.agent, networks=self._networks, seed=config.seed,
                          logger=self.learner_logger, counter=self.learner_counter,
                          overlap_learner=config.overlap_learner, num_envs=config.num_envs)
        self._stack.callback(self.agent.close)
        self.checkpoints = (TrainingCheckpoints(self.folder.checkpoints_dir, keep=config.keep_checkpoints)
                            if config.agent.checkpoint else None)
        if self.run.checkpoint is not None:
            self._restore(self.run.checkpoint)
        self._progress = self._stack.enter_context(
            Progress(config.steps, enabled=not self.run.quiet, live=self.run.progress))

    def _resumed_steps(self) -> dict[str, int]:
        """The steps the logs are rewound to: the checkpoint's (0 when a resumed run had none)."""
        if not self.run.resume:
            return {}
        if self.run.checkpoint is None:
            return {"env_steps": 0, "learner_steps": 0}
        state = read_state(self.run.checkpoint)
        return {"env_steps": state.env_steps, "learner_steps": state.learner_steps}

    def _restore(self, checkpoint: Path) -> None:
        learner_state, saved, replay = TrainingCheckpoints.load(checkpoint, self.agent.learner.save_state())
        state = CheckpointState.from_json(saved, where=str(checkpoint / "state.json"))
        if state.counters is None:
            raise ValueError(f"{checkpoint} was written by the distributed program; resume it with "
                             "actors > 0")
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
        self.run.schedule.checkpointed(state.env_steps)
        self.callbacks.on_checkpoint({"path": str(path), "env_steps": state.env_steps,
                                      "learner_steps": state.learner_steps})
        return path

    # -- evaluation and snapshots ---------------------------------------------------------------
    def evaluate(self, film: bool = False) -> dict[str, Any]:
        """Runs `eval_episodes` episodes with the target policy's mean (filmed with `film`); logs it,
        writes the snapshot and calls `on_evaluation`."""
        with self.agent.pause():
            params = jax.device_put(self.agent.learner.policy_params())
        mean_fn = self._mean_fn
        seed = evaluation_seed(self.config.seed, self.evaluations)
        policy = lambda obs: np.asarray(mean_fn(params, obs))  # noqa: E731
        if not film:
            env = self.env_factory(seed)
            result = evaluate(env, policy, self.config.eval_episodes)
            video = None
        else:  # the same episodes, filmed from an environment made able to render (`dmpo.lifecycle.videos`)
            env = rendering_factory(self.env_factory)(seed)
            video = video_path(self.folder.path, self.env_steps())
            result = evaluate(env, policy, self.config.eval_episodes, video_path=video,
                              render_fn=camera_render_fn())
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
        self.run.schedule.evaluated(self.env_steps())
        return row

    @functools.cached_property
    def _mean_fn(self) -> Any:
        return self.agent.builder.make_evaluation_policy()

    def save_snapshot(self) -> Path:
        with self.agent.pause():  # the overlapped learner donates its state's buffers on every step
            params = self.agent.learner.policy_params()
        return self._write_policy(self.folder.snapshots_dir / "policy.msgpack", params)

    def _write_policy(self, path: Path, params: Any) -> Path:
        counts = self.counter.get_counts()
        metadata = self.run.snapshot_metadata(actor_steps=counts.get("actor_steps", 0),
                                              learner_steps=counts.get("learner_steps", 0))
        return save_policy(path, self.spec, self.config.agent.networks, params, metadata=metadata)

    # -- the loop -------------------------------------------------------------------------------
    def wall_seconds(self) -> float:
        """Seconds since the run started, across resumes (the time after a run's last checkpoint
        before it was killed is not counted: that work is done again)."""
        return time.monotonic() - self._wall_origin

    def env_steps(self) -> int:
        return int(self.counter.get_counts().get("actor_steps", 0))

    def train(self) -> None:
        while self.env_steps() < self.config.steps and not self.run.stop_requested:
            self._run_segment()
            if self._checkpoint_due:
                self._checkpoint_due = False
                self.save_checkpoint()

    def finish(self, final: Due) -> tuple[str, str | None]:
        self.save_snapshot()
        if final.checkpoint is not None:
            self.save_checkpoint()
        return "finished", None

    def interrupted(self) -> None:
        save_policy_on_interrupt(self.save_snapshot)
        if self.run.schedule.last_checkpoint != self.env_steps():  # else that one is final
            self.save_checkpoint(mid_episode=True)

    def close(self, failed: bool = False) -> None:
        del failed
        self._stack.close()

    def summary(self) -> dict[str, Any]:
        return {"env_steps": self.env_steps(), "episodes": self.episodes, "last_eval": self.last_eval,
                "counts": self.counter.get_counts()}

    def _segment_done(self) -> bool:
        return self.env_steps() >= self.config.steps or self._checkpoint_due or self.run.stop_requested

    def _run_segment(self) -> None:
        envs = [self.env_factory(segment_seed(self.config.seed, self.episodes, i))
                for i in range(self.config.num_envs)]
        if len(envs) == 1:  # an environment error names the run's episode, not this segment's
            number_episodes_from(envs[0], self.episodes + 1)
        # An interrupt waits for the end of the agent call it arrives in (dmpo.lifecycle.interrupts.critical).
        loop = EnvironmentLoop(envs, CriticalCalls(self.agent), self.actor_counter, self.loop_logger,
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
        due = self.run.check(self.env_steps())  # the run's check point: an episode end
        if due.evaluation is not None:
            self.evaluate(film=due.video is not None)
        self._checkpoint_due = self._checkpoint_due or due.checkpoint is not None
