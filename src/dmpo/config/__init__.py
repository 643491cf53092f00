"""Typed, frozen configuration. Defaults equal the reference's (algorithm.md §3, §4.2, §6.4, §10).

Every dataclass validates itself on construction and raises `ConfigError` naming the bad field and
the expected value, so that a wrong setting fails before any work starts.

    agent.py   DMPOConfig and its parts (networks, learner, MPO loss), the named presets
    train.py   TrainConfig: a whole run around a DMPOConfig (`dmpo train`'s flags)
    files.py   configs as JSON (config.json, snapshots, DMPO.save)
    flags.py   a ConfigError in terms of the flag that sets the field
"""

from dmpo.config.agent import (
    AGENT_PRESETS,
    AUTO_SUPPORT,
    REFERENCE_SUPPORT,
    ConfigError,
    DMPOConfig,
    LearnerConfig,
    MPOLossConfig,
    NetworkConfig,
    ParsedConfigError,
    control_suite_preset,
    flags_parsed,
    parsing_flags,
    sample_efficient_preset,
)
from dmpo.config.train import MAX_NUM_ENVS, TrainConfig

__all__ = [
    "AGENT_PRESETS",
    "AUTO_SUPPORT",
    "MAX_NUM_ENVS",
    "REFERENCE_SUPPORT",
    "ConfigError",
    "DMPOConfig",
    "LearnerConfig",
    "MPOLossConfig",
    "NetworkConfig",
    "ParsedConfigError",
    "TrainConfig",
    "control_suite_preset",
    "flags_parsed",
    "parsing_flags",
    "sample_efficient_preset",
]
