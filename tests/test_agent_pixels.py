"""The agent on a real pixel task: deduplicating replay, pixel torso, augmentation, learner steps."""

from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402

from dmpo.agent.builder import pixel_stack_size  # noqa: E402
from dmpo.agent.core import DMPO  # noqa: E402
from dmpo.agent.environment_loop import EnvironmentLoop  # noqa: E402
from dmpo.config import DMPOConfig, LearnerConfig, NetworkConfig, TrainConfig  # noqa: E402
from dmpo.envs import (
    make,  # noqa: E402
    make_environment_spec,  # noqa: E402
)
from dmpo.replay import FrameStackTable  # noqa: E402
from dmpo.reporting.logging import NoOpLogger  # noqa: E402
from dmpo.utils.counting import Counter  # noqa: E402


def test_pixel_agent_learns_from_frames_with_deduplicated_replay():
    env = make("dmc:cartpole-swingup", seed=0, pixels=True, image_size=32, action_repeat=8)
    spec = make_environment_spec(env)
    assert spec.observations.shape == (32, 32, 9) and pixel_stack_size(spec) == 3
    config = DMPOConfig(
        batch_size=8, samples_per_insert=8.0, min_replay_size=100, max_replay_size=1000, n_step=3,
        learner=LearnerConfig(num_samples=2, augmentation="image_shift"),
        networks=NetworkConfig(policy_layer_sizes=(16,), critic_layer_sizes=(16,), num_atoms=5,
                               observation_network="drq", init_scale=1.0),
    )
    counter = Counter(time_delta=0.0)
    agent = DMPO(spec, config, seed=0, counter=counter)
    assert isinstance(agent.table, FrameStackTable)
    EnvironmentLoop(env, agent, logger=NoOpLogger()).run(num_episodes=1)  # 125 steps
    stats = agent.table.stats()
    assert stats.size == 125 + 3 - 1
    assert counter.get_counts()["steps"] == 125 - 100 + 1
    frame_bytes = 32 * 32 * 3
    naive_bytes = 2 * 3 * frame_bytes  # observation and next observation, 3 frames each
    assert stats.bytes_per_item < 0.25 * naive_bytes  # about one frame per transition
    params = agent.learner.save_state().params
    assert all(np.all(np.isfinite(leaf)) for leaf in np.asarray(params.critic, dtype=object).flat
               if isinstance(leaf, np.ndarray))


def test_pixels_flag_switches_state_networks_to_the_impala_torso():
    resolved = TrainConfig(pixels=True).resolved()
    assert resolved.agent.networks.observation_network == "impala"
    assert resolved.agent.networks.init_scale == 1.0
    kept = TrainConfig(pixels=True, agent=DMPOConfig(networks=NetworkConfig(observation_network="drq")))
    assert kept.resolved() is kept
