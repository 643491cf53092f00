"""Distributed DMPO on a real pixel task: actors and evaluator render on the threads that step them,
and the replay node deduplicates frames (about one frame per transition)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("MUJOCO_GL", "egl")

from dmpo.config import DMPOConfig, LearnerConfig, NetworkConfig, TrainConfig  # noqa: E402
from dmpo.distributed import run_distributed  # noqa: E402
from dmpo.envs import TaskFactory  # noqa: E402
from dmpo.lifecycle.checkpoints import TrainingCheckpoints  # noqa: E402
from dmpo.run.distributed.options import ProgramOptions  # noqa: E402

pytestmark = pytest.mark.ray


def test_pixel_task_trains_with_an_actor_and_an_evaluator(tmp_path, shared_ray_cluster):
    config = DMPOConfig(
        batch_size=8, min_replay_size=100, max_replay_size=1000, samples_per_insert=8.0, n_step=3,
        learner=LearnerConfig(num_samples=2, augmentation="batch_shift"),
        networks=NetworkConfig(policy_layer_sizes=(8,), critic_layer_sizes=(8,), num_atoms=5,
                               observation_network="drq"),
    )
    factory = TaskFactory("dmc:cartpole-swingup", pixels=True, action_repeat=8, image_size=32)
    run = TrainConfig(env="dmc:cartpole-swingup", pixels=True, steps=250, actors=1, eval_every=125,
                      eval_episodes=1, checkpoint_every=0, agent=config)
    # No actor restarts allowed: an actor that cannot render fails the run instead of being replaced.
    result = run_distributed(run, tmp_path / "run", env_factory=factory, num_cpus=2, progress=False,
                             options=ProgramOptions(max_actor_restarts=0))
    assert result.status == "finished"
    assert result.counts["actor_steps"] >= 250 and result.counts["learner_steps"] > 0
    assert result.evaluator_returns  # the evaluator rendered and finished episodes
    assert TrainingCheckpoints(tmp_path / "run" / "checkpoints").steps()
    # The replay node stores frame stacks frame by frame, as the single-process agent does.
    assert result.replay_frames is not None and result.replay_frames["frames_per_item"] <= 1.2
