"""Config defaults equal the reference's; the training preset differs only where documented."""

from __future__ import annotations

import dataclasses

import pytest

from dmpo.config import (
    AGENT_PRESETS,
    ConfigError,
    DMPOConfig,
    LearnerConfig,
    MPOLossConfig,
    NetworkConfig,
    TrainConfig,
    control_suite_preset,
    sample_efficient_preset,
)


def test_defaults_are_the_reference_values():
    config = DMPOConfig()  # algorithm.md §3, §4.2, §5, §6.4
    assert (config.batch_size, config.prefetch_size, config.min_replay_size, config.max_replay_size,
            config.samples_per_insert, config.n_step) == (256, 4, 1000, 1_000_000, 32.0, 5)
    learner = config.learner
    assert (learner.discount, learner.num_samples, learner.target_policy_update_period,
            learner.target_critic_update_period, learner.policy_learning_rate, learner.critic_learning_rate,
            learner.dual_learning_rate, learner.clipping, learner.max_gradient_norm) == (
        0.99, 20, 100, 100, 1e-4, 1e-4, 1e-2, True, 40.0)
    assert learner.mpo == MPOLossConfig(0.1, 1e-3, 2.5e-3, 1e-6, 10.0, 10.0, 1000.0, True, True)
    assert config.networks == NetworkConfig((256, 256, 256), (512, 512, 256), -150.0, 150.0, 51, 0.7)
    assert config.networks.layer_norm == "first"  # the reference normalises after the first layer only
    assert config.networks.normalize_observations is False  # the reference feeds observations as they are
    assert config.networks.residual is False  # the reference's MLPs have no skip connections
    assert config.min_observations == 1000 and config.observations_per_step == 8.0


def test_control_preset_changes_only_the_documented_values():
    preset, reference = control_suite_preset(), DMPOConfig()
    changed = {f.name for f in dataclasses.fields(LearnerConfig)
               if getattr(preset.learner, f.name) != getattr(reference.learner, f.name)}
    assert changed == {"policy_learning_rate", "critic_learning_rate", "target_policy_update_period"}
    assert dataclasses.replace(preset, learner=reference.learner) == reference


def test_sample_efficient_preset_changes_only_the_documented_values():
    fast, default = sample_efficient_preset(), control_suite_preset()
    assert TrainConfig().agent == fast  # `dmpo train`'s default (docs/results/time-to-score.md)
    assert (fast.batch_size, fast.samples_per_insert, fast.learner.sgd_steps_per_call) == (128, 64.0, 4)
    assert fast.networks.critic_layer_sizes == (256, 256, 256)
    assert (fast.networks.vmin, fast.networks.vmax) == ("auto-gym", "auto-gym")
    assert fast.observations_per_step == 2.0  # one update per two environment steps
    assert dataclasses.replace(
        fast, batch_size=default.batch_size, samples_per_insert=default.samples_per_insert,
        learner=dataclasses.replace(fast.learner, sgd_steps_per_call=1),
        networks=default.networks) == default
    assert {name: make() for name, make in AGENT_PRESETS.items()} == {
        "fast": fast, "control": default, "reference": DMPOConfig()}


@pytest.mark.parametrize("make, field", [
    (lambda: NetworkConfig(num_atoms=1), "NetworkConfig.num_atoms"),
    (lambda: NetworkConfig(policy_layer_sizes=()), "NetworkConfig.policy_layer_sizes"),
    (lambda: NetworkConfig(layer_norm="all"), "NetworkConfig.layer_norm"),
    (lambda: NetworkConfig(normalize_observations=1), "NetworkConfig.normalize_observations"),
    (lambda: NetworkConfig(observation_network="drq", normalize_observations=True),
     "NetworkConfig.normalize_observations"),
    (lambda: NetworkConfig(observation_network="impala", normalize_observations=True),
     "NetworkConfig.normalize_observations"),
    (lambda: TrainConfig(pixels=True, agent=DMPOConfig(networks=NetworkConfig(normalize_observations=True))),
     "NetworkConfig.normalize_observations"),
    (lambda: NetworkConfig(residual="yes"), "NetworkConfig.residual"),
    # Residual blocks keep the width: equal sizes, the first layer then pairs.
    (lambda: NetworkConfig(residual=True, policy_layer_sizes=(256, 256)), "NetworkConfig.policy_layer_sizes"),
    (lambda: NetworkConfig(residual=True, critic_layer_sizes=(512, 512, 256)),
     "NetworkConfig.critic_layer_sizes"),
    (lambda: NetworkConfig(residual=True, critic_layer_sizes=(256,) * 3, layer_norm="every"),
     "NetworkConfig.layer_norm"),
    (lambda: NetworkConfig(residual=True, critic_layer_sizes=(256,) * 3, observation_network="drq"),
     "NetworkConfig.residual"),
    (lambda: TrainConfig(pixels=True, agent=DMPOConfig(networks=NetworkConfig(
        residual=True, critic_layer_sizes=(256,) * 3))), "NetworkConfig.residual"),
    (lambda: LearnerConfig(num_samples=0), "LearnerConfig.num_samples"),
    (lambda: LearnerConfig(target_update_rate=1.5), "LearnerConfig.target_update_rate"),
    (lambda: LearnerConfig(augmentation="random_crop"), "LearnerConfig.augmentation"),
    (lambda: MPOLossConfig(epsilon=0.0), "MPOLossConfig.epsilon"),
    (lambda: MPOLossConfig(min_temperature=-0.1), "MPOLossConfig.min_temperature"),
    (lambda: DMPOConfig(min_replay_size=10, max_replay_size=5, batch_size=5), "DMPOConfig.min_replay_size"),
    (lambda: DMPOConfig(samples_per_insert=-1.0), "DMPOConfig.samples_per_insert"),
    (lambda: TrainConfig(eval_every=-1), "TrainConfig.eval_every"),
])
def test_bad_values_name_their_field(make, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        make()


def test_augmentation_error_lists_the_modes():
    with pytest.raises(ConfigError, match=r"one of \['none', 'batch_shift', 'image_shift'\], got 'shift'"):
        LearnerConfig(augmentation="shift")
    assert LearnerConfig(augmentation="image_shift").augmentation == "image_shift"
