"""`TrainConfig`: a whole training run (task, budget, evaluation, checkpoints, modes) around a
`DMPOConfig`; `dmpo train`'s flags are its fields."""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

from dmpo.config.agent import DMPOConfig, _check, _positive_int, sample_efficient_preset

MAX_NUM_ENVS = 256
"""Most environments one actor steps in lockstep (`TrainConfig.num_envs`): beyond this the batched
policy call stops paying and one slow environment holds back too many others."""


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """A whole training run: task, budget, evaluation, checkpoints and the agent's config."""

    env: str = "dmc:cartpole-swingup"
    """Task name: dmc:<domain>-<task> (dm_control suite), gym:<Id> or gym:<module>:<Id> (gymnasium),
    or an entry point module.path:callable (callable(seed) -> gymnasium.Env or dm_env.Environment)."""
    steps: int = 100_000
    """Environment steps to train for, as the agent counts them: one per action it takes (the last
    episode is always finished). With action_repeat R the task runs R steps of its own per action:
    `--steps 4000 --action-repeat 2` is 8,000 task steps. Every env-step count of a run (the periods,
    the logs, the checkpoint names) counts these agent steps."""
    seed: int = 0
    """Seeds networks, acting, replay sampling and the environments."""
    pixels: bool = False
    """Learn from 84x84 camera frames instead of states (dm_control tasks)."""
    action_repeat: int | None = None
    """Task steps per agent action: each action is sent to the task this many times (default: 1 for
    states, 2 for pixels); `steps` and the periods count agent steps, so the task runs steps × action_repeat
    steps of its own."""
    eval_every: int = 10_000
    """Environment steps between evaluations (one per crossed boundary, plus one at the end), checked
    where an episode ends: in one process at the next episode end, distributed by each actor at the
    end of each of its episodes; 0 disables evaluation."""
    eval_episodes: int = 5
    """Episodes per evaluation, acting with the target policy's mean (>= 1 unless eval_every is 0)."""
    checkpoint_every: int = 10_000
    """Environment steps between checkpoints (one per crossed boundary), checked where an episode
    ends: in one process at the next episode end, distributed by each actor at the end of each of its
    episodes; 0 only saves at the end. No checkpoint at all when `agent.checkpoint` is False."""
    keep_checkpoints: int = 2
    """Checkpoints kept on disk (oldest deleted first)."""
    video_every: int = 0
    """Environment steps between videos: the first evaluation after each multiple films one episode
    to `<run>/videos/step_<env steps>.mp4` (`dmpo.lifecycle.videos`); 0 records none. Needs eval_every > 0."""
    save_replay: bool = True
    """Store the replay contents in checkpoints and restore them on resume (both modes). Without
    them a resumed run waits for `min_replay_size` fresh observations before learning again."""
    overlap_learner: bool = False
    """Run the learner on its own thread (single process only; the distributed learner always has
    its own node); the replay rate limiter then holds samples_per_insert."""
    actors: int = 0
    """Distributed actors on Ray; 0 trains in this process."""
    stop_at_return: float | None = None
    """Stop after the first evaluation whose mean return is at or above this (needs eval_every > 0);
    the run ends with a final checkpoint and status "finished" plus the reason
    (`dmpo.lifecycle.callbacks`)."""
    track: Literal["wandb", "mlflow"] | None = None
    """Also send the logged rows, the config and evaluation videos to an experiment tracker (extras
    `dmpo-jax[wandb]` / `dmpo-jax[mlflow]`; `dmpo.reporting.trackers`)."""
    track_project: str = "dmpo"
    """The W&B project or the MLflow experiment name."""
    num_envs: int = 1
    """Environments each actor steps in lockstep with one batched policy call per step (at most
    MAX_NUM_ENVS); with `actors` > 0 the run acts in actors·num_envs environments. `steps` and the
    learning schedule count environment steps of all of them."""
    agent: DMPOConfig = dataclasses.field(default_factory=sample_efficient_preset)
    """The agent; default: `sample_efficient_preset()` (`--preset fast`; not the reference's values, see
    there). `DMPOConfig()` is the reference's agent exactly (`--preset reference`)."""

    def __post_init__(self) -> None:
        _check(isinstance(self.env, str) and ":" in self.env, "TrainConfig.env",
               "a task name such as 'dmc:cartpole-swingup' or 'gym:Pendulum-v1'", self.env)
        _positive_int(self, "steps", "keep_checkpoints")
        for name in ("eval_every", "eval_episodes", "checkpoint_every", "actors", "video_every"):
            value = getattr(self, name)
            _check(isinstance(value, int) and value >= 0, f"TrainConfig.{name}", "an integer >= 0", value)
        if self.action_repeat is not None:
            _positive_int(self, "action_repeat")
        if self.stop_at_return is not None:
            _check(isinstance(self.stop_at_return, int | float) and math.isfinite(self.stop_at_return),
                   "TrainConfig.stop_at_return", "a finite number or None", self.stop_at_return)
            _check(self.eval_every > 0, "TrainConfig.stop_at_return",
                   "None while eval_every is 0 (it is checked at evaluations)", self.stop_at_return)
        _check(self.track in (None, "wandb", "mlflow"), "TrainConfig.track", "None, 'wandb' or 'mlflow'",
               self.track)
        _check(isinstance(self.track_project, str) and bool(self.track_project), "TrainConfig.track_project",
               "a non-empty name", self.track_project)
        _check(isinstance(self.num_envs, int) and not isinstance(self.num_envs, bool)
               and 1 <= self.num_envs <= MAX_NUM_ENVS, "TrainConfig.num_envs",
               f"an integer in [1, {MAX_NUM_ENVS}]", self.num_envs)
        _check(not (self.overlap_learner and self.actors), "TrainConfig.overlap_learner",
               "False when actors > 0 (the distributed learner always runs on its own node)",
               self.overlap_learner)
        _check(not (self.overlap_learner and self.agent.samples_per_insert is None),
               "TrainConfig.overlap_learner", "False when agent.samples_per_insert is None (the "
               "overlapped learner's rate limiter holds that ratio)", self.overlap_learner)
        _check(self.actors > 0 or self.agent.samples_per_insert is not None, "DMPOConfig.samples_per_insert",
               "a number > 0 when actors = 0 (None means 'no sample/insert ratio', which only the "
               "distributed learner can run; the single-process agent's update schedule is the ratio)",
               self.agent.samples_per_insert)
        _check(self.eval_every == 0 or self.eval_episodes >= 1, "TrainConfig.eval_episodes",
               "a positive integer while eval_every > 0 (set eval_every=0 to turn evaluation off)",
               self.eval_episodes)

        _check(not (self.pixels and self.agent.networks.normalize_observations),
               "NetworkConfig.normalize_observations", "False with pixels (only state observations are "
               "normalised)", self.agent.networks.normalize_observations)
        _check(not (self.pixels and self.agent.networks.residual), "NetworkConfig.residual",
               "False with pixels (residual blocks are built for the state networks)",
               self.agent.networks.residual)
        _check(self.video_every == 0 or self.eval_every > 0, "TrainConfig.video_every",
               "0 while eval_every is 0 (videos are filmed at evaluations)", self.video_every)

    def resolved(self) -> TrainConfig:
        """This config with pixel defaults filled in: `--pixels` with the state networks' flatten torso
        switches to the IMPALA torso and initial policy scale 1.0 of the reference's pixel agent
        (algorithm.md §4.3). Any other torso choice is kept as given."""
        networks = self.agent.networks
        if not self.pixels or networks.observation_network != "flatten":
            return self
        pixel_networks = dataclasses.replace(networks, observation_network="impala", init_scale=1.0)
        return dataclasses.replace(self, agent=dataclasses.replace(self.agent, networks=pixel_networks))
